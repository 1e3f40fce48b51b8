"""The two tasks of the ``streaming_safe_restart`` DAG inside its downtime window: stop, then submit.

From the old query's last committed batch to the new query's first, every task boundary is a
scheduler round trip (the scheduler sees the task end, queues the next one, the executor starts a
process for it): about half a second each under the LocalExecutor, plus the task process's own
start (bench/downtime_dag.py, docs/benchmarks.md). So the steps that must run in the window are
two tasks, whatever the mode:

* :class:`SafeRestartStopOperator`: the stop on a batch boundary (with the backup's pre-copy while
  the driver runs, :class:`~airflow_kafka_spark.operators.streaming.StopStreamingJobOperator`),
  then the **verified backup** of what the driver left, in the same task. The stop's result is
  the task's XCom from the moment the driver is gone, so a backup that fails after a stop still
  leaves the rollback its proof that the job was stopped; the backup's document is the ``backup``
  XCom key.
* :class:`SafeRestartSubmitOperator`: the **reset or restore** the plan takes (XCom key ``reset``
  or ``restore``; the approval came before the stop), then the **validation** of what the new
  driver will start from, then the submit; the verdict is the ``verdict`` XCom key, and a BLOCK
  fails the task before anything starts. The change sits here, not in the stop task, because a
  retry of the stop task would take its backup again, of the changed checkpoint. A retry of this
  task finds its earlier try's work: a reset finished by the same task is reported, not run again
  (``ops.reset.finished_by``); a driver it started is adopted without changing or judging again,
  and what that try reset or restored is reported from the lifecycle record; a first try killed
  while it held the record's lease left a lease the judgement counts as this task's own.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_kafka_spark.airflow_glue.jobs import flag, optional_text, task_holder
from airflow_kafka_spark.airflow_glue.kinds import BackupStep, ValidateStep, steps_for
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.operators.checkpoint import reset_step, restore_step, seal_key_from_connection
from airflow_kafka_spark.operators.streaming import StopStreamingJobOperator, SubmitStreamingJobOperator
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import drivers, local_start
from airflow_kafka_spark.runtime.restart_steps import SubmittedDriver, from_xcom
from airflow_kafka_spark.runtime.start_stop import own_submission

#: XCom keys of the two tasks (the rollback and the audit read them).
BACKUP_KEY = "backup"
VERDICT_KEY = "verdict"
RESET_KEY = "reset"
RESTORE_KEY = "restore"


class SafeRestartStopOperator(StopStreamingJobOperator):
    """Stop the job on a batch boundary, then take a verified backup of its checkpoint, in one task.

    The job's backup retention is not applied here: reading every kept manifest to prune is seconds
    of downtime at 20,000 state files (docs/benchmarks.md, round 13). The run's finish task applies
    it after the window (:class:`~airflow_kafka_spark.operators.safe_restart.SafeRestartFinishOperator`).

    :param backup_reason: the backup's reason (templated), kept in its manifest.
    :param seal_key_conn_id: Generic connection whose password keys the manifest seal (HMAC).
    """

    template_fields = (*StopStreamingJobOperator.template_fields, "backup_reason")

    def __init__(self, *, backup_reason: str | None = None, seal_key_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(precopy_backup=True, **kwargs)
        self.backup_reason = backup_reason
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        done = self.stop_spec(spec, context)
        stopped = done.xcom
        ti = context["ti"]
        ti.xcom_push(key="return_value", value=stopped)   # the stop happened, whatever the backup does next
        # a stop that saw a commit says the checkpoint has batches: the backup need not look first (missing_ok)
        step = BackupStep(dry_run=flag(self.dry_run, name="dry_run"), reason=optional_text(self.backup_reason),
                          missing_ok=stopped.get("last_committed") is None,
                          seal_key=seal_key_from_connection(self.seal_key_conn_id), prune=False,
                          precopy=done.precopy)
        try:
            backup = steps_for(spec).backup(spec, context, step, self.log)
        except UserError as exc:
            raise UserError(f"job {spec.name} was stopped ({stopped.get('outcome')}), then its backup failed: "
                            f"{exc}") from None
        ti.xcom_push(key=BACKUP_KEY, value=backup)
        return stopped


class SafeRestartSubmitOperator(SubmitStreamingJobOperator):
    """Change the checkpoint as the plan says, judge what the new driver will start from, then start it: one task.

    The reset or restore runs here, after the stop task's verified backup and before the judgement,
    not in a task of its own: a task boundary inside the downtime window costs a scheduler round trip
    and a task process (docs/benchmarks.md, round 12). The approval still comes before the stop.

    :param override: accept a BLOCK verdict (templated): the DAG sets it in a dry run only, where
        nothing starts.
    :param mode: the reset the plan takes (templated; ``preserve``, ``earliest``...), or empty.
    :param to_datetime: for ``mode=to-datetime`` (templated).
    :param accept_data_loss: a person (or the trigger's pre-approval) approved a reset that skips records.
    :param max_records_skipped: the most records the approved reset may skip (templated), or empty.
    :param backup_id: the backup the plan restores (templated), or empty. At most one of ``mode`` and
        ``backup_id`` is given.
    :param seal_key_conn_id: Generic connection whose password keys the seal of the reset's backup and
        of the restored manifest (HMAC).
    :param first_batch_wait_s: a local driver (it runs on this worker's host): the task returns once the
        new query committed its first batch, or after this long, so that the health gate's task does not
        start beside the driver's JVM while it starts (``local_start.wait_first_commit_local``); 0: return at
        once. A query on an idle topic commits no batch: the task then waits this long, and the health
        gate judges it (its idle pass). A cluster driver runs elsewhere: never waited for.
    """

    template_fields = (*SubmitStreamingJobOperator.template_fields, "override", "mode", "to_datetime",
                       "accept_data_loss", "max_records_skipped", "backup_id")

    def __init__(self, *, override: bool | str = False, kafka_timeout_s: float = 10.0, mode: str | None = None,
                 to_datetime: str | None = None, accept_data_loss: bool | str = False,
                 max_records_skipped: int | str | None = None, backup_id: str | None = None,
                 seal_key_conn_id: str | None = None, first_batch_wait_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.first_batch_wait_s = first_batch_wait_s
        self.override = override
        self.kafka_timeout_s = kafka_timeout_s
        self.mode = mode
        self.to_datetime = to_datetime
        self.accept_data_loss = accept_data_loss
        self.max_records_skipped = max_records_skipped
        self.backup_id = backup_id
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        holder = task_holder(context)   # the submit's lease holder: its own killed try's lease is not "another run"
        record = LifecycleRecord.load(spec.checkpoint)
        if record is not None and own_submission(record, holder) is not None:
            self.log.info("job %s: this task's earlier try judged and started the recorded driver; adopting it",
                          spec.name)
            self._report_earlier_change(record, context)
        else:
            self._change(spec, context)
            step = ValidateStep(override=flag(self.override, name="override"), dry_run=flag(self.dry_run,
                                name="dry_run"), reason=optional_text(self.reason),
                                kafka_timeout_s=self.kafka_timeout_s, owner=holder)
            context["ti"].xcom_push(key=VERDICT_KEY, value=steps_for(spec).validate(spec, context, step, self.log))
        submitted = self.submit_spec(spec, context)
        self._until_first_batch(spec, submitted)
        return submitted

    def _until_first_batch(self, spec: JobSpec, submitted: dict[str, Any]) -> None:
        """A new local driver of a Structured Streaming query: wait for its first commit (``first_batch_wait_s``)."""
        drv = from_xcom(SubmittedDriver, submitted)
        if (drv is None or drv.kind != DriverKind.LOCAL or self.first_batch_wait_s <= 0 or submitted.get("adopted")
                or not steps_for(spec).commits_to_checkpoint):
            return
        t = time.monotonic()
        batch = local_start.wait_first_commit_local(DriverInfo(kind=drv.kind, id=drv.id, host=drv.host),
                                                    spec.checkpoint, submitted.get("committed_before"),
                                                    timeout_s=self.first_batch_wait_s)
        waited = time.monotonic() - t
        if batch is None:
            why = "the driver exited" if not drivers.local_alive(DriverInfo(kind=drv.kind, id=drv.id, host=drv.host)) \
                else f"none within {waited:.1f}s"
            self.log.info("job %s: no new batch committed after the submit (%s); the health gate judges the driver",
                          spec.name, why)
        else:
            self.log.info("job %s: the new query committed batch %s %.1fs after the submit", spec.name, batch, waited)

    def _change(self, spec: JobSpec, context: Any) -> None:
        """The plan's reset or restore (XCom key ``reset``/``restore``), or nothing (``keep``)."""
        mode, backup_id = optional_text(self.mode), optional_text(self.backup_id)
        if mode and backup_id:
            raise UserError(f"job {spec.name}: a run resets or restores, not both (mode {mode!r}, backup "
                            f"{backup_id!r}); nothing was changed")
        if mode:
            context["ti"].xcom_push(key=RESET_KEY, value=steps_for(spec).reset(spec, context, reset_step(self),
                                                                                self.log))
        elif backup_id:
            step = restore_step(backup_id, dry_run=self.dry_run, seal_key_conn_id=self.seal_key_conn_id)
            context["ti"].xcom_push(key=RESTORE_KEY, value=steps_for(spec).restore(spec, context, step, self.log))

    def _report_earlier_change(self, record: LifecycleRecord, context: Any) -> None:
        """What an earlier try of this task reset or restored, from the record (its XComs went with it)."""
        by = f" via {task_holder(context)}"
        for key, kind in ((RESET_KEY, LifecycleEvent.CHECKPOINT_RESET),
                          (RESTORE_KEY, LifecycleEvent.CHECKPOINT_RESTORED)):
            event = record.last_event(kind)
            if event is not None and str(event.get("actor") or "").endswith(by):
                self.log.info("job %s: that try's %s: %s", self.job, key, (event.get("details") or {}).get(
                    "operation_id"))
                context["ti"].xcom_push(key=key, value={"job": self.job, "earlier_try": True,
                                                        **(event.get("details") or {})})


__all__ = ["BACKUP_KEY", "RESET_KEY", "RESTORE_KEY", "VERDICT_KEY", "SafeRestartStopOperator",
           "SafeRestartSubmitOperator"]
