"""A stop that kills at once kills just after the job's next commit, and never waits past its bound
(runtime/stop_align.py).

The checkpoint is a Spark-shaped one (tests/support/checkpoint_factory.py) whose ``commits/`` a thread
extends at a steady cadence, as a running query does; the driver is a stand-in that dies when killed.
The stop is composed as ``start_stop.stop_job`` composes it for a job that watches no marker: the wait,
then ``drivers.stop`` with no timeout.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.runtime import drivers
from airflow_kafka_spark.runtime.stop_align import Alignment, cadence, wait_for_next_commit
from tests.support.checkpoint_factory import write_checkpoint


class _Committer(threading.Thread):
    """Writes ``commits/N`` (and ``offsets/N`` before it) every ``every_s``, like a busy query."""

    def __init__(self, ck: Path, first: int, every_s: float) -> None:
        super().__init__(daemon=True)
        self.ck, self.next, self.every_s = ck, first, every_s
        self.stop_event = threading.Event()
        self.written: dict[int, float] = {}

    def run(self) -> None:
        while not self.stop_event.wait(self.every_s):
            commit = self.ck / "commits" / str(self.next - 1)
            (self.ck / "offsets" / str(self.next - 1)).write_bytes((self.ck / "offsets" / "0").read_bytes())
            data = (self.ck / "commits" / "0").read_bytes()
            self.written[self.next - 1] = time.time()   # before the file exists: no look can see it earlier
            commit.write_bytes(data)
            self.next += 1


def _spaced(ck: Path, every_s: float) -> None:
    """The factory's commits given mtimes ``every_s`` apart, ending now (a job with that cadence)."""
    ids = sorted(int(n) for n in os.listdir(ck / "commits") if n.isdigit())
    now = time.time()
    for k, i in enumerate(reversed(ids)):
        os.utime(ck / "commits" / str(i), (now - k * every_s, now - k * every_s))


class _Driver:
    """A driver that watches no marker: it runs until killed."""

    def __init__(self, marker: Path) -> None:
        self.marker, self.killed_at = marker, None

    def alive(self) -> bool:
        return self.killed_at is None

    def kill(self) -> None:
        self.killed_at = time.time()


def _stop(tmp_path: Path, driver: _Driver, align_max_s: float = 30.0) -> tuple[Alignment, drivers.StopResult]:
    """As ``start_stop.stop_job`` composes them for a job killed at once: the wait, then the kill."""
    a = wait_for_next_commit(open_location(str(tmp_path / "ck")).child("commits"), is_alive=driver.alive,
                             max_s=align_max_s)
    return a, drivers.stop(str(tmp_path / "ck"), str(driver.marker), is_alive=driver.alive, kill=driver.kill,
                           timeout_s=0, poll_s=0.01)


def test_the_kill_follows_the_next_commit(tmp_path):
    ck = tmp_path / "ck"
    write_checkpoint(ck, batches=4)
    _spaced(ck, 0.6)
    committer = _Committer(ck, first=5, every_s=0.6)
    driver = _Driver(tmp_path / "ck.stop")
    committer.start()
    try:
        a, res = _stop(tmp_path, driver)
    finally:
        committer.stop_event.set()
        committer.join()
    assert a is not None and a.found_batch == 3 and a.after_batch is not None and a.after_batch > 3, a
    assert abs(a.cadence_s - 0.6) < 0.15 and abs(a.bound_s - 0.9) < 0.25, a
    # the kill came after that commit was written, within two looks of it, before the next one
    assert a.after_batch == 4 and committer.written[4] <= a.asked_at <= driver.killed_at, (committer.written, a)
    assert driver.killed_at - committer.written[4] < 0.5, (driver.killed_at, committer.written)
    assert 5 not in committer.written or driver.killed_at < committer.written[5], (driver.killed_at, committer.written)
    assert res.outcome == "KILLED" and res.last_committed >= 4 and a.to_dict()["after_batch"] == 4


def test_a_job_that_commits_nothing_is_asked_at_the_bound(tmp_path):
    ck = tmp_path / "ck"
    write_checkpoint(ck, batches=4)
    _spaced(ck, 0.5)
    driver = _Driver(tmp_path / "ck.stop")
    t = time.monotonic()
    a, res = _stop(tmp_path, driver)
    assert a.after_batch is None and a.found_batch == 3 and 0.7 <= a.waited_s <= 1.2 + 0.5, a
    assert time.monotonic() - t < 5 and res.outcome == "KILLED" and driver.killed_at is not None
    assert "no batch committed in the" in a.line() and "newest batch 3" in a.line()


def test_the_bound_caps_a_long_cadence_and_too_few_commits_ask_at_once(tmp_path):
    ck = tmp_path / "ck"
    write_checkpoint(ck, batches=4)
    _spaced(ck, 120.0)
    a, _ = _stop(tmp_path, _Driver(tmp_path / "ck.stop"), align_max_s=0.5)
    assert a.bound_s == 0.5 and a.after_batch is None, a
    few = tmp_path / "few"
    write_checkpoint(few / "ck", batches=2)
    a, _ = _stop(few, _Driver(few / "ck.stop"))
    assert a.bound_s == 0 and a.waited_s == 0 and "fewer than three batches" in a.line(), a


def test_a_driver_that_exits_while_the_stop_waits_ends_the_wait(tmp_path):
    ck = tmp_path / "ck"
    write_checkpoint(ck, batches=4)
    _spaced(ck, 10.0)
    exits_at = time.monotonic() + 0.5
    t = time.monotonic()
    a = wait_for_next_commit(open_location(str(ck)).child("commits"), is_alive=lambda: time.monotonic() < exits_at)
    assert time.monotonic() - t < 3 and a.after_batch is None and a.waited_s < 1.5 and a.bound_s == 15, a


def test_cadence_is_the_median_gap_of_the_newest_commits():
    assert cadence({1: 10.0, 2: 11.0, 3: 12.0, 4: 20.0}) == 1.0
    assert cadence({1: 10.0, 2: 11.0}) is None
    assert cadence({1: 10.0, 2: None, 3: 12.0}) is None
