"""The refusals every operation on a checkpoint location shares, before it changes anything.

Why one module: backup, reset and restore must refuse the same situations the same way — a job
holding the lease, a backup root inside the checkpoint (or the reverse), an interrupted
reset/restore that must be finished first, and finishing one that a new run has overtaken. Each
refusal is one line and exit 3 (:class:`OperationBlocked`, with its
:class:`~airflow_kafka_spark.errors.BlockReason`) or exit 2.

Two operations at once on one location are a different matter for each kind:

* a second **reset or restore** is refused at once (:func:`operation_lock`, taken with timeout 0
  by ``ops.commands``): it would plan against a checkpoint the first is moving aside;
* a second **backup** of the same job *waits* for the first on the backup store's job lock
  (``backups/<job>/.lock``, up to the lock's timeout, then one line naming the holder): both
  copies are of the same committed state, each is published and verified on its own, and the
  second reuses the first's blobs, so refusing would only fail a scheduled backup that met a
  manual one.
"""

from __future__ import annotations

import time

from airflow_kafka_spark._util.fs import Location, comparable, is_within, open_location
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.journal import (
    Journal,
    checkpoint_marks,
    is_operation_id,
)
from airflow_kafka_spark.lifecycle.record import LifecycleRecord

OPERATION_LOCK_SUFFIX = ".operation.lock"


def running_reason(record: LifecycleRecord | None, now_ms: int | None = None) -> str | None:
    """Why the lifecycle record says the job runs (a live lease), or None."""
    lease = record.lease if record is not None else None
    if lease is not None and lease.live(now_ms):
        left = (lease.expires_at_ms - (now_ms or int(time.time() * 1000))) / 1000
        return f"lease held by {lease.holder} (run {lease.run_id}, {left:.0f}s left)"
    return None


def check_locations(checkpoint: Location, root: Location) -> None:
    """A backup root inside the checkpoint would be copied into itself and handed to Spark."""
    if is_within(root, checkpoint):
        raise UserError(f"backup root {root.url} is inside checkpoint {checkpoint.url}: Spark owns every file "
                        "there; put backups in a folder outside the checkpoint")
    if is_within(checkpoint, root):
        raise UserError(f"checkpoint {checkpoint.url} is inside backup root {root.url}; keep backups in their "
                        "own folder")


def operation_lock(checkpoint: Location, *, timeout: float = 5.0, what: str | None = None) -> LockFile:
    """``<checkpoint>.operation.lock``: one reset/restore at a time per location (a killed holder's
    lock is broken when its pid is gone). Backups do not take it: they wait for each other on the
    backup store's job lock instead (see the module's docstring)."""
    return LockFile(checkpoint.sibling(OPERATION_LOCK_SUFFIX), what=what or f"checkpoint {checkpoint.url}",
                    timeout=timeout)


def refuse_if_interrupted(ck: Location) -> None:
    """Backups do not run over a half-finished reset/restore: the folder may be half moved."""
    journal = Journal.load(ck)
    if journal is not None:
        raise OperationBlocked(f"an interrupted {journal.op} ({journal.operation_id}) of {ck.url} is recorded in "
                               f"{journal.location.url}; re-run aks {journal.op} on this checkpoint to finish it "
                               "before backing up", reason=BlockReason.INTERRUPTED_OPERATION)


def refuse_stale_roll_forward(journal: Journal, checkpoint: Location) -> None:
    """Refuse (exit 3, one line, nothing changed) to finish ``journal`` when the situation moved on.

    Why: the journal's plan (startingOffsets, the folder to move aside) was right when it was
    written. If a job was deployed since — it holds the lease, or it wrote batches — finishing the
    plan would pull the live checkpoint from under it and restart from old offsets (a replay).
    """
    head = (f"the interrupted {journal.op} {journal.operation_id} recorded in {journal.location.url} was not "
            "finished and nothing was changed")
    abandon = (f"if the job should keep running on its checkpoint, abandon the interrupted {journal.op} by "
               f"moving {journal.location.url} away (its backup is kept), then plan again")
    if journal.is_done("aside") or journal.is_done("in_place"):
        return  # past the move: the location no longer holds the old checkpoint, what is left is bookkeeping
    record = LifecycleRecord.load(checkpoint.url)
    running = running_reason(record)   # the operation itself refused to start under a live lease
    if running:
        raise OperationBlocked(f"{head}: a job holds the checkpoint's lease ({running}); stop it first, or {abandon}",
                               reason=BlockReason.STALE_INTERRUPTED_OPERATION)
    guard = journal.doc.get("guard")
    if not isinstance(guard, dict):
        return  # journals written before the guard existed carry none
    now = checkpoint_marks(checkpoint)
    if now != guard:
        changed = ", ".join(f"{k} {guard.get(k)!s} -> {now.get(k)!s}" for k in ("offsets", "commits", "exists")
                            if guard.get(k) != now.get(k)) or "metadata (query id) changed"
        raise OperationBlocked(f"{head}: the checkpoint moved on since the journal was written ({changed}): a query "
                               f"ran on it meanwhile; {abandon}", reason=BlockReason.STALE_INTERRUPTED_OPERATION)


def journal_path(journal: Journal, key: str, expected: Location, storage_options: dict | None) -> Location:
    """``expected`` if the journal's ``key`` names exactly that place; else a one-line error, nothing moved.

    Why: a resumed reset/restore moves whatever its journal names, so an edited journal must not
    point the move anywhere but the place the operation id implies.
    """
    given = journal.payload.get(key)
    ok = is_operation_id(journal.operation_id) and isinstance(given, str) and "::" not in given
    if ok:
        try:
            ok = comparable(open_location(given, storage_options)) == comparable(expected)
        except UserError:
            ok = False
    if not ok:
        raise UserError(f"operation journal {journal.location.url} names {key} {given!r}, not {expected.url}: it "
                        "was edited; nothing was moved — inspect it, then move it away")
    return expected
