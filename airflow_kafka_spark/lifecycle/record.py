"""The lifecycle record: what the product remembers about a streaming job that Spark does not.

A Structured Streaming checkpoint stores raw offsets but no identity: not the Kafka cluster, not
the topic incarnation, not which Spark wrote it, not who is running it now. Those are exactly the
facts needed to catch a recreated topic (S03), a checkpoint copied to another cluster (S06), a
rollback to an older Spark (S27) or a double start (S16). The record keeps them.

Where: **beside** the checkpoint, ``<checkpoint>.lifecycle.json`` by default, never inside it.
Spark owns every file under the checkpoint folder (and a backup/restore or a ``rm -rf`` of the
checkpoint must not silently take the product's memory with it or, worse, leave a stale copy
inside a restored folder). Any fsspec URL works (local, HDFS, S3, GCS, ABFS, ``memory://`` in
tests).

Writes are atomic for readers: on a local disk a temp file is renamed over the record; on object
stores a single PUT replaces the object (readers see the old or the new record, never half).

Concurrency: every read-modify-write (:meth:`LifecycleRecord.save`, the lease calls) runs under a
lock file ``<record>.lock`` created exclusively (``O_CREAT | O_EXCL`` locally, WebHDFS
``overwrite=false`` on HDFS, ``If-None-Match: *`` on S3), so of two processes racing for the lease
exactly one wins. On S3 the write is also a compare-and-swap (``If-Match: <etag>`` of the object
read, ``If-None-Match: *`` for a new record): should the lock ever be broken as stale while its
holder still works, the late writer is refused (:class:`~airflow_kafka_spark._util.conditional.WriteConflict`)
instead of overwriting a change it did not see. Other object stores (GCS, ABFS) have no exclusive
create through fsspec: there the lock is best effort, and jobs whose checkpoints live there should
run their orchestration from one scheduler.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util.conditional import read_versioned, write_if_unchanged
from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import JSON_MAX_BYTES, load_json
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.text import iso_seconds, now_ms
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.kafka.secrets import redact
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent
from airflow_kafka_spark.lifecycle.model import (
    RECORD_SUFFIX,
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
from airflow_kafka_spark.names import validate_job_name

LOCK_SUFFIX = ".lock"
FORMAT_VERSION = 1
HISTORY_LIMIT = 200

# Test hook: seconds to pause between reading and writing the record while holding the lock. A
# test sets it in racing processes to prove the lock, not luck, keeps exactly one winner.
_RMW_PAUSE_S = 0.0


@dataclass
class LifecycleRecord:
    """What the product knows about one job and its checkpoint. See the module docstring."""

    job_name: str
    checkpoint_location: str
    kafka_cluster_id: str | None = None
    topics: dict[str, TopicIdentity] = field(default_factory=dict)
    spark_version: str | None = None
    compatibility_version: str | None = None      # declared by the job registry
    source_options: dict[str, Any] = field(default_factory=dict)   # secrets redacted
    next_starting_offsets: str | None = None       # Spark offsets JSON set by reset, used by next submit
    driver: DriverInfo | None = None
    lease: Lease | None = None
    history: list[dict[str, Any]] = field(default_factory=list)     # audit events, oldest first
    revision: int = 0                              # +1 per save; tells readers the record moved on
    updated_at_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)             # unknown keys, kept on rewrite
    location: str = field(default="", compare=False)                # where the record is stored
    # fsspec options for the record's file system (e.g. S3 credentials from --storage-option); never saved
    storage_options: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.location:
            self.location = record_location(self.checkpoint_location)
        self.source_options = redact(self.source_options)

    # -- construction / loading --------------------------------------------------------------------

    @classmethod
    def create(cls, job_name: str, checkpoint_location: str, *, location: str | None = None,
               storage_options: dict[str, Any] | None = None) -> LifecycleRecord:
        """A new, unsaved record for ``job_name`` beside ``checkpoint_location``.

        The name goes through the one job-name rule (backup folders use it too), so
        ``../../etc`` or ``"orders\\n"`` never reaches a record or a path.
        """
        validate_job_name(job_name)
        return cls(job_name=job_name, checkpoint_location=checkpoint_location, location=location or "",
                   storage_options=storage_options)

    @classmethod
    def load(cls, location: str, *, storage_options: dict[str, Any] | None = None) -> LifecycleRecord | None:
        """The stored record, or None if there is none yet.

        ``location`` is a checkpoint location (the record beside it is read) or the record's own
        path (ending in ``.lifecycle.json``). A record that cannot be understood is a
        :class:`UserError`, never silently treated as absent: that would drop the identity the
        S03/S06 checks rely on.
        """
        path = location if str(location).endswith(RECORD_SUFFIX) else record_location(location)
        raw = _read_bytes(path, storage_options)
        if raw is None:
            return None
        found = cls.from_json(raw, location=path)
        found.storage_options = storage_options
        return found

    @classmethod
    def load_or_create(cls, job_name: str, checkpoint_location: str, *, location: str | None = None
                       ) -> LifecycleRecord:
        found = cls.load(location or checkpoint_location)
        if found is None:
            return cls.create(job_name, checkpoint_location, location=location)
        _check_same_job(found, job_name)
        return found

    # -- serialisation -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = dict(self.extra)
        doc.update({
            "format": FORMAT_VERSION,
            "job_name": self.job_name,
            "checkpoint_location": self.checkpoint_location,
            "kafka_cluster_id": self.kafka_cluster_id,
            "topics": {n: {"topic_id": t.topic_id, "partitions": t.partitions}
                       for n, t in sorted(self.topics.items())},
            "spark_version": self.spark_version,
            "compatibility_version": self.compatibility_version,
            "source_options": redact(self.source_options),
            "next_starting_offsets": self.next_starting_offsets,
            "driver": None if self.driver is None else {
                "kind": self.driver.kind, "id": self.driver.id, "host": self.driver.host,
                "started_at": self.driver.started_at},
            "lease": None if self.lease is None else {
                "holder": self.lease.holder, "run_id": self.lease.run_id,
                "expires_at_ms": self.lease.expires_at_ms},
            "history": self.history[-HISTORY_LIMIT:],
            "revision": self.revision,
            "updated_at_ms": self.updated_at_ms,
        })
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, raw: str | bytes, *, location: str = "") -> LifecycleRecord:
        where = location or "lifecycle record"
        try:
            doc = load_json(raw, what="it")
        except ValueError as exc:
            raise _corrupt(where, str(exc)) from None
        return cls.from_dict(doc, location=location)

    @classmethod
    def from_dict(cls, doc: Any, *, location: str = "") -> LifecycleRecord:
        where = location or "lifecycle record"
        if not isinstance(doc, dict):
            raise _corrupt(where, f"expected a JSON object, got {type(doc).__name__}")
        fmt = doc.get("format", FORMAT_VERSION)
        if not isinstance(fmt, int):
            raise _corrupt(where, f"format must be an integer, got {fmt!r}")
        if fmt > FORMAT_VERSION:
            raise UserError(f"lifecycle record {where} has format {fmt}, newer than this airflow-kafka-spark "
                            f"understands ({FORMAT_VERSION}); upgrade airflow-kafka-spark on this host")
        try:
            topics = {str(n): TopicIdentity(opt_str(t.get("topic_id"), f"topics.{n}.topic_id"),
                                            req_int(t.get("partitions"), f"topics.{n}.partitions"))
                      for n, t in obj(doc.get("topics"), "topics").items()}
            drv = doc.get("driver")
            driver = None if drv is None else DriverInfo(
                kind=req_str(obj(drv, "driver").get("kind"), "driver.kind"),
                id=req_str(drv.get("id"), "driver.id"),
                host=opt_str(drv.get("host"), "driver.host"),
                started_at=opt_int(drv.get("started_at"), "driver.started_at"))
            ls = doc.get("lease")
            lease = None if ls is None else Lease(
                holder=req_str(obj(ls, "lease").get("holder"), "lease.holder"),
                run_id=req_str(ls.get("run_id"), "lease.run_id"),
                expires_at_ms=req_int(ls.get("expires_at_ms"), "lease.expires_at_ms"))
            history = doc.get("history") or []
            if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
                raise ValueError("history must be a list of objects")
            nso = opt_str(doc.get("next_starting_offsets"), "next_starting_offsets")
            if nso is not None:
                parse_offsets_json(nso, what="next_starting_offsets")
            known = {"format", "job_name", "checkpoint_location", "kafka_cluster_id", "topics",
                     "spark_version", "compatibility_version", "source_options", "next_starting_offsets",
                     "driver", "lease", "history", "revision", "updated_at_ms"}
            return cls(
                job_name=req_str(doc.get("job_name"), "job_name"),
                checkpoint_location=req_str(doc.get("checkpoint_location"), "checkpoint_location"),
                kafka_cluster_id=opt_str(doc.get("kafka_cluster_id"), "kafka_cluster_id"),
                topics=topics,
                spark_version=opt_str(doc.get("spark_version"), "spark_version"),
                compatibility_version=opt_str(doc.get("compatibility_version"), "compatibility_version"),
                source_options=obj(doc.get("source_options"), "source_options"),
                next_starting_offsets=nso,
                driver=driver, lease=lease, history=history[-HISTORY_LIMIT:],
                revision=req_int(doc.get("revision", 0), "revision"),
                updated_at_ms=opt_int(doc.get("updated_at_ms"), "updated_at_ms"),
                extra={k: v for k, v in doc.items() if k not in known},
                location=location)
        except UserError as exc:
            raise _corrupt(where, str(exc)) from None
        except (ValueError, TypeError, AttributeError) as exc:
            raise _corrupt(where, str(exc)) from None

    # -- plain updates (persisted by save()) -------------------------------------------------------

    def add_event(self, event: LifecycleEvent | str, *, actor: str | None = None, **details: Any
                  ) -> dict[str, Any]:
        """Append an audit event (overrides, resets, leases...); only the last 200 are kept.

        ``event`` is a :class:`LifecycleEvent`; a plain string is kept for events users add.
        """
        entry = {"id": uuid.uuid4().hex[:12], "at_ms": now_ms(), "event": str(event), "actor": actor,
                 "details": redact(details)}
        self.history.append(entry)
        del self.history[:-HISTORY_LIMIT]
        return entry

    def set_source_options(self, options: Mapping[str, Any]) -> None:
        """Remember the source options of the last deploy (S22 diff), secrets redacted."""
        self.source_options = redact(options)

    def set_kafka_identity(self, cluster_id: str | None, topics: Mapping[str, Any]) -> None:
        """Record cluster id and topic incarnations; ``topics`` maps names to ``TopicInfo``-likes
        (``topic_id``, ``partitions``), e.g. ``BrokerState.topics``."""
        self.kafka_cluster_id = cluster_id
        self.topics = {n: TopicIdentity(getattr(t, "topic_id", None), int(t.partitions))
                       for n, t in topics.items()}

    def set_next_starting_offsets(self, offsets: PartitionOffsets | str | None, *, actor: str | None = None
                                  ) -> None:
        """Offsets the next submit must start from (after a reset); validated Spark JSON."""
        if offsets is None:
            self.next_starting_offsets = None
            return
        parsed = parse_offsets_json(offsets, what="next starting offsets") if isinstance(offsets, str) \
            else dict(offsets)
        self.next_starting_offsets = to_offsets_json(parsed)
        self.add_event(LifecycleEvent.NEXT_STARTING_OFFSETS_SET, actor=actor, offsets=self.next_starting_offsets)

    def take_next_starting_offsets(self, *, actor: str | None = None) -> str | None:
        """Return and clear the pending starting offsets (the submit consumes them once)."""
        value = self.next_starting_offsets
        if value is not None:
            self.next_starting_offsets = None
            self.add_event(LifecycleEvent.NEXT_STARTING_OFFSETS_USED, actor=actor, offsets=value)
        return value

    def set_driver(self, kind: DriverKind | str, id: str, *, host: str | None = None,
                   started_at: int | None = None) -> None:
        try:
            kind = DriverKind(kind)
        except ValueError:
            raise UserError(f"driver kind {kind!r} is not one of {', '.join(DriverKind)}") from None
        self.driver = DriverInfo(kind=kind.value, id=str(id), host=host,
                                 started_at=started_at if started_at is not None else now_ms())

    # -- persistence -------------------------------------------------------------------------------

    def save(self, *, lock_timeout: float = 10.0) -> None:
        """Write the record atomically under the lock.

        The lease is owned by the lease calls, so the stored lease wins over this object's copy
        (a stale object must not resurrect or drop someone else's lease), and history is merged,
        so events written by other processes since this object was loaded survive.
        """
        with _record_lock(self.location, lock_timeout, self.storage_options):
            stored, version = _load_versioned(self.location, self.storage_options)
            if stored is not None:
                _check_same_job(stored, self.job_name)
                self.lease = stored.lease
                self.history = _merge_history(stored.history, self.history)
            self.revision = max(self.revision, stored.revision if stored else 0) + 1
            self.updated_at_ms = now_ms()
            _pause()
            _write_checked(self.location, self.to_json().encode(), version, self.storage_options)

    # -- lease -------------------------------------------------------------------------------------

    def acquire_lease(self, holder: str, ttl_s: float, *, run_id: str | None = None,
                      lock_timeout: float = 10.0) -> Lease:
        """Take (or renew, if ``holder`` already has it) the right to run this job for ``ttl_s``.

        Fails with a :class:`UserError` naming the current holder when another live lease
        exists (S16: orchestrator retry, double submit). An expired lease is taken over and the
        take-over is audited. Only the lease and one history event are written; other unsaved
        changes of this object stay in memory for a later :meth:`save`.
        """
        if ttl_s <= 0:
            raise UserError(f"lease ttl must be positive, got {ttl_s}")
        with _record_lock(self.location, lock_timeout, self.storage_options):
            stored, version = _load_versioned(self.location, self.storage_options)
            if stored is not None:
                _check_same_job(stored, self.job_name)
            now = now_ms()
            current = stored.lease if stored is not None else None
            if current is not None and current.holder != holder and current.live(now):
                raise UserError(
                    f"job {self.job_name} (checkpoint {self.checkpoint_location}) is leased by "
                    f"{current.holder} (run {current.run_id}) until {iso_seconds(current.expires_at_ms)} "
                    f"({(current.expires_at_ms - now) / 1000:.0f}s left); stop that run or wait for the "
                    "lease to expire before starting another")
            renew = current is not None and current.holder == holder and current.live(now)
            lease = Lease(holder=holder,
                          run_id=run_id or (current.run_id if renew and current else uuid.uuid4().hex[:12]),
                          expires_at_ms=now + int(ttl_s * 1000))
            target = copy.deepcopy(stored if stored is not None else self)
            target.location = self.location
            if not renew:  # renewals are heartbeats: not worth an audit event each
                details: dict[str, Any] = {"run_id": lease.run_id, "ttl_s": ttl_s}
                if current is not None:
                    details["previous_holder"] = current.holder
                    details["previous_expired_at"] = iso_seconds(current.expires_at_ms)
                target.add_event(LifecycleEvent.LEASE_TAKEN_OVER if current is not None and current.holder != holder
                                 else LifecycleEvent.LEASE_ACQUIRED, actor=holder, **details)
            target.lease = lease
            target.revision = max(target.revision, self.revision) + 1
            target.updated_at_ms = now
            _pause()
            _write_checked(self.location, target.to_json().encode(), version, self.storage_options)
        self.lease = lease
        self.history = _merge_history(target.history, self.history)
        self.revision = target.revision
        return lease

    def release_lease(self, holder: str, *, force: bool = False, lock_timeout: float = 10.0) -> bool:
        """Give the lease up; True if a lease was cleared.

        Releasing someone else's live lease needs ``force`` (an operator breaking a stuck run),
        and is audited as such.
        """
        with _record_lock(self.location, lock_timeout, self.storage_options):
            stored, version = _load_versioned(self.location, self.storage_options)
            if stored is None or stored.lease is None:
                self.lease = None
                return False
            current = stored.lease
            if current.holder != holder and current.live() and not force:
                raise UserError(f"the lease of job {self.job_name} is held by {current.holder} (run "
                                f"{current.run_id}), not {holder}; pass force=True to break it")
            stored.lease = None
            event = (LifecycleEvent.LEASE_RELEASED if current.holder == holder
                     else LifecycleEvent.LEASE_BROKEN if current.live() else LifecycleEvent.EXPIRED_LEASE_CLEARED)
            stored.add_event(event, actor=holder, run_id=current.run_id, holder=current.holder)
            stored.revision += 1
            stored.updated_at_ms = now_ms()
            _write_checked(self.location, stored.to_json().encode(), version, self.storage_options)
        self.lease = None
        self.history = _merge_history(stored.history, self.history)
        self.revision = stored.revision
        return True


# --------------------------------------------------------------------------------------------------
# helpers: validation
# --------------------------------------------------------------------------------------------------

def _corrupt(where: str, reason: str) -> UserError:
    return UserError(f"lifecycle record {where} is corrupt ({reason}); it is airflow-kafka-spark's file "
                     "beside the checkpoint, not Spark's: restore it from a backup, or move it away to "
                     "start a fresh record (cluster and topic identity checks restart from the next "
                     "validation)")


def _check_same_job(stored: LifecycleRecord, job_name: str) -> None:
    if stored.job_name != job_name:
        raise UserError(f"lifecycle record {stored.location} belongs to job {stored.job_name!r}, not "
                        f"{job_name!r}: two jobs must not share checkpoint {stored.checkpoint_location}; "
                        "give each job its own checkpoint location")


def _merge_history(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Union of two event lists by id, in time order, bounded."""
    seen: dict[str, dict[str, Any]] = {}
    for e in [*a, *b]:
        key = str(e.get("id") or json.dumps(e, sort_keys=True, default=str))
        seen.setdefault(key, e)
    events = sorted(seen.values(), key=lambda e: (e.get("at_ms") or 0))
    return events[-HISTORY_LIMIT:]


def _pause() -> None:
    if _RMW_PAUSE_S > 0:
        time.sleep(_RMW_PAUSE_S)


# --------------------------------------------------------------------------------------------------
# helpers: storage
# --------------------------------------------------------------------------------------------------

def _read_bytes(location: str, options: dict[str, Any] | None = None) -> bytes | None:
    return read_bytes(open_location(location, options, what="lifecycle record"), limit=JSON_MAX_BYTES)


def _load_versioned(location: str, options: dict[str, Any] | None = None
                    ) -> tuple[LifecycleRecord | None, str | None]:
    """The stored record and its version for :func:`_write_checked` (S3: the ETag; else None)."""
    raw, version = read_versioned(open_location(location, options, what="lifecycle record"),
                                  limit=JSON_MAX_BYTES)
    return (None if raw is None else LifecycleRecord.from_json(raw, location=location)), version


def _record_lock(location: str, timeout: float, options: dict[str, Any] | None = None) -> LockFile:
    """``<record>.lock``: held for milliseconds, so one older than a minute was left by a crash."""
    return LockFile(open_location(location + LOCK_SUFFIX, options, what="lifecycle record lock"),
                    what="lifecycle record", timeout=timeout, stale_after_s=60.0)


def _write_checked(location: str, data: bytes, version: str | None, options: dict[str, Any] | None = None
                   ) -> None:
    """Readers see the old record or the new one, never a torn write; on S3 only if the record is
    still the ``version`` read under the lock (compare-and-swap), else a one-line WriteConflict."""
    write_if_unchanged(open_location(location, options, what="lifecycle record"), data, version)
