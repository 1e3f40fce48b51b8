"""The three tasks that make the ``streaming_safe_restart`` DAG more than a chain of operators.

The DAG is validate → stop and backup → (reset | restore), validate and submit → health gate, built
from the generic operators (the two tasks inside the downtime window are
:mod:`airflow_kafka_spark.operators.restart_window`). What a plain chain cannot do is done here:

* :class:`SafeRestartPlanOperator` (first task) turns the trigger form into a plan: which action
  the mode means (``auto`` compares the registry's ``compatibility_version`` with the one recorded
  when the running application passed its health gate: different means checkpoint-breaking, so
  reset with ``preserve``; equal means keep — unless the job has ``compatibility_probe``: then
  Spark decides, through a shadow start of the new application on a copy of the checkpoint,
  :mod:`airflow_kafka_spark.runtime.probe`), whether a BLOCK before the change is acceptable (only
  when the run replaces the checkpoint anyway), where the job stands now (offsets, driver). It also
  takes the **run lease**: a lease in a second lifecycle-record file beside the checkpoint
  (``<checkpoint>.safe-restart.lifecycle.json``) held for the whole run, so that two runs for the
  same job never interleave (``max_active_runs=1`` covers runs the scheduler starts, not
  ``airflow dags test`` or a second DAG). A separate file because backup, restore and reset refuse
  to touch a checkpoint whose own record holds a live lease, which is right for everybody but
  the run that holds it.
* :class:`SafeRestartRollbackOperator` runs when a step after the stop failed: it stops the
  driver this run started, restores the backup this run took (unless the checkpoint did not move),
  and resubmits the application that last passed a health gate, if the job was running before.
* :class:`SafeRestartFinishOperator` (last task, always runs) writes one audit entry in the
  lifecycle record (who, why, mode, verdicts before/after, backup id, offsets before/after,
  outcome, failure reasons), releases the run lease and fails the run with the reason when
  anything failed: a rolled-back restart is a failed run, even though the job runs again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue.jobs import (
    FAILURE_KEY,
    actor,
    cluster_endpoint,
    fail,
    flag,
    kafka_config,
    optional_text,
    recorded_gate_failure,
    run_holder,
    who,
)
from airflow_kafka_spark.airflow_glue.kinds import steps_for
from airflow_kafka_spark.airflow_glue.kinds.structured import position
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent
from airflow_kafka_spark.lifecycle.model import RECORD_SUFFIX
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.operators._common import StreamingJobOperator
from airflow_kafka_spark.operators.approval import APPROVAL_KEY, APPROVAL_TIMEOUT
from airflow_kafka_spark.operators.checkpoint import seal_key_from_connection
from airflow_kafka_spark.operators.restart_window import BACKUP_KEY, RESET_KEY, RESTORE_KEY, VERDICT_KEY
from airflow_kafka_spark.operators.streaming import driver_alive, stop_job, submit_job
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import probe, safe_restart, submit
from airflow_kafka_spark.runtime.app_versions import last_good_app
from airflow_kafka_spark.runtime.health import make_control
from airflow_kafka_spark.runtime.restart_steps import (
    ApprovalSummary,
    AuditEntry,
    BackupTaken,
    ChangeSummary,
    DriverRef,
    HealthSummary,
    RestartPlan,
    RollbackOutcome,
    RunContext,
    RunLeaseRef,
    StopSummary,
    SubmittedDriver,
    VerdictSummary,
    from_xcom,
)

RUN_LEASE_SUFFIX = ".safe-restart" + RECORD_SUFFIX
# Task ids of the DAG, shared by the DAG file and these operators.
PLAN, VALIDATE_BEFORE, APPROVE, STOP, SUBMIT, HEALTH_GATE, ROLLBACK, FINISH = (
    "plan", "validate_before", "approve", "stop", "submit", "health_gate", "rollback", "finish")
PLAN_KEYS = ("dry_run", "tolerate_block", "reset_mode", "to_datetime", "accept_data_loss", "restore_backup_id")
CHANGE_STEPS = (STOP, SUBMIT, HEALTH_GATE)


def decide(mode: str, *, registry_compat: str, recorded_compat: str | None, backup_id: str | None = None,
           when: str | None = None) -> dict[str, Any]:
    """The plan's JSON for ``mode``: :func:`airflow_kafka_spark.runtime.safe_restart.decide` as XCom carries it."""
    return safe_restart.decide(mode, registry_compat=registry_compat, recorded_compat=recorded_compat,
                               backup_id=backup_id, when=when).to_dict()


def run_lease_record(spec: JobSpec) -> LifecycleRecord:
    """The run lease's own record file, beside the checkpoint (see the module doc)."""
    location = spec.checkpoint.rstrip("/") + RUN_LEASE_SUFFIX
    return LifecycleRecord.load_or_create(spec.name, spec.checkpoint, location=location)


def run_lease_ttl_s(spec: JobSpec) -> float:
    """Long enough for a whole run (see :func:`airflow_kafka_spark.runtime.safe_restart.run_lease_ttl_s`),
    including the longest wait for a person's approval."""
    return safe_restart.run_lease_ttl_s(spec.stop_timeout_s, spec.health_gate.timeout_s) \
        + APPROVAL_TIMEOUT.total_seconds()


class SafeRestartPlanOperator(StreamingJobOperator):
    """Decide what a safe-restart run does and take the job's run lease; push the plan.

    All arguments are templated from the trigger form (``{{ params.* }}``).
    """

    template_fields = ("job", "reason", "mode", "backup_id", "datetime", "dry_run", "accept_data_loss")

    def __init__(self, *, job: str, mode: str, backup_id: str | None = None, datetime: str | None = None,
                 dry_run: bool | str = False, accept_data_loss: bool | str = False, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.mode = mode
        self.backup_id = backup_id
        self.datetime = datetime
        self.dry_run = dry_run
        self.accept_data_loss = accept_data_loss

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        mode = str(optional_text(self.mode) or "auto")
        dry_run = flag(self.dry_run, name="dry_run")
        record = LifecycleRecord.load(spec.checkpoint)
        good = last_good_app(record)
        recorded = (good or {}).get("compatibility_version") or (record.compatibility_version if record else None)
        found = None
        if safe_restart.wants_probe(mode, enabled=spec.compatibility_probe, registry_compat=spec.compatibility_version,
                                    recorded_compat=recorded):
            self.log.info("auto: asking Spark whether the new application runs on the checkpoint of %s (probe, at "
                          "most %.0fs) ...", spec.name, spec.probe_timeout_s)
            found = probe.probe_application(spec, kafka_config=kafka_config(spec), target=spark_target(spec))
            self.log.info("compatibility probe: %s in %.1fs: %s%s", found.answer, found.seconds, found.reason,
                          f"\n{found.log_tail}" if found.answer is probe.ProbeAnswer.UNKNOWN else "")
        decision = safe_restart.decide(mode, registry_compat=spec.compatibility_version, recorded_compat=recorded,
                                       backup_id=optional_text(self.backup_id), when=optional_text(self.datetime),
                                       probe=found)
        alive = driver_alive(spec, record)
        before = None if record is None or record.driver is None else \
            DriverRef(kind=record.driver.kind, id=record.driver.id, alive=alive)
        plan = RestartPlan.of(
            decision, job=spec.name, mode=mode,
            flags=(dry_run, flag(self.accept_data_loss, name="accept_data_loss")),
            asked=RunContext(reason=optional_text(self.reason), who=who(context), run=run_holder(context)),
            compat=(spec.compatibility_version, recorded), before=(before, position(spec)), was_running=alive)
        self.log.info("safe restart of %s by %s: %s%s", spec.name, plan.asked.who, decision.why,
                      " (dry run: nothing will be changed)" if dry_run else "")
        if not dry_run:
            lease_record = run_lease_record(spec)
            try:
                lease = lease_record.acquire_lease(run_holder(context), run_lease_ttl_s(spec),
                                                   run_id=context["ti"].run_id)
            except UserError as exc:
                fail(context, f"job {spec.name} is being restarted by another run, nothing was changed: {exc}")
            plan = dataclasses.replace(plan, run_lease=RunLeaseRef(holder=lease.holder,
                                                                   expires_at_ms=lease.expires_at_ms))
        doc = plan.to_dict()
        # Each decision also under its own key: the DAG wires them into the steps' arguments as
        # ``plan.output["<key>"]``, which pulls an XCom *key*, not a dict item.
        # (An XCom holding None reads as "not found" there, hence "" for "nothing".)
        for key in PLAN_KEYS:
            context["ti"].xcom_push(key=key, value="" if doc[key] is None else doc[key])
        return doc


def _states(context: Any) -> dict[str, str]:
    ti = context["ti"]
    found = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id])
    return {k: str(v) for k, v in (found.get(ti.run_id) or {}).items()}


def _pull(context: Any, task_id: str, key: str | None = None) -> Any:
    ti = context["ti"]
    return ti.xcom_pull(task_ids=task_id, key=key) if key else ti.xcom_pull(task_ids=task_id)


class SafeRestartRollbackOperator(StreamingJobOperator):
    """Undo a failed safe restart: stop the new driver, restore this run's backup, resubmit the previous app.

    Runs on ``one_failed`` of the change steps; skips itself when the run failed before the job was
    touched (a BLOCK, a refused lease), in a dry run, and when nothing failed.
    """

    def run(self, context: Any) -> dict[str, Any]:
        plan = from_xcom(RestartPlan, _pull(context, PLAN))
        if plan is None or plan.dry_run:
            raise AirflowSkipException("dry run or no plan: nothing to roll back")
        states = _states(context)
        failed = [t for t in CHANGE_STEPS if states.get(t) == "failed"]
        if not failed:
            raise AirflowSkipException("no step failed")
        if _pull(context, STOP) is None:   # the stop task's result is pushed once the driver is gone
            raise AirflowSkipException("the run failed before the job was stopped: nothing to roll back")
        _, spec = self.load()
        sub = from_xcom(SubmittedDriver, _pull(context, SUBMIT))
        stopped = None if sub is None else stop_job(spec, context=context, log=self.log, only_driver_id=sub.id)
        restored = dict(steps_for(spec).rollback(spec, context, _pull(context, STOP, BACKUP_KEY) or {}, self.log))
        notes = list(restored.pop("notes"))
        resubmitted = None
        if not plan.was_running:
            notes.append("the job was not running before this run: left stopped")
        elif last_good_app(LifecycleRecord.load(spec.checkpoint)) is None:
            notes.append("no application of this job ever passed a health gate: nothing to resubmit")
        else:
            resubmitted = submit_job(spec, context=context, log=self.log, previous=True)
        out = RollbackOutcome(job=spec.name, failed_steps=tuple(failed), notes=tuple(notes), restored=restored,
                              stopped=stopped, resubmitted=resubmitted)
        again = out.resubmitted_driver
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        record.add_event(LifecycleEvent.SAFE_RESTART_ROLLED_BACK, actor=actor(context), failed_steps=failed,
                         restored_backup_id=out.restored_backup_id,
                         resubmitted_driver=None if again is None else again.to_dict(), notes=notes)
        record.save()
        self.log.warning("rolled back job %s after %s failed: %s", spec.name, ", ".join(failed),
                         "; ".join(notes) or "previous application resubmitted")
        return out.to_dict()


def _verdict_of(context: Any, task_id: str) -> VerdictSummary | None:
    return from_xcom(VerdictSummary, _pull(context, task_id) or _pull(context, task_id, "verdict"))


def outcome_of(plan: RestartPlan | Mapping[str, Any] | None, states: Mapping[str, str],
               approval: Mapping[str, Any] | None = None) -> str:
    """The run's outcome from its task states and the approval decision (pure)."""
    if states.get(PLAN) != "success" or not plan:
        return "REFUSED"
    if plan.dry_run if isinstance(plan, RestartPlan) else plan.get("dry_run"):
        return "DRY_RUN" if not any(states.get(t) == "failed" for t in (VALIDATE_BEFORE, *CHANGE_STEPS)) \
            else "DRY_RUN_FAILED"
    if states.get(VALIDATE_BEFORE) == "failed":
        return "BLOCKED"
    if (approval or {}).get("decision") == "rejected":
        return "REJECTED"
    if states.get(APPROVE) == "failed":       # no answer in time, or the plan could not be made
        return "NOT_APPROVED"
    if any(states.get(t) == "failed" for t in CHANGE_STEPS):
        return {"success": "ROLLED_BACK", "failed": "ROLLBACK_FAILED"}.get(states.get(ROLLBACK, ""), "FAILED")
    if states.get(HEALTH_GATE) == "success":
        return "SUCCESS"
    return "INCOMPLETE"


class SafeRestartFinishOperator(StreamingJobOperator):
    """Apply the job's backup retention, write the run's audit entry, release the run lease, and fail
    the run if anything failed.

    The retention is applied here, after the restart window, and not by the stop task's backup: it
    reads every kept manifest, seconds of downtime at 20,000 state files (docs/benchmarks.md, round 13).
    This task runs whatever happened before it (``all_done``), so every backup the run took is pruned
    to the registry's ``backup_retention`` here; the run's own backup is always kept.

    :param seal_key_conn_id: Generic connection whose password keys the manifest seal (HMAC), as the
        stop task's.
    """

    def __init__(self, *, seal_key_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seal_key_conn_id = seal_key_conn_id

    def run(self, context: Any) -> dict[str, Any]:
        plan = from_xcom(RestartPlan, _pull(context, PLAN))
        states = _states(context)
        failures = {t: _pull(context, t, FAILURE_KEY) for t, s in states.items() if s == "failed"}
        approval = _pull(context, APPROVE, APPROVAL_KEY)
        outcome = outcome_of(plan, states, approval)
        spec = None
        try:
            _, spec = self.load()
        except UserError as exc:
            self.log.info("no job to audit: %s", exc)
        if spec is not None and states.get(HEALTH_GATE) == "failed" and not failures.get(HEALTH_GATE):
            failures[HEALTH_GATE] = (recorded_gate_failure(spec, run_holder(context))
                                     or _gate_failure_from_driver(spec, _pull(context, SUBMIT), self.log))
        entry = AuditEntry(
            outcome=outcome, job=str(self.job), who=(plan.asked.who if plan else None) or who(context),
            reason=(plan.asked.reason if plan else None) or optional_text(self.reason), plan=plan,
            dry_run=bool(plan and plan.dry_run), run=run_holder(context),
            verdicts=(_verdict_of(context, VALIDATE_BEFORE), from_xcom(VerdictSummary, _pull(context, SUBMIT,
                                                                                               VERDICT_KEY))),
            backup_id=getattr(from_xcom(BackupTaken, _pull(context, STOP, BACKUP_KEY)), "backup_id", None),
            reset=from_xcom(ChangeSummary, _pull(context, SUBMIT, RESET_KEY)),
            restore=from_xcom(ChangeSummary, _pull(context, SUBMIT, RESTORE_KEY)),
            stop=from_xcom(StopSummary, _pull(context, STOP)),
            submitted_driver=from_xcom(SubmittedDriver, _pull(context, SUBMIT)),
            health=from_xcom(HealthSummary, _pull(context, HEALTH_GATE)),
            rollback=from_xcom(RollbackOutcome, _pull(context, ROLLBACK)) if states.get(ROLLBACK) == "success"
            else None,
            approval=from_xcom(ApprovalSummary, approval),
            offsets_after=None if spec is None else position(spec)["offsets"],
            failures={k: v for k, v in failures.items() if v}, task_states=states,
            pruned=tuple(self._retention(spec, context, plan)))
        audit = entry.to_dict()
        if spec is not None:
            params = context.get("params") or {}
            dry_run = plan.dry_run if plan else flag(params.get("dry_run", False), name="dry_run")
            if not dry_run:    # a refused run is audited too: who tried, and why it was refused
                record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
                record.add_event(LifecycleEvent.SAFE_RESTART, actor=entry.who, **entry.event_fields())
                record.save()
            if plan and plan.run_lease:
                try:
                    run_lease_record(spec).release_lease(plan.run_lease.holder)
                except UserError as exc:
                    self.log.warning("run lease not released: %s", exc)
        self.log.info("safe restart of %s: %s", audit["job"], outcome)
        if outcome in ("SUCCESS", "DRY_RUN", "REJECTED"):   # a rejection is a decision, not a failure
            return audit
        context["ti"].xcom_push(key="audit", value=audit)
        first = next((f"{t}: {failures[t] or 'failed (see its log)'}"
                      for t in (PLAN, VALIDATE_BEFORE, APPROVE, *CHANGE_STEPS, ROLLBACK) if t in failures),
                     "a step did not complete")
        tail = ""
        rollback = entry.rollback
        if rollback:
            again = rollback.resubmitted_driver
            parts = [f"restored backup {rollback.restored_backup_id}" if rollback.restored_backup_id else "",
                     f"resubmitted the previous application (driver {again.id if again else None})"
                     if rollback.resubmitted else "", *rollback.notes]
            tail = "; rolled back: " + "; ".join(p for p in parts if p)
        fail(context, f"safe restart of job {audit['job']} {outcome}: {first}{tail}")
        return audit   # not reached


    def _retention(self, spec: JobSpec | None, context: Any, plan: RestartPlan | None) -> list[str]:
        """The job's retention after the stop task's backup (``BackupStep(prune=False)``); never in a dry run."""
        taken = _pull(context, STOP, BACKUP_KEY)
        if spec is None or not isinstance(taken, Mapping) or taken.get("dry_run") or (plan and plan.dry_run):
            return []
        return steps_for(spec).prune(spec, taken, seal_key_from_connection(self.seal_key_conn_id), self.log)


def _gate_failure_from_driver(spec: Any, submitted: Any, log: Any) -> str | None:
    """The last resort for a gate that failed without a word in XCom or the record: what its driver shows now.

    Seen on YARN under load: the gate's task failed (by Airflow, around its resume from the triggerer)
    before any of its own code ran. The submitted driver's final state and log tail still say why.
    """
    drv = from_xcom(SubmittedDriver, submitted)
    if drv is None:
        return None
    try:
        endpoint = cluster_endpoint(spec, submitted) if drv.kind != DriverKind.LOCAL else None
        tail = submit.log_tail(submitted.get("log_path")) or make_control(drv.to_dict(), endpoint=endpoint).log_tail()
    except Exception as exc:   # a fallback for the audit: it must never replace the run's own failure
        log.warning("the health gate failed without a reason, and its driver could not be asked: %s", exc)
        return None
    log.warning("the health gate failed without a reason in XCom or the record; its driver was asked")
    return f"health gate failed without reporting why (its task ended first); driver {drv.id} now: {tail}" \
        if tail else None
