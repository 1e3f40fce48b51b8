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
              elapsed: float, witnessed: bool = False) -> LogIds:
    """The ``offsets/``/``commits/`` ids of the second listing, taken once the quiet period is long enough
    (:func:`settle_wait`); a newest file rewritten under the same ids adds the id -1 (something writes there)."""
    wait = settle_wait(settle_s, newest_before, listed_wall, elapsed, local=ck.local, witnessed=witnessed)
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
    """When (wall seconds, this product's clock) the job's own stop saw its driver exit at the listed batch, or None.

    Why: the settle period guesses that a query still running writes ``offsets/``/``commits/`` within
    ``settle_s``. After the stop task (``runtime.start_stop.stop_job``) saw the recorded driver exit,
    there is no need to guess about that driver: the stop records ``driver_stopped`` with the batch
    Spark's files ended on. When that is the lifecycle record's newest event about the checkpoint's
    writers (no submit, lease or move since), the stop was graceful, and the first listing ends both
    ``offsets/`` and ``commits/`` at that batch, nothing planned or committed a batch between the
    stop's reading and this listing, and the backup waits no settle period (:func:`settle_wait`).
    A second driver the product did not start is not what the settle period is for: two drivers on
    one checkpoint fail each other's log writes within a few batches (Spark's
    ``CONCURRENT_STREAM_LOG_UPDATE``), and one that commits less often than ``settle_s`` would pass it
    anyway. The second listing is still taken after the copy and still refuses a checkpoint that moved.
    """
    offs, coms = ids
    event = last_stop(record)
    if event is None:
        return None
    d = event.get("details") or {}
    n, at = d.get("last_committed"), event.get("at_ms")
    if not d.get("graceful") or d.get("killed") or d.get("replay_batch") is not None \
            or not offs or not coms or max(offs) != n or max(coms) != n or not isinstance(at, int):
        return None
    return at / 1000.0


def last_stop(record: Any) -> dict[str, Any] | None:
    """The lifecycle record's newest ``driver_stopped`` event when no event since (:data:`WRITERS_MOVED`) lets
    anything write to the checkpoint again; else None. The one walk of the history that both the backup's
    settle period (:func:`stop_witness`) and a reset's adoption (``adopt.stop_before``) rest on."""
    for event in reversed(getattr(record, "history", None) or []):
        kind = event.get("event")
        if kind in WRITERS_MOVED:
            return None
        if kind == "driver_stopped":
            return event
    return None


#: Events after which a stop no longer speaks for the checkpoint: something may write there again.
WRITERS_MOVED = frozenset({"driver_submitted", "lease_acquired", "lease_taken_over", "checkpoint_reset",
                            "checkpoint_restored"})


def settle_wait(settle_s: float, newest: Newest, listed_wall: float, elapsed: float, *, local: bool = True,
                witnessed: bool = False) -> float:
    """How long to wait before the second listing: only while the checkpoint may be changing.

    The two listings prove the query is stopped when they span a quiet period of at least
    ``settle_s`` seconds. That period starts at the newest ``offsets/``/``commits/`` file's mtime,
    not at the first listing: when that file was written ``settle_s`` or more before the first
    listing, and the second listing finds the same ids, mtimes and sizes, the quiet period already
    covers ``settle_s`` and waiting adds nothing. Only a checkpoint written within the last
    ``settle_s`` (or without mtimes) waits for the rest of it. An object store stamps files with
    its own clock: there the quiet period must be longer by :data:`CLOCK_SKEW_S` to count.
    ``witnessed`` (:func:`stop_witness`: the product's own stop saw the driver exit at this batch):
    no wait.
    """
    if settle_s <= 0 or witnessed:
        return 0.0
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
