"""Whether a checkpoint stayed quiet while it was copied: the second listing of a backup.

A backup lists the checkpoint, copies, then lists ``offsets/`` and ``commits/`` again: batch ids
that moved in between (or the newest file rewritten under the same id) mean the query is running
(``ops.backup.take``). Split out of ``take.py`` so the copy and the running-query test read apart.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_kafka_spark._util.fs import Location, list_files, mtime_of
from airflow_kafka_spark.ops.backup.selection import log_ids

#: How far a remote store's clock may be behind ours before its mtimes would fool :func:`settle_wait`.
CLOCK_SKEW_S = 60.0

LogIds = tuple[frozenset[int], frozenset[int]]
Newest = tuple[tuple[str, float | None, int], ...]


def ids_after(ck: Location, before: LogIds, newest_before: Newest, settle_s: float, listed_wall: float,
              elapsed: float, quiet_since: float | None = None) -> LogIds:
    """The ``offsets/``/``commits/`` ids of the second listing, taken once the quiet period is long enough
    (:func:`settle_wait`); a newest file rewritten under the same ids adds the id -1 (something writes there)."""
    wait = settle_wait(settle_s, newest_before, listed_wall, elapsed, local=ck.local, quiet_since=quiet_since)
    if wait > 0:
        time.sleep(wait)
    after_listing = log_listing(ck)
    after = log_ids(after_listing)
    if after == before and newest_log_files(after_listing, after) != newest_before:
        after = (after[0] | {-1}, after[1])  # same ids, rewritten newest file: something writes there
    return after


def log_listing(ck: Location) -> dict[str, dict]:
    """The files of ``offsets/`` and ``commits/`` only (relative to the checkpoint)."""
    out: dict[str, dict] = {}
    for log in ("offsets", "commits"):
        out.update({f"{log}/{rel}": info for rel, info in list_files(ck.child(log)).items() if "/" not in rel})
    return out


def newest_log_files(listing: dict[str, dict], ids: LogIds) -> Newest:
    """(path, mtime, size) of the newest ``offsets/`` and ``commits/`` files: what a running query writes next."""
    out = []
    for log, batch_ids in zip(("offsets", "commits"), ids, strict=True):
        if batch_ids:
            rel = f"{log}/{max(batch_ids)}"
            info = listing.get(rel, {})
            out.append((rel, mtime_of(info), int(info.get("size") or 0)))
    return tuple(out)


def stop_witness(record: Any, ids: LogIds) -> float | None:
    """Since when (wall seconds, this product's clock) the job's own stop vouches the checkpoint quiet, or None.

    Why: on HDFS and object stores :func:`settle_wait` cannot trust the store's mtimes within
    :data:`CLOCK_SKEW_S`, so the backup after a stop waited the whole settle period inside the
    downtime window (docs/benchmarks.md, round 10). The stop task (``runtime.start_stop.stop_job``)
    records ``driver_stopped`` once the recorded driver has exited, with the batch Spark's files
    ended on. When that is the lifecycle record's newest event about the checkpoint's writers (no
    submit, lease or move since), the stop was graceful, and the first listing ends both
    ``offsets/`` and ``commits/`` at that batch, nothing planned or committed a batch between the
    stop's reading and this listing: the quiet period runs from the event's time (``at_ms``, the
    worker's clock, as ``listed_wall`` is).
    """
    offs, coms = ids
    for event in reversed(getattr(record, "history", None) or []):
        kind = event.get("event")
        if kind in _WRITERS_MOVED:
            return None
        if kind != "driver_stopped":
            continue
        d = event.get("details") or {}
        n, at = d.get("last_committed"), event.get("at_ms")
        if not d.get("graceful") or d.get("killed") or d.get("replay_batch") is not None \
                or not offs or not coms or max(offs) != n or max(coms) != n or not isinstance(at, int):
            return None
        return at / 1000.0
    return None


#: Events after which a stop no longer speaks for the checkpoint: something may write there again.
_WRITERS_MOVED = frozenset({"driver_submitted", "lease_acquired", "lease_taken_over", "checkpoint_reset",
                            "checkpoint_restored"})


def settle_wait(settle_s: float, newest: Newest, listed_wall: float, elapsed: float, *, local: bool = True,
                quiet_since: float | None = None) -> float:
    """How long to wait before the second listing: only while the checkpoint may be changing.

    The two listings prove the query is stopped when they span a quiet period of at least
    ``settle_s`` seconds. That period starts at the newest ``offsets/``/``commits/`` file's mtime,
    not at the first listing: when that file was written ``settle_s`` or more before the first
    listing, and the second listing finds the same ids, mtimes and sizes, the quiet period already
    covers ``settle_s`` and waiting adds nothing. Only a checkpoint written within the last
    ``settle_s`` (or without mtimes) waits for the rest of it. An object store stamps files with
    its own clock: there the quiet period must be longer by :data:`CLOCK_SKEW_S` to count.
    ``quiet_since`` (:func:`stop_witness`, this product's clock) starts the quiet period earlier.
    """
    if settle_s <= 0:
        return 0.0
    if quiet_since is not None:
        if listed_wall - quiet_since >= settle_s:
            return 0.0
        wait = settle_wait(settle_s, newest, listed_wall, elapsed, local=local)
        return min(wait, settle_s - (listed_wall - quiet_since) - elapsed)
    stamps = [m for _, m, _ in newest]
    if newest and all(m is not None for m in stamps):
        quiet_before = listed_wall - max(m for m in stamps if m is not None) - (0.0 if local else CLOCK_SKEW_S)
        if quiet_before >= settle_s:
            return 0.0
        return min(settle_s - elapsed, settle_s - quiet_before - elapsed)
    return settle_s - elapsed


def span(ids: LogIds) -> str:
    offs, coms = ids
    return f"L={max(offs) if offs else '-'} C={max(coms) if coms else '-'}"
