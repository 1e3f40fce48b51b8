"""A stop that pre-copies the backup before it and beside its wait, for the safe restart.

Why: the backup after a safe restart's stop stands the stream still, and it reads every file the
pre-copy (``ops.backup.precopy``) has not read. The passes before the stop leave out the files
Spark writes while the stop waits for a batch boundary: 17–28 s on YARN, 63–79 state files on the
HDFS minicluster, read one WebHDFS round trip at a time after the stop (docs/benchmarks.md, round 9
and "After round 9"). So :func:`stop_with_precopy` runs the passes until quiet before the stop
(``ops.backup.precopy.passes_until_quiet``), then, while the stop callable waits, further passes in
a thread: each reuses the entries of the one before and reads only what was written since (the stop
task's passes hand them on in memory, ``ops.backup.precopy.PassChain``; the bench's through
``<job>/precopy.json``).

The rules of the thread:

* A pass starts only while the driver still runs (``still_running``) and the stop has not
  returned; passes start at most every ``pause_s``, so a quiet query is not listed in a loop.
* Passes beside the wait run only where they pay (``beside``; :func:`beside_rule` decides by the
  checkpoint's store). On HDFS or an object store the backup after the stop reads each new file with
  a round trip (63-79 state files after a YARN stop's wait, round 9), so passes beside the wait move
  those reads out of the window. On a local disk it reads them in milliseconds, while a pass there is
  its listing and sealing (0.5-1 s at 20,000 files, ``PrecopyResult.read_seconds`` a few ms of it) on
  the cores the stopping driver needs: no pass beside the wait (docs/benchmarks.md, round 13).
* A pass in flight when the stop returns gives up if it has not read yet (``one_pass`` gets the
  stop's "returned" as its ``abandon``; ``ops.backup.precopy.PassAbandoned``): its listing is
  what the backup after the stop redoes anyway (the stop task waited 0.4-1.4 s on YARN for the pass
  in flight, docs/benchmarks.md round 14, whatever step it was in). A pass already reading finishes:
  its reads are ones the backup would make, and its entries hand them on.
* The stop returns only after the thread is joined: the backup task that follows takes the job's
  backup lock, which a pass holds while it runs.
* The pre-copy never delays or breaks the stop: the stop callable runs as without it (its timeout
  and kill are its own); an exception in a pass or in ``still_running`` is logged as a warning,
  ends the passes and is reported in :class:`StopPrecopy`, never raised. An exception of the stop
  itself is raised after the join, as without a pre-copy.

No Airflow here: the stop task (``operators/streaming.py``) and the downtime bench
(``bench/downtime_bench.py``) call the same function.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.ops.backup.precopy import PassAbandoned, PrecopyResult, never_abandon, passes_until_quiet

T = TypeVar("T")

#: The least time between the starts of two passes beside the stop's wait (a batch's trigger is about as long).
IN_WAIT_PAUSE_S = 1.0


def beside_rule(checkpoint: str) -> bool:
    """Whether passes beside the stop's wait pay for a checkpoint at this URL: not on a local disk (module doc)."""
    return not open_location(checkpoint).local


@dataclass
class StopPrecopy:
    """Every pre-copy pass of one stop: before it, and beside its wait; the last one's entries are what
    the backup after the stop reuses."""

    before: list[PrecopyResult] = field(default_factory=list)
    during: list[PrecopyResult] = field(default_factory=list)   # beside the stop's wait, in order
    error: str | None = None          # the passes before the stop failed: none ran beside it either
    error_during: str | None = None   # a pass (or the liveness check) beside the wait failed: passes ended there
    abandoned: bool = False           # the pass in flight at the stop's return gave up before reading
    join_seconds: float = 0.0         # from the stop's return to the thread's end (a pass in flight finishing)

    def to_dict(self) -> dict[str, Any]:
        """The stop XCom's ``precopy``: the last pass's figures, ``passes`` (before the stop) and
        ``passes_during_stop``; only ``error`` when the passes before the stop failed."""
        if self.error is not None:
            return {"error": self.error}
        last = (self.during or self.before)[-1]
        out = {**last.to_dict(), "passes": [p.to_dict() for p in self.before],
               "passes_during_stop": [p.to_dict() for p in self.during],
               "join_seconds": round(self.join_seconds, 3), "pass_abandoned": self.abandoned}
        if self.error_during is not None:
            out["error_during_stop"] = self.error_during
        return out


@dataclass
class PrecopiedStop(Generic[T]):
    """The stop callable's own result, and the pre-copy beside it (None: no driver ran, none was taken)."""

    stop: T
    precopy: StopPrecopy | None


def stop_with_precopy(stop: Callable[[], T], *, job: str, one_pass: Callable[[Callable[[], bool]], PrecopyResult],
                      still_running: Callable[[], bool], log: Any,
                      before: Callable[[], list[PrecopyResult]] | None = None, pause_s: float = IN_WAIT_PAUSE_S,
                      on_pass: Callable[[PrecopyResult, bool], None] | None = None,
                      beside: bool = True) -> PrecopiedStop[T]:
    """Pre-copy until quiet, then ``stop()`` with passes of ``one_pass`` beside it; see the module doc.

    ``one_pass(abandon)``: one pre-copy pass (``ops.backup.precopy.precopy_checkpoint``'s ``abandon``):
    passes before the stop never abandon; a pass beside the wait abandons once the stop returned.

    ``before``: the passes before the stop (default: ``passes_until_quiet`` of ``one_pass``; the bench
    runs them in a child process to measure their memory). ``on_pass(result, during_stop)`` is called
    after each pass, in the thread that ran it. ``beside``: passes beside the wait at all (callers ask
    :func:`beside_rule`).
    """
    if not still_running():
        return PrecopiedStop(stop(), None)
    pre = StopPrecopy()
    try:
        pre.before = (before or (lambda: passes_until_quiet(lambda: one_pass(never_abandon),
                                                            still_running=still_running)))()
        for n, r in enumerate(pre.before, 1):
            _logged(log, n, r, False, on_pass)
    except Exception as exc:   # an optimisation only: the backup after the stop reads what is missing
        log.warning("job %s: the backup's pre-copy failed (%s); the backup after the stop copies everything it "
                    "needs", job, exc)
        pre.error = str(exc)
        return PrecopiedStop(stop(), pre)
    if not beside:
        log.info("job %s: no pre-copy pass beside the stop's wait (its store's rule, beside_rule); the backup "
                 "after the stop reads the files the wait writes", job)
        return PrecopiedStop(stop(), pre)
    stopped = threading.Event()
    thread = threading.Thread(target=_passes_beside, args=(job, pre, one_pass, still_running, stopped, log, pause_s,
                                                           on_pass), name="precopy-beside-stop", daemon=True)
    thread.start()
    try:
        result = stop()
    finally:
        stopped.set()
        t = time.monotonic()
        thread.join()
        pre.join_seconds = time.monotonic() - t
    return PrecopiedStop(result, pre)


def _passes_beside(job: str, pre: StopPrecopy, one_pass: Callable[[Callable[[], bool]], PrecopyResult],
                   still_running: Callable[[], bool],
                   stopped: threading.Event, log: Any, pause_s: float,
                   on_pass: Callable[[PrecopyResult, bool], None] | None) -> None:
    """The thread: a pass while the stop waits and the driver runs, at most every ``pause_s``."""
    try:
        while not stopped.is_set() and still_running():
            started = time.monotonic()
            pre.during.append(one_pass(stopped.is_set))
            _logged(log, len(pre.before) + len(pre.during), pre.during[-1], True, on_pass)
            stopped.wait(max(0.0, pause_s - (time.monotonic() - started)))
    except PassAbandoned:   # the stop returned before this pass read anything: the backup lists again
        pre.abandoned = True
        log.info("job %s: the pre-copy pass in flight at the stop's return gave up before reading; the backup "
                 "after the stop reads what is new", job)
    except Exception as exc:   # never the stop's failure: the backup after it reads what is missing
        log.warning("job %s: the backup's pre-copy beside the stop's wait failed (%s); no further pass", job, exc)
        pre.error_during = str(exc)


def _logged(log: Any, n: int, r: PrecopyResult, during: bool,
            on_pass: Callable[[PrecopyResult, bool], None] | None) -> None:
    log.info("job %s: pre-copy pass %d: %d files (%d read, %.1f MB, %.1fs) %s", r.job, n, r.files, r.files_read,
             r.bytes_read / 1e6, r.seconds, "beside the stop's wait" if during else "before the stop")
    if on_pass is not None:
        on_pass(r, during)


__all__ = ["IN_WAIT_PAUSE_S", "PrecopiedStop", "StopPrecopy", "beside_rule", "stop_with_precopy"]
