"""The lifecycle record beside a checkpoint: round trip, corruption, lease races between processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle import record as lifecycle
from airflow_kafka_spark.lifecycle.model import TopicIdentity, record_location
from airflow_kafka_spark.lifecycle.record import HISTORY_LIMIT, LifecycleRecord


@pytest.fixture
def ckpt(tmp_path):
    path = tmp_path / "checkpoints" / "orders"
    path.mkdir(parents=True)
    return str(path)


def full_record(ckpt: str) -> LifecycleRecord:
    rec = LifecycleRecord.create("orders-job", ckpt)
    rec.kafka_cluster_id = "JVv5lohZS2GjT-iWPYtqgg"
    rec.topics = {"orders": TopicIdentity("B6S8wHDOTM6fMeDn1u5gow", 3)}
    rec.spark_version = "4.0.0"
    rec.compatibility_version = "7"
    rec.set_next_starting_offsets({TopicPartition("orders", 0): 5, TopicPartition("orders", 1): 7})
    rec.set_driver("yarn", "application_1700000000000_0042", host="edge-1", started_at=1_700_000_000_000)
    rec.add_event("validated", actor="airflow", verdict="PASS",
                  options={"subscribe": "orders", "kafka.bootstrap.servers": "b:9092",
                           "kafka.sasl.jaas.config": 'x required username="u" password="hunter2";',
                           "kafka.ssl.truststore.password": "changeit"})
    return rec


def test_record_lives_beside_the_checkpoint_not_inside(ckpt):
    assert record_location(ckpt) == ckpt + ".lifecycle.json"
    assert record_location(ckpt + "/") == ckpt + ".lifecycle.json"
    assert record_location("s3://bucket/streams/orders/") == "s3://bucket/streams/orders.lifecycle.json"
    with pytest.raises(UserError, match="no parent folder"):
        record_location("s3://bucket")
    rec = full_record(ckpt)
    rec.save()
    assert os.path.exists(ckpt + ".lifecycle.json")
    assert os.listdir(ckpt) == []  # nothing written into Spark's folder
    assert sorted(os.listdir(os.path.dirname(ckpt))) == ["orders", "orders.lifecycle.json"]  # no tmp, no lock


def test_round_trip(ckpt):
    rec = full_record(ckpt)
    rec.save()
    loaded = LifecycleRecord.load(ckpt)
    assert loaded == rec
    assert loaded.revision == 1
    assert LifecycleRecord.load(record_location(ckpt)) == rec  # the record path works too
    assert loaded.next_starting_offsets == '{"orders":{"0":5,"1":7}}'
    assert loaded.driver.kind == "yarn" and loaded.driver.started_at == 1_700_000_000_000
    loaded.spark_version = "4.0.1"
    loaded.save()
    again = LifecycleRecord.load(ckpt)
    assert again.spark_version == "4.0.1" and again.revision == 2


def test_a_record_written_with_source_options_keeps_them_on_rewrite(ckpt):
    """Records of earlier versions carried ``source_options`` (never read): kept as an unknown key."""
    full_record(ckpt).save()
    path = Path(record_location(ckpt))
    doc = json.loads(path.read_text())
    doc["source_options"] = {"subscribe": "orders"}
    path.write_text(json.dumps(doc))
    rec = LifecycleRecord.load(ckpt)
    rec.spark_version = "4.1.0"
    rec.save()
    assert json.loads(path.read_text())["source_options"] == {"subscribe": "orders"}


def test_missing_record_is_none(ckpt):
    assert LifecycleRecord.load(ckpt) is None
    rec = LifecycleRecord.load_or_create("orders-job", ckpt)
    assert rec.revision == 0 and rec.location == record_location(ckpt)


def test_secrets_never_reach_the_file(ckpt):
    full_record(ckpt).save()
    text = Path(record_location(ckpt)).read_text()
    assert "hunter2" not in text and "changeit" not in text
    options = json.loads(text)["history"][-1]["details"]["options"]
    assert options["kafka.sasl.jaas.config"] == "***" and options["subscribe"] == "orders"
    rec = LifecycleRecord.load(ckpt)
    rec.add_event("deployed", actor="ci", password="s3cr3t")
    rec.save()
    assert "s3cr3t" not in Path(record_location(ckpt)).read_text()


def test_next_starting_offsets_are_consumed_once(ckpt):
    rec = full_record(ckpt)
    assert rec.take_next_starting_offsets() == '{"orders":{"0":5,"1":7}}'
    assert rec.take_next_starting_offsets() is None
    assert [e["event"] for e in rec.history][-1] == "next_starting_offsets_used"
    with pytest.raises(UserError):
        rec.set_next_starting_offsets('{"orders": [1, 2]}')


def test_driver_kind_is_checked(ckpt):
    rec = LifecycleRecord.create("j", ckpt)
    with pytest.raises(UserError, match="local-pid"):
        rec.set_driver("mesos", "x")


@pytest.mark.parametrize("content", [
    b"",
    b"{not json",
    b"\xff\xfe\x00",
    b"[1, 2, 3]",
    b'{"format": 1, "job_name": "j"}',                                   # no checkpoint_location
    b'{"format": 1, "job_name": "j", "checkpoint_location": "/c", "topics": {"t": {"partitions": "3"}}}',
    b'{"format": 1, "job_name": "j", "checkpoint_location": "/c", "lease": {"holder": "h"}}',
    b'{"format": 1, "job_name": "j", "checkpoint_location": "/c", "next_starting_offsets": "nope"}',
])
def test_corrupt_record_is_one_clean_line(ckpt, content):
    with open(record_location(ckpt), "wb") as fh:
        fh.write(content)
    with pytest.raises(UserError) as info:
        LifecycleRecord.load(ckpt)
    msg = str(info.value)
    assert "corrupt" in msg and record_location(ckpt) in msg and "\n" not in msg
    assert "restore it from a backup" in msg
    # and a save does not silently overwrite it
    with pytest.raises(UserError, match="corrupt"):
        LifecycleRecord.create("j", ckpt).save()


def test_newer_format_asks_for_an_upgrade(ckpt):
    with open(record_location(ckpt), "w") as fh:
        json.dump({"format": 99, "job_name": "j", "checkpoint_location": ckpt}, fh)
    with pytest.raises(UserError, match="upgrade"):
        LifecycleRecord.load(ckpt)


def test_unknown_keys_survive_a_rewrite(ckpt):
    rec = full_record(ckpt)
    doc = rec.to_dict()
    doc["added_by_a_newer_minor"] = {"x": 1}
    with open(record_location(ckpt), "w") as fh:
        json.dump(doc, fh)
    loaded = LifecycleRecord.load(ckpt)
    loaded.save()
    assert json.loads(Path(record_location(ckpt)).read_text())["added_by_a_newer_minor"] == {"x": 1}


def test_history_is_bounded(ckpt):
    rec = LifecycleRecord.create("j", ckpt)
    for i in range(HISTORY_LIMIT + 50):
        rec.add_event("tick", n=i)
    rec.save()
    loaded = LifecycleRecord.load(ckpt)
    assert len(loaded.history) == HISTORY_LIMIT
    assert loaded.history[-1]["details"]["n"] == HISTORY_LIMIT + 49


def test_two_jobs_cannot_share_a_record(ckpt):
    LifecycleRecord.create("job-a", ckpt).save()
    with pytest.raises(UserError, match="belongs to job 'job-a'"):
        LifecycleRecord.create("job-b", ckpt).save()
    with pytest.raises(UserError, match="belongs to job 'job-a'"):
        LifecycleRecord.load_or_create("job-b", ckpt)


def test_custom_location_and_object_store(ckpt):
    rec = LifecycleRecord.create("j", "s3://bucket/ckpt/orders",
                                 location="memory://records/orders.lifecycle.json")
    rec.spark_version = "4.0.0"
    rec.save()
    lease = rec.acquire_lease("worker-1", 30)
    loaded = LifecycleRecord.load("memory://records/orders.lifecycle.json")
    assert loaded.spark_version == "4.0.0" and loaded.lease == lease
    assert loaded.checkpoint_location == "s3://bucket/ckpt/orders"
    assert rec.release_lease("worker-1")
    import fsspec
    assert not fsspec.filesystem("memory").exists("/records/orders.lifecycle.json.lock")


# -- lease --------------------------------------------------------------------------------------------

def test_lease_acquire_renew_release(ckpt):
    rec = LifecycleRecord.create("j", ckpt)
    first = rec.acquire_lease("scheduler-a", 60, run_id="run-1")
    assert first.holder == "scheduler-a" and first.live()
    again = rec.acquire_lease("scheduler-a", 120)          # renewal keeps the run id
    assert again.run_id == "run-1" and again.expires_at_ms > first.expires_at_ms
    other = LifecycleRecord.load(ckpt)
    with pytest.raises(UserError) as info:
        other.acquire_lease("scheduler-b", 60)
    msg = str(info.value)
    assert "leased by scheduler-a (run run-1)" in msg and "\n" not in msg
    with pytest.raises(UserError, match="held by scheduler-a"):
        other.release_lease("scheduler-b")
    assert rec.release_lease("scheduler-a") is True
    assert rec.release_lease("scheduler-a") is False
    assert other.acquire_lease("scheduler-b", 60).holder == "scheduler-b"
    events = [e["event"] for e in LifecycleRecord.load(ckpt).history]
    assert events == ["lease_acquired", "lease_released", "lease_acquired"]


def test_expired_lease_is_taken_over_and_audited(ckpt):
    rec = LifecycleRecord.create("j", ckpt)
    rec.acquire_lease("crashed-worker", 0.05)
    time.sleep(0.1)
    lease = LifecycleRecord.load(ckpt).acquire_lease("new-worker", 60)
    assert lease.holder == "new-worker"
    last = LifecycleRecord.load(ckpt).history[-1]
    assert last["event"] == "lease_taken_over" and last["details"]["previous_holder"] == "crashed-worker"


def test_force_release_breaks_a_live_lease(ckpt):
    LifecycleRecord.create("j", ckpt).acquire_lease("stuck", 600)
    rec = LifecycleRecord.load(ckpt)
    assert rec.release_lease("operator", force=True)
    assert LifecycleRecord.load(ckpt).history[-1]["event"] == "lease_broken"


def test_stale_object_save_keeps_the_stored_lease(ckpt):
    stale = LifecycleRecord.create("j", ckpt)
    stale.save()
    holder = LifecycleRecord.load(ckpt)
    holder.acquire_lease("runner", 600)
    stale.spark_version = "4.0.0"   # stale object knows nothing about the lease
    stale.save()
    loaded = LifecycleRecord.load(ckpt)
    assert loaded.spark_version == "4.0.0"
    assert loaded.lease is not None and loaded.lease.holder == "runner"
    assert [e["event"] for e in loaded.history] == ["lease_acquired"]


def test_lock_left_by_a_dead_process_is_broken(ckpt):
    dead = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    lock = record_location(ckpt) + ".lock"
    with open(lock, "w") as fh:
        fh.write(f"{socket.gethostname()} {dead.pid} deadbeef {int(time.time() * 1000)}")
    rec = LifecycleRecord.create("j", ckpt)
    rec.save()
    assert not os.path.exists(lock)


def test_lock_held_by_a_live_process_times_out_with_a_fix(ckpt):
    lock = record_location(ckpt) + ".lock"
    with open(lock, "w") as fh:
        fh.write(f"{socket.gethostname()} {os.getpid()} cafe {int(time.time() * 1000)}")
    with pytest.raises(UserError) as info:
        LifecycleRecord.create("j", ckpt).save(lock_timeout=0.3)
    assert "delete the lock file" in str(info.value) and lock in str(info.value)
    os.unlink(lock)


def _race_for_lease(ckpt: str, holder: str, barrier, results, pause: float) -> None:
    lifecycle._RMW_PAUSE_S = pause   # widen the read-modify-write window: only the lock can save us
    rec = LifecycleRecord.create("race-job", ckpt)
    barrier.wait()
    try:
        lease = rec.acquire_lease(holder, 60, lock_timeout=30)
        results.put((holder, "won", lease.holder))
    except UserError as exc:
        results.put((holder, "lost", str(exc)))
    except Exception as exc:  # pragma: no cover - reported to the parent
        results.put((holder, "error", repr(exc)))


@pytest.mark.parametrize("round_no", range(3))
def test_lease_contention_between_processes_has_exactly_one_winner(tmp_path, round_no):
    ckpt = str(tmp_path / f"race-{round_no}")
    ctx = multiprocessing.get_context("spawn")
    n = 4
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=_race_for_lease, args=(ckpt, f"worker-{i}", barrier, results, 0.2))
             for i in range(n)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    winners = [o for o in outcomes if o[1] == "won"]
    assert len(winners) == 1, outcomes
    winner = winners[0][0]
    for _, verdict, msg in outcomes:
        if verdict == "lost":
            assert f"leased by {winner}" in msg
    stored = LifecycleRecord.load(ckpt)
    assert stored.lease.holder == winner
    assert [e["event"] for e in stored.history] == ["lease_acquired"]
    assert not os.path.exists(record_location(ckpt) + ".lock")
