"""The two tasks of the ``streaming_safe_restart`` DAG inside its downtime window: stop, then submit.

From the old query's last committed batch to the new query's first, every task boundary is a
scheduler round trip (the scheduler sees the task end, queues the next one, the executor starts a
process for it): about half a second each under the LocalExecutor, plus the task process's own
start (bench/downtime_dag.py, docs/benchmarks.md). So the steps that must run in the window are
two tasks, not four:

* :class:`SafeRestartStopOperator`: the stop on a batch boundary (with the backup's pre-copy while
  the driver runs, :class:`~airflow_kafka_spark.operators.streaming.StopStreamingJobOperator`),
  then the **verified backup** of what the driver left, in the same task. The stop's result is
  the task's XCom from the moment the driver is gone, so a backup that fails after a stop still
  leaves the rollback its proof that the job was stopped; the backup's document is the ``backup``
  XCom key.
* :class:`SafeRestartSubmitOperator`: the **validation** of what the new driver will start from,
  then the submit, in the same task; the verdict is the ``verdict`` XCom key, and a BLOCK fails
  the task before anything starts. A retry of a task whose first try already started its driver
  adopts that driver without judging again (the first try judged it before starting it); a first
  try killed while it held the record's lease left a lease the judgement counts as this task's own.

``reset`` and ``restore`` stay tasks of their own between the two: they change the checkpoint,
need the approval before them, and the plan skips them when the run takes neither.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_spark.airflow_glue.jobs import flag, optional_text, task_holder
from airflow_kafka_spark.airflow_glue.kinds import BackupStep, ValidateStep, steps_for
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.operators.checkpoint import seal_key_from_connection
from airflow_kafka_spark.operators.streaming import StopStreamingJobOperator, SubmitStreamingJobOperator
from airflow_kafka_spark.runtime.start_stop import own_submission

#: XCom keys of the two tasks (the rollback and the audit read them).
BACKUP_KEY = "backup"
VERDICT_KEY = "verdict"


class SafeRestartStopOperator(StopStreamingJobOperator):
    """Stop the job on a batch boundary, then take a verified backup of its checkpoint, in one task.

    :param backup_reason: the backup's reason (templated), kept in its manifest.
    :param keep_backup_id: a backup the job's retention must not prune (templated): the one a
        restore later in the same run reads.
    :param seal_key_conn_id: Generic connection whose password keys the manifest seal (HMAC).
    """

    template_fields = (*StopStreamingJobOperator.template_fields, "backup_reason", "keep_backup_id")

    def __init__(self, *, backup_reason: str | None = None, keep_backup_id: str | None = None,
                 seal_key_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(precopy_backup=True, **kwargs)
        self.backup_reason = backup_reason
        self.keep_backup_id = keep_backup_id
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        stopped = self.stop_spec(spec, context)
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=stopped)   # the stop happened, whatever the backup does next
        step = BackupStep(dry_run=flag(self.dry_run, name="dry_run"), reason=optional_text(self.backup_reason),
                          missing_ok=True, seal_key=seal_key_from_connection(self.seal_key_conn_id),
                          keep_backup_id=optional_text(self.keep_backup_id))
        try:
            backup = steps_for(spec).backup(spec, context, step, self.log)
        except UserError as exc:
            raise UserError(f"job {spec.name} was stopped ({stopped.get('outcome')}), then its backup failed: "
                            f"{exc}") from None
        ti.xcom_push(key=BACKUP_KEY, value=backup)
        return stopped


class SafeRestartSubmitOperator(SubmitStreamingJobOperator):
    """Judge what the new driver will start from against Kafka, then start it, in one task.

    :param override: accept a BLOCK verdict (templated): the DAG sets it in a dry run only, where
        nothing starts.
    """

    template_fields = (*SubmitStreamingJobOperator.template_fields, "override")

    def __init__(self, *, override: bool | str = False, kafka_timeout_s: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.override = override
        self.kafka_timeout_s = kafka_timeout_s

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        holder = task_holder(context)   # the submit's lease holder: its own killed try's lease is not "another run"
        record = LifecycleRecord.load(spec.checkpoint)
        if record is not None and own_submission(record, holder) is not None:
            self.log.info("job %s: this task's earlier try judged and started the recorded driver; adopting it",
                          spec.name)
        else:
            step = ValidateStep(override=flag(self.override, name="override"), dry_run=flag(self.dry_run,
                                name="dry_run"), reason=optional_text(self.reason),
                                kafka_timeout_s=self.kafka_timeout_s, owner=holder)
            context["ti"].xcom_push(key=VERDICT_KEY, value=steps_for(spec).validate(spec, context, step, self.log))
        return self.submit_spec(spec, context)


__all__ = ["BACKUP_KEY", "VERDICT_KEY", "SafeRestartStopOperator", "SafeRestartSubmitOperator"]
