"""The three tasks that make the ``streaming_safe_restart`` DAG more than a chain of operators.

The DAG is validate → stop → backup → (reset | restore) → validate → submit → health gate, built
from the generic operators. What a plain chain cannot do is done here:

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
from airflow_kafka_spark.operators.streaming import driver_alive, stop_job, submit_job
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import probe, safe_restart, submit
from airflow_kafka_spark.runtime.app_versions import last_good_app
from airflow_kafka_spark.runtime.health import make_control

RUN_LEASE_SUFFIX = ".safe-restart" + RECORD_SUFFIX
# Task ids of the DAG, shared by the DAG file and these operators.
PLAN, VALIDATE_BEFORE, APPROVE, STOP, BACKUP, RESET, RESTORE, VALIDATE_AFTER, SUBMIT, HEALTH_GATE, ROLLBACK, FINISH = (
    "plan", "validate_before", "approve", "stop", "backup", "reset", "restore", "validate_after", "submit",
    "health_gate", "rollback", "finish")
PLAN_KEYS = ("dry_run", "tolerate_block", "reset_mode", "to_datetime", "accept_data_loss", "restore_backup_id")
CHANGE_STEPS = (STOP, BACKUP, RESET, RESTORE, VALIDATE_AFTER, SUBMIT, HEALTH_GATE)


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
        plan = {"job": spec.name, "mode": mode, **decision.to_dict(), "dry_run": dry_run,
                "accept_data_loss": flag(self.accept_data_loss, name="accept_data_loss"),
                "reason": optional_text(self.reason), "who": who(context), "run": run_holder(context),
                "registry_compatibility_version": spec.compatibility_version,
                "recorded_compatibility_version": recorded, "was_running": alive,
                "driver_before": None if record is None or record.driver is None else
                {"kind": record.driver.kind, "id": record.driver.id, "alive": alive},
                "position_before": position(spec), "run_lease": None}
        self.log.info("safe restart of %s by %s: %s%s", spec.name, plan["who"], decision.why,
                      " (dry run: nothing will be changed)" if dry_run else "")
        if not dry_run:
            lease_record = run_lease_record(spec)
            try:
                lease = lease_record.acquire_lease(run_holder(context), run_lease_ttl_s(spec),
                                                   run_id=context["ti"].run_id)
            except UserError as exc:
                fail(context, f"job {spec.name} is being restarted by another run, nothing was changed: {exc}")
            plan["run_lease"] = {"holder": lease.holder, "expires_at_ms": lease.expires_at_ms}
        # Each decision also under its own key: the DAG wires them into the steps' arguments as
        # ``plan.output["<key>"]``, which pulls an XCom *key*, not a dict item.
        # (An XCom holding None reads as "not found" there, hence "" for "nothing".)
        for key in PLAN_KEYS:
            context["ti"].xcom_push(key=key, value="" if plan[key] is None else plan[key])
        return plan


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
        plan = _pull(context, PLAN)
        if not plan or plan.get("dry_run"):
            raise AirflowSkipException("dry run or no plan: nothing to roll back")
        states = _states(context)
        failed = [t for t in CHANGE_STEPS if states.get(t) == "failed"]
        if not failed:
            raise AirflowSkipException("no step failed")
        if states.get(STOP) != "success":
            raise AirflowSkipException("the run failed before the job was stopped: nothing to roll back")
        _, spec = self.load()
        out: dict[str, Any] = {"job": spec.name, "failed_steps": failed, "notes": []}
        sub = _pull(context, SUBMIT)
        if sub and sub.get("driver"):
            out["stopped"] = stop_job(spec, context=context, log=self.log, only_driver_id=str(sub["driver"]["id"]))
        restored = steps_for(spec).rollback(spec, context, _pull(context, BACKUP) or {}, self.log)
        out["notes"].extend(restored.pop("notes"))
        out.update(restored)
        out["resubmitted"] = None
        if not plan.get("was_running"):
            out["notes"].append("the job was not running before this run: left stopped")
        elif last_good_app(LifecycleRecord.load(spec.checkpoint)) is None:
            out["notes"].append("no application of this job ever passed a health gate: nothing to resubmit")
        else:
            out["resubmitted"] = submit_job(spec, context=context, log=self.log, previous=True)
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        record.add_event(LifecycleEvent.SAFE_RESTART_ROLLED_BACK, actor=actor(context), failed_steps=failed,
                         restored_backup_id=out["restored_backup_id"],
                         resubmitted_driver=(out["resubmitted"] or {}).get("driver"), notes=out["notes"])
        record.save()
        self.log.warning("rolled back job %s after %s failed: %s", spec.name, ", ".join(failed),
                         "; ".join(out["notes"]) or "previous application resubmitted")
        return out


def _verdict_of(context: Any, task_id: str) -> dict[str, Any] | None:
    doc = _pull(context, task_id) or _pull(context, task_id, "verdict")
    if not isinstance(doc, Mapping):
        return None
    return {"verdict": doc.get("verdict"), "headline": doc.get("headline"), "overridden": doc.get("overridden")}


def outcome_of(plan: Mapping[str, Any] | None, states: Mapping[str, str],
               approval: Mapping[str, Any] | None = None) -> str:
    """The run's outcome from its task states and the approval decision (pure)."""
    if states.get(PLAN) != "success" or not plan:
        return "REFUSED"
    if plan.get("dry_run"):
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
    """Write the run's audit entry, release the run lease, and fail the run if anything failed."""

    def run(self, context: Any) -> dict[str, Any]:
        plan = _pull(context, PLAN)
        states = _states(context)
        failures = {t: _pull(context, t, FAILURE_KEY) for t, s in states.items() if s == "failed"}
        approval = _pull(context, APPROVE, APPROVAL_KEY)
        outcome = outcome_of(plan, states, approval)
        rollback = _pull(context, ROLLBACK) if states.get(ROLLBACK) == "success" else None
        backup = _pull(context, BACKUP) or {}
        audit: dict[str, Any] = {
            "outcome": outcome, "job": str(self.job), "who": (plan or {}).get("who") or who(context),
            "reason": (plan or {}).get("reason") or optional_text(self.reason), "mode": (plan or {}).get("mode"),
            "action": (plan or {}).get("action"), "why": (plan or {}).get("why"),
            "probe": {k: v for k, v in ((plan or {}).get("probe") or {}).items() if k != "log_tail"} or None,
            "dry_run": bool((plan or {}).get("dry_run")), "run": run_holder(context),
            "verdict_before": _verdict_of(context, VALIDATE_BEFORE),
            "verdict_after": _verdict_of(context, VALIDATE_AFTER),
            "backup_id": backup.get("backup_id"), "reset": _summary(_pull(context, RESET)),
            "restore": _summary(_pull(context, RESTORE)), "stop": _stop_summary(_pull(context, STOP)),
            "submitted_driver": (_pull(context, SUBMIT) or {}).get("driver"),
            "health": _health_summary(_pull(context, HEALTH_GATE)), "rollback": rollback,
            "approval": _approval_summary(approval),
            "offsets_before": ((plan or {}).get("position_before") or {}).get("offsets"),
            "offsets_after": None, "failures": {k: v for k, v in failures.items() if v}, "task_states": states}
        spec = None
        try:
            _, spec = self.load()
        except UserError as exc:
            self.log.info("no job to audit: %s", exc)
        if spec is not None:
            audit["offsets_after"] = position(spec)["offsets"]
            if states.get(HEALTH_GATE) == "failed" and not failures.get(HEALTH_GATE):
                failures[HEALTH_GATE] = (recorded_gate_failure(spec, run_holder(context))
                                         or _gate_failure_from_driver(spec, _pull(context, SUBMIT), self.log))
                audit["failures"] = {k: v for k, v in failures.items() if v}
            params = context.get("params") or {}
            dry_run = plan.get("dry_run") if plan else flag(params.get("dry_run", False), name="dry_run")
            if not dry_run:    # a refused run is audited too: who tried, and why it was refused
                record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
                record.add_event(LifecycleEvent.SAFE_RESTART, actor=audit["who"], **{k: v for k, v in audit.items()
                                                                         if k not in ("task_states", "who")})
                record.save()
            if plan and plan.get("run_lease"):
                try:
                    run_lease_record(spec).release_lease(plan["run_lease"]["holder"])
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
        if rollback:
            parts = [f"restored backup {rollback['restored_backup_id']}" if rollback.get("restored_backup_id") else "",
                     "resubmitted the previous application (driver "
                     f"{(rollback.get('resubmitted') or {}).get('driver', {}).get('id')})"
                     if rollback.get("resubmitted") else "", *rollback.get("notes", [])]
            tail = "; rolled back: " + "; ".join(p for p in parts if p)
        fail(context, f"safe restart of job {audit['job']} {outcome}: {first}{tail}")
        return audit   # not reached


def _gate_failure_from_driver(spec: Any, submitted: Any, log: Any) -> str | None:
    """The last resort for a gate that failed without a word in XCom or the record: what its driver shows now.

    Seen on YARN under load: the gate's task failed (by Airflow, around its resume from the triggerer)
    before any of its own code ran. The submitted driver's final state and log tail still say why.
    """
    drv = (submitted or {}).get("driver") if isinstance(submitted, Mapping) else None
    if not drv or not drv.get("id"):
        return None
    try:
        endpoint = cluster_endpoint(spec, submitted) if drv.get("kind") != DriverKind.LOCAL else None
        tail = submit.log_tail(submitted.get("log_path")) or make_control(drv, endpoint=endpoint).log_tail()
    except Exception as exc:   # a fallback for the audit: it must never replace the run's own failure
        log.warning("the health gate failed without a reason, and its driver could not be asked: %s", exc)
        return None
    log.warning("the health gate failed without a reason in XCom or the record; its driver was asked")
    return f"health gate failed without reporting why (its task ended first); driver {drv['id']} now: {tail}" \
        if tail else None


def _summary(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, Mapping):
        return None
    plan = doc.get("plan") or {}
    return {k: v for k, v in {"dry_run": doc.get("dry_run"), "operation_id": doc.get("operation_id"),
                              "backup_id": doc.get("backup_id"), "headline": plan.get("headline"),
                              "starting_offsets": doc.get("starting_offsets"),
                              "aside_location": doc.get("aside_location")}.items() if v is not None}


def _approval_summary(doc: Any) -> dict[str, Any] | None:
    """Who decided what on which numbers: the approval as the audit keeps it."""
    if not isinstance(doc, Mapping):
        return None
    request = doc.get("request") or {}
    return {"decision": doc.get("decision"), "by": doc.get("by"), "comment": doc.get("comment"), "at": doc.get("at"),
            "max_records_skipped": doc.get("max_records_skipped"), "reasons": request.get("reasons"),
            "shown": {"skipped": request.get("skipped"), "replayed": request.get("replayed"),
                      "topics": request.get("topics"), "codes": request.get("codes")}}


def _stop_summary(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, Mapping):
        return None
    return {k: doc.get(k) for k in ("outcome", "graceful", "killed", "last_committed", "replay_batch", "driver")}


def _health_summary(doc: Any) -> dict[str, Any] | None:
    if not isinstance(doc, Mapping):
        return None
    return {k: doc.get(k) for k in ("state", "reason", "new_batches", "last_committed", "lag_records", "status",
                                    "promoted", "idle", "dry_run")}
