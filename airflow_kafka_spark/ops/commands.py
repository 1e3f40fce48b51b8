"""The entry points of every operation on a checkpoint location: lock → recover → run.

The CLI and the Airflow operators call these and nothing else of ``ops`` that changes files
(alembic's ``command.py`` is the model: one facade over the operations). Each takes the lock its
operation needs, finishes (or refuses) an interrupted reset/restore first, then runs the
operation's own module. Reset and restore call ``backup.take.take_backup`` directly for their
pre-operation backup: they already hold the operation lock and have recovered.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import validate_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import job_location, open_backup_root, store_path
from airflow_kafka_spark.ops.backup.manifest import LOCK_NAME
from airflow_kafka_spark.ops.backup.prune import PruneResult, check_retention, prune_job
from airflow_kafka_spark.ops.backup.take import BackupRequest, BackupResult, take_backup
from airflow_kafka_spark.ops.guards import operation_lock, refuse_if_interrupted
from airflow_kafka_spark.ops.options import (
    DEFAULT_RUN,
    NO_RETENTION,
    NO_SINK,
    Progress,
    Retention,
    RunOptions,
    SinkFacts,
    Stores,
    with_legacy,
)
from airflow_kafka_spark.ops.recover import finish_interrupted

if TYPE_CHECKING:   # reset and restore ask Kafka: imported when run, so a backup or prune starts without a Kafka client
    from airflow_kafka_spark.ops.reset import ResetResult
    from airflow_kafka_spark.ops.reset_plan import ResetRequest
    from airflow_kafka_spark.ops.restore import RestoreResult

__all__ = ["BackupRequest", "Progress", "Retention", "RunOptions", "SinkFacts", "Stores", "backup_as_requested",
           "backup_checkpoint", "prune_backups", "reset_checkpoint", "restore_checkpoint"]


def backup_checkpoint(checkpoint_location: str, backup_root: str, *, job: str | None = None,
                      reason: str = "manual", force: bool = False, settle_s: float = 2.0, now_ms: int | None = None,
                      retention: Retention = NO_RETENTION, run: RunOptions = DEFAULT_RUN,
                      **legacy: Any) -> BackupResult:
    """Copy the last committed version of a stopped query's checkpoint to ``backup_root`` (``backup.take``).

    Refuses (exit 3) while an interrupted reset/restore is recorded beside the checkpoint: the
    folder may be half moved. ``settle_s`` is the least time between the listing before the copy
    and the one after it; ``retention`` prunes after a successful backup. Raises
    :class:`OperationBlocked` (exit 3) for a running query without ``force``, :class:`UserError`
    (exit 2) for bad input; in both cases nothing is published. ``run.seal_key`` (default:
    ``$AKS_SEAL_KEY_FILE``'s) adds the keyed seal. ``run.progress`` hears each step (the CLI shows
    the steps of a run that takes more than a second).
    """
    run = with_legacy(run, legacy, where="backup_checkpoint")
    return backup_as_requested(checkpoint_location, backup_root,
                               BackupRequest(job=job, reason=reason, force=force, now_ms=now_ms),
                               retention=retention, run=replace(run, backup_settle_s=settle_s))


def backup_as_requested(checkpoint_location: str, backup_root: str, request: BackupRequest, *,
                        retention: Retention = NO_RETENTION, run: RunOptions = DEFAULT_RUN) -> BackupResult:
    """:func:`backup_checkpoint` for a caller that composes the :class:`BackupRequest` itself: the safe
    restart's stop task, which hands the backup its pre-copy in memory (``BackupRequest.precopy``)."""
    ck = open_location(checkpoint_location, run.stores.checkpoint, what="checkpoint location")
    refuse_if_interrupted(ck)
    if run.progress:
        run.progress("copying and hashing the checkpoint's files, then verifying the backup")
    return take_backup(ck, open_backup_root(backup_root, run.stores.backup), request, retention=retention, run=run)


def prune_backups(backup_root: str, job: str, retention: Retention, *, now_ms: int | None = None,
                  dry_run: bool = False, grace_s: float | None = None, storage_options: dict | None = None,
                  seal_key: bytes | None = None) -> PruneResult:
    """Apply ``retention`` to ``job``'s backups, then collect blobs no remaining backup references.

    A backup goes when it is beyond the newest ``retention.keep_last`` or older than
    ``retention.max_age_s`` (either rule, when both are given), unless it is in ``retention.keep_ids``;
    the newest intact backup always stays. Blobs, staged manifests and temp files of killed backups
    are deleted only when unreferenced and older than ``grace_s`` (default 0 on local disks, where
    the job lock is exclusive; an hour on object stores, where it is best effort).
    """
    validate_job_name(job)
    check_retention(retention.keep_last, retention.max_age_s)
    job_loc = job_location(open_backup_root(backup_root, storage_options), job)
    if grace_s is None:
        grace_s = 0.0 if job_loc.local else 3600.0
    with LockFile(store_path(job_loc, LOCK_NAME), what=f"backups of job {job}"):
        return prune_job(job_loc, job, keep_last=retention.keep_last, max_age_s=retention.max_age_s, now_ms=now_ms,
                         dry_run=dry_run, grace_s=grace_s, seal_key=seal.resolve_key(seal_key),
                         keep_ids=retention.keep_ids)


def reset_checkpoint(checkpoint_location: str, backup_root: str | None, kafka_config: dict, request: ResetRequest,
                     *, job: str | None = None, dry_run: bool = False, actor: str | None = None,
                     run: RunOptions = DEFAULT_RUN, **legacy: Any) -> ResetResult:
    """Plan and (unless ``dry_run``) execute a reset (``ops.reset``).

    Raises :class:`OperationBlocked` (exit 3) when the plan blocks, the job is running, or the
    checkpoint moved while planning; :class:`UserError` (exit 2) for bad input. Either way nothing
    was changed. An interrupted earlier reset/restore of this location is finished first (a dry
    run shows it as a BLOCK instead).
    """
    from airflow_kafka_spark.ops import reset

    run = with_legacy(run, legacy, where="reset_checkpoint")
    ck = open_location(checkpoint_location, run.stores.checkpoint, what="checkpoint location")   # the one parse
    kw = dict(job=job, actor=actor, run=run)
    if dry_run:
        return reset.run_reset(ck, backup_root, kafka_config, request, dry_run=True, **kw)
    # Not queued (timeout 0), like restore: a second reset started together must not run on the
    # location the first one just emptied; it is told who holds the location.
    with operation_lock(ck, timeout=0.0, what=f"checkpoint {ck.url} (another reset or restore)"):
        resumed = finish_interrupted(ck, storage_options=run.stores.checkpoint)
        if resumed is not None:
            return reset.resumed_result(resumed, request)
        return reset.run_reset(ck, backup_root, kafka_config, request, dry_run=False, **kw)


def restore_checkpoint(checkpoint_location: str, backup_root: str, backup_id: str, kafka_config: dict, *,
                       job: str | None = None, dry_run: bool = False, actor: str | None = None,
                       sink: SinkFacts = NO_SINK, run: RunOptions = DEFAULT_RUN, **legacy: Any) -> RestoreResult:
    """Roll ``checkpoint_location`` back to backup ``backup_id`` (``ops.restore``, which explains the order).

    ``sink.output`` lets a file sink's ``_spark_metadata`` be compared with the backup (S19).
    Raises :class:`OperationBlocked` (exit 3) when the verdict blocks, :class:`UserError` (exit 2)
    for bad input (unknown or tampered backup, wrong job, another operation holding the location);
    in both cases nothing was changed.
    """
    from airflow_kafka_spark.ops import restore

    run = with_legacy(run, legacy, where="restore_checkpoint")
    storage_options = run.stores.checkpoint
    t = restore.open_restore(checkpoint_location, backup_root, backup_id, job=job, run=run)
    if dry_run:
        return restore.run_restore(t, kafka_config, dry_run=True, sink=sink, actor=actor, run=run)
    # Not queued behind another restore/reset (timeout 0): two restores started together must not
    # both run one after the other; the second is told who holds the location.
    with operation_lock(t.ck, timeout=0.0, what=f"checkpoint {t.ck.url} (another restore or reset)"):
        done = finish_interrupted(t.ck, storage_options=storage_options)
        if done is not None and done.get("op") == "restore" and done["payload"].get("backup_id") == backup_id:
            return restore.resumed_result(done, t.manifest)
        record = LifecycleRecord.load(checkpoint_location) if done is not None else t.record
        already = restore.already_restored(t.ck, t.manifest, record)
        if already is not None:
            return already
        return restore.run_restore(replace(t, record=record), kafka_config, dry_run=False, sink=sink, actor=actor,
                                   run=run)
