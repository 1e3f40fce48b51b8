"""Operators on a job's checkpoint: validate it against Kafka, back it up, restore it, reset it.

Each is a thin shell over the core (:mod:`~airflow_kafka_spark.verdict.validate`,
:mod:`~airflow_kafka_spark.ops.backup`, :mod:`~airflow_kafka_spark.ops.restore`,
:mod:`~airflow_kafka_spark.ops.reset`): the core decides, checks and writes the lifecycle record;
the operator resolves the job from the registry, the Kafka config from the job's ``kafka``
connection, and turns results into XCom (plain JSON, no secret: the core's ``to_dict()`` output
never holds the Kafka config) and failures into one line.

All of them take ``dry_run``: they then report what they would do and change nothing, which is
how the safe-restart DAG shows a plan before anyone commits to it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue import dstream
from airflow_kafka_spark.airflow_glue.jobs import actor, fail, flag, kafka_config, optional_text
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import to_offsets_json
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import validate_backup_id
from airflow_kafka_spark.operators._common import StreamingJobOperator
from airflow_kafka_spark.operators.links import FINDING_LINKS
from airflow_kafka_spark.ops.commands import backup_checkpoint
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.app_versions import last_good_app
from airflow_kafka_spark.verdict.findings import BLOCK
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate


def seal_key_from_connection(conn_id: str | None) -> bytes | None:
    """The keyed-seal key: the password of Generic connection ``conn_id`` (masked in logs), or None.

    None (no connection given) leaves the core's default: ``$AKS_SEAL_KEY_FILE``, else unkeyed.
    """
    conn_id = optional_text(conn_id)
    if conn_id is None:
        return None
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    from airflow_kafka_spark.ops.seal import check_key

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise UserError(f"seal key connection {conn_id!r} is not defined; create a Generic connection whose "
                        "password is the key, or fix seal_key_conn_id") from None
    if not conn.password:
        raise UserError(f"seal key connection {conn_id!r} has no password; put the key in its password field")
    mask_secret(conn.password)
    return check_key(conn.password, source=f"connection {conn_id}")


def position(spec: JobSpec) -> dict[str, Any]:
    """Where the job's checkpoint stands: query id, last committed batch and its end offsets."""
    state = read_checkpoint(spec.checkpoint)
    pos = resume_position(state)
    batch = pos.committed_batch if pos is not None else None
    return {"exists": state.exists, "query_id": state.query_id,
            "last_committed_batch": batch,
            "last_planned_batch": state.latest_planned.batch_id if state.latest_planned else None,
            "offsets": to_offsets_json(pos.committed) if pos is not None and batch is not None else None}


class ValidateCheckpointOperator(StreamingJobOperator):
    """Judge the job's checkpoint against Kafka before a (re)start; push the verdict to XCom.

    Fails the task on a BLOCK verdict unless ``override`` is set; an override is written to the
    lifecycle record's history (who, why, which findings), because starting over a BLOCK means
    accepting data loss or a broken start on purpose.

    :param override: accept a BLOCK (templated; bool or "true"/"false").
    :param expect_new_checkpoint: the deploy starts a new query. Default: only when there is no
        checkpoint yet and no application of this job ever passed a health gate (a first start);
        a job that ran before and lost its checkpoint must not silently start over.
    :param dry_run: read only: the cluster and topic identities seen are not recorded either.
    """

    template_fields = ("job", "reason", "override", "dry_run", "expect_new_checkpoint")
    operator_extra_links = FINDING_LINKS   # the docs of the three worst finding codes

    def __init__(self, *, job: str, override: bool | str = False, dry_run: bool | str = False,
                 expect_new_checkpoint: bool | str | None = None, kafka_timeout_s: float = 10.0,
                 **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.override = override
        self.dry_run = dry_run
        self.expect_new_checkpoint = expect_new_checkpoint
        self.kafka_timeout_s = kafka_timeout_s

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        override = flag(self.override, name="override")
        dry_run = flag(self.dry_run, name="dry_run")
        if spec.is_dstream:
            return dstream.validate_step(spec, context, override=override, dry_run=dry_run, log=self.log)
        config = kafka_config(spec)
        record = LifecycleRecord.load(spec.checkpoint)
        state = read_checkpoint(spec.checkpoint)
        if self.expect_new_checkpoint is None or optional_text(self.expect_new_checkpoint) is None:
            expect_new = not state.exists and last_good_app(record) is None
        else:
            expect_new = flag(self.expect_new_checkpoint, name="expect_new_checkpoint")
        options = DeployOptions.for_job(spec, new_query=not state.exists, expect_new_checkpoint=expect_new)
        verdict = validate(checkpoint_location=spec.checkpoint, kafka_config=config, options=options,
                           timeout=self.kafka_timeout_s, record_identity=not dry_run, job_name=spec.name)
        result = {"job": spec.name, **verdict.to_dict(), "position": position(spec),
                  "expect_new_checkpoint": expect_new, "overridden": False, "dry_run": dry_run}
        self.log.info("%s: %s", spec.name, verdict.headline)
        for f in verdict.findings:
            if f.severity != "PASS":
                self.log.info("  %-5s %-28s %-14s %s", f.severity, f.code, f.where, f.message)
        if verdict.severity == BLOCK:
            codes = sorted({f.code for f in verdict.worst})
            if not override:
                context["ti"].xcom_push(key="verdict", value=result)
                fail(context, f"job {spec.name}: {verdict.headline}" + (f"; fix: {verdict.fix}" if verdict.fix else ""))
            result["overridden"] = True
            self.log.warning("BLOCK verdict overridden (%s): %s", ", ".join(codes), self.reason or "no reason given")
            if not dry_run:
                rec = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
                rec.add_event(LifecycleEvent.VERDICT_OVERRIDDEN, actor=actor(context), codes=codes,
                              headline=verdict.headline, reason=optional_text(self.reason))
                rec.save()
        return result


class BackupCheckpointOperator(StreamingJobOperator):
    """Take a verified backup of the job's (stopped) checkpoint; push its id and summary.

    :param missing_ok: a job without a checkpoint yet (first start) yields ``backup_id: None``
        instead of failing.
    :param seal_key_conn_id: Generic connection whose password keys the manifest seal (HMAC).
    :param keep_backup_id: a backup the job's retention (``keep_last``, ``max_age_days``) must not
        prune after this backup (templated): the one a restore later in the same run reads.
    """

    template_fields = ("job", "reason", "dry_run", "keep_backup_id")

    def __init__(self, *, job: str, missing_ok: bool = False, dry_run: bool | str = False,
                 seal_key_conn_id: str | None = None, keep_backup_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.keep_backup_id = keep_backup_id
        self.missing_ok = missing_ok
        self.dry_run = dry_run
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        if spec.is_dstream:
            return dstream.backup_step(spec, context, dry_run=flag(self.dry_run, name="dry_run"), log=self.log)
        state = read_checkpoint(spec.checkpoint)
        has_batches = bool(state.offset_batch_ids or state.commit_batch_ids)
        if not has_batches and self.missing_ok:
            self.log.info("job %s has no checkpoint batches at %s: nothing to back up", spec.name, spec.checkpoint)
            return {"job": spec.name, "backup_id": None, "skipped": "no checkpoint yet"}
        if flag(self.dry_run, name="dry_run"):
            return {"job": spec.name, "backup_id": None, "dry_run": True,
                    "would_back_up": spec.checkpoint, "to": spec.backup_root, "position": position(spec)}
        retention = spec.backup_retention
        result = backup_checkpoint(
            spec.checkpoint, spec.backup_root, job=spec.name,
            reason=optional_text(self.reason) or f"backup by {actor(context)}",
            keep_last=retention.keep_last,
            max_age_s=retention.max_age_s,
            seal_key=seal_key_from_connection(self.seal_key_conn_id),
            keep_ids=[b for b in [optional_text(self.keep_backup_id)] if b])
        self.log.info("job %s: backup %s of batch %s (%d files, %d new blobs, %.1fs)", spec.name, result.backup_id,
                      result.manifest.last_committed_batch, result.files, result.blobs_written, result.seconds)
        return {"job": spec.name, "backup_id": result.backup_id, **result.to_dict()}


class RestoreCheckpointOperator(StreamingJobOperator):
    """Roll the job's checkpoint back to one of its backups (the job must be stopped).

    The restore is judged against Kafka on a staged copy before anything moves; a BLOCK (retention
    already deleted the backup's offsets, another cluster...) fails the task and changes nothing.

    :param backup_id: the backup to restore (templated). ``None``/empty skips the task, so a DAG
        can leave it out of a run without a branch.
    :param seal_key_conn_id: Generic connection whose password keys the manifest seal (HMAC): a
        manifest without a valid keyed seal is refused.
    """

    template_fields = ("job", "reason", "backup_id", "dry_run")

    def __init__(self, *, job: str, backup_id: str | None, dry_run: bool | str = False,
                 seal_key_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.backup_id = backup_id
        self.dry_run = dry_run
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        from airflow_kafka_spark.ops.commands import restore_checkpoint

        backup_id = optional_text(self.backup_id)
        if backup_id is None:
            raise AirflowSkipException("no backup to restore in this run")
        _, spec = self.load()
        if spec.is_dstream:
            return dstream.restore_step(spec)
        validate_backup_id(backup_id)
        result = restore_checkpoint(
            spec.checkpoint, spec.backup_root, backup_id, kafka_config(spec), job=spec.name,
            dry_run=flag(self.dry_run, name="dry_run"), idempotent_sink=spec.replay_is_idempotent,
            sink_output=spec.sink_output, actor=actor(context),
            seal_key=seal_key_from_connection(self.seal_key_conn_id))
        self.log.info("job %s: %s", spec.name, result.plan.headline)
        self.log.info("%s", result.plan.render())
        return {"job": spec.name, **result.to_dict()}


class ResetCheckpointOperator(StreamingJobOperator):
    """Move the job's checkpoint aside and leave exact starting offsets for the next start.

    The core plans the reset, refuses a plan that skips records unless ``accept_data_loss`` (then
    records it), takes a verified backup first and never deletes the old checkpoint.

    :param mode: ``preserve`` (continue exactly where the last committed batch ended),
        ``earliest``, ``latest``, ``to-datetime``, ``shift-by`` or ``to-offsets`` (templated).
        ``None``/empty skips the task.
    :param to_datetime: for ``to-datetime``: ISO-8601 or epoch milliseconds.
    :param sink_log: a file sink's ``_spark_metadata``: ``refuse`` (default) or ``move-aside``.
    :param max_records_skipped: with ``accept_data_loss``, the most records the reset may skip (what a
        person approved, see :mod:`~airflow_kafka_spark.operators.approval`): the reset is planned again
        and refused, changing nothing, above it. ``None``/empty: no bound.
    """

    template_fields = ("job", "reason", "mode", "to_datetime", "shift_by", "to_offsets", "dry_run",
                       "accept_data_loss", "max_records_skipped")

    def __init__(self, *, job: str, mode: str | None, to_datetime: str | None = None, shift_by: int | str | None = None,
                 to_offsets: str | None = None, dry_run: bool | str = False, accept_data_loss: bool | str = False,
                 sink_log: str = "refuse", max_records_skipped: int | str | None = None, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.max_records_skipped = max_records_skipped
        self.mode = mode
        self.to_datetime = to_datetime
        self.shift_by = shift_by
        self.to_offsets = to_offsets
        self.dry_run = dry_run
        self.accept_data_loss = accept_data_loss
        self.sink_log = sink_log

    def run(self, context: Any) -> dict[str, Any]:
        from airflow_kafka_spark.kafka.offsets import parse_offsets_json
        from airflow_kafka_spark.ops.commands import reset_checkpoint
        from airflow_kafka_spark.ops.modes import ResetMode
        from airflow_kafka_spark.ops.reset_plan import ResetRequest, parse_datetime

        mode = optional_text(self.mode)
        _, spec = self.load()
        if spec.is_dstream:   # a new build moves its DStream checkpoint aside even when the mode says keep
            return dstream.reset_step(spec, context, mode=mode, dry_run=flag(self.dry_run, name="dry_run"),
                                      log=self.log)
        if mode is None:
            raise AirflowSkipException("no reset in this run")
        if mode not in tuple(ResetMode):
            raise UserError(f"reset mode {mode!r} is not one of {', '.join(ResetMode)}")
        when = optional_text(self.to_datetime)
        shift = optional_text(self.shift_by)
        offsets = optional_text(self.to_offsets)
        try:
            shift_by = int(shift) if shift is not None else None
        except ValueError:
            raise UserError(f"shift_by must be a whole number of records, got {shift!r}") from None
        request = ResetRequest(
            mode=mode, to_datetime_ms=parse_datetime(when) if when else None, shift_by=shift_by,
            to_offsets=parse_offsets_json(offsets, what="to_offsets") if offsets else None, topics=spec.topics,
            sink_output=spec.sink_output, sink_log=self.sink_log,
            accept_data_loss=flag(self.accept_data_loss, name="accept_data_loss"))
        dry_run = flag(self.dry_run, name="dry_run")
        if not dry_run and int(getattr(context["ti"], "try_number", 1) or 1) > 1:
            # a retry of a reset that finished before its task reported it
            from airflow_kafka_spark.ops.reset import finished_by

            earlier = finished_by(spec.checkpoint, actor(context), request)
            if earlier is not None:
                self.log.warning("job %s: %s", spec.name, earlier.notes[0])
                return {"job": spec.name, **earlier.to_dict()}
        bound = optional_text(self.max_records_skipped)
        if bound is not None and not dry_run:   # the job is stopped now: the plan is what the reset does
            again = reset_checkpoint(spec.checkpoint, spec.backup_root, kafka_config(spec), request, job=spec.name,
                                     dry_run=True).plan
            if again.skipped > int(bound):
                fail(context, f"job {spec.name}: the reset would now skip {again.skipped:,} records, more than the "
                              f"{int(bound):,} approved; nothing was changed: trigger the restart again to see and "
                              "approve the new plan")
        result = reset_checkpoint(spec.checkpoint, spec.backup_root, kafka_config(spec), request, job=spec.name,
                                  dry_run=dry_run, actor=actor(context))
        self.log.info("job %s: %s", spec.name, result.plan.headline)
        self.log.info("%s", result.plan.render())
        return {"job": spec.name, **result.to_dict()}
