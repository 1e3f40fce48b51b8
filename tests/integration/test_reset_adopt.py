"""A reset adopts the backup just taken of the same stopped checkpoint (airflow_kafka_spark/ops/backup/adopt.py).

One real Spark run on the real broker writes the checkpoint; two copies of it (each its own job)
give the other cases without another Spark run: a file written after the backup makes the reset
take its own backup and say why, and ``--fresh-backup`` always takes one.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint, reset_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions, SinkFacts
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from tests.integration.test_backup_restore import JOB, Job, aks

pytestmark = pytest.mark.integration


def manifests(root: Path, job: str) -> list[str]:
    return sorted(p.stem for p in (root / job / "backups").glob("*.json"))


def copy_as(src: Path, dst: Path, job: str) -> str:
    shutil.copytree(src, dst)
    LifecycleRecord.create(job, str(dst)).save()
    return str(dst)


def test_a_reset_adopts_the_backup_just_taken_unless_a_file_changed_or_a_fresh_one_is_asked(broker, tmp_path,
                                                                                          topic_name):
    job = Job(broker, tmp_path, topic_name, partitions=2)
    job.produce(40)
    ran = job.run(max_offsets_per_trigger=20)
    t0 = time.monotonic()
    spark = read_checkpoint(str(job.checkpoint))
    assert spark.latest_committed is not None and spark.latest_committed.batch_id >= 1
    root = tmp_path / "backups"
    ck, ck_b, ck_c = str(job.checkpoint), copy_as(job.checkpoint, tmp_path / "ck-b", "orders-b"), \
        copy_as(job.checkpoint, tmp_path / "ck-c", "orders-c")
    reset_args = ("--backup-root", str(root), "--mode", "preserve", "--bootstrap-servers", job.bootstrap,
                  "--settle", "0", "--execute")

    # aks backup, then aks reset: the reset adopts that backup and writes no manifest of its own.
    taken = aks("backup", "--checkpoint", ck, "--backup-root", str(root), "--settle", "0", "--json")
    assert taken.returncode == 0, taken.stderr
    backup_id = json.loads(taken.stdout)["backup"]["backup_id"]
    done = aks("reset", "--checkpoint", ck, *reset_args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"backup: {backup_id} — adopted verified backup {backup_id} (taken " in done.stdout, done.stdout
    assert "s ago; the checkpoint unchanged since)" in done.stdout
    assert manifests(root, JOB) == [backup_id]
    event = [e for e in LifecycleRecord.load(ck).history if e["event"] == "checkpoint_reset"][-1]["details"]
    assert event["backup_id"] == backup_id and event["backup_adopted"] is True
    # That backup is the reset's: restored, it gives Spark's position back.
    verify_backup(str(root), JOB, backup_id)
    back = restore_checkpoint(ck, str(root), backup_id, job.kafka, sink=SinkFacts(idempotent=False),
                              run=RunOptions(backup_settle_s=0))
    assert back.restored
    restored = read_checkpoint(ck)
    assert restored.query_id == spark.query_id
    assert restored.latest_committed.batch_id == spark.latest_committed.batch_id
    assert restored.latest_committed.kafka_offsets == spark.latest_committed.kafka_offsets

    # A file touched after the backup: the reset takes its own backup and says why.
    first_b = backup_checkpoint(ck_b, str(root), job="orders-b", settle_s=0).backup_id
    newest_commit = max((Path(ck_b) / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    newest_commit.touch()
    own = reset_checkpoint(ck_b, str(root), job.kafka, ResetRequest(mode="preserve"), run=RunOptions(backup_settle_s=0))
    assert not own.backup_adopted and own.backup_id != first_b
    assert own.backup_note.startswith(f"took its own backup: 1 file(s) differ from the newest backup {first_b}")
    assert f"commits/{newest_commit.name}" in own.backup_note
    assert manifests(root, "orders-b") == sorted([first_b, own.backup_id])

    # --fresh-backup: its own backup although the newest one would do, and the result says so.
    first_c = backup_checkpoint(ck_c, str(root), job="orders-c", settle_s=0).backup_id
    fresh = aks("reset", "--checkpoint", ck_c, *reset_args, "--fresh-backup", "--json")
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    doc = json.loads(fresh.stdout)
    assert doc["fresh_backup"] is True and doc["backup_adopted"] is False and doc["backup_id"] != first_c
    assert manifests(root, "orders-c") == sorted([first_c, doc["backup_id"]])
    print("RESET_ADOPT " + json.dumps({"spark_s": round(ran.seconds, 1), "rest_s": round(time.monotonic() - t0, 1)}))
