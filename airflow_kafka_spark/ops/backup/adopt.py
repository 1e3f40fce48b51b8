"""A reset adopts the newest verified backup when it provably holds the checkpoint as it is now.

Why: the safe restart backs the stopped checkpoint up (its ``backup`` task), then its reset took a
second verified backup of the very same files inside the downtime window: every file reused, yet
the manifest was still listed, written, sealed and verified again (~0.9 s locally at 2 GB, ~2.3 s
on HDFS: docs/benchmarks.md, round 9). A backup is published only after its copy was verified
(``ops.backup.take``), so when that backup is of exactly the files the reset would back up, it *is*
the reset's verified backup and "nothing mutating runs without a verified backup" still holds.

The proof, all of it (else the reset takes its own backup and says which part failed):

* the job's newest published backup, parsed and sealed as restore reads it (with the seal key
  when one is configured: ``reuse.published_newest_first``), is of the same checkpoint location and
  query id, and was neither ``forced`` nor of a ``running`` query;
* its ``last_committed_batch`` and ``pending_batch`` are the checkpoint's now;
* the files the backup selection takes now (``selection.select_files``, the rules ``take`` uses)
  are exactly its entries, each with the same size and mtime and, on a local disk, the same inode
  change time (``reuse.stat_of``: nobody can set that back, so a rewritten file never passes);
* it is younger than :data:`ADOPT_MAX_AGE_S`.

Which files "the files the backup selection takes now" means depends on what the lifecycle record
witnessed (:func:`stop_before`). With no witness, every file of the checkpoint is listed and matched
(a manual edit of a state file after the backup is noticed). When the record shows the product's own
stop of the job *before* the backup, at the batch the backup holds, and no event since after which
anything may write there (a submit, a lease, a reset or restore: ``quiet.WRITERS_MOVED``), only
``offsets/`` and ``commits/`` are listed and matched: the same test the backup applied to itself
after its copy (``ops.backup.quiet``). Spark writes ``offsets/N`` before a batch's state files and
``commits/N`` after them, and a state file once written is never rewritten, so a checkpoint whose two
logs are as the backup found them has the committed version the backup holds; state files a
re-run of the pending batch may have begun are after that version and outside every backup
(``selection``). Why: the full listing is 20,000 files at 2 GB of RocksDB state, 1.0-1.5 s of the
safe restart's downtime on HDFS (docs/benchmarks.md, round 17), to prove again what the stop task
proved seconds earlier.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

from airflow_kafka_spark._util.fs import Location, comparable, list_files, open_location
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.ops.backup.quiet import last_stop, log_listing
from airflow_kafka_spark.ops.backup.reuse import published_newest_first, stat_of
from airflow_kafka_spark.ops.backup.selection import layout_misfit, log_ids, select_files

#: The oldest backup a reset adopts (seconds). Why a bound at all: the file match is the proof; the
#: bound keeps adoption to what it is for — the backup the same restart took minutes earlier — so a
#: reset days after a manual backup records a backup of its own time, which is what an operator
#: reading the history expects. 15 min covers the safe restart's stop, approval wait aside.
ADOPT_MAX_AGE_S = 15 * 60.0
#: Clock skew tolerated between the host that took the backup and the one resetting (seconds).
_SKEW_S = 60.0

Stat = tuple[int, float | None, float | None]   # size, mtime, ctime (ctime only on a local disk)
#: The folders listed when a recorded stop witnesses the backup (see the module doc).
LOGS = ("offsets/", "commits/")


@dataclass(frozen=True)
class CheckpointNow:
    """The checkpoint as the reset sees it: where, which query, its batches, and the files a backup takes."""

    location: tuple[str, str]          # ``fs.comparable`` of the checkpoint
    query_id: str | None
    committed: int | None
    pending: int | None
    files: dict[str, Stat] = field(default_factory=dict)
    local: bool = True
    scope: tuple[str, ...] = ()        # the folders listed and matched; () = every file of the checkpoint


@dataclass(frozen=True)
class Adoption:
    """The backup adopted (``manifest``) and its age, or None and why not (one line)."""

    manifest: Manifest | None
    why_not: str = ""
    age_s: float = 0.0
    ids: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())   # offsets/, commits/ ids listed
    scope: tuple[str, ...] = ()        # what was matched (``CheckpointNow.scope``)

    @property
    def note(self) -> str:
        if self.manifest is None:
            return f"took its own backup: {self.why_not}"
        if self.scope:
            return (f"adopted verified backup {self.manifest.backup_id} (taken {self.age_s:.0f}s ago, after the "
                    "recorded stop; offsets/ and commits/ unchanged since, no submit, lease, reset or restore "
                    "recorded since)")
        return (f"adopted verified backup {self.manifest.backup_id} (taken {self.age_s:.0f}s ago; the checkpoint "
                "unchanged since)")


def stop_before(record: LifecycleRecord | None, m: Manifest) -> int | None:
    """When (ms) the product's own stop, recorded before backup ``m`` at the batch it holds, saw the driver
    exit, with no event since after which anything may write to the checkpoint; else None."""
    event = last_stop(record)
    if event is None:
        return None
    at, last = event.get("at_ms"), (event.get("details") or {}).get("last_committed")
    if not isinstance(at, int) or at > m.created_at_ms or last != m.last_committed_batch:
        return None
    return at


def checkpoint_now(ck: Location, state: CheckpointState, scope: tuple[str, ...] = ()
                   ) -> tuple[CheckpointNow, tuple[frozenset[int], frozenset[int]]]:
    """One listing of ``ck`` (of its ``scope`` folders only, when given) read as ``take`` reads it: the files its
    backup would take now there, and the log ids."""
    listing = log_listing(ck) if scope == LOGS else list_files(ck)
    ids = log_ids(listing)
    committed = max(ids[1]) if ids[1] else None
    planned = max(ids[0]) if ids[0] else None
    misfit = layout_misfit(listing, [(p.code, p.path) for p in state.problems], ids=ids)
    sel = select_files(listing, committed, planned, keep_pending=True, whole=misfit)
    # The pending batch as ``take._manifest`` records it.
    pending = sel.log_bound if sel.log_bound is not None and (committed is None or sel.log_bound > committed) \
        else None
    files = {rel: stat_of(info, local=ck.local) for rel, info in sel.files.items()}
    return CheckpointNow(location=comparable(ck), query_id=state.query_id, committed=committed, pending=pending,
                         files=files, local=ck.local, scope=scope), ids


def why_not(m: Manifest, now: CheckpointNow, *, now_ms: int, max_age_s: float = ADOPT_MAX_AGE_S) -> str:
    """Why backup ``m`` does not capture the checkpoint ``now`` (one line), or "" when it does."""
    age_s = (now_ms - m.created_at_ms) / 1000
    if not _same(m.checkpoint_location, now.location):
        return f"the newest backup {m.backup_id} is of another location ({m.checkpoint_location})"
    if m.query_id != now.query_id:
        return f"the newest backup {m.backup_id} is of query {m.query_id}, the checkpoint's is {now.query_id}"
    if m.forced or m.running:
        return f"the newest backup {m.backup_id} was taken of a running query (forced)"
    if (m.last_committed_batch, m.pending_batch) != (now.committed, now.pending):
        return (f"the newest backup {m.backup_id} holds batch {m.last_committed_batch} (pending {m.pending_batch}), "
                f"the checkpoint now {now.committed} (pending {now.pending})")
    if age_s > max_age_s or age_s < -_SKEW_S:
        return f"the newest backup {m.backup_id} was taken {age_s:.0f}s ago (adopted up to {max_age_s:.0f}s)"
    entries = {f.path: f for f in m.files if not now.scope or f.path.startswith(now.scope)}
    changed = sorted(set(entries) ^ set(now.files))
    for rel in sorted(now.files):
        if rel in entries:
            e, (size, mtime, ctime) = entries[rel], now.files[rel]
            if mtime is None or (e.size, e.mtime) != (size, mtime) or (now.local and (ctime is None
                                                                                     or e.ctime != ctime)):
                changed.append(rel)
    if changed:
        return (f"{len(changed)} file(s) differ from the newest backup {m.backup_id} in presence, size or times "
                f"(first: {sorted(changed)[0]}): written since")
    return ""


def _same(location: str, target: tuple[str, str]) -> bool:
    """``location`` (a manifest's, untrusted) is the checkpoint ``target``; one that does not open is not."""
    with contextlib.suppress(UserError):
        return comparable(open_location(location, None)) == target
    return False


def adopt_backup(ck: Location, job_loc: Location, job: str, state: CheckpointState, *, seal_key: bytes | None,
                 record: LifecycleRecord | None = None, now_ms: int | None = None,
                 max_age_s: float = ADOPT_MAX_AGE_S) -> Adoption:
    """The job's newest published backup when it captures ``ck`` as it is now (see the module doc);
    ``record``: the checkpoint's lifecycle record, whose recorded stop may witness the backup."""
    newest = next(published_newest_first(job_loc, job, seal_key), None)
    if newest is None:
        return Adoption(None, f"job {job} has no published backup (sealed as configured) to adopt")
    witnessed = stop_before(record, newest) is not None and newest.selection.get("mode") != "whole"
    scope = LOGS if witnessed else ()
    now, ids = checkpoint_now(ck, state, scope)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    reason = why_not(newest, now, now_ms=now_ms, max_age_s=max_age_s)
    if reason:
        return Adoption(None, reason, ids=ids, scope=scope)
    return Adoption(newest, age_s=max(0.0, (now_ms - newest.created_at_ms) / 1000), ids=ids, scope=scope)
