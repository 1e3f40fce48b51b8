"""The backup's pre-copy on HDFS (WebHDFS) and S3 (S3Proxy): the backup after the stop reads only new files.

Proven on the real stores: a pre-copy taken while batches still arrive publishes nothing; the
backup after it reads exactly the files written since (their stat from the store's listing differs
or is new), takes every other file's sha256 from the pre-copy, and its manifest is the checkpoint
byte for byte and verifies deep (every blob re-hashed). An object rewritten after the pre-copy is
read again (its modification time is the store's, which no client sets).
"""

from __future__ import annotations

import time
import uuid

import pytest

from airflow_kafka_spark._util.fs import list_files, open_location
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint
from tests.cluster.test_ops_cluster import JOB, advance, base_url, remote_tree, seeded_checkpoint, sha
from tests.cluster.test_ops_cluster import stores as stores  # the worker's environment (a fixture)

pytestmark = pytest.mark.cluster


@pytest.mark.usefixtures("stores")
@pytest.mark.parametrize("store", ["hdfs", "s3"])
def test_the_backup_after_a_precopy_reads_only_the_files_written_since(store, hadoop, s3, broker, topic_name,
                                                                       tmp_path):
    run = uuid.uuid4().hex[:8]
    ck_url = f"{base_url(store, hadoop, s3, run)}/{JOB}/ck"
    root_url = f"{base_url(store, hadoop, s3, run)}/backups"
    seeded_checkpoint(ck_url, broker, topic_name, tmp_path)
    pre = precopy_checkpoint(ck_url, root_url, job=JOB)
    assert pre.files == pre.files_read > 20 and pre.files_skipped == 0
    assert list_backups(root_url, JOB).backups == []                      # nothing published

    time.sleep(1.1)          # the stores stamp whole seconds: the rewrite below must get a new mtime
    advance(ck_url, topic_name, 4, 5)                                     # offsets/5, commits/4..5 new
    loc = open_location(ck_url)
    loc.fs.pipe_file(loc.child("state/0/0/2.delta").path, b"rewritten in place")
    written = remote_tree(ck_url)
    after = backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0)
    assert {f.path: f.sha256 for f in after.manifest.files} == written
    read_again = {"offsets/5", "commits/4", "commits/5", "state/0/0/2.delta"}
    assert after.files_hashed == len(read_again)                           # ...and nothing else
    assert after.files_from_precopy == after.files - len(read_again)
    assert {f.path: f.sha256 for f in after.manifest.files}["state/0/0/2.delta"] == sha(b"rewritten in place")
    assert verify_backup(root_url, JOB, after.backup_id, deep=True).backup_id == after.backup_id
    assert list_files(open_location(f"{root_url}/{JOB}/staging")) == {}   # published (HDFS: renamed), not left


@pytest.mark.usefixtures("stores")
def test_an_hdfs_blob_index_lists_again_only_the_folders_that_changed(hadoop, webhdfs, monkeypatch):
    """The HDFS blob index of one process (``store._webhdfs_blob_index``): a folder whose version (fileId,
    modificationTime, childrenNum) the NameNode still gives is not listed again, and every change another
    client makes (a blob deleted, one added to a listed folder, a new folder, a folder made again) is seen."""
    from airflow_kafka_spark.ops.backup.store import blob_index

    job_loc = open_location(f"{hadoop.default_fs}/aks-ops/{uuid.uuid4().hex[:8]}/backups/{JOB}")

    def name(folder: str, n: int) -> str:
        return folder + f"{n:062x}"

    other = webhdfs   # another client: its own fsspec instance, as another process would be

    def put(folder: str, n: int, body: bytes = b"x") -> None:
        other.pipe_file(f"{job_loc.path}/blobs/{folder}/{name(folder, n)}", body)

    for folder in ("aa", "bb", "cc"):
        put(folder, 1, folder.encode() * 3)
    listed: list[str] = []
    call = job_loc.fs._call

    def counted(op, *args, **kwargs):
        if op == "LISTSTATUS":
            listed.append(kwargs.get("path", ""))
        return call(op, *args, **kwargs)

    monkeypatch.setattr(job_loc.fs, "_call", counted)
    first = blob_index(job_loc)
    assert first == {name("aa", 1): 6, name("bb", 1): 6, name("cc", 1): 6} and len(listed) == 4
    listed.clear()
    assert blob_index(job_loc) == first and len(listed) == 1                    # blobs/ only
    other.rm(f"{job_loc.path}/blobs/bb/{name('bb', 1)}")
    put("cc", 2, b"yy")
    put("dd", 1)
    listed.clear()
    assert blob_index(job_loc) == {name("aa", 1): 6, name("cc", 1): 6, name("cc", 2): 2, name("dd", 1): 1}
    assert sorted(p.rsplit("/", 1)[-1] for p in listed[1:]) == ["bb", "cc", "dd"]
    other.rm(f"{job_loc.path}/blobs/aa", recursive=True)                          # made again, same name inside
    put("aa", 1, b"zz")
    assert blob_index(job_loc)[name("aa", 1)] == 2
