"""The lifecycle record: what the product remembers about a streaming job that Spark does not,
stored beside its checkpoint and shared safely between processes.

What it holds and its JSON format: :mod:`~airflow_kafka_spark.lifecycle.document` (S03, S06, S27,
S16 rely on it). This module adds where it lives, how it is written, and the lease.

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
from typing import Any

from airflow_kafka_spark._util.conditional import read_versioned, write_if_unchanged
from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import JSON_MAX_BYTES
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.text import iso_seconds, now_ms
from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.document import HISTORY_LIMIT, RecordDocument
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import RECORD_SUFFIX, Lease, record_location
from airflow_kafka_spark.names import validate_job_name

LOCK_SUFFIX = ".lock"

# Test hook: seconds to pause between reading and writing the record while holding the lock. A
# test sets it in racing processes to prove the lock, not luck, keeps exactly one winner.
_RMW_PAUSE_S = 0.0


class LifecycleRecord(RecordDocument):
    """The record of one job, stored beside its checkpoint. See the module docstring."""

    # -- construction / loading --------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        job_name: str,
        checkpoint_location: str,
        *,
        location: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> LifecycleRecord:
        """A new, unsaved record for ``job_name`` beside ``checkpoint_location``.

        The name goes through the one job-name rule (backup folders use it too), so
        ``../../etc`` or ``"orders\\n"`` never reaches a record or a path.
        """
        validate_job_name(job_name)
        return cls(
            job_name=job_name,
            checkpoint_location=checkpoint_location,
            location=location or "",
            storage_options=storage_options,
        )

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
    def load_or_create(cls, job_name: str, checkpoint_location: str, *, location: str | None = None) -> LifecycleRecord:
        found = cls.load(location or checkpoint_location)
        if found is None:
            return cls.create(job_name, checkpoint_location, location=location)
        _check_same_job(found, job_name)
        return found

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

    def acquire_lease(
        self, holder: str, ttl_s: float, *, run_id: str | None = None, lock_timeout: float = 10.0
    ) -> Lease:
        """Take (or renew, if ``holder`` already has it) the right to run this job for ``ttl_s``.

        Refuses with :class:`OperationBlocked` (``ALREADY_RUNNING``) naming the current holder when
        another live lease exists (S16: orchestrator retry, double submit). An expired lease is taken over and the
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
                raise OperationBlocked(
                    f"job {self.job_name} (checkpoint {self.checkpoint_location}) is leased by "
                    f"{current.holder} (run {current.run_id}) until {iso_seconds(current.expires_at_ms)} "
                    f"({(current.expires_at_ms - now) / 1000:.0f}s left); stop that run or wait for the "
                    "lease to expire before starting another",
                    reason=BlockReason.ALREADY_RUNNING,
                )
            renew = current is not None and current.holder == holder and current.live(now)
            lease = Lease(
                holder=holder,
                run_id=run_id or (current.run_id if renew and current else uuid.uuid4().hex[:12]),
                expires_at_ms=now + int(ttl_s * 1000),
            )
            target = copy.deepcopy(stored if stored is not None else self)
            target.location = self.location
            if not renew:  # renewals are heartbeats: not worth an audit event each
                details: dict[str, Any] = {"run_id": lease.run_id, "ttl_s": ttl_s}
                if current is not None:
                    details["previous_holder"] = current.holder
                    details["previous_expired_at"] = iso_seconds(current.expires_at_ms)
                target.add_event(
                    LifecycleEvent.LEASE_TAKEN_OVER
                    if current is not None and current.holder != holder
                    else LifecycleEvent.LEASE_ACQUIRED,
                    actor=holder,
                    **details,
                )
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
                raise UserError(
                    f"the lease of job {self.job_name} is held by {current.holder} (run "
                    f"{current.run_id}), not {holder}; pass force=True to break it"
                )
            stored.lease = None
            event = (
                LifecycleEvent.LEASE_RELEASED
                if current.holder == holder
                else LifecycleEvent.LEASE_BROKEN
                if current.live()
                else LifecycleEvent.EXPIRED_LEASE_CLEARED
            )
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


def _check_same_job(stored: LifecycleRecord, job_name: str) -> None:
    if stored.job_name != job_name:
        raise UserError(
            f"lifecycle record {stored.location} belongs to job {stored.job_name!r}, not "
            f"{job_name!r}: two jobs must not share checkpoint {stored.checkpoint_location}; "
            "give each job its own checkpoint location"
        )


def _merge_history(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Union of two event lists by id, in time order, bounded."""
    seen: dict[str, dict[str, Any]] = {}
    for e in [*a, *b]:
        key = str(e.get("id") or json.dumps(e, sort_keys=True, default=str))
        seen.setdefault(key, e)
    events = sorted(seen.values(), key=lambda e: e.get("at_ms") or 0)
    return events[-HISTORY_LIMIT:]


def _pause() -> None:
    if _RMW_PAUSE_S > 0:
        time.sleep(_RMW_PAUSE_S)


# --------------------------------------------------------------------------------------------------
# helpers: storage
# --------------------------------------------------------------------------------------------------


def _read_bytes(location: str, options: dict[str, Any] | None = None) -> bytes | None:
    return read_bytes(open_location(location, options, what="lifecycle record"), limit=JSON_MAX_BYTES)


def _load_versioned(location: str, options: dict[str, Any] | None = None) -> tuple[LifecycleRecord | None, str | None]:
    """The stored record and its version for :func:`_write_checked` (S3: the ETag; else None)."""
    raw, version = read_versioned(open_location(location, options, what="lifecycle record"), limit=JSON_MAX_BYTES)
    return (None if raw is None else LifecycleRecord.from_json(raw, location=location)), version


def _record_lock(location: str, timeout: float, options: dict[str, Any] | None = None) -> LockFile:
    """``<record>.lock``: held for milliseconds, so one older than a minute was left by a crash."""
    return LockFile(
        open_location(location + LOCK_SUFFIX, options, what="lifecycle record lock"),
        what="lifecycle record",
        timeout=timeout,
        stale_after_s=60.0,
    )


def _write_checked(location: str, data: bytes, version: str | None, options: dict[str, Any] | None = None) -> None:
    """Readers see the old record or the new one, never a torn write; on S3 only if the record is
    still the ``version`` read under the lock (compare-and-swap), else a one-line WriteConflict."""
    write_if_unchanged(open_location(location, options, what="lifecycle record"), data, version)
