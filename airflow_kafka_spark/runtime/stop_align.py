"""Kill a job that watches no stop marker just after a batch commits, not inside a batch.

Why: the stream stands still from the old query's last ``commits/N`` to the new query's first. A job
whose integration watches no marker (``integration: none``: a user's application run unchanged,
without the agent) is killed at once; killed at a random moment of a busy job's batch cycle, the window starts
when batch N committed and the kill throws away batch N+1's work so far (a batch took 3-9 s on the
YARN devstack, docs/benchmarks.md round 21). Waiting for the next commit before the kill moves the
window's start to that commit, while the stream keeps running, and the kill cuts a batch that has
barely begun. A job that watches the marker (the agent's gate, the reference job) picks its own
boundary after the request, so its stop is not delayed by this wait (``start_stop.stop_job``).

The rule, from the checkpoint's own ``commits/`` (no code in the job): the newest commits give the
job's cadence (the median gap of the last few); the stop waits for ``commits/<found + 1>``, at most
1.5 gaps and never more than :data:`MAX_ALIGN_S`, looking every :data:`POLL_S` (one stat, however
long the folder). Fewer than three commits, or no ``commits/`` at all (a DStream job's checkpoint),
give no cadence, and the kill comes at once. A job that commits nothing within the bound (idle, or
stuck) is killed at the bound: the wait only ever delays the kill, never skips it.

The store's clock is never compared with this machine's: the bound comes from gaps between the
store's own modification times, and the wait ends on the next batch's file appearing.
"""

from __future__ import annotations

import itertools
import os
import posixpath
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from airflow_kafka_spark._util.fs import Location, mtime_of

#: The longest a stop waits for the next commit (a job with a long trigger interval is killed at this bound).
MAX_ALIGN_S = 30.0
#: How often the next ``commits/`` file is looked for while waiting: the kill follows a commit by about half of this.
POLL_S = 0.2
#: How often the wait asks whether the driver still runs (a driver that exits ends it).
ALIVE_EVERY_S = 1.0
#: The gaps the cadence is the median of.
CADENCE_GAPS = 5


@dataclass(frozen=True)
class Alignment:
    """Where a kill fell against the job's batches (the stop's XCom and log say so)."""

    waited_s: float            # from the start of the wait to its end (the kill)
    bound_s: float             # the longest it would have waited (0: no cadence, killed at once)
    cadence_s: float | None    # the median gap between the job's newest commits
    found_batch: int | None    # the newest committed batch when the stop began
    after_batch: int | None    # the commit the kill followed; None: none came within the bound
    asked_at: float            # this machine's epoch seconds when the wait ended (the kill follows)

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """What the wait saw (logged before the kill; a driver that exits meanwhile ends the wait)."""
        if self.bound_s <= 0:
            return ("no cadence to wait on (fewer than three batches in commits/, or commits/ unreadable): "
                    "no wait before the kill")
        if self.after_batch is None:
            return (f"no batch committed in the {self.waited_s:.1f}s waited (bound {self.bound_s:.1f}s, cadence "
                    f"{self.cadence_s:.1f}s; newest batch {self.found_batch})")
        return f"batch {self.after_batch} committed after {self.waited_s:.1f}s of waiting; the kill follows it"


def _commit_ids(names) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _listing(commits: Location) -> dict[int, float | None]:
    """Committed batch id -> modification time (None where the store gives none); {} if no ``commits/``."""
    try:
        if commits.local:
            ids = _commit_ids(os.listdir(commits.path))
            return {i: os.stat(os.path.join(commits.path, str(i))).st_mtime for i in ids[-(CADENCE_GAPS + 1):]}
        commits.fs.invalidate_cache(commits.path)
        infos = commits.fs.ls(commits.path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out: dict[int, float | None] = {}
    for info in infos:
        name = str(info.get("name", "")).rstrip("/").rsplit("/", 1)[-1]
        if name.isdigit() and info.get("type") != "directory":
            out[int(name)] = mtime_of(info)
    return out


def _committed(commits: Location, batch: int) -> bool:
    """Whether ``commits/<batch>`` exists: one stat, however many batches the folder keeps."""
    path = posixpath.join(commits.path, str(batch))
    if commits.local:
        return os.path.exists(path)
    commits.fs.invalidate_cache(commits.path)
    return bool(commits.fs.exists(path))


def cadence(listing: dict[int, float | None]) -> float | None:
    """The median gap between the newest commits' modification times; None below three commits."""
    newest = sorted(listing)[-(CADENCE_GAPS + 1):]
    times = [t for t in (listing[i] for i in newest) if t is not None]
    if len(newest) < 3 or len(times) < len(newest):
        return None
    return max(statistics.median(b - a for a, b in itertools.pairwise(times)), 0.0)


def wait_for_next_commit(commits: Location, *, is_alive: Callable[[], bool],
                         poll_s: float = POLL_S, max_s: float = MAX_ALIGN_S) -> Alignment:
    """Wait until ``commits/`` holds a batch newer than now (see the module doc); listing errors end the
    wait at once (the stop itself reads the checkpoint and says what is wrong)."""
    t0 = time.monotonic()
    try:
        listing = _listing(commits)
    except OSError:
        return Alignment(0.0, 0.0, None, None, None, time.time())
    found = max(listing) if listing else None
    gap = cadence(listing)
    if found is None or gap is None:
        return Alignment(0.0, 0.0, gap, found, None, time.time())
    bound = min(max(1.5 * gap, 2 * poll_s), max_s)
    checked = t0
    while time.monotonic() - t0 < bound:
        if time.monotonic() - checked >= ALIVE_EVERY_S:   # through a cluster manager, a REST call
            checked = time.monotonic()
            if not is_alive():
                break
        time.sleep(poll_s)
        try:
            if _committed(commits, found + 1):
                return _ended(t0, bound, gap, found, found + 1)
        except OSError:
            break
    return _ended(t0, bound, gap, found, None)


def _ended(t0: float, bound: float, gap: float, found: int, after: int | None) -> Alignment:
    return Alignment(round(time.monotonic() - t0, 3), round(bound, 3), round(gap, 3), found, after, time.time())


__all__ = ["MAX_ALIGN_S", "POLL_S", "Alignment", "cadence", "wait_for_next_commit"]
