"""Backup, restore, reset, the lifecycle record, its lock and the stop marker on HDFS and on S3.

Checkpoints are written byte for byte as Spark 4.0 writes them (tests/support/checkpoint_factory)
and uploaded to the minicluster's HDFS (``hdfs://`` URLs, served through WebHDFS: no libhdfs) or to
S3Proxy (``s3://``), against a real Kafka topic. Credentials and endpoints come from the
environment, as on a worker: ``HADOOP_CONF_DIR`` (the NameNode's HTTP port) and ``AWS_*``.

Proven: a backup → restore → reset round trip is byte-identical where it must be (the backup is
the checkpoint; the restored checkpoint is the backup; what restore and reset move aside is what was
there); a backup from HDFS to an S3 backup root; two concurrent resets (two real processes): one
proceeds, the other refuses with one line; leases raced by four processes: one winner; on S3 a
record write whose lock was broken meanwhile is refused (compare-and-swap), not lost.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import posixpath
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path

import pytest

from airflow_kafka_spark._util.conditional import WriteConflict
from airflow_kafka_spark._util.fs import exists, list_files, open_location, siblings_with_prefix
from airflow_kafka_spark.checkpoint.initial_offsets import read_initial_offsets
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.lifecycle import record as lifecycle
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint, reset_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from airflow_kafka_spark.runtime import drivers
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
JOB = "orders"


@pytest.fixture
def stores(hadoop, s3, monkeypatch) -> dict[str, str]:
    """The environment a worker has: HADOOP_CONF_DIR and AWS_* (also for child processes)."""
    env = {"HADOOP_CONF_DIR": str(hadoop.conf_dir), "AWS_ACCESS_KEY_ID": s3.access_key,
           "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_ENDPOINT_URL_S3": s3.endpoint,
           "AWS_DEFAULT_REGION": "us-east-1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def base_url(store: str, hadoop, s3, run: str) -> str:
    return f"{hadoop.default_fs}/aks-ops/{run}" if store == "hdfs" else s3.url(f"aks-ops/{run}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def local_tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha(p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()}


def remote_tree(url: str) -> dict[str, str]:
    """Every file below ``url`` (relative path -> sha256), read through the product's own opener."""
    loc = open_location(url)
    loc.fs.invalidate_cache()
    return {rel: sha(loc.fs.cat_file(posixpath.join(loc.path, rel))) for rel in list_files(loc)}


def upload(root: Path, url: str) -> None:
    loc = open_location(url)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            loc.fs.pipe_file(posixpath.join(loc.path, str(p.relative_to(root))), p.read_bytes())


def advance(url: str, topic: str, first: int, last: int) -> None:
    """Batches ``first..last`` planned and committed, as the running query would write them."""
    loc = open_location(url)
    for b in range(first, last + 1):
        ends = json.dumps({topic: {"0": (b + 1) * 10, "1": (b + 1) * 10}}, separators=(",", ":"))
        if not exists(loc.child(f"offsets/{b}")):
            loc.fs.pipe_file(loc.child(f"offsets/{b}").path,
                             offsets_file([ends], batch_timestamp_ms=int(time.time() * 1000)))
        loc.fs.pipe_file(loc.child(f"commits/{b}").path, commit_file())


def seeded_checkpoint(url: str, broker, topic: str, tmp_path: Path, batches: int = 4) -> Path:
    """A stopped query's checkpoint at ``url``: batches 0..batches-1 committed, the next planned, state files."""
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 200, partitions=2)
    ck = write_checkpoint(tmp_path / "ck", batches=batches, pending=True, sources=({topic: 2},), records_per_batch=10,
                          state=True, start_timestamp_ms=int(time.time() * 1000))
    upload(ck.root, url)
    LifecycleRecord.create(JOB, url).save()
    return ck.root


def events(url: str) -> list[str]:
    return [e["event"] for e in LifecycleRecord.load(url).history]


@pytest.mark.parametrize("ck_store, backup_store", [("hdfs", "hdfs"), ("s3", "s3"), ("hdfs", "s3")])
def test_backup_restore_reset_round_trip(ck_store, backup_store, stores, hadoop, s3, broker, topic_name, tmp_path):
    run = uuid.uuid4().hex[:8]
    ck_url = f"{base_url(ck_store, hadoop, s3, run)}/{JOB}/ck"
    root_url = f"{base_url(backup_store, hadoop, s3, run)}/backups"
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    local = seeded_checkpoint(ck_url, broker, topic_name, tmp_path)
    written = remote_tree(ck_url)
    assert written == local_tree(local) and len(written) > 20

    # backup: the manifest is the checkpoint, byte for byte, and verifies deep (every blob's sha256)
    m = backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0).manifest
    assert {f.path: f.sha256 for f in m.files} == written
    assert (m.last_committed_batch, m.pending_batch) == (3, 4)
    assert verify_backup(root_url, JOB, m.backup_id, deep=True).backup_id == m.backup_id
    assert [b.backup_id for b in list_backups(root_url, JOB).backups] == [m.backup_id]

    # the query moves on to batch 7; restore brings back exactly the backup's bytes
    advance(ck_url, topic_name, 4, 7)
    moved_on = remote_tree(ck_url)
    restored = restore_checkpoint(ck_url, root_url, m.backup_id, kafka, run=RunOptions(backup_settle_s=0))
    assert restored.restored and restored.aside_location.startswith(ck_url + ".restore-")
    assert remote_tree(ck_url) == written
    assert remote_tree(restored.aside_location) == moved_on
    assert verify_backup(root_url, JOB, restored.pre_restore_backup_id).last_committed_batch == 7

    # reset (preserve): the restored checkpoint moves aside untouched, its backup verifies, the
    # location holds only Spark's start file, and the next run starts where the last committed batch ended
    reset = reset_checkpoint(ck_url, root_url, kafka, ResetRequest(mode="preserve"), run=RunOptions(backup_settle_s=0))
    assert list(remote_tree(ck_url)) == ["sources/0/0"]
    assert read_initial_offsets(ck_url, "0") == {TopicPartition(topic_name, 0): 40, TopicPartition(topic_name, 1): 40}
    assert remote_tree(reset.aside_location) == written
    pre_reset = verify_backup(root_url, JOB, reset.backup_id, deep=True)
    assert {f.path: f.sha256 for f in pre_reset.files} == written
    record = LifecycleRecord.load(ck_url)
    assert parse_offsets_json(record.next_starting_offsets) == {TopicPartition(topic_name, 0): 40,
                                                               TopicPartition(topic_name, 1): 40}
    assert events(ck_url).count("checkpoint_restored") == 1 and events(ck_url).count("checkpoint_reset") == 1
    # no lock or journal left behind; the user's URL is what the record and results name
    ck = open_location(ck_url)
    assert not siblings_with_prefix(ck, ".operation") and not exists(open_location(record.location + ".lock"))
    assert record.checkpoint_location == ck_url and reset.aside_location.startswith(ck_url + ".reset-")


@pytest.mark.parametrize("store", ["hdfs", "s3"])
def test_a_reset_after_a_recorded_stop_adopts_its_backup_on_the_logs_alone(store, stores, hadoop, s3, broker,
                                                                            topic_name, tmp_path):
    """The safe restart's stop task records the stop, then backs up; the reset adopts that backup after listing
    ``offsets/`` and ``commits/`` only (ops/backup/adopt.py), and what it adopted is the checkpoint it moved
    aside, byte for byte. A batch committed after the backup: the same reset takes a backup of its own."""
    run = uuid.uuid4().hex[:8]
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    local = seeded_checkpoint(f"{base_url(store, hadoop, s3, run)}/seed/ck", broker, topic_name, tmp_path)
    for case in ("unchanged", "committed since"):
        ck_url = f"{base_url(store, hadoop, s3, run)}/{case.replace(' ', '-')}/{JOB}/ck"
        root_url = f"{base_url(store, hadoop, s3, run)}/{case.replace(' ', '-')}/backups"
        upload(local, ck_url)
        record = LifecycleRecord.create(JOB, ck_url)
        record.add_event(LifecycleEvent.DRIVER_STOPPED, actor="stop-task", outcome="STOPPED", graceful=True,
                         killed=False, last_committed=3, replay_batch=None)
        record.save()
        m = backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0).manifest
        if case == "committed since":
            advance(ck_url, topic_name, 4, 4)
        before = remote_tree(ck_url)
        reset = reset_checkpoint(ck_url, root_url, kafka, ResetRequest(mode="preserve"),
                                 run=RunOptions(backup_settle_s=0))
        assert remote_tree(reset.aside_location) == before
        kept = verify_backup(root_url, JOB, reset.backup_id, deep=True)
        assert {f.path: f.sha256 for f in kept.files} == before, case
        if case == "unchanged":
            assert reset.backup_adopted and reset.backup_id == m.backup_id, reset.backup_note
            assert "after the recorded stop; offsets/ and commits/ unchanged since" in reset.backup_note
        else:
            assert not reset.backup_adopted and reset.backup_id != m.backup_id
            assert "holds batch 3 (pending 4), the checkpoint now 4 (pending None)" in reset.backup_note, \
                reset.backup_note
            assert kept.last_committed_batch == 4


def aks_reset(ck_url: str, root_url: str, broker, settle: float) -> list[str]:
    return [sys.executable, "-m", "airflow_kafka_spark.cli", "reset", "--checkpoint", ck_url, "--backup-root",
            root_url, "--mode", "preserve", "--bootstrap-servers", broker.bootstrap_servers,
            "--settle", str(settle), "--json", "--execute"]


@pytest.mark.parametrize("store", ["s3", "hdfs"])
def test_two_concurrent_resets_one_proceeds_the_other_refuses(store, stores, hadoop, s3, broker, topic_name,
                                                               tmp_path):
    run = uuid.uuid4().hex[:8]
    ck_url = f"{base_url(store, hadoop, s3, run)}/{JOB}/ck"
    root_url = f"{base_url(store, hadoop, s3, run)}/backups"
    seeded_checkpoint(ck_url, broker, topic_name, tmp_path)
    before = remote_tree(ck_url)
    procs = [subprocess.Popen(aks_reset(ck_url, root_url, broker, settle=8), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=REPO, env={**os.environ, **stores})
             for _ in range(2)]
    results = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    assert sorted(r[0] for r in results) == [0, 2], results
    winner = next(r for r in results if r[0] == 0)
    loser = next(r for r in results if r[0] == 2)
    lines = loser[2].strip().splitlines()
    assert len(lines) == 1 and "locked by" in lines[0] and "another reset or restore" in lines[0], loser
    aside = json.loads(winner[1])["aside_location"]
    assert remote_tree(aside) == before and list(remote_tree(ck_url)) == ["sources/0/0"]   # only Spark's start file
    assert len(list_backups(root_url, JOB).backups) == 1
    assert events(ck_url).count("checkpoint_reset") == 1
    assert len(siblings_with_prefix(open_location(ck_url), ".reset-")) == 1


def _race_for_lease(env: dict, ck_url: str, holder: str, barrier, results) -> None:
    os.environ.update(env)
    lifecycle._RMW_PAUSE_S = 0.3   # widen the read-modify-write window: only the lock can save us
    rec = LifecycleRecord.create("race-job", ck_url)
    barrier.wait()
    try:
        results.put((holder, "won", rec.acquire_lease(holder, 60, lock_timeout=60).holder))
    except UserError as exc:
        results.put((holder, "lost", str(exc)))
    except Exception:  # pragma: no cover - reported to the parent
        results.put((holder, "error", traceback.format_exc()[-1500:]))


@pytest.mark.parametrize("store", ["s3", "hdfs"])
def test_lease_raced_by_four_processes_has_one_winner(store, stores, hadoop, s3):
    ck_url = f"{base_url(store, hadoop, s3, uuid.uuid4().hex[:8])}/race/ck"
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race_for_lease, args=(stores, ck_url, f"worker-{i}", barrier, results))
             for i in range(4)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    winners = [o[0] for o in outcomes if o[1] == "won"]
    assert len(winners) == 1, outcomes
    assert all(f"leased by {winners[0]}" in o[2] for o in outcomes if o[1] == "lost"), outcomes
    stored = LifecycleRecord.load(ck_url)
    assert stored.lease.holder == winners[0] and [e["event"] for e in stored.history] == ["lease_acquired"]
    assert not exists(open_location(stored.location + ".lock"))


def test_s3_record_write_after_its_lock_was_broken_is_refused_not_lost(stores, s3, monkeypatch):
    """The lock is broken (as a stale one would be) while its holder sits between read and write,
    and a second writer goes through the same window: of the two If-Match writes of one ETag exactly
    one lands, the other is refused with one line: no change is overwritten unseen."""
    ck_url = s3.url(f"aks-ops/{uuid.uuid4().hex[:8]}/cas/ck")
    LifecycleRecord.create(JOB, ck_url).save()
    slow, fast = LifecycleRecord.load(ck_url), LifecycleRecord.load(ck_url)
    slow.spark_version = "4.0.0"
    fast.add_event("operator_note", actor="fast")
    monkeypatch.setattr(lifecycle, "_RMW_PAUSE_S", 2.0)   # both writers sit 2 s between read and write
    failures: dict[str, BaseException] = {}

    def save(name: str, rec: LifecycleRecord) -> None:
        try:
            rec.save()
        except BaseException as exc:
            failures[name] = exc

    t = threading.Thread(target=save, args=("slow", slow))
    t.start()
    lock = open_location(slow.location + ".lock")
    deadline = time.monotonic() + 10
    while not exists(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)                                    # slow has read the record and sits in its window
    lock.fs.rm_file(lock.path)                         # broken as stale by another process
    save("fast", fast)
    t.join(30)
    assert len(failures) == 1 and isinstance(next(iter(failures.values())), WriteConflict), failures
    message = str(next(iter(failures.values())))
    assert "changed by another process" in message and "\n" not in message
    stored = LifecycleRecord.load(ck_url)
    noted = "operator_note" in [e["event"] for e in stored.history]
    assert (stored.spark_version == "4.0.0", noted) == ((False, True) if "slow" in failures else (True, False))


def _job_side(env: dict, marker_url: str) -> None:
    """Stands in for the driver: exits once it sees the marker (the job reads it through Hadoop)."""
    os.environ.update(env)
    loc = open_location(marker_url)
    while not exists(loc):
        time.sleep(0.1)


@pytest.mark.parametrize("store", ["hdfs", "s3"])
def test_stop_marker_is_written_beside_the_checkpoint_and_removed(store, stores, hadoop, s3, broker, topic_name,
                                                                 tmp_path):
    base = base_url(store, hadoop, s3, uuid.uuid4().hex[:8])
    ck_url, marker_url = f"{base}/{JOB}/ck", f"{base}/{JOB}/STOP"
    seeded_checkpoint(ck_url, broker, topic_name, tmp_path)
    job = multiprocessing.get_context("spawn").Process(target=_job_side, args=(stores, marker_url))
    job.start()
    result = drivers.stop(ck_url, marker_url, is_alive=job.is_alive, kill=job.kill, timeout_s=60, poll_s=0.2)
    assert result.graceful and not result.killed, result
    assert (result.outcome, result.last_committed, result.replay_batch) == ("STOPPED_MID_BATCH", 3, 4)
    assert not exists(open_location(marker_url))
