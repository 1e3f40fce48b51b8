"""A file that changes under a backup's copy makes it list again; one that keeps changing is refused
(airflow_kafka_spark/ops/backup/take.py, ``_backup_retrying``).

Why: on YARN an executor of a finished application wrote a RocksDB ``.sst`` for seconds after its
driver was gone (docs/benchmarks.md, round 21), and the backup after the stop failed. Here the
checkpoint is a Spark-shaped one on the local disk (tests/support/checkpoint_factory.py) and the
backup is the real one; the late writer is a stand-in that appends to a state file right after the
backup's listing, as that executor did.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import CheckpointWritten
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import take
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint
from tests.support.checkpoint_factory import write_checkpoint

JOB = "orders"


def _late_writer(monkeypatch, state_file: Path, listings: int) -> dict:
    """Append to ``state_file`` after each of the backup's first ``listings`` listings."""
    real, seen = take._list, {"listings": 0}

    def listing(cap, state, *being_written):
        out = real(cap, state, *being_written)
        seen["listings"] += 1
        if seen["listings"] <= listings:
            with open(state_file, "ab") as fh:
                fh.write(b"\x00" * 4096)
        return out

    monkeypatch.setattr(take, "_list", listing)
    monkeypatch.setattr(take, "WRITTEN_SETTLE_S", 0.05)
    return seen


@pytest.fixture
def checkpoint(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=4, state=True)
    LifecycleRecord.create(JOB, ck.location).save()
    state = sorted(p for p in Path(ck.location, "state").rglob("*") if p.is_file() and not p.name.startswith("."))
    return ck, state[-1], str(tmp_path / "backups")


def test_a_write_that_ends_is_waited_out_and_the_backup_holds_the_final_file(checkpoint, monkeypatch, caplog):
    ck, state_file, root = checkpoint
    seen = _late_writer(monkeypatch, state_file, listings=1)
    with caplog.at_level(logging.WARNING, logger=take.__name__):
        result = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    assert seen["listings"] == 2, "the backup listed again after the change"
    assert any("listing again" in r.getMessage() and state_file.name in r.getMessage() for r in caplog.records)
    rel = str(state_file.relative_to(ck.location))
    [entry] = [f for f in result.manifest.files if f.path == rel]
    assert entry.size == state_file.stat().st_size, (entry, state_file.stat().st_size)
    assert verify_backup(root, JOB, result.backup_id, deep=True).backup_id == result.backup_id


def test_a_file_that_keeps_changing_is_refused_and_nothing_is_published(checkpoint, monkeypatch):
    ck, state_file, root = checkpoint
    seen = _late_writer(monkeypatch, state_file, listings=99)
    with pytest.raises(CheckpointWritten) as err:
        backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    assert seen["listings"] == 3 and "\n" not in str(err.value)
    assert state_file.name in str(err.value) and "a file changed in each of 3 attempts" in str(err.value)
    assert list_backups(root, JOB).backups == []


def test_a_rocksdb_upload_that_keeps_growing_is_left_out_at_once_and_the_backup_verifies(checkpoint, monkeypatch,
                                                                                            caplog):
    """Round 25 (docs/benchmarks.md): the reference job's stop interrupted an executor's upload of an .sst,
    which stayed open on HDFS, growing under each of the backup's three attempts; the DAG run failed."""
    from airflow_kafka_spark.ops.backup.selection import UNFINISHED_UPLOAD

    ck, _, root = checkpoint
    sst = Path(ck.location, "state", "0", "0", "SSTs", "000042-266c8950-c1b7-47d3-929d-778624980e83.sst")
    sst.parent.mkdir(parents=True)
    sst.write_bytes(b"\x01" * 8192)
    seen = _late_writer(monkeypatch, sst, listings=99)
    monkeypatch.setattr(take, "WRITTEN_SETTLE_S", 30.0)   # a wait would show as a timeout: there must be none
    with caplog.at_level(logging.WARNING, logger=take.__name__):
        result = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    rel = str(sst.relative_to(ck.location))
    assert seen["listings"] == 2, seen
    assert result.excluded[rel] == UNFINISHED_UPLOAD
    assert rel not in {f.path for f in result.manifest.files}
    assert any("unfinished RocksDB upload" in r.getMessage() for r in caplog.records)
    assert verify_backup(root, JOB, result.backup_id, deep=True).backup_id == result.backup_id


def test_only_a_rocksdb_sst_counts_as_an_interrupted_upload():
    from airflow_kafka_spark.ops.backup.selection import is_rocksdb_immutable

    assert is_rocksdb_immutable("state/0/3/SSTs/000042-266c8950.sst")
    assert not is_rocksdb_immutable("state/0/3/36.zip") and not is_rocksdb_immutable("state/0/3/12.delta")
    assert not is_rocksdb_immutable("offsets/SSTs/1.sst") and not is_rocksdb_immutable("state/0/3/SSTs/x.sst.tmp")
