"""The backup's running-query check after a stop: the stop's own record starts the quiet period (ops/backup/quiet.py).

The settle period guesses whether a query still runs; after the product's own stop saw the driver
exit, there is nothing to guess about it, so the backup in the downtime window waits no settle
period (locally it waited up to 1 s, on HDFS and S3 the whole 2 s: their mtimes count only with a 60 s
clock-skew margin). A graceful ``driver_stopped`` event at exactly the listed batch is that proof;
anything that may have written since (a submit, a lease, a move) or a stop that did not end on that
batch vouches nothing, and the mtimes decide.
"""

from __future__ import annotations

import threading
import time

import pytest

from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import quiet
from airflow_kafka_spark.ops.backup.quiet import settle_wait, stop_witness
from airflow_kafka_spark.ops.commands import backup_checkpoint
from tests.support.checkpoint_factory import write_checkpoint

IDS = (frozenset({0, 1, 2}), frozenset({0, 1, 2}))


def stopped(at_s: float, *, last: int = 2, graceful: bool = True, killed: bool = False,
            replay: int | None = None, job: str = "orders", ck: str = "/nowhere") -> LifecycleRecord:
    record = LifecycleRecord.create(job, ck)
    record.add_event(LifecycleEvent.DRIVER_SUBMITTED, actor="t")
    event = record.add_event(LifecycleEvent.DRIVER_STOPPED, actor="t", outcome="STOPPED", graceful=graceful,
                             killed=killed, last_committed=last, replay_batch=replay)
    event["at_ms"] = int(at_s * 1000)
    return record


def test_a_graceful_stop_at_the_listed_batch_vouches_from_its_time():
    assert stop_witness(stopped(1000.0), IDS) == 1000.0


@pytest.mark.parametrize("record, ids", [
    (stopped(1000.0, last=1), IDS),                                        # the checkpoint moved on since
    (stopped(1000.0), (frozenset({0, 1, 2, 3}), IDS[1])),                  # a batch planned since
    (stopped(1000.0, graceful=False, killed=True), IDS),                   # killed: no boundary vouched
    (stopped(1000.0, replay=2), IDS),
    (None, IDS),
    (LifecycleRecord.create("orders", "/nowhere"), IDS),                   # never stopped
], ids=["other-batch", "pending-batch", "killed", "replay", "no-record", "no-stop"])
def test_a_stop_that_does_not_match_the_listing_vouches_nothing(record, ids):
    assert stop_witness(record, ids) is None


def test_a_submit_or_a_lease_after_the_stop_voids_it():
    for later in (LifecycleEvent.DRIVER_SUBMITTED, LifecycleEvent.LEASE_ACQUIRED):
        record = stopped(1000.0)
        record.add_event(later, actor="t")
        assert stop_witness(record, IDS) is None, later


def test_a_witnessed_stop_spares_the_settle_wait_the_mtimes_cannot():
    now = 5000.0
    newest = (("offsets/2", now - 30.0, 100), ("commits/2", now - 30.0, 30))   # 30 s ago, by the store's clock
    assert settle_wait(2.0, newest, now, 0.1, local=False) == pytest.approx(1.9)   # the skew margin: full wait
    assert settle_wait(2.0, newest, now, 0.1, local=False, witnessed=True) == 0.0
    just = (("offsets/2", now - 0.5, 100), ("commits/2", now - 0.5, 30))       # locally, written 0.5 s ago
    assert settle_wait(2.0, just, now, 0.1) == pytest.approx(1.4)
    assert settle_wait(2.0, just, now, 0.1, witnessed=True) == 0.0


def test_a_backup_after_a_recorded_stop_does_not_sleep_the_settle_period(tmp_path, monkeypatch):
    """A real backup of a checkpoint written a moment ago (its mtimes alone would make it wait 30 s), stopped now."""
    ck = write_checkpoint(tmp_path / "ck", batches=3).root
    naps: list[float] = []
    real_sleep, me = time.sleep, threading.get_ident()

    def nap(seconds: float) -> None:   # ``quiet.time`` is the time module: another test's thread sleeps through it too
        if threading.get_ident() == me:
            naps.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(quiet.time, "sleep", nap)
    record = stopped(time.time(), ck=str(ck))
    record.save()
    done = backup_checkpoint(str(ck), str(tmp_path / "backups"), job="orders", settle_s=30.0)
    assert done.manifest.last_committed_batch == 2 and not naps

    (ck.parent / f"{ck.name}.lifecycle.json").unlink()   # (a saved record merges its history with the stored)
    stopped(time.time() - 40.0, last=1, ck=str(ck)).save()   # a stop at another batch: the mtimes decide
    backup_checkpoint(str(ck), str(tmp_path / "backups"), job="orders", settle_s=30.0)
    assert len(naps) == 1 and naps[0] > 25.0


def test_after_a_witnessed_stop_a_batch_written_during_the_copy_still_refuses_the_backup(tmp_path, monkeypatch):
    """No settle wait is not no check: the second listing, after the copy, still sees a writer."""
    from airflow_kafka_spark.errors import OperationBlocked
    from airflow_kafka_spark.ops.backup.catalog import list_backups

    written = write_checkpoint(tmp_path / "ck", batches=3)
    ck = written.root
    stopped(time.time(), ck=str(ck)).save()
    real = quiet.log_listing

    def listing_after_another_writer(location):
        written.write("offsets/3", b"v1\n{}\n{}")   # a driver nobody recorded planned batch 3 during the copy
        return real(location)

    monkeypatch.setattr(quiet, "log_listing", listing_after_another_writer)
    with pytest.raises(OperationBlocked, match="changed during the backup"):
        backup_checkpoint(str(ck), str(tmp_path / "backups"), job="orders", settle_s=2.0)
    assert list_backups(str(tmp_path / "backups"), "orders").backups == []
