"""Restore (roll back) a checkpoint from a published backup — judged against Kafka *before* anything moves.

Order of work, and why:

1. The manifest's seal is checked (a tampered manifest is a one-line error) and every file of the
   backup is copied into ``<checkpoint>.staging-<id>`` beside the checkpoint, each checked against
   its sha256 while it is copied. Nothing of the user's has changed yet.
2. The pre-deploy verdict (``ops.restore_plan``, via ``verdict.evaluate``) runs on that staged copy,
   against the cluster as it is now and the job's lifecycle record, plus what only a rollback has:
   how many records the restored query reads again (per partition, current position minus the
   backup's), and whether a file sink already holds batch ids the restored query would re-run
   (``SINK_AHEAD_OF_CHECKPOINT``, S19). A BLOCK — retention already deleted the backup's offsets
   (``OFFSET_BELOW_LOG_START`` with the count), another cluster, a live lease — deletes the staging
   copy and refuses: **a blocked restore changes nothing**. ``dry_run`` stops here too — and a
   dry run stages into ``memory://`` (state file bodies hash-checked, not kept), so it writes
   nothing anywhere: no staging folder, no lock file.
3. Only then: the current checkpoint is backed up (``reason: before restore``), the journal is
   written (commit point), the current checkpoint is moved to ``<checkpoint>.restore-<id>``
   (kept), the staged copy is renamed into place, and the lifecycle record gets an audit event.
   A stale ``next_starting_offsets`` (from an earlier reset) is cleared: a checkpoint with batches
   ignores startingOffsets, and leaving it would mislead the next validation.

Only one restore or reset runs per location (``<checkpoint>.operation.lock``, taken by
``ops.commands.restore_checkpoint``; a second one is refused at once, never queued), and
re-running a restore whose backup is already in place (the lifecycle record's last restore names
it and the checkpoint holds exactly its files) is a no-op that says so. The staged copy is checked
against the manifest just before the commit point, and roll-forward refuses to record a restore
whose staged copy vanished.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import (
    Location,
    exists,
    list_files,
    open_location,
    siblings_with_prefix,
)
from airflow_kafka_spark._util.trees import move_dir, remove_tree
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.journal import Journal, Operation, is_operation_id, new_operation_id
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import load_backup, open_backup_root
from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.ops.backup.source import job_of
from airflow_kafka_spark.ops.backup.store import materialize
from airflow_kafka_spark.ops.backup.take import BackupRequest, take_backup
from airflow_kafka_spark.ops.guards import check_locations, journal_path, running_reason
from airflow_kafka_spark.ops.options import DEFAULT_RUN, NO_SINK, RunOptions, SinkFacts
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.ops.restore_plan import RestoreTarget, judge_restore
from airflow_kafka_spark.verdict.findings import Verdict
from airflow_kafka_spark.verdict.interrupted import interrupted_finding


@dataclass
class RestoreResult:
    plan: Plan
    verdict: Verdict
    backup: Manifest
    dry_run: bool
    restored: bool = False
    operation_id: str | None = None
    pre_restore_backup_id: str | None = None
    aside_location: str | None = None
    resumed: bool = False
    already_restored: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def records_to_replay(self) -> int:
        return self.plan.replayed + self.plan.pending_replay

    def to_dict(self) -> dict[str, Any]:
        return {"backup_id": self.backup.backup_id, "dry_run": self.dry_run, "restored": self.restored,
                "operation_id": self.operation_id, "pre_restore_backup_id": self.pre_restore_backup_id,
                "aside_location": self.aside_location, "records_to_replay": self.records_to_replay,
                "resumed": self.resumed, "already_restored": self.already_restored, "notes": self.notes,
                "backup": self.backup.summary(),
                "plan": self.plan.to_dict(), "verdict": self.verdict.to_dict()}


def restore_job_name(checkpoint_location: str, job: str | None, storage_options: dict | None = None) -> str:
    """:func:`job_of` with the lifecycle record read from beside ``checkpoint_location``."""
    if job is not None:
        return job_of(checkpoint_location, job, None)
    return job_of(checkpoint_location, None, LifecycleRecord.load(checkpoint_location, storage_options=storage_options))


def open_restore(checkpoint_location: str, backup_root: str, backup_id: str, *, job: str | None,
                 run: RunOptions = DEFAULT_RUN) -> RestoreTarget:
    """Check everything a restore needs before it takes the lock; changes nothing.

    The one place a restore parses its URLs (with ``run.stores``' options). ``job`` defaults to the
    lifecycle record's job name, else the folder's (:func:`job_of`; a backup of another job is
    refused). Raises :class:`OperationBlocked` (exit 3) while the job runs, :class:`UserError` (exit 2)
    for bad input (unknown or tampered backup, wrong job). ``run.seal_key`` (default:
    ``$AKS_SEAL_KEY_FILE``'s) requires the keyed seal on the manifest.
    """
    storage_options, backup_storage_options = run.stores.checkpoint, run.stores.backup
    seal_key = seal.resolve_key(run.seal_key)
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    root = open_backup_root(backup_root, backup_storage_options)
    check_locations(ck, root)
    record = LifecycleRecord.load(checkpoint_location, storage_options=storage_options)
    job = job_of(checkpoint_location, job, record)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r}, not {job!r}: restore "
                        f"it from {record.job_name}'s backups")
    manifest = load_backup(backup_root, job, backup_id, storage_options=backup_storage_options, seal_key=seal_key)
    running = running_reason(record)
    if running:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before restoring its "
                               "checkpoint", code="QUERY_RUNNING")
    return RestoreTarget(ck=ck, root=root, manifest=manifest, record=record, job=job, seal_key=seal_key)


def run_restore(target: RestoreTarget, kafka_config: dict, *, dry_run: bool, sink: SinkFacts = NO_SINK,
                actor: str | None = None, run: RunOptions = DEFAULT_RUN) -> RestoreResult:
    """Stage ``target``'s backup, judge it, and unless ``dry_run`` or blocked put it in place (the module doc
    has the order). ``ops.commands.restore_checkpoint`` opened ``target``, holds the lock and has recovered."""
    step = run.progress or (lambda _text: None)
    ck, manifest, storage_options = target.ck, target.manifest, run.stores.checkpoint
    if not dry_run:
        remove_stale_staging(ck)   # leftovers of restores killed before their commit point
    op_id = new_operation_id()
    staging, scratch, staged_options = _staging_for(ck, op_id, dry_run, storage_options)
    try:
        step(f"staging backup {manifest.backup_id} ({len(manifest.files):,} files, each checked against its sha256)")
        materialize(manifest, target.root.url, staging, storage_options=run.stores.backup,
                    hash_only=(lambda p: p.startswith("state/")) if dry_run else None)
        current = read_checkpoint(ck)
        staged = read_checkpoint(staging.url, storage_options=staged_options)
        step("judging the staged copy against Kafka")
        plan, verdict = judge_restore(target, current, staged, kafka_config, sink=sink, run=run)
    except BaseException:
        remove_tree(scratch)
        raise
    aside = ck.sibling(f".restore-{op_id}") if current.exists else None
    plan.actions = _actions(target, current, aside)
    result = RestoreResult(plan=plan, verdict=verdict, backup=manifest, dry_run=dry_run, operation_id=op_id,
                           aside_location=aside.url if aside else None)
    if dry_run:
        interrupted = interrupted_finding(ck.url, storage_options)
        if interrupted is not None:   # the real run would finish (or refuse) that operation first
            plan.add(interrupted.code, interrupted.severity, interrupted.message, interrupted.fix)
    if dry_run or plan.blocked:
        remove_tree(scratch)
        if dry_run:
            return result
        worst = plan.blocking[0]
        raise OperationBlocked(f"restore of {manifest.backup_id} refused, nothing was changed: {worst.code} — "
                               f"{worst.message}" + (f"; fix: {worst.fix}" if worst.fix else ""), code=worst.code,
                               details=result.to_dict())
    journal = _commit(target, current, staging, result, actor, run)
    faults.crash_point("restore.journaled")
    step("moving the current checkpoint aside and the backup into place")
    roll_forward(journal, ck, storage_options=storage_options)
    result.restored = True
    return result


def _staging_for(ck: Location, op_id: str, dry_run: bool,
                 storage_options: dict | None) -> tuple[Location, Location, dict | None]:
    """Where the backup is staged, what to remove when the restore stops before its commit point, and the
    staged copy's store options: ``<checkpoint>.staging-<op id>``, or for a dry run a ``memory://`` scratch
    (judged in memory: a dry run writes nothing anywhere; state bodies are hash-checked only)."""
    if dry_run:
        scratch = open_location(f"memory://aks-dry-run-{uuid.uuid4().hex}")
        return scratch.child("checkpoint"), scratch, None
    staging = ck.sibling(f".staging-{op_id}")
    return staging, staging, storage_options


def _actions(target: RestoreTarget, current: CheckpointState, aside: Location | None) -> list[str]:
    """The plan's steps as the user reads them, in the order :func:`run_restore` takes them."""
    checkpoint_location, backup_id = target.ck.url, target.manifest.backup_id
    actions = [f"back up the current checkpoint {checkpoint_location} to {target.root.url}" if current.exists
               else f"(no current checkpoint at {checkpoint_location})",
               f"move {checkpoint_location} to {aside.url} (kept)" if aside else "",
               f"put backup {backup_id} (batch {target.manifest.last_committed_batch}) in place",
               "record the restore in the lifecycle record"]
    return [a for a in actions if a]


def _commit(target: RestoreTarget, current: CheckpointState, staging: Location, result: RestoreResult,
            actor: str | None, run: RunOptions) -> Journal:
    """Back up the current checkpoint, check that it did not move and that the staged copy is intact, and
    write the journal: the commit point. The staged copy is removed when any of it fails."""
    ck, manifest, op_id = target.ck, target.manifest, str(result.operation_id)
    checkpoint_location, backup_id = ck.url, manifest.backup_id
    try:
        if current.exists and (current.offset_batch_ids or current.commit_batch_ids):
            (run.progress or (lambda _text: None))("backing up the current checkpoint")
            # The operation's stores, settle time and seal key; the Spark version only the record gives.
            pre = take_backup(ck, target.root, BackupRequest(job=target.job,
                                                             reason=f"before restore of {backup_id} ({op_id})"),
                              run=replace(run, seal_key=target.seal_key, spark_version=None))
            result.pre_restore_backup_id = pre.backup_id
        faults.crash_point("restore.backed_up")
        again = read_checkpoint(ck)
        if (again.offset_batch_ids, again.commit_batch_ids) != (current.offset_batch_ids, current.commit_batch_ids):
            raise OperationBlocked(f"checkpoint {checkpoint_location} changed during the restore: is the job running? "
                                   "Stop it and re-run the restore", code="QUERY_RUNNING")
        staged_print = fingerprint(staging)
        if staged_print != manifest_fingerprint(manifest):
            raise UserError(f"the staged copy of backup {backup_id} at {staging.url} vanished or changed before the "
                            f"restore's commit point; the checkpoint {checkpoint_location} was not changed: re-run "
                            "the restore (and check what deletes folders beside the checkpoint)")
        return Journal.begin(ck, Operation.RESTORE, op_id, {
            "job": target.job, "actor": actor, "backup_root": target.root.url, "backup_id": backup_id,
            "staging": staging.url, "aside": result.aside_location,
            "pre_restore_backup_id": result.pre_restore_backup_id,
            "records_to_replay": result.records_to_replay, "verdict": str(result.verdict.severity),
            "restored_batch": manifest.last_committed_batch, "restored_query_id": manifest.query_id,
            "replaced_query_id": current.query_id, "plan": result.plan.to_dict(), "staged_fingerprint": staged_print})
    except BaseException:
        remove_tree(staging)
        raise


def roll_forward(journal: Journal, ck: Location, *, storage_options: dict | None = None) -> dict[str, Any]:
    """Finish a journaled restore (idempotent steps: the crash recovery path too).

    The journal is input too: its staging and aside paths must be exactly the ones this module
    derives from the checkpoint and the operation id, or nothing is moved. A staged copy that is
    gone (and not already in place) ends the operation without recording a restore: the original
    checkpoint is put back where it was and the command fails with one line.
    """
    pl = journal.payload
    op_id = journal.operation_id
    staging = journal_path(journal, "staging", ck.sibling(f".staging-{op_id}"), storage_options)
    aside = None
    if pl.get("aside"):
        aside = journal_path(journal, "aside", ck.sibling(f".restore-{op_id}"), storage_options)
    if not journal.is_done("in_place") and not exists(staging):
        expected = pl.get("staged_fingerprint")
        if not exists(ck):
            in_place = False
        elif expected:
            in_place = fingerprint(ck) == expected
        else:   # a journal of an older version: the copy is in place if the original was moved aside
            in_place = aside is not None and exists(aside)
        if not in_place:
            if aside is not None and exists(aside) and not exists(ck):
                move_dir(aside, ck)
            journal.finish()
            where = ck.url if exists(ck) else (aside.url if aside is not None else ck.url)
            raise UserError(f"restore {journal.operation_id} of backup {pl.get('backup_id')} cannot finish: its "
                            f"staged copy {staging.url} is gone; nothing was restored or recorded, the original "
                            f"checkpoint is at {where} — re-run the restore")
    if aside is not None and not journal.is_done("aside"):
        if exists(ck) and exists(staging):
            move_dir(ck, aside)
        journal.mark("aside")
        faults.crash_point("restore.moved_aside")
    if not journal.is_done("in_place"):
        if exists(staging):
            if exists(ck):
                raise UserError(f"both {ck.url} and the staged backup {staging.url} exist after an interrupted "
                                "restore: something wrote to the checkpoint location meanwhile; inspect them")
            move_dir(staging, ck)
        journal.mark("in_place")
        faults.crash_point("restore.in_place")
    if not journal.is_done("record"):
        record = LifecycleRecord.load(ck.url, storage_options=storage_options) \
            or LifecycleRecord.create(pl["job"], ck.url, storage_options=storage_options)
        if not any((e.get("details") or {}).get("operation_id") == journal.operation_id for e in record.history):
            stale = record.next_starting_offsets
            record.next_starting_offsets = None
            record.add_event(LifecycleEvent.CHECKPOINT_RESTORED, actor=pl.get("actor"),
                             operation_id=journal.operation_id,
                             backup_id=pl["backup_id"], backup_root=pl["backup_root"],
                             restored_batch=pl.get("restored_batch"), restored_query_id=pl.get("restored_query_id"),
                             replaced_query_id=pl.get("replaced_query_id"), moved_to=pl.get("aside"),
                             pre_restore_backup_id=pl.get("pre_restore_backup_id"),
                             records_to_replay=pl.get("records_to_replay"), verdict=pl.get("verdict"),
                             cleared_next_starting_offsets=stale)
            record.save()
        journal.mark("record")
    journal.finish()
    return {"op": "restore", "operation_id": journal.operation_id, "payload": pl}


def fingerprint(loc: Location) -> str:
    """sha256 over the sorted (path, size) of every file below ``loc``: "is this that copy?"."""
    rows = sorted((rel, int(info.get("size") or 0)) for rel, info in list_files(loc).items())
    return hashlib.sha256("".join(f"{r}\0{n}\n" for r, n in rows).encode()).hexdigest()


def manifest_fingerprint(manifest: Manifest) -> str:
    """:func:`fingerprint` of a faithful copy of ``manifest``'s files."""
    rows = sorted((f.path, f.size) for f in manifest.files)
    return hashlib.sha256("".join(f"{r}\0{n}\n" for r, n in rows).encode()).hexdigest()


def remove_stale_staging(ck: Location) -> int:
    """Delete ``<checkpoint>.staging-<op id>`` folders of restores killed before their commit point.

    Names are listed and compared exactly (no glob: a checkpoint named ``job[12]`` must never
    match its neighbour ``job1``'s folders), and only names that end in an operation id count.
    """
    removed = 0
    for loc in siblings_with_prefix(ck, ".staging-"):
        op_id = loc.path.rstrip("/").rsplit(".staging-", 1)[-1]
        if is_operation_id(op_id) and loc.path == ck.sibling(f".staging-{op_id}").path:
            remove_tree(loc)
            removed += 1
    return removed


def already_restored(ck: Location, manifest: Manifest, record: LifecycleRecord | None) -> RestoreResult | None:
    """A no-op result when ``manifest`` is in place already: the record's last restore names it and
    the checkpoint holds exactly its files (a run since then adds files, and restoring again is real)."""
    if record is None:
        return None
    last = record.last_event(LifecycleEvent.CHECKPOINT_RESTORED)
    details = (last or {}).get("details") or {}
    if details.get("backup_id") != manifest.backup_id or not exists(ck):
        return None
    if fingerprint(ck) != manifest_fingerprint(manifest):
        return None
    op = details.get("operation_id")
    return RestoreResult(plan=Plan(kind="restore", subject=ck.url), verdict=Verdict.of([]), backup=manifest,
                         dry_run=False, restored=False, operation_id=op, already_restored=True,
                         aside_location=details.get("moved_to"),
                         pre_restore_backup_id=details.get("pre_restore_backup_id"),
                         notes=[f"backup {manifest.backup_id} is already in place (restore {op}); nothing was done"])


def resumed_result(done: dict[str, Any], manifest: Manifest) -> RestoreResult:
    pl = done["payload"]
    plan = Plan(kind="restore", subject=done["payload"].get("staging", ""))
    doc = pl.get("plan") or {}
    for m in doc.get("moves", []):
        plan.moves.append(PartitionMove(topic=m["topic"], partition=m["partition"], old=m["old"], new=m["new"],
                                        log_start=m["log_start"], log_end=m["log_end"], pending_end=m["pending_end"],
                                        source=m.get("source", ""), note=m.get("note", "")))
    return RestoreResult(plan=plan, verdict=Verdict.of([]), backup=manifest, dry_run=False, restored=True,
                         operation_id=done["operation_id"], pre_restore_backup_id=pl.get("pre_restore_backup_id"),
                         aside_location=pl.get("aside"), resumed=True,
                         notes=[f"resumed interrupted restore {done['operation_id']} and finished it"])


# --------------------------------------------------------------------------------------------------
# judging the staged backup
# --------------------------------------------------------------------------------------------------
