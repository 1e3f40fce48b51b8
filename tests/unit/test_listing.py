"""The local listing every backup, restore and audit starts from (``_util.localfs.walk_local_tree``).

It replaces fsspec's ``find`` for local folders (a quarter of the time again since it lists each
folder through an open descriptor, issue 15), so it is checked against fsspec itself on a tree with
every kind of entry a checkpoint folder can be made to hold.
"""

from __future__ import annotations

import os

import fsspec
import pytest

from airflow_kafka_spark._util.localfs import walk_local_tree


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "ck"
    for rel, body in {"metadata": b"{}", "offsets/0": b"v1", "offsets/.0.crc": b"c", "state/0/0/1.delta": b"d" * 7,
                      "state/0/1/2.snapshot": b"", "sources/0/0": b"s"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(body)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "secret").write_bytes(b"x" * 3)
    (outside / "file").write_bytes(b"y" * 5)
    os.symlink(outside / "file", root / "link-to-file")          # followed, as fsspec does
    os.symlink(outside / "sub", root / "state" / "linked-dir")   # listed as "other", never walked
    os.symlink(tmp_path / "nowhere", root / "dangling")          # left out, like a vanished file
    os.mkfifo(root / "offsets" / "fifo")                          # "other": never opened
    return root


def test_the_walk_lists_what_fsspec_lists_with_the_documented_differences(tree):
    ours = walk_local_tree(str(tree))
    fs = fsspec.filesystem("file")
    theirs = {os.path.relpath(p, tree): info for p, info in fs.find(str(tree), withdirs=False, detail=True).items()}
    assert set(ours) == set(theirs) - {"dangling"} | {"state/linked-dir"}
    assert "state/linked-dir/secret" not in ours and ours["state/linked-dir"]["type"] == "other"
    assert ours["state/linked-dir"]["islink"] is True and ours["offsets/fifo"]["type"] == "other"
    for rel, info in ours.items():
        assert info["name"] == str(tree / rel)
        if rel in theirs and info["type"] == "file":
            assert (info["size"], info["islink"]) == (theirs[rel]["size"], theirs[rel]["islink"]), rel
            assert info["mtime"] == pytest.approx(theirs[rel]["mtime"]) and isinstance(info["created"], float)
    assert ours["link-to-file"]["size"] == 5 and ours["link-to-file"]["islink"] is True
    assert ours["state/0/0/1.delta"]["size"] == 7 and ours["state/0/1/2.snapshot"]["size"] == 0


def test_the_walk_of_no_folder_is_empty_and_a_trailing_slash_changes_nothing(tree, tmp_path):
    assert walk_local_tree(str(tmp_path / "missing")) == {}
    assert walk_local_tree(str(tree / "metadata")) == {}                  # a file, not a folder
    assert walk_local_tree(str(tree / "offsets" / "fifo")) == {}          # never blocks on a FIFO's open
    assert walk_local_tree(str(tree) + "/") == walk_local_tree(str(tree))
    fds = len(os.listdir("/proc/self/fd"))
    walk_local_tree(str(tree))
    assert len(os.listdir("/proc/self/fd")) == fds                        # every folder descriptor closed


def test_one_folder_is_listed_in_fsspecs_shape_and_crc_files_by_name_only(tree):
    from airflow_kafka_spark._util.localfs import list_local_detail

    ours = list_local_detail(str(tree / "offsets"))
    theirs = {os.path.basename(i["name"]): i for i in fsspec.filesystem("file").ls(str(tree / "offsets"), detail=True)}
    assert set(ours) == set(theirs) == {"0", ".0.crc", "fifo"}
    assert ours["0"] == {"name": str(tree / "offsets" / "0"), "type": "file", "size": 2}
    assert ours[".0.crc"] == {"name": str(tree / "offsets" / ".0.crc"), "type": "file"}
    assert ours["fifo"]["type"] == "other" and list_local_detail(str(tree) + "/")["offsets"]["type"] == "directory"
    with pytest.raises(FileNotFoundError):
        list_local_detail(str(tree / "missing"))
