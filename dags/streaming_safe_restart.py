"""``streaming_safe_restart``: restart a registered Spark Structured Streaming job without losing or duplicating data.

Trigger it from the UI ("Trigger Dag" shows a typed form) or the REST API with the job's name and
a mode; everything else (checkpoint, backups, application, connections) comes from the job
registry (``streaming_jobs.yaml`` beside this file, or ``[kafka_spark] job_registry``).

Procedure::

    plan ─ validate_before ─ approve ─ stop ─ submit ─ health_gate ─┐
                                                                    ├ finish
           (any step from stop on fails) ─────────────── rollback ──┘

* ``plan`` decides what the mode means and takes the job's run lease (one run per job at a time).
* ``validate_before`` judges the checkpoint against Kafka. A BLOCK (e.g. retention deleted records
  the job has not read) stops the run **before anything is changed**, unless the mode replaces the
  checkpoint anyway (reset, restore): then the override is recorded and the reset or restore plan
  judges its own result.
* ``approve`` plans the reset or restore (the core's dry run) and, when it would skip records
  (reset-latest, reset-to-datetime past the committed position, any plan that skips), replay
  records into a sink that is not idempotent, or when a BLOCK was overridden, **pauses the run for
  a person** (Airflow's human-in-the-loop ``ApprovalOperator``: the "Required actions" page shows
  the records skipped and read again per topic and the verdict codes). Otherwise it skips and the
  run goes on without a pause. **Reject** skips every step that changes something (the finish
  task audits the rejection with who rejected it); **Approve** lets the reset/restore run, and the
  approver and their comment go into the audit entry. The job keeps running until the stop, so the
  reset is planned again after the stop and refused (nothing changed, the rollback resubmits the
  application) if it would skip more than the approved ``max_records_skipped`` (empty: the number
  shown plus 10 %, at least 1,000). ``accept_data_loss`` in the trigger form is a *pre-approval*
  for automation: no pause, no bound, recorded as ``pre-approved`` by the triggering user.
* ``stop`` ends the running driver on a batch boundary, then takes a verified backup of the
  checkpoint it left (its ``backup`` XCom). While the driver still runs, it first *pre-copies* that
  backup (copies and hashes the state files, publishes nothing), so the backup in the downtime window
  reads only the files of the last batches. Stop and backup are one task, and the change, the
  validation and the submit another, because each task boundary inside the downtime window is a
  scheduler round trip (``airflow_kafka_spark.operators.restart_window``).
* ``submit`` first changes the checkpoint when the plan says so: a **reset** for the reset modes
  and for ``auto`` when the registry's ``compatibility_version`` differs from the one of the
  application that last passed a health gate (checkpoint-breaking change: reset with ``preserve``,
  the new query starts exactly where the old one committed), a **restore** for ``restore`` with
  the given backup id (its ``reset``/``restore`` XCom key). Then it judges what the new driver
  will start from (its ``verdict`` XCom; a BLOCK fails it before anything starts), then starts it
  detached. The change runs in this task, not in one of its own, for the same reason as above. A
  local driver runs on the worker's host: the task then returns once the new query committed its
  first batch, so the health gate's task does not start beside the driver's JVM while it starts.
  ``health_gate`` waits (in the triggerer) for committed batches and a lag that is not growing. It
  is the only step with a retry (it only reads): a retry after a failure that gave no verdict looks
  again, after one that did it repeats the verdict.
* ``rollback`` (only when a step after the stop failed) stops the new driver, restores this run's
  backup and resubmits the previous application; ``finish`` applies the job's backup retention
  (after the downtime window, not in the stop task: it reads every kept manifest), writes the audit
  entry into the lifecycle record and fails the run with the reason whenever anything failed.

``dry_run`` runs every step in plan-only mode: the verdict, the reset/restore plan and the
spark-submit line are shown in the task XComs and logs, and nothing is changed.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from airflow.sdk import DAG, Param, TriggerRule, chain

from airflow_kafka_spark import settings
from airflow_kafka_spark.names import BACKUP_ID_PATTERN
from airflow_kafka_spark.operators.approval import SafeRestartApprovalOperator
from airflow_kafka_spark.operators.checkpoint import ValidateCheckpointOperator
from airflow_kafka_spark.operators.links import SparkApplicationLink
from airflow_kafka_spark.operators.restart_window import SafeRestartStopOperator, SafeRestartSubmitOperator
from airflow_kafka_spark.operators.safe_restart import (
    APPROVE,
    CHANGE_STEPS,
    FINISH,
    HEALTH_GATE,
    PLAN,
    ROLLBACK,
    STOP,
    SUBMIT,
    VALIDATE_BEFORE,
    SafeRestartFinishOperator,
    SafeRestartPlanOperator,
    SafeRestartRollbackOperator,
)
from airflow_kafka_spark.registry.loader import default_registry_path, load_registry
from airflow_kafka_spark.registry.model import NAME_PATTERN
from airflow_kafka_spark.runtime.safe_restart import RestartMode
from airflow_kafka_spark.sensors.health import StreamingHealthSensor

DAG_ID = "streaming_safe_restart"
# How often the health gate looks at the job. Seconds; the default suits production, tests and the
# demo set a short one.
HEALTH_POLL_S = settings.float_value("health_gate_poll_s", 15.0)   # [kafka_spark] health_gate_poll_s
# The one step that is retried (it only reads): Airflow can fail a deferred gate whose trigger fired quickly
# before any of its code runs (apache/airflow#72716), which would roll back a deploy nobody judged. A retry
# looks again; a gate that did judge repeats its verdict (StreamingHealthSensor). The soak raises it.
GATE_RETRIES = 1
# The shape of a backup id (airflow_kafka_spark.names, checked again before any use): rejecting a
# malformed id in the form means no run is created for it.


def _job_param() -> Param:
    """The job drop-down, from the registry at parse time.

    The enum is also what rejects an unknown or path-like job name at trigger time (HTTP 400 from
    the REST API, before a run exists). A registry that cannot be read must not break the DAG
    import: the field then takes any registry-style name and the first task reports the registry
    error.

    The default is None, which the schema refuses: a run must still name a job (a conf without one is
    refused like an unknown name), and Airflow 3.3's triggerer can render the health gate's template
    fields (it cannot when a param has no default at all; see the health gate's ``start_from_trigger``).
    """
    try:
        names = load_registry(default_registry_path(Path(__file__).parent)).names()
        problem = None
    except Exception as exc:  # parse time: report in the form, never fail the import
        names, problem = [], str(exc)
    if names:
        return Param(None, type="string", enum=names, pattern=f"^{NAME_PATTERN}$", title="Job",
                     description="The streaming job, as declared in the job registry.")
    return Param(None, type="string", pattern=f"^{NAME_PATTERN}$", title="Job",
                 description=f"The job registry could not be read ({problem or 'no jobs declared'}).")


PARAMS = {
    "job": _job_param(),
    "mode": Param("auto", type="string", enum=[str(m) for m in RestartMode], title="Mode", values_display={
        "auto": "auto: reset (preserve) only if compatibility_version changed, else keep",
        "keep": "keep: restart on the existing checkpoint",
        "reset-preserve": "reset, continue where the last committed batch ended",
        "reset-earliest": "reset, read from the earliest retained offset",
        "reset-latest": "reset, skip to the end (skips records)",
        "reset-to-datetime": "reset, start at the first record at or after a time",
        "restore": "restore a backup (give its id)"}),
    "backup_id": Param(None, type=["null", "string"], pattern=BACKUP_ID_PATTERN, title="Backup id",
                       description="For mode restore: the backup to restore (e.g. 20260131T120000000Z-b41)."),
    "datetime": Param(None, type=["null", "string"], format="date-time", title="Date and time",
                      description="For mode reset-to-datetime: ISO-8601, e.g. 2026-01-31T12:00:00Z."),
    "dry_run": Param(False, type="boolean", title="Dry run", description="Plan only: change nothing."),
    "accept_data_loss": Param(False, type="boolean", title="Pre-approve data loss",
                              description="For automation: approve a plan that skips records without the "
                                          "approval pause (recorded in the audit history as pre-approved)."),
    "reason": Param(None, type=["null", "string"], maxLength=500, title="Reason",
                    description="Why; kept in the job's audit history."),
}

JOB = "{{ params.job }}"
REASON = "{{ params.reason or '' }}"

with DAG(
    dag_id=DAG_ID,
    schedule=None,
    max_active_runs=1,
    catchup=False,
    params=PARAMS,
    tags=["streaming", "spark", "kafka"],
    doc_md=__doc__,
    default_args={"retries": 0},
) as dag:
    plan = SafeRestartPlanOperator(
        task_id=PLAN, job=JOB, mode="{{ params.mode }}", backup_id="{{ params.backup_id or '' }}",
        datetime="{{ params.datetime or '' }}", dry_run="{{ params.dry_run }}",
        accept_data_loss="{{ params.accept_data_loss }}", reason=REASON)
    dry = plan.output["dry_run"]
    validate_before = ValidateCheckpointOperator(
        task_id=VALIDATE_BEFORE, job=JOB, override=plan.output["tolerate_block"], dry_run=dry, reason=REASON)
    approve = SafeRestartApprovalOperator(task_id=APPROVE, job=JOB, plan_task_id=PLAN, verdict_task_id=VALIDATE_BEFORE,
                                          change_task_ids=CHANGE_STEPS)
    stop = SafeRestartStopOperator(task_id=STOP, job=JOB, dry_run=dry, reason=REASON,
                                   backup_reason="before safe restart {{ run_id }}",
                                   trigger_rule=TriggerRule.NONE_FAILED)   # runs when no approval was needed
    submit = SafeRestartSubmitOperator(
        task_id=SUBMIT, job=JOB, mode=plan.output["reset_mode"], to_datetime=plan.output["to_datetime"],
        accept_data_loss=approve.output["accept_data_loss"], max_records_skipped=approve.output["max_records_skipped"],
        backup_id=plan.output["restore_backup_id"], override=dry, dry_run=dry, reason=REASON,
        trigger_rule=TriggerRule.NONE_FAILED)   # approve is an upstream (its XCom) and skips when nothing is lost
    # Started in the triggerer: no worker process starts beside the new driver's JVMs (Airflow 3.3+).
    health_gate = StreamingHealthSensor(task_id=HEALTH_GATE, job=JOB, dry_run=dry, deferrable=True,
                                        start_from_trigger=True, poke_interval=HEALTH_POLL_S, retries=GATE_RETRIES,
                                        retry_delay=timedelta(seconds=5))
    health_gate.operator_extra_links = (SparkApplicationLink(),)   # sensors may not import operators/links
    rollback = SafeRestartRollbackOperator(task_id=ROLLBACK, job=JOB, reason=REASON,
                                           trigger_rule=TriggerRule.ONE_FAILED)
    finish = SafeRestartFinishOperator(task_id=FINISH, job=JOB, reason=REASON, trigger_rule=TriggerRule.ALL_DONE)

    chain(plan, validate_before, approve, stop, submit, health_gate)
    steps = {STOP: stop, SUBMIT: submit, HEALTH_GATE: health_gate}
    [steps[t] for t in CHANGE_STEPS] >> rollback
    [plan, validate_before, approve, *steps.values(), rollback] >> finish
