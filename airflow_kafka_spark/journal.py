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

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark import storage
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.storage import Location

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
            storage.write_atomic(self.location, _dump(self.doc))

    def finish(self) -> None:
        storage.remove_file(self.location)

    @classmethod
    def load(cls, checkpoint: Location) -> Journal | None:
        loc = journal_location(checkpoint)
        raw = storage.read_bytes(loc)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("payload"), dict) \
                    or doc.get("op") not in ("reset", "restore"):
                raise ValueError("not an operation journal")
        except (ValueError, UnicodeDecodeError) as exc:
            raise UserError(f"operation journal {loc.url} is unreadable ({exc}); it records an interrupted reset or "
                            "restore: inspect it, then move it away to continue") from None
        if int(doc.get("format", 1)) > FORMAT_VERSION:
            raise UserError(f"operation journal {loc.url} was written by a newer airflow-kafka-spark; finish the "
                            "operation with that version")
        return cls(loc, doc)

    @classmethod
    def begin(cls, checkpoint: Location, op: str, operation_id: str, payload: dict[str, Any]) -> Journal:
        """Write the commit point. A journal already there means an unfinished operation: refuse."""
        loc = journal_location(checkpoint)
        if storage.exists(loc):
            raise UserError(f"an interrupted operation is recorded in {loc.url}; re-run the command (it resumes "
                            "the interrupted one first)")
        doc = {"format": FORMAT_VERSION, "op": op, "operation_id": operation_id,
               "checkpoint": checkpoint.url, "created_at_ms": int(time.time() * 1000), "done": [],
               "payload": payload}
        storage.write_atomic(loc, _dump(doc))
        return cls(loc, doc)


def _dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def finish_interrupted(checkpoint_location: str, *, storage_options: dict | None = None) -> dict[str, Any] | None:
    """Roll an interrupted reset/restore on this location forward to its end; its result, or None."""
    ck = storage.open_location(checkpoint_location, storage_options, what="checkpoint location")
    journal = Journal.load(ck)
    if journal is None:
        return None
    if journal.op == "reset":
        from airflow_kafka_spark.reset import roll_forward as reset_forward

        return reset_forward(journal, ck, storage_options=storage_options)
    from airflow_kafka_spark.restore import roll_forward as restore_forward

    return restore_forward(journal, ck, storage_options=storage_options)


def operation_lock(checkpoint: Location) -> storage.DirLock:
    """``<checkpoint>.operation.lock``: one reset/restore at a time per location (a killed holder's
    lock is broken when its pid is gone)."""
    return storage.DirLock(checkpoint.sibling(".operation.lock"), what=f"checkpoint {checkpoint.url}", timeout=5.0)


def refuse_if_interrupted(checkpoint_location: str, storage_options: dict | None = None) -> None:
    """Backups do not run over a half-finished reset/restore: the folder may be half moved."""
    ck = storage.open_location(checkpoint_location, storage_options, what="checkpoint location")
    journal = Journal.load(ck)
    if journal is not None:
        from airflow_kafka_spark.plan import OperationBlocked

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
        storage.remove_tree(Location(checkpoint.fs, path, path))
        removed += 1
    return removed
