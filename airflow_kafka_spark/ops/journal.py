"""A write-ahead journal for the multi-step operations on a checkpoint location (reset, restore).

Why: a reset or restore moves folders, edits the lifecycle record and maybe a sink's log. Killed
half-way, it must neither lose the original checkpoint nor leave a state nobody can explain. So
every such operation first does everything that changes nothing (plan, verified backup, staged
copy), then writes ``<checkpoint>.operation.json`` — the *commit point* — with every decision and
every path it will use, and only then starts moving things. Each step is idempotent and marked
done in the journal; the journal is deleted last.

* Killed before the journal exists: nothing was changed (staging leftovers are removed by the
  next operation).
* Killed after: the next reset or restore on that location finds the journal and rolls the
  operation *forward* to its end (a backup refuses until then: the folder may be half moved). The
  original checkpoint is always either at its location or at the journal's ``aside`` path.

One operation at a time per location: ``<checkpoint>.operation.lock`` is held for the whole
reset/restore (exclusive create; a lock of a killed process is broken when its pid is gone).

The journal lives beside the checkpoint, like the lifecycle record, never inside Spark's folder.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.fs import (
    Location,
    exists,
    open_location,
    os_reason,
    read_bytes,
    remove_file,
    remove_tree,
    write_atomic,
)
from airflow_kafka_spark._util.jsonfile import JSON_MAX_BYTES, load_json
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark.errors import UserError

JOURNAL_SUFFIX = ".operation.json"
FORMAT_VERSION = 1


def journal_location(checkpoint: Location) -> Location:
    return checkpoint.sibling(JOURNAL_SUFFIX)


def new_operation_id() -> str:
    """Sortable and unique: ``20260101T120000Z-1a2b3c``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


@dataclass
class Journal:
    """One operation in progress on one checkpoint location."""

    location: Location
    doc: dict[str, Any]

    @property
    def op(self) -> str:
        return str(self.doc["op"])

    @property
    def operation_id(self) -> str:
        return str(self.doc["operation_id"])

    @property
    def payload(self) -> dict[str, Any]:
        return self.doc["payload"]

    def is_done(self, step: str) -> bool:
        return step in self.doc.get("done", [])

    def mark(self, step: str) -> None:
        """Record that ``step`` finished (atomic rewrite), so a resumed run skips it."""
        if not self.is_done(step):
            self.doc.setdefault("done", []).append(step)
            self.doc["updated_at_ms"] = int(time.time() * 1000)
            write_atomic(self.location, _dump(self.doc))

    def finish(self) -> None:
        remove_file(self.location)

    @classmethod
    def load(cls, checkpoint: Location) -> Journal | None:
        loc = journal_location(checkpoint)
        raw = read_bytes(loc, limit=JSON_MAX_BYTES)
        if raw is None:
            return None
        try:
            doc = load_json(raw, what="it")
            if not isinstance(doc, dict) or not isinstance(doc.get("payload"), dict) \
                    or doc.get("op") not in ("reset", "restore") or not isinstance(doc.get("operation_id"), str):
                raise ValueError("not an operation journal")
        except ValueError as exc:
            raise UserError(f"operation journal {loc.url} is unreadable ({exc}); it records an interrupted reset or "
                            "restore: inspect it, then move it away to continue") from None
        fmt = doc.get("format", 1)
        if isinstance(fmt, bool) or not isinstance(fmt, int) or fmt > FORMAT_VERSION:
            raise UserError(f"operation journal {loc.url} was written by a newer airflow-kafka-spark; finish the "
                            "operation with that version")
        return cls(loc, doc)

    @classmethod
    def begin(cls, checkpoint: Location, op: str, operation_id: str, payload: dict[str, Any]) -> Journal:
        """Write the commit point. A journal already there means an unfinished operation: refuse."""
        loc = journal_location(checkpoint)
        if exists(loc):
            raise UserError(f"an interrupted operation is recorded in {loc.url}; re-run the command (it resumes "
                            "the interrupted one first)")
        doc = {"format": FORMAT_VERSION, "op": op, "operation_id": operation_id,
               "checkpoint": checkpoint.url, "created_at_ms": int(time.time() * 1000), "done": [],
               "guard": checkpoint_marks(checkpoint), "payload": payload}
        write_atomic(loc, _dump(doc))
        return cls(loc, doc)


def _dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def finish_interrupted(checkpoint_location: str, *, storage_options: dict | None = None) -> dict[str, Any] | None:
    """Roll an interrupted reset/restore on this location forward to its end; its result, or None."""
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    journal = Journal.load(ck)
    if journal is None:
        return None
    refuse_stale_roll_forward(journal, ck)
    if journal.op == "reset":
        from airflow_kafka_spark.ops.reset import roll_forward as reset_forward

        return reset_forward(journal, ck, storage_options=storage_options)
    from airflow_kafka_spark.ops.restore import roll_forward as restore_forward

    return restore_forward(journal, ck, storage_options=storage_options)


def operation_lock(checkpoint: Location) -> LockFile:
    """``<checkpoint>.operation.lock``: one reset/restore at a time per location (a killed holder's
    lock is broken when its pid is gone)."""
    return LockFile(checkpoint.sibling(".operation.lock"), what=f"checkpoint {checkpoint.url}", timeout=5.0)


def refuse_if_interrupted(checkpoint_location: str, storage_options: dict | None = None) -> None:
    """Backups do not run over a half-finished reset/restore: the folder may be half moved."""
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    journal = Journal.load(ck)
    if journal is not None:
        from airflow_kafka_spark.errors import OperationBlocked

        raise OperationBlocked(f"an interrupted {journal.op} ({journal.operation_id}) of {ck.url} is recorded in "
                               f"{journal.location.url}; re-run aks {journal.op} on this checkpoint to finish it "
                               "before backing up", code="INTERRUPTED_OPERATION")


def remove_stale_staging(checkpoint: Location, keep: str | None = None) -> int:
    """Delete ``<checkpoint>.staging-*`` folders left by operations killed before their commit point."""
    removed = 0
    try:
        found = checkpoint.fs.glob(checkpoint.path.rstrip("/") + ".staging-*")
    except (OSError, ValueError):
        return 0
    for path in found:
        if keep and path.rstrip("/").endswith(keep):
            continue
        remove_tree(Location(checkpoint.fs, path, path))
        removed += 1
    return removed


# --------------------------------------------------------------------------------------------------
# an interrupted operation is a BLOCK, and finishing it must not run over a job deployed meanwhile
# --------------------------------------------------------------------------------------------------

INTERRUPTED_OPERATION = "INTERRUPTED_OPERATION"
"""Finding code: a reset/restore journal beside the checkpoint (the operation was killed midway)."""
STALE_INTERRUPTED_OPERATION = "STALE_INTERRUPTED_OPERATION"
"""Refusal code: rolling the journal forward would move a checkpoint that moved on, or a running job's."""


def checkpoint_marks(checkpoint: Location) -> dict[str, Any]:
    """What tells whether a query ran on this location since: newest offsets/commits ids, the query id.

    Lists ``offsets/`` and ``commits/`` only (never ``state/``, which can be huge) and reads
    ``metadata`` up to 1 MiB. Recorded in the journal at its commit point, compared on resume.
    """
    from airflow_kafka_spark.checkpoint.reader import METADATA_MAX_BYTES, batch_id_from_name

    marks: dict[str, Any] = {"exists": exists(checkpoint), "offsets": None, "commits": None,
                             "metadata_sha256": None}
    if not marks["exists"]:
        return marks
    for log in ("offsets", "commits"):
        try:
            names = checkpoint.fs.ls(checkpoint.child(log).path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        except OSError as exc:
            raise UserError(f"cannot list {checkpoint.child(log).url}: {os_reason(exc)}") from None
        ids = [b for b in (batch_id_from_name(str(n).rstrip("/").rsplit("/", 1)[-1]) for n in names) if b is not None]
        marks[log] = max(ids, default=None)
    try:
        raw = read_bytes(checkpoint.child("metadata"), limit=METADATA_MAX_BYTES)
    except UserError as exc:
        raw = str(exc).encode()
    if raw is not None:
        marks["metadata_sha256"] = hashlib.sha256(raw).hexdigest()
    return marks


def refuse_stale_roll_forward(journal: Journal, checkpoint: Location) -> None:
    """Refuse (exit 3, one line, nothing changed) to finish ``journal`` when the situation moved on.

    Why: the journal's plan (startingOffsets, the folder to move aside) was right when it was
    written. If a job was deployed since — it holds the lease, or it wrote batches — finishing the
    plan would pull the live checkpoint from under it and restart from old offsets (a replay).
    """
    from airflow_kafka_spark.errors import OperationBlocked
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.ops.backup import running_reason

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
                               code=STALE_INTERRUPTED_OPERATION)
    guard = journal.doc.get("guard")
    if not isinstance(guard, dict):
        return  # journals written before the guard existed carry none
    now = checkpoint_marks(checkpoint)
    if now != guard:
        changed = ", ".join(f"{k} {guard.get(k)!s} -> {now.get(k)!s}" for k in ("offsets", "commits", "exists")
                            if guard.get(k) != now.get(k)) or "metadata (query id) changed"
        raise OperationBlocked(f"{head}: the checkpoint moved on since the journal was written ({changed}): a query "
                               f"ran on it meanwhile; {abandon}", code=STALE_INTERRUPTED_OPERATION)


def interrupted_finding(checkpoint_location: str, storage_options: dict | None = None) -> Any:
    """The BLOCK finding for a journal beside ``checkpoint_location`` (None without one).

    validate, the audit and the UI all read it through the verdict, so a killed reset/restore is
    never reported as PASS. An unreadable journal is a BLOCK too: it still records an interruption.
    """
    from airflow_kafka_spark.verdict.findings import BLOCK, Finding

    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    loc = journal_location(ck)
    if not exists(loc):
        return None
    try:
        journal = Journal.load(ck)
    except UserError as exc:
        return Finding(INTERRUPTED_OPERATION, BLOCK, message=str(exc),
                       fix=f"inspect {loc.url}; move it away only once you know the checkpoint and the lifecycle "
                           "record are as they should be")
    if journal is None:
        return None
    done = ", ".join(str(s) for s in journal.doc.get("done", [])) or "none"
    aside = journal.payload.get("aside")
    return Finding(
        INTERRUPTED_OPERATION, BLOCK,
        message=(f"an interrupted {journal.op} ({journal.operation_id}) of this checkpoint is recorded in "
                 f"{loc.url} (steps done: {done}); finishing it moves the checkpoint "
                 f"{'to ' + str(aside) if aside else 'away'} — starting the job now would run on a checkpoint "
                 "that is about to be replaced"),
        fix=(f"finish it by re-running aks {journal.op} --checkpoint {ck.url} (it resumes the interrupted one "
             f"first), or abandon it by moving {loc.url} away while no job runs"))
