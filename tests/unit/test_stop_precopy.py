"""The rules of the pre-copy passes beside a stop's wait (``runtime.stop_precopy``), on plain functions.

A pass is a function that records when it ran; the driver's liveness a flag the stop callable
clears, as a driver exiting on a batch boundary does. Proven: no pass starts once the driver is
gone, a pass already reading when the stop returns finishes before it returns and one that has not
read yet gives up (``abandon``), a failing pass (or liveness check) ends
the passes with a warning and the stop's own result, and a failing stop still raises its error.
The real pre-copy beside a real job's graceful stop: tests/integration/test_driver.py.
"""

from __future__ import annotations

import logging
import threading

import pytest

from airflow_kafka_spark.ops.backup.precopy import PassAbandoned, PrecopyResult
from airflow_kafka_spark.runtime.stop_precopy import beside_rule, stop_with_precopy

log = logging.getLogger("test.stop_precopy")
WAIT = 30.0   # the longest any event here is waited for: a hung thread fails the test, never hangs it


def result(files_read: int = 1, seconds: float = 0.0, read_seconds: float = 0.0) -> PrecopyResult:
    return PrecopyResult(job="j", seconds=seconds, files=files_read, bytes=0, files_read=files_read, bytes_read=0,
                         blobs_written=0, bytes_written=0, files_skipped=0, read_seconds=read_seconds)


class Driver:
    """A driver flag, and the passes run, each with what the last liveness check before it answered."""

    def __init__(self) -> None:
        self.alive = True
        self.last_check: bool | None = None
        self.starts: list[bool | None] = []
        self.passed = threading.Event()
        self.seen_gone = threading.Event()

    def running(self) -> bool:
        self.last_check = self.alive
        if not self.alive:
            self.seen_gone.set()
        return self.alive

    def one_pass(self, abandon=None) -> PrecopyResult:
        self.starts.append(self.last_check)
        self.passed.set()
        return result()


def test_passes_run_beside_the_wait_and_none_starts_once_the_driver_is_gone():
    d = Driver()

    def stop() -> str:
        for _ in range(2):                       # the wait spans two passes beside it
            d.passed.clear()
            assert d.passed.wait(WAIT)
        d.alive = False                          # the driver exits on its batch boundary ...
        assert d.seen_gone.wait(WAIT)            # ... the thread sees it ...
        n = len(d.starts)
        threading.Event().wait(0.3)              # ... and the stop polls a while longer
        assert len(d.starts) == n                # no pass started in that while
        return "STOPPED"

    done = stop_with_precopy(stop, job="j", one_pass=d.one_pass, still_running=d.running, log=log, pause_s=0.01)
    assert done.stop == "STOPPED"
    pre = done.precopy
    assert len(pre.before) == 1 and len(pre.during) >= 2 and pre.error is None and pre.error_during is None
    assert all(d.starts) and len(d.starts) == len(pre.before) + len(pre.during)   # each after a "running"
    doc = pre.to_dict()
    assert len(doc["passes"]) == 1 and len(doc["passes_during_stop"]) == len(pre.during)
    assert doc["files_read"] == 1 and "error_during_stop" not in doc


def test_a_pass_reading_when_the_driver_exits_finishes_before_the_stop_returns():
    d = Driver()
    in_flight, release, finished = threading.Event(), threading.Event(), []

    def one_pass(abandon) -> PrecopyResult:
        if d.starts:                             # the first pass beside the wait blocks until released
            in_flight.set()
            assert release.wait(WAIT)
            finished.append(True)
        d.starts.append(d.alive)
        return result()

    def stop() -> str:
        assert in_flight.wait(WAIT)
        d.alive = False
        threading.Timer(0.2, release.set).start()   # the pass ends after the driver and the stop's wait
        return "STOPPED"

    done = stop_with_precopy(stop, job="j", one_pass=one_pass, still_running=d.running, log=log, pause_s=0.0)
    assert finished == [True] and len(done.precopy.during) == 1    # joined: the pass is in the result
    assert done.precopy.abandoned is False and done.precopy.to_dict()["pass_abandoned"] is False


def test_a_pass_listing_when_the_stop_returns_gives_up_before_reading(caplog):
    """The pass asks ``abandon`` after its listing (``precopy_checkpoint`` does): true once the stop
    returned, so it ends there, is not in ``during``, and the stop's join does not wait for its reads."""
    d = Driver()
    listing, stop_returned, asked = threading.Event(), threading.Event(), []

    def one_pass(abandon) -> PrecopyResult:
        if d.starts:                             # the first pass beside the wait: its listing spans the return
            listing.set()
            assert stop_returned.wait(WAIT)
            threading.Event().wait(0.05)         # stopped.set() follows the stop's return
            asked.append(abandon())
            if asked[-1]:
                raise PassAbandoned("abandoned before reading 3 new files")
            threading.Event().wait(5.0)          # the reads it would have made: the join would wait for them
        d.starts.append(d.alive)
        return result()

    def stop() -> str:
        assert listing.wait(WAIT)
        d.alive = False
        stop_returned.set()
        return "STOPPED"

    caplog.set_level(logging.INFO, logger=log.name)
    done = stop_with_precopy(stop, job="j", one_pass=one_pass, still_running=d.running, log=log, pause_s=0.0)
    pre = done.precopy
    assert asked == [True] and pre.abandoned and pre.during == [] and pre.error_during is None
    assert pre.join_seconds < 2.0 and pre.to_dict()["pass_abandoned"] is True
    assert "gave up before reading" in caplog.text


def test_no_pass_beside_the_wait_where_it_does_not_pay(caplog, tmp_path):
    """``beside=False`` (a checkpoint on a local disk, ``beside_rule``): the passes before the stop run,
    none beside its wait, and the stop is the stop's own; HDFS and object stores keep their passes."""
    d = Driver()

    def stop() -> str:
        threading.Event().wait(0.3)              # long enough for a pass that would start (pause_s=0)
        d.alive = False
        return "STOPPED"

    caplog.set_level(logging.INFO, logger=log.name)
    done = stop_with_precopy(stop, job="j", one_pass=d.one_pass, still_running=d.running, log=log, pause_s=0.0,
                             beside=False)
    assert done.stop == "STOPPED" and len(done.precopy.before) == 1 and done.precopy.during == []
    assert "no pre-copy pass beside the stop's wait" in caplog.text
    assert beside_rule(str(tmp_path)) is False and beside_rule(f"file://{tmp_path}") is False
    assert beside_rule("memory://ck") is True    # not a local disk: fsspec's in-memory store stands for a remote one


@pytest.mark.parametrize("where", ["pass", "liveness"])
def test_a_failure_beside_the_wait_is_a_warning_and_the_stop_goes_on(where, caplog):
    d = Driver()
    calls = {"n": 0}

    def one_pass(abandon=None) -> PrecopyResult:
        calls["n"] += 1
        if where == "pass" and calls["n"] == 2:     # the first pass beside the wait
            raise OSError("store unreachable")
        return d.one_pass()

    def running() -> bool:
        if where == "liveness" and calls["n"] >= 1:
            raise OSError("store unreachable")
        return d.alive

    def stop() -> str:
        threading.Event().wait(0.3)
        return "STOPPED"

    with caplog.at_level(logging.WARNING, logger=log.name):
        done = stop_with_precopy(stop, job="j", one_pass=one_pass, still_running=running, log=log, pause_s=0.0,
                                 before=lambda: [one_pass(None)])
    assert done.stop == "STOPPED"
    assert done.precopy.during == [] and done.precopy.error_during == "store unreachable"
    assert calls["n"] == (2 if where == "pass" else 1)          # no pass after the failure
    assert done.precopy.to_dict()["error_during_stop"] == "store unreachable"
    assert "beside the stop's wait failed (store unreachable)" in caplog.text


def test_a_failure_before_the_stop_runs_no_pass_beside_it_and_no_driver_no_pass_at_all():
    d = Driver()

    def failing() -> list[PrecopyResult]:
        raise OSError("no space left")

    done = stop_with_precopy(lambda: "STOPPED", job="j", one_pass=d.one_pass, still_running=d.running, log=log,
                             before=failing)
    assert done.stop == "STOPPED" and done.precopy.to_dict() == {"error": "no space left"} and d.starts == []
    d.alive = False
    idle = stop_with_precopy(lambda: "NOT_RUNNING", job="j", one_pass=d.one_pass, still_running=d.running, log=log)
    assert (idle.stop, idle.precopy, d.starts) == ("NOT_RUNNING", None, [])


def test_the_stops_own_error_is_raised_after_the_passes_end():
    d = Driver()

    def stop() -> str:
        assert d.passed.wait(WAIT)
        raise TimeoutError("the cluster did not answer")

    with pytest.raises(TimeoutError, match="did not answer"):
        stop_with_precopy(stop, job="j", one_pass=d.one_pass, still_running=d.running, log=log)
    n = len(d.starts)
    threading.Event().wait(0.2)
    assert len(d.starts) == n and n >= 1        # the thread was joined: nothing runs after the raise
