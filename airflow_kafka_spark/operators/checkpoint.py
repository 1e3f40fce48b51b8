"""Operators on a job's checkpoint: validate it against Kafka, back it up, restore it, reset it.

Each parses its templated arguments once into a typed step request and hands it, with the job, to
the steps of the job's kind (:mod:`airflow_kafka_spark.airflow_glue.kinds`: a Structured Streaming
checkpoint, or a DStream job's consumer group), which call the core and turn results into XCom.

All of them take ``dry_run``: they then report what they would do and change nothing, which is
how the safe-restart DAG shows a plan before anyone commits to it.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue.jobs import flag, optional_text
from airflow_kafka_spark.airflow_glue.kinds import BackupStep, ResetStep, RestoreStep, ValidateStep, steps_for
from airflow_kafka_spark.airflow_glue.kinds.structured import position
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.operators._common import StreamingJobOperator
from airflow_kafka_spark.operators.links import FINDING_LINKS


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


def reset_step(op: Any) -> ResetStep:
    """The reset ``op`` asks for, from its rendered templated fields (``mode``, ``to_datetime``, ...).

    One parse for :class:`ResetCheckpointOperator` and the safe restart's submit task, which resets in
    the same task as the submit (``operators.restart_window``); fields an operator does not have take
    the reset operator's defaults.
    """
    return ResetStep(mode=optional_text(op.mode), dry_run=flag(op.dry_run, name="dry_run"),
                     to_datetime=optional_text(getattr(op, "to_datetime", None)),
                     shift_by=optional_text(getattr(op, "shift_by", None)),
                     to_offsets=optional_text(getattr(op, "to_offsets", None)),
                     accept_data_loss=flag(getattr(op, "accept_data_loss", False), name="accept_data_loss"),
                     sink_log=getattr(op, "sink_log", "refuse"),
                     max_records_skipped=optional_text(getattr(op, "max_records_skipped", None)),
                     seal_key=seal_key_from_connection(getattr(op, "seal_key_conn_id", None)),
                     fresh_backup=flag(getattr(op, "fresh_backup", False), name="fresh_backup"))


def restore_step(backup_id: str, *, dry_run: bool | str, seal_key_conn_id: str | None = None) -> RestoreStep:
    """The restore asked for, from rendered templates (the restore operator and the safe restart's submit)."""
    return RestoreStep(backup_id=backup_id, dry_run=flag(dry_run, name="dry_run"),
                       seal_key=seal_key_from_connection(seal_key_conn_id))


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
        expect = optional_text(self.expect_new_checkpoint)
        step = ValidateStep(
            override=flag(self.override, name="override"), dry_run=flag(self.dry_run, name="dry_run"),
            reason=optional_text(self.reason), kafka_timeout_s=self.kafka_timeout_s,
            expect_new_checkpoint=None if expect is None else flag(expect, name="expect_new_checkpoint"))
        return steps_for(spec).validate(spec, context, step, self.log)


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
        step = BackupStep(dry_run=flag(self.dry_run, name="dry_run"), reason=optional_text(self.reason),
                          missing_ok=self.missing_ok, seal_key=seal_key_from_connection(self.seal_key_conn_id),
                          keep_backup_id=optional_text(self.keep_backup_id))
        return steps_for(spec).backup(spec, context, step, self.log)


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
        backup_id = optional_text(self.backup_id)
        if backup_id is None:
            raise AirflowSkipException("no backup to restore in this run")
        _, spec = self.load()
        step = restore_step(backup_id, dry_run=self.dry_run, seal_key_conn_id=self.seal_key_conn_id)
        return steps_for(spec).restore(spec, context, step, self.log)


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
    :param seal_key_conn_id: Generic connection whose password keys the seal of the backup the reset
        takes before anything moves (as for :class:`BackupCheckpointOperator`; without it, the
        ``seal_key_file`` setting's key).
    :param fresh_backup: always take a new verified backup. Default False: the reset adopts the job's
        newest backup (the safe restart's ``backup`` task) when it provably holds the checkpoint as it is
        now, which keeps a second backup out of the downtime (``ops.backup.adopt``); recorded in the result
        (templated; bool or "true"/"false").
    """

    template_fields = ("job", "reason", "mode", "to_datetime", "shift_by", "to_offsets", "dry_run",
                       "accept_data_loss", "max_records_skipped", "fresh_backup")

    def __init__(self, *, job: str, mode: str | None, to_datetime: str | None = None, shift_by: int | str | None = None,
                 to_offsets: str | None = None, dry_run: bool | str = False, accept_data_loss: bool | str = False,
                 sink_log: str = "refuse", max_records_skipped: int | str | None = None,
                 seal_key_conn_id: str | None = None, fresh_backup: bool | str = False, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.seal_key_conn_id = seal_key_conn_id
        self.fresh_backup = fresh_backup
        self.max_records_skipped = max_records_skipped
        self.mode = mode
        self.to_datetime = to_datetime
        self.shift_by = shift_by
        self.to_offsets = to_offsets
        self.dry_run = dry_run
        self.accept_data_loss = accept_data_loss
        self.sink_log = sink_log

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        return steps_for(spec).reset(spec, context, reset_step(self), self.log)


__all__ = ["BackupCheckpointOperator", "ResetCheckpointOperator", "RestoreCheckpointOperator",
           "ValidateCheckpointOperator", "position", "reset_step", "restore_step", "seal_key_from_connection"]
