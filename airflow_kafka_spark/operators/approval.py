"""The safe restart's human approval: Airflow's ``ApprovalOperator`` showing the core's plan.

Between ``validate_before`` and ``stop``: the task plans the reset or restore the run is about to
do (a dry run of the core's own command, so the numbers are the core's) and decides with
:func:`airflow_kafka_spark.ops.approval.approval_request` whether a person must approve it.

* Nothing lost, nothing overridden, or a dry run: the task **skips** (no pause); ``stop`` runs
  (its trigger rule is ``none_failed``).
* ``accept_data_loss`` ticked in the trigger form: a **pre-approval** for automation (CI, a
  runbook script): no pause, recorded as ``pre-approved`` by the run's triggering user, no bound.
* Otherwise the task waits in Airflow's ``awaiting_input`` state (Required actions page, or
  ``PATCH .../taskInstances/approve/-1/hitlDetails``). **Approve** passes ``accept_data_loss`` and
  the bound (``max_records_skipped``) to the reset; **Reject** skips every changing step (stop
  and its backup, reset/restore, submit with its validation, health_gate), so nothing is changed; ``finish``
  still writes the audit entry (outcome ``REJECTED``, with the approver and the comment).

The decision is pushed as XCom ``approval`` (and ``accept_data_loss`` / ``max_records_skipped``
for the DAG's wiring); the finish task copies it into the audit entry.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk import Param
from airflow.sdk.definitions.param import ParamsDict
from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue.jobs import kafka_config, load_job, optional_text, run_reporting_failure
from airflow_kafka_spark.airflow_glue.kinds import steps_for
from airflow_kafka_spark.ops.approval import ApprovalRequest, approval_request
from airflow_kafka_spark.ops.options import SinkFacts
from airflow_kafka_spark.ops.plan import Plan

APPROVAL_KEY = "approval"
COMMENT, MAX_SKIPPED = "comment", "max_records_skipped"
# How long a run waits for a person; the run lease is held for this long on top of the rest.
APPROVAL_TIMEOUT = timedelta(hours=4)


def change_plan(spec: Any, plan: dict[str, Any]) -> Plan | None:
    """The core's plan of the change this run makes (a dry run of the reset or restore); None for none."""
    if plan.get("reset_mode"):
        from airflow_kafka_spark.ops.commands import reset_checkpoint
        from airflow_kafka_spark.ops.reset_plan import ResetRequest, parse_datetime

        when = optional_text(plan.get("to_datetime"))
        request = ResetRequest(mode=plan["reset_mode"], to_datetime_ms=parse_datetime(when) if when else None,
                               topics=spec.topics, sink_output=spec.sink_output,
                               batch_keyed_sink=spec.sink.keyed_by_batch_id)
        return reset_checkpoint(spec.checkpoint, spec.backup_root, kafka_config(spec), request, job=spec.name,
                                dry_run=True).plan
    if plan.get("restore_backup_id"):
        from airflow_kafka_spark.ops.commands import restore_checkpoint

        return restore_checkpoint(spec.checkpoint, spec.backup_root, plan["restore_backup_id"], kafka_config(spec),
                                  job=spec.name, dry_run=True,
                                  sink=SinkFacts(idempotent=spec.replay_is_idempotent, output=spec.sink_output)).plan
    return None


def overridden_codes(verdict: Any) -> list[str]:
    """The BLOCK codes ``validate_before`` overrode (empty when nothing was overridden)."""
    if not isinstance(verdict, dict) or not verdict.get("overridden"):
        return []
    return sorted({f["code"] for f in verdict.get("findings") or () if f.get("severity") == "BLOCK"})


class SafeRestartApprovalOperator(ApprovalOperator):
    """Pause the safe restart for a person's approval when the plan loses records or overrides a BLOCK.

    :param job: the job's registry name (templated).
    :param plan_task_id: the task whose XCom is the run's plan (``SafeRestartPlanOperator``).
    :param verdict_task_id: the ``validate_before`` task.
    :param change_task_ids: the steps a rejection skips.
    """

    template_fields = ("job", "subject", "body")
    ui_color = "#fdf0d5"

    def __init__(self, *, job: str, plan_task_id: str, verdict_task_id: str, change_task_ids: tuple[str, ...],
                 registry_path: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("subject", "Safe restart of {{ params.job }}: approve the plan?")
        kwargs.setdefault("response_timeout", APPROVAL_TIMEOUT)
        # The form a person fills in. ``params`` arrives holding the DAG's params (merged in by
        # Airflow's apply_defaults); the HITL operator keeps only the task's own ones.
        params = ParamsDict(kwargs.pop("params", None) or {})
        params.update({COMMENT: Param(None, type=["null", "string"], maxLength=500, title="Comment", source="task",
                                      description="Kept in the job's audit history with your name."),
                       MAX_SKIPPED: Param(None, type=["null", "integer"], minimum=0, title="Max records skipped",
                                          source="task", description="The most records the reset may skip after "
                                          "the stop (empty: the number shown plus a margin, see above).")})
        super().__init__(params=params, **kwargs)
        self.job = job
        self.registry_path = registry_path
        self.plan_task_id = plan_task_id
        self.verdict_task_id = verdict_task_id
        self.change_task_ids = change_task_ids

    def execute(self, context: Any) -> Any:
        return run_reporting_failure(self, context, lambda: self._ask(context))

    def _push(self, context: Any, decision: dict[str, Any]) -> None:
        ti = context["ti"]
        ti.xcom_push(key=APPROVAL_KEY, value=decision)
        ti.xcom_push(key="accept_data_loss", value=bool(decision.get("accept_data_loss")))
        bound = decision.get(MAX_SKIPPED)
        ti.xcom_push(key=MAX_SKIPPED, value="" if bound is None else bound)

    def _ask(self, context: Any) -> Any:
        ti = context["ti"]
        plan = ti.xcom_pull(task_ids=self.plan_task_id) or {}
        verdict = ti.xcom_pull(task_ids=self.verdict_task_id)
        _, spec = load_job(self.job, self.registry_path)
        if not steps_for(spec).plans_offsets:   # a DStream restart is judged by runtime/dstream, not these plans
            self._push(context, {"request": None, "decision": "not needed", "accept_data_loss": False,
                                 MAX_SKIPPED: None})
            raise AirflowSkipException(f"job {spec.name} is a {spec.kind} job: no offsets plan to approve")
        request = approval_request(change_plan(spec, plan), idempotent_sink=spec.replay_is_idempotent,
                                   overridden_codes=overridden_codes(verdict))
        decision: dict[str, Any] = {"request": request.to_dict(), "accept_data_loss": False, MAX_SKIPPED: None}
        self.log.info("approval: %s", "; ".join(request.reasons) or "not needed (nothing skipped or overridden)")
        if plan.get("dry_run") or not request.needed:
            self._push(context, {**decision, "decision": "dry run" if plan.get("dry_run") else "not needed",
                                 "accept_data_loss": bool(plan.get("accept_data_loss"))})
            raise AirflowSkipException("dry run: not asked" if plan.get("dry_run") else "nothing to approve")
        if plan.get("accept_data_loss"):
            self._push(context, {**decision, "decision": "pre-approved", "by": plan.get("who"),
                                 "comment": "accept_data_loss ticked when the run was triggered",
                                 "accept_data_loss": True})
            raise AirflowSkipException("pre-approved by accept_data_loss")
        self._push(context, {**decision, "decision": "waiting"})
        self.body = request.body()
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        return run_reporting_failure(self, context, lambda: self._answer(context, event))

    def _answer(self, context: Any, event: dict[str, Any]) -> Any:
        ti = context["ti"]
        answer = HITLOperator.execute_complete(self, context=context, event=event)   # validates the response
        asked = ti.xcom_pull(task_ids=self.task_id, key=APPROVAL_KEY) or {}
        request = ApprovalRequest.from_dict(asked["request"])
        entered = dict(answer["params_input"] or {})
        approved = answer["chosen_options"][0] == self.APPROVE
        user = answer.get("responded_by_user") or {}
        decision = {**asked, "decision": "approved" if approved else "rejected", "by": user.get("name"),
                    "by_id": user.get("id"), "comment": optional_text(entered.get(COMMENT)),
                    "at": str(answer["responded_at"]), "accept_data_loss": approved,
                    MAX_SKIPPED: request.bound(entered.get(MAX_SKIPPED)) if approved else None}
        self._push(context, decision)
        self.log.info("%s by %s%s", decision["decision"], decision["by"],
                      f": {decision['comment']}" if decision["comment"] else "")
        if not approved:
            dag = context["task"].dag
            self.skip(ti=ti, tasks=[dag.get_task(t) for t in self.change_task_ids])
        return decision
