"""The safe-restart steps of a Structured Streaming job (registry ``kind: structured``, the default).

Its position is its checkpoint's offset and commit logs, so each step is a thin shell over the core
(:mod:`~airflow_kafka_spark.verdict.validate`, :mod:`~airflow_kafka_spark.ops.backup`,
:mod:`~airflow_kafka_spark.ops.restore`, :mod:`~airflow_kafka_spark.ops.reset`): the core decides,
checks and writes the lifecycle record; this module resolves the Kafka config from the job's
``kafka`` connection and turns results into XCom (plain JSON, no secret: the core's ``to_dict()``
output never holds the Kafka config) and failures into one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue.jobs import actor, fail, kafka_config, optional_text
from airflow_kafka_spark.airflow_glue.kinds.base import BackupStep, GateStep, ResetStep, RestoreStep, ValidateStep
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import to_offsets_json
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import validate_backup_id
from airflow_kafka_spark.ops.options import NO_RETENTION, Retention, RunOptions, SinkFacts
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import safe_restart
from airflow_kafka_spark.runtime.app_versions import last_good_app
from airflow_kafka_spark.verdict.findings import BLOCK


def position(spec: JobSpec) -> dict[str, Any]:
    """Where the job's checkpoint stands: query id, last committed batch and its end offsets."""
    return position_of(read_checkpoint(spec.checkpoint))


def position_of(state: CheckpointState) -> dict[str, Any]:
    """``position`` of a checkpoint already read (a step that read it once does not read it again)."""
    pos = resume_position(state)
    batch = pos.committed_batch if pos is not None else None
    return {"exists": state.exists, "query_id": state.query_id,
            "last_committed_batch": batch,
            "last_planned_batch": state.latest_planned.batch_id if state.latest_planned else None,
            "offsets": to_offsets_json(pos.committed) if pos is not None and batch is not None else None}


class StructuredSteps:
    """The steps on a Spark checkpoint (see the module docstring)."""

    plans_offsets = True
    precopies_backup = True
    commits_to_checkpoint = True

    def validate(self, spec: JobSpec, context: Any, step: ValidateStep, log: Any) -> dict[str, Any]:
        from airflow_kafka_spark.verdict.options import DeployOptions
        from airflow_kafka_spark.verdict.validate import validate

        record = LifecycleRecord.load(spec.checkpoint)
        state = read_checkpoint(spec.checkpoint)
        expect_new = step.expect_new_checkpoint
        if expect_new is None:
            expect_new = not state.exists and last_good_app(record) is None
        options = dataclasses.replace(DeployOptions.for_job(spec, new_query=not state.exists,
                                                            expect_new_checkpoint=expect_new), owner=step.owner)
        verdict = validate(checkpoint_location=spec.checkpoint, kafka_config=kafka_config(spec), options=options,
                           timeout=step.kafka_timeout_s, record_identity=not step.dry_run, job_name=spec.name)
        # the state read above: validating reads the checkpoint and writes only the record beside it
        result = {"job": spec.name, **verdict.to_dict(), "position": position_of(state),
                  "expect_new_checkpoint": expect_new, "overridden": False, "dry_run": step.dry_run}
        log.info("%s: %s", spec.name, verdict.headline)
        for f in verdict.findings:
            if f.severity != "PASS":
                log.info("  %-5s %-28s %-14s %s", f.severity, f.code, f.where, f.message)
        if verdict.severity == BLOCK:
            codes = sorted({f.code for f in verdict.worst})
            if not step.override:
                context["ti"].xcom_push(key="verdict", value=result)
                fail(context, f"job {spec.name}: {verdict.headline}" + (f"; fix: {verdict.fix}" if verdict.fix else ""))
            result["overridden"] = True
            log.warning("BLOCK verdict overridden (%s): %s", ", ".join(codes), step.reason or "no reason given")
            if not step.dry_run:
                rec = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
                rec.add_event(LifecycleEvent.VERDICT_OVERRIDDEN, actor=actor(context), codes=codes,
                              headline=verdict.headline, reason=step.reason)
                rec.save()
        return result

    def backup(self, spec: JobSpec, context: Any, step: BackupStep, log: Any) -> dict[str, Any]:
        from airflow_kafka_spark.ops.commands import BackupRequest, backup_as_requested

        # Only a step that may find no batches reads the logs first: the backup reads them itself, and this read is
        # 11 small reads (0.2 s on HDFS) inside a safe restart's window when the stop already saw a commit.
        state = read_checkpoint(spec.checkpoint) if step.missing_ok else None
        if state is not None and not (state.offset_batch_ids or state.commit_batch_ids):
            log.info("job %s has no checkpoint batches at %s: nothing to back up", spec.name, spec.checkpoint)
            return {"job": spec.name, "backup_id": None, "skipped": "no checkpoint yet"}
        if step.dry_run:
            return {"job": spec.name, "backup_id": None, "dry_run": True,
                    "would_back_up": spec.checkpoint, "to": spec.backup_root, "position": position(spec)}
        kept = spec.backup_retention
        retention = Retention(keep_last=kept.keep_last, max_age_s=kept.max_age_s,
                              keep_ids=[step.keep_backup_id] if step.keep_backup_id else []) \
            if step.prune else NO_RETENTION
        result = backup_as_requested(spec.checkpoint, spec.backup_root,
                                     BackupRequest(job=spec.name, reason=step.reason or f"backup by {actor(context)}",
                                                   precopy=step.precopy),
                                     retention=retention, run=RunOptions(seal_key=step.seal_key))
        log.info("job %s: backup %s of batch %s (%d files, %d new blobs, %.1fs)", spec.name, result.backup_id,
                 result.manifest.last_committed_batch, result.files, result.blobs_written, result.seconds)
        return {"job": spec.name, "backup_id": result.backup_id, **result.to_dict()}

    def restore(self, spec: JobSpec, context: Any, step: RestoreStep, log: Any) -> dict[str, Any]:
        from airflow_kafka_spark.ops.commands import restore_checkpoint

        validate_backup_id(step.backup_id)
        result = restore_checkpoint(spec.checkpoint, spec.backup_root, step.backup_id, kafka_config(spec),
                                    job=spec.name, dry_run=step.dry_run, actor=actor(context),
                                    sink=SinkFacts(idempotent=spec.replay_is_idempotent, output=spec.sink_output),
                                    run=RunOptions(seal_key=step.seal_key))
        log.info("job %s: %s", spec.name, result.plan.headline)
        log.info("%s", result.plan.render())
        return {"job": spec.name, **result.to_dict()}

    def reset(self, spec: JobSpec, context: Any, step: ResetStep, log: Any) -> dict[str, Any]:
        from airflow_kafka_spark.kafka.offsets import parse_offsets_json
        from airflow_kafka_spark.ops.commands import reset_checkpoint
        from airflow_kafka_spark.ops.modes import ResetMode
        from airflow_kafka_spark.ops.reset_plan import ResetRequest, parse_datetime

        if step.mode is None:
            raise AirflowSkipException("no reset in this run")
        if step.mode not in tuple(ResetMode):
            raise UserError(f"reset mode {step.mode!r} is not one of {', '.join(ResetMode)}")
        try:
            shift_by = int(step.shift_by) if step.shift_by is not None else None
        except ValueError:
            raise UserError(f"shift_by must be a whole number of records, got {step.shift_by!r}") from None
        request = ResetRequest(
            mode=step.mode, to_datetime_ms=parse_datetime(step.to_datetime) if step.to_datetime else None,
            shift_by=shift_by,
            to_offsets=parse_offsets_json(step.to_offsets, what="to_offsets") if step.to_offsets else None,
            topics=spec.topics, sink_output=spec.sink_output, sink_log=step.sink_log,
            accept_data_loss=step.accept_data_loss, batch_keyed_sink=spec.sink.keyed_by_batch_id,
            fresh_backup=step.fresh_backup)
        if not step.dry_run and int(getattr(context["ti"], "try_number", 1) or 1) > 1:
            # a retry of a reset that finished before its task reported it
            from airflow_kafka_spark.ops.reset import finished_by

            earlier = finished_by(spec.checkpoint, actor(context), request)
            if earlier is not None:
                log.warning("job %s: %s", spec.name, earlier.notes[0])
                return {"job": spec.name, **earlier.to_dict()}
        bound = step.max_records_skipped
        if bound is not None and not step.dry_run:   # the job is stopped now: the plan is what the reset does
            again = reset_checkpoint(spec.checkpoint, spec.backup_root, kafka_config(spec), request, job=spec.name,
                                     dry_run=True).plan
            if again.skipped > int(bound):
                fail(context, f"job {spec.name}: the reset would now skip {again.skipped:,} records, more than the "
                              f"{int(bound):,} approved; nothing was changed: trigger the restart again to see and "
                              "approve the new plan")
        result = reset_checkpoint(spec.checkpoint, spec.backup_root, kafka_config(spec), request, job=spec.name,
                                  dry_run=step.dry_run, actor=actor(context), run=RunOptions(seal_key=step.seal_key))
        log.info("job %s: %s", spec.name, result.plan.headline)
        if result.backup_note:
            log.info("job %s: backup %s: %s", spec.name, result.backup_id, result.backup_note)
        log.info("%s", result.plan.render())
        return {"job": spec.name, **result.to_dict()}

    def rollback(self, spec: JobSpec, context: Any, backup_task: Mapping[str, Any], log: Any) -> dict[str, Any]:
        from airflow_kafka_spark.ops.backup.catalog import load_backup
        from airflow_kafka_spark.ops.commands import restore_checkpoint

        backup_id = optional_text(backup_task.get("backup_id"))
        if backup_id is None:
            return {"restored_backup_id": None, "notes": [
                "no backup was taken in this run: nothing to restore"]}
        manifest = load_backup(spec.backup_root, spec.name, backup_id)
        record = LifecycleRecord.load(spec.checkpoint)
        unchanged = safe_restart.unchanged_since_backup(
            position(spec), query_id=manifest.query_id, last_committed_batch=manifest.last_committed_batch,
            pending_batch=manifest.pending_batch, next_starting_offsets=bool(record and record.next_starting_offsets))
        if unchanged:
            return {"restored_backup_id": None,
                    "notes": [f"checkpoint unchanged since backup {backup_id}: not restored"]}
        res = restore_checkpoint(spec.checkpoint, spec.backup_root, backup_id, kafka_config(spec), job=spec.name,
                                 actor=actor(context),
                                 sink=SinkFacts(idempotent=spec.replay_is_idempotent, output=spec.sink_output))
        return {"restored_backup_id": backup_id, "notes": [],
                "restore": {"records_to_replay": res.records_to_replay,
                            "pre_restore_backup_id": res.pre_restore_backup_id,
                            "aside_location": res.aside_location}}

    def prune(self, spec: JobSpec, backup_task: Mapping[str, Any], seal_key: bytes | None, log: Any) -> list[str]:
        from airflow_kafka_spark.ops.commands import prune_backups

        kept = spec.backup_retention
        taken = backup_task.get("backup_id")
        if not taken:   # no backup in this run (no checkpoint yet): nothing new to prune against
            return []
        try:
            result = prune_backups(spec.backup_root, spec.name,
                                   Retention(keep_last=kept.keep_last, max_age_s=kept.max_age_s, keep_ids=[taken]),
                                   seal_key=seal_key)
        except Exception as exc:   # housekeeping: an unreachable store or a refused delete never fails the run
            log.warning("job %s: backups not pruned: %s", spec.name, exc)
            return []
        removed = [m.backup_id for m in result.removed]
        if removed:
            log.info("job %s: backup_retention (keep_last %s, max_age_s %s) removed backups %s", spec.name,
                     kept.keep_last, kept.max_age_s, ", ".join(removed))
        return removed

    def worker_gate(self, spec: JobSpec, context: Any, step: GateStep, log: Any) -> None:
        return None   # the sensor's checkpoint gate, deferrable to the triggerer


STEPS = StructuredSteps()
