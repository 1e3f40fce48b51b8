"""The lifecycle record's contents: the facts Spark does not keep, and their JSON format.

A Structured Streaming checkpoint stores raw offsets but no identity: not the Kafka cluster, not
the topic incarnation, not which Spark wrote it, not who is running it now. Those are exactly the
facts needed to catch a recreated topic (S03), a checkpoint copied to another cluster (S06), a
rollback to an older Spark (S27) or a double start (S16). :class:`RecordDocument` holds them, with
their JSON form (format 1; keys a newer version adds are kept on rewrite) and the in-memory updates;
:class:`~airflow_kafka_spark.lifecycle.record.LifecycleRecord` adds where it is stored and how
processes share it (lock, compare-and-swap, lease).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark._util.text import now_ms
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.kafka.secrets import redact
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent
from airflow_kafka_spark.lifecycle.model import (
    DriverInfo,
    Lease,
    TopicIdentity,
    obj,
    opt_int,
    opt_str,
    record_location,
    req_int,
    req_str,
)

FORMAT_VERSION = 1
HISTORY_LIMIT = 200


@dataclass
class RecordDocument:
    """What the product knows about one job and its checkpoint. See the module docstring."""

    job_name: str
    checkpoint_location: str
    kafka_cluster_id: str | None = None
    topics: dict[str, TopicIdentity] = field(default_factory=dict)
    spark_version: str | None = None
    compatibility_version: str | None = None  # declared by the job registry
    next_starting_offsets: str | None = None  # Spark offsets JSON set by reset, used by next submit
    driver: DriverInfo | None = None
    lease: Lease | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # audit events, oldest first
    revision: int = 0  # +1 per save; tells readers the record moved on
    updated_at_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # unknown keys, kept on rewrite
    location: str = field(default="", compare=False)  # where the record is stored
    # fsspec options for the record's file system (e.g. S3 credentials from --storage-option); never saved
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.location:
            self.location = record_location(self.checkpoint_location)

    # -- serialisation -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(self.extra)
        doc.update(
            {
                "format": FORMAT_VERSION,
                "job_name": self.job_name,
                "checkpoint_location": self.checkpoint_location,
                "kafka_cluster_id": self.kafka_cluster_id,
                "topics": {n: asdict(t) for n, t in sorted(self.topics.items())},
                "spark_version": self.spark_version,
                "compatibility_version": self.compatibility_version,
                "next_starting_offsets": self.next_starting_offsets,
                "driver": None if self.driver is None else asdict(self.driver),
                "lease": None if self.lease is None else asdict(self.lease),
                "history": self.history[-HISTORY_LIMIT:],
                "revision": self.revision,
                "updated_at_ms": self.updated_at_ms,
            }
        )
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, raw: str | bytes, *, location: str = "") -> Self:
        where = location or "lifecycle record"
        try:
            doc = load_json(raw, what="it")
        except ValueError as exc:
            raise _corrupt(where, str(exc)) from None
        return cls.from_dict(doc, location=location)

    @classmethod
    def from_dict(cls, doc: Any, *, location: str = "") -> Self:
        where = location or "lifecycle record"
        if not isinstance(doc, dict):
            raise _corrupt(where, f"expected a JSON object, got {type(doc).__name__}")
        fmt = doc.get("format", FORMAT_VERSION)
        if not isinstance(fmt, int):
            raise _corrupt(where, f"format must be an integer, got {fmt!r}")
        if fmt > FORMAT_VERSION:
            raise UserError(
                f"lifecycle record {where} has format {fmt}, newer than this airflow-kafka-spark "
                f"understands ({FORMAT_VERSION}); upgrade airflow-kafka-spark on this host"
            )
        try:
            topics = {
                str(n): TopicIdentity(
                    opt_str(t.get("topic_id"), f"topics.{n}.topic_id"),
                    req_int(t.get("partitions"), f"topics.{n}.partitions"),
                )
                for n, t in obj(doc.get("topics"), "topics").items()
            }
            driver = _driver_of(doc.get("driver"))
            lease = _lease_of(doc.get("lease"))
            history = doc.get("history") or []
            if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
                raise ValueError("history must be a list of objects")
            nso = opt_str(doc.get("next_starting_offsets"), "next_starting_offsets")
            if nso is not None:
                parse_offsets_json(nso, what="next_starting_offsets")
            return cls(
                job_name=req_str(doc.get("job_name"), "job_name"),
                checkpoint_location=req_str(doc.get("checkpoint_location"), "checkpoint_location"),
                kafka_cluster_id=opt_str(doc.get("kafka_cluster_id"), "kafka_cluster_id"),
                topics=topics,
                spark_version=opt_str(doc.get("spark_version"), "spark_version"),
                compatibility_version=opt_str(doc.get("compatibility_version"), "compatibility_version"),
                next_starting_offsets=nso,
                driver=driver,
                lease=lease,
                history=history[-HISTORY_LIMIT:],
                revision=req_int(doc.get("revision", 0), "revision"),
                updated_at_ms=opt_int(doc.get("updated_at_ms"), "updated_at_ms"),
                extra={k: v for k, v in doc.items() if k not in _KNOWN_KEYS},
                location=location,
            )
        except UserError as exc:
            raise _corrupt(where, str(exc)) from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise _corrupt(where, str(exc)) from None

    # -- plain updates (persisted by save()) -------------------------------------------------------

    def add_event(self, event: LifecycleEvent | str, *, actor: str | None = None, **details: Any) -> dict[str, Any]:
        """Append an audit event (overrides, resets, leases...); only the last 200 are kept.

        ``event`` is a :class:`LifecycleEvent`; a plain string is kept for events users add.
        """
        entry = {
            "id": uuid.uuid4().hex[:12],
            "at_ms": now_ms(),
            "event": str(event),
            "actor": actor,
            "details": redact(details),
        }
        self.history.append(entry)
        del self.history[:-HISTORY_LIMIT]
        return entry

    def last_event(self, event: LifecycleEvent | str) -> dict[str, Any] | None:
        """The newest history entry of kind ``event``, or None: what the last reset or restore did."""
        return next((e for e in reversed(self.history) if e.get("event") == str(event)), None)

    def set_kafka_identity(self, cluster_id: str | None, topics: Mapping[str, Any]) -> None:
        """Record cluster id and topic incarnations; ``topics`` maps names to ``TopicInfo``-likes
        (``topic_id``, ``partitions``), e.g. ``BrokerState.topics``."""
        self.kafka_cluster_id = cluster_id
        self.topics = {n: TopicIdentity(getattr(t, "topic_id", None), int(t.partitions)) for n, t in topics.items()}

    def set_next_starting_offsets(self, offsets: PartitionOffsets | str | None, *, actor: str | None = None) -> None:
        """Offsets the next submit must start from (after a reset); validated Spark JSON."""
        if offsets is None:
            self.next_starting_offsets = None
            return
        parsed = (
            parse_offsets_json(offsets, what="next starting offsets") if isinstance(offsets, str) else dict(offsets)
        )
        self.next_starting_offsets = to_offsets_json(parsed)
        self.add_event(LifecycleEvent.NEXT_STARTING_OFFSETS_SET, actor=actor, offsets=self.next_starting_offsets)

    def take_next_starting_offsets(self, *, actor: str | None = None) -> str | None:
        """Return and clear the pending starting offsets (the submit consumes them once)."""
        value = self.next_starting_offsets
        if value is not None:
            self.next_starting_offsets = None
            self.add_event(LifecycleEvent.NEXT_STARTING_OFFSETS_USED, actor=actor, offsets=value)
        return value

    def set_driver(
        self, kind: DriverKind | str, id: str, *, host: str | None = None, started_at: int | None = None
    ) -> None:
        try:
            kind = DriverKind(kind)
        except ValueError:
            raise UserError(f"driver kind {kind!r} is not one of {', '.join(DriverKind)}") from None
        self.driver = DriverInfo(
            kind=kind.value, id=str(id), host=host, started_at=started_at if started_at is not None else now_ms()
        )


def _corrupt(where: str, reason: str) -> UserError:
    return UserError(
        f"lifecycle record {where} is corrupt ({reason}); it is airflow-kafka-spark's file "
        "beside the checkpoint, not Spark's: restore it from a backup, or move it away to "
        "start a fresh record (cluster and topic identity checks restart from the next "
        "validation)"
    )


#: The record's own keys; any other key of the document is kept in ``extra`` (e.g. ``submitted_app``).
_KNOWN_KEYS = frozenset({
    "format", "job_name", "checkpoint_location", "kafka_cluster_id", "topics", "spark_version",
    "compatibility_version", "next_starting_offsets", "driver", "lease", "history", "revision", "updated_at_ms",
})


def _driver_of(drv: Any) -> DriverInfo | None:
    if drv is None:
        return None
    return DriverInfo(
        kind=req_str(obj(drv, "driver").get("kind"), "driver.kind"),
        id=req_str(drv.get("id"), "driver.id"),
        host=opt_str(drv.get("host"), "driver.host"),
        started_at=opt_int(drv.get("started_at"), "driver.started_at"),
    )


def _lease_of(ls: Any) -> Lease | None:
    if ls is None:
        return None
    return Lease(
        holder=req_str(obj(ls, "lease").get("holder"), "lease.holder"),
        run_id=req_str(ls.get("run_id"), "lease.run_id"),
        expires_at_ms=req_int(ls.get("expires_at_ms"), "lease.expires_at_ms"),
    )
