"""The operation journal FILE: ``<checkpoint>.operation.json``, the commit point of a reset or restore.

Why: a reset or restore moves folders, edits the lifecycle record and maybe a sink's log. Killed
half-way, it must neither lose the original checkpoint nor leave a state nobody can explain. So
every such operation first does everything that changes nothing (plan, verified backup, staged
copy), then writes this journal with every decision and every path it will use, and only then
starts moving things. Each step is idempotent and marked done in the journal; the journal is
deleted last. The original checkpoint is always either at its location or at the journal's
``aside`` path.

This module is the file only (where it lives, its format, reading and writing it, the guard it
records), so the verdict can report an interrupted operation without depending on the code that
runs operations (``ops.recover`` finishes or refuses one, ``ops.reset``/``ops.restore`` write one).
The journal lives beside the checkpoint, like the lifecycle record, never inside Spark's folder.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_kafka_spark._util.fs import Location, exists, os_reason, read_bytes, remove_file, write_atomic
from airflow_kafka_spark._util.jsonfile import JSON_MAX_BYTES, load_json
from airflow_kafka_spark.checkpoint.formats import METADATA_MAX_BYTES, batch_id_from_name
from airflow_kafka_spark.errors import UserError

JOURNAL_SUFFIX = ".operation.json"
FORMAT_VERSION = 1

INTERRUPTED_OPERATION = "INTERRUPTED_OPERATION"
"""Finding code: a reset/restore journal beside the checkpoint (the operation was killed midway)."""
STALE_INTERRUPTED_OPERATION = "STALE_INTERRUPTED_OPERATION"
"""Refusal code: rolling the journal forward would move a checkpoint that moved on, or a running job's."""

OPERATION_ID_PATTERN = r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6}$"
_OPERATION_ID = re.compile(OPERATION_ID_PATTERN)


class Operation(StrEnum):
    """The operations that journal themselves (the ``op`` field of the file)."""

    RESET = "reset"
    RESTORE = "restore"


def journal_location(checkpoint: Location) -> Location:
    return checkpoint.sibling(JOURNAL_SUFFIX)


def new_operation_id() -> str:
    """Sortable and unique: ``20260101T120000Z-1a2b3c`` (matches :data:`OPERATION_ID_PATTERN`)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def is_operation_id(text: object) -> bool:
    """Whether ``text`` is an id :func:`new_operation_id` makes (journal paths are built from it)."""
    return isinstance(text, str) and _OPERATION_ID.fullmatch(text) is not None


@dataclass
class Journal:
    """One operation in progress on one checkpoint location."""

    location: Location
    doc: dict[str, Any]

    @property
    def op(self) -> Operation:
        return Operation(self.doc["op"])

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
                    or doc.get("op") not in tuple(Operation) or not isinstance(doc.get("operation_id"), str):
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
    def begin(cls, checkpoint: Location, op: Operation, operation_id: str, payload: dict[str, Any]) -> Journal:
        """Write the commit point. A journal already there means an unfinished operation: refuse."""
        loc = journal_location(checkpoint)
        if exists(loc):
            raise UserError(f"an interrupted operation is recorded in {loc.url}; re-run the command (it resumes "
                            "the interrupted one first)")
        doc = {"format": FORMAT_VERSION, "op": str(Operation(op)), "operation_id": operation_id,
               "checkpoint": checkpoint.url, "created_at_ms": int(time.time() * 1000), "done": [],
               "guard": checkpoint_marks(checkpoint), "payload": payload}
        write_atomic(loc, _dump(doc))
        return cls(loc, doc)


def _dump(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def checkpoint_marks(checkpoint: Location) -> dict[str, Any]:
    """What tells whether a query ran on this location since: newest offsets/commits ids, the query id.

    Lists ``offsets/`` and ``commits/`` only (never ``state/``, which can be huge) and reads
    ``metadata`` up to 1 MiB. Recorded in the journal at its commit point, compared on resume.
    """
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
