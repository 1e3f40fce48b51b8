"""What the safe restart does around the window when a store does not answer: never fail the run.

``finish`` applies the job's backup retention (``KindSteps.prune``) and the ``submit`` task waits for a
local driver's first commit (``local_start.wait_first_commit_local``). Both are housekeeping or pacing: a
store that refuses connections (here WebHDFS on a closed port) is a warning or a shorter wait, never an
exception that would leave the run without its audit entry or fail a submit whose driver already runs.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time

from airflow_kafka_spark.airflow_glue.kinds.structured import StructuredSteps
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import local_start

UNREACHABLE = "hdfs://127.0.0.1:9"   # the discard port: nothing listens, the connection is refused at once


def _spec(tmp_path, backup_root: str) -> JobSpec:
    return JobSpec(name="j", application="a.py", topics=("t",), checkpoint=str(tmp_path / "ck"),
                   backup_root=backup_root, stop_marker=str(tmp_path / "m"))


def test_retention_on_an_unreachable_backup_store_is_a_warning_and_removes_nothing(tmp_path, caplog):
    log = logging.getLogger("test.prune")
    caplog.set_level(logging.WARNING, logger=log.name)
    spec = _spec(tmp_path, f"{UNREACHABLE}/backups")
    assert StructuredSteps().prune(spec, {"backup_id": "20261128T000000000Z-b1-abcdef"}, None, log) == []
    assert "job j: backups not pruned:" in caplog.text


def test_retention_without_a_backup_in_this_run_touches_nothing(tmp_path):
    spec = _spec(tmp_path, str(tmp_path / "backups"))
    for taken in ({}, {"backup_id": None, "skipped": "no checkpoint yet"}):
        assert StructuredSteps().prune(spec, taken, None, logging.getLogger("test")) == []
    assert not (tmp_path / "backups").exists()


def test_the_first_commit_wait_on_an_unreachable_store_ends_with_the_driver_and_never_raises(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    gone = DriverInfo(kind=DriverKind.LOCAL.value, id=str(proc.pid), host=socket.gethostname())
    t = time.monotonic()
    assert local_start.wait_first_commit_local(gone, f"{UNREACHABLE}/ck", None, timeout_s=30) is None
    assert time.monotonic() - t < 10


def test_an_unreachable_hdfs_fails_a_listing_or_a_blob_index_in_one_line():
    """The parallel WebHDFS listers (``_util.hdfs_tree``) answer an unreachable NameNode as ``find`` did:
    one line naming the location, never a thread's traceback; nothing is remembered for that store."""
    import pytest

    from airflow_kafka_spark._util.fs import list_files, open_location
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.ops.backup import store

    for call, url in ((lambda loc: list_files(loc), f"{UNREACHABLE}/ck"),
                      (lambda loc: store.blob_index(loc), f"{UNREACHABLE}/backups/j")):
        loc = open_location(url)
        with pytest.raises(UserError) as err:
            call(loc)
        assert "\n" not in str(err.value) and "cannot list" in str(err.value) and "127.0.0.1" in str(err.value)
    assert store._FOLDERS.get(open_location(f"{UNREACHABLE}/backups/j/blobs").url) is None
