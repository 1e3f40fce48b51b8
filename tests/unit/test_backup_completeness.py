"""Backups are complete by construction (issue 27): a file is left out only when it is proven garbage.

What is proven here, on checkpoints written byte for byte as Spark writes them (no Spark; the
corpus test, tests/integration/test_spark_corpus.py, runs Spark's own test checkpoints): a
checkpoint whose layout fits no model (no commit log, a hole in offsets/, logs that contradict, a
log version this tool cannot read) is copied whole but for temp files, and says so; folders outside
the model are copied as found and named; every file left out is in the manifest with its reason;
a forced backup of a running query with such a layout is refused in one line; manifests without the
new ``selection`` field still parse and keep their seal.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.errors import OperationBlocked
from airflow_kafka_spark.ops.backup import take
from airflow_kafka_spark.ops.backup.catalog import load_backup
from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.ops.backup.selection import layout_misfit, select_files
from airflow_kafka_spark.ops.backup.store import materialize
from airflow_kafka_spark.ops.commands import backup_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from tests.support.checkpoint_factory import write_checkpoint

JOB = "orders"


def files_below(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def listing(*names: str) -> dict[str, dict]:
    return {n: {"size": 1} for n in names}


@pytest.mark.parametrize(("names", "why"), [
    (("metadata", "offsets/0", "offsets/1", "state/0/0/1.delta"), "no commit log"),
    (("offsets/0", "offsets/1", "offsets/3", "commits/0", "commits/1"), "hole at batch 2"),
    (("offsets/0", "offsets/1", "commits/0", "commits/1", "commits/2"), "commits/2 is newer"),
    (("offsets/0", "offsets/1", "offsets/2", "offsets/3", "commits/0"), "runs to batch 3 but commits/ ends at 0"),
    (("commits/0", "metadata"), "commits/ without offsets/"),
])
def test_layouts_outside_the_model_are_named(names, why):
    assert why in (layout_misfit(listing(*names)) or "")


def test_layouts_inside_the_model_fit():
    assert layout_misfit(listing("metadata", "offsets/0", "offsets/1", "offsets/2", "commits/0", "commits/1")) is None
    assert layout_misfit(listing("metadata", "offsets/0")) is None       # stopped before its first commit
    assert layout_misfit(listing("offsets/0", "commits/0"), [("UNSUPPORTED_LOG_VERSION", "commits/0")]) \
        == "commits/0 is in a log format this tool cannot read"


def test_whole_copy_keeps_every_file_but_temp_files_of_sparks_folders():
    files = listing("metadata", "offsets/0", "offsets/1", "offsets/.1.abc.tmp", "state/0/0/1.delta",
                    "state/0/0/7.delta", "extra/notes.tmp", "_spark_metadata/0")
    sel = select_files(files, None, 1, keep_pending=True, whole="no commit log")
    assert set(sel.excluded) == {"offsets/.1.abc.tmp"}
    assert set(sel.files) == set(files) - {"offsets/.1.abc.tmp"}
    assert sel.unmodelled == ["_spark_metadata/", "extra/"]
    rec = sel.record()
    assert rec["mode"] == "whole" and rec["why"] == "no commit log"


def test_version_selection_names_unmodelled_folders_and_copies_them():
    files = listing("metadata", "offsets/0", "commits/0", "rtm/abc", "notes.txt")
    sel = select_files(files, 0, 0, keep_pending=True)
    assert {"rtm/abc", "notes.txt"} <= set(sel.files)
    assert sel.unmodelled == ["notes.txt", "rtm/"]


def legacy_checkpoint(root: Path) -> Path:
    """Spark 2.1's layout: offsets/ and state/, no commits/ folder (the factory's files, commits removed)."""
    write_checkpoint(root, batches=3, state=True)
    shutil.rmtree(root / "commits")
    return root


def test_a_checkpoint_without_commit_log_is_backed_up_whole_and_restores_byte_for_byte(tmp_path):
    ck = legacy_checkpoint(tmp_path / "ck")
    (ck / "offsets" / ".2.5c1d.tmp").write_bytes(b"partial")
    before = files_below(ck)
    result = backup_checkpoint(str(ck), str(tmp_path / "bk"), job=JOB, settle_s=0)
    m = result.manifest
    assert m.selection["mode"] == "whole" and "no commit log" in m.selection["why"]
    assert m.selection["excluded"] == {"offsets/.2.5c1d.tmp": "temp file of an interrupted write"}
    assert {f.path for f in m.files} == set(before) - {"offsets/.2.5c1d.tmp"}
    assert m.last_committed_batch is None and m.pending_batch == 2
    again = load_backup(str(tmp_path / "bk"), JOB, m.backup_id)
    assert again.selection == m.selection
    materialize(again, str(tmp_path / "bk"), open_location(str(tmp_path / "restored")))
    assert files_below(tmp_path / "restored") == {k: v for k, v in before.items() if not k.endswith(".tmp")}


def test_every_file_left_out_of_a_version_backup_is_listed_with_its_reason(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True, pending=True).root
    (ck / "state" / "0" / "0" / "9.delta").write_bytes(b"from an uncommitted batch")
    result = backup_checkpoint(str(ck), str(tmp_path / "bk"), job=JOB, settle_s=0)
    sel = result.manifest.selection
    assert sel["mode"] == "version" and sel["why"] is None
    assert sel["excluded"] == {"state/0/0/9.delta": "state version 9 is after the captured version"}
    copied = {f.path for f in result.manifest.files}
    assert copied | set(sel["excluded"]) == set(files_below(ck))


def test_a_forced_backup_of_a_running_query_outside_the_model_is_refused(tmp_path, monkeypatch):
    ck = legacy_checkpoint(tmp_path / "ck")
    monkeypatch.setattr(take, "running_reason", lambda _record: "a live lease")
    with pytest.raises(OperationBlocked, match=r"no commit log.*stop it on a batch boundary"):
        take.take_backup(open_location(str(ck)), open_location(str(tmp_path / "bk")),
                         take.BackupRequest(job=JOB, force=True), run=RunOptions(backup_settle_s=0))
    published = tmp_path / "bk" / JOB / "backups"
    assert not published.exists() or not any(published.iterdir())


def test_a_manifest_without_selection_keeps_its_seal(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2).root
    m = backup_checkpoint(str(ck), str(tmp_path / "bk"), job=JOB, settle_s=0).manifest
    old = replace(m, selection={}, files_json=None)
    _, raw = old.sealed_json()
    assert b'"selection"' not in raw
    parsed = Manifest.from_json(raw, where="old.json")
    assert parsed.selection == {} and parsed.files == m.files


def test_commits_ahead_of_offsets_are_copied_whole_without_a_pending_batch(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3).root
    for rel in ("offsets/2", "offsets/.2.crc"):
        (ck / rel).unlink(missing_ok=True)
    m = backup_checkpoint(str(ck), str(tmp_path / "bk"), job=JOB, settle_s=0).manifest
    assert m.selection["mode"] == "whole" and "commits/2 is newer" in m.selection["why"]
    assert m.last_committed_batch == 2 and m.pending_batch is None
    assert {f.path for f in m.files} == set(files_below(ck))


def test_the_command_line_says_what_was_copied_whole_and_what_was_left_out(tmp_path, capsys):
    from airflow_kafka_spark import cli

    ck = legacy_checkpoint(tmp_path / "ck")
    (ck / "offsets" / ".2.5c1d.tmp").write_bytes(b"partial")
    (ck / "rtm").mkdir()
    (ck / "rtm" / "0").write_bytes(b"a folder this tool does not know")
    code = cli.main(["backup", "--checkpoint", str(ck), "--backup-root", str(tmp_path / "bk"), "--settle", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "copied whole (every file but temp files): no commit log" in out
    assert "copied as found (outside Spark's known folders): rtm/" in out
    assert "left out offsets/.2.5c1d.tmp: temp file of an interrupted write" in out
