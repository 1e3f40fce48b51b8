"""The health gate as a sensor: did the job just (re)started actually come up?

It reads what the last submit recorded in the lifecycle record (driver, the batch committed
before the start, the query id) and succeeds once the job has committed ``min_batches`` new
batches and its lag is not growing; it fails as soon as the driver is gone, and on timeout. The
rules live in :mod:`airflow_kafka_spark.triggers.health`.

Three ways to wait, one first look (:func:`airflow_kafka_spark.airflow_glue.gate.open_gate`: the
registry, the lifecycle record, an earlier try's verdict):

* ``deferrable=True, start_from_trigger=True`` (the safe-restart DAG): the scheduler hands the gate
  to the triggerer and no worker runs it until the verdict
  (:class:`~airflow_kafka_spark.triggers.health.StreamingHealthStartTrigger`). A restart's gate
  starts while the new driver's JVMs do; on a worker it is a process start beside them.
* ``deferrable=True``: one cheap probe on the worker (a healthy job is done without deferring), then
  :class:`~airflow_kafka_spark.triggers.health.StreamingHealthTrigger` waits in the triggerer.
* ``deferrable=False``: the classic poke loop (``mode="reschedule"`` works too, at the price of
  forgetting the lag samples between pokes).

Give a deferrable gate ``retries=1``, as the safe-restart DAG does: Airflow 3.3 can fail a deferred
task around its resume before any of its code runs (apache/airflow#72716). A retry after such a
failure looks again; a gate that gave a verdict is never judged twice (its failure is final, and a
retried try that finds this run's ``health_gate_failed`` repeats it).

On success the gate is what makes the submitted application *the last good one*
(:func:`airflow_kafka_spark.runtime.app_versions.promote_submitted`): the application a later rollback
resubmits, and the compatibility version the safe-restart DAG's ``auto`` mode compares with. It
also consumes the reset's ``next_starting_offsets`` once the new query has planned a batch from
them (not at submit time: a driver that dies at start must not use them up).
"""

from __future__ import annotations

import time
import warnings
from datetime import timedelta
from typing import Any

from airflow import __version__ as airflow_version
from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.definitions._internal.types import NOTSET
from airflow.sdk.definitions.xcom_arg import PlainXComArg, XComArg
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import StartTriggerArgs

from airflow_kafka_spark.airflow_glue.gate import (
    GateAsk,
    GateOpening,
    GateTarget,
    Opening,
    gate_min_batches,
    open_gate,
)
from airflow_kafka_spark.airflow_glue.jobs import (
    actor,
    fail,
    fail_health_gate,
    flag,
    load_job,
    push_failure,
    run_holder,
    run_reporting_failure,
)
from airflow_kafka_spark.airflow_glue.kinds import GateStep, steps_for
from airflow_kafka_spark.airflow_glue.stats import gate_outcome
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import app_versions, submit
from airflow_kafka_spark.runtime.health import (
    FAILED,
    HEALTHY,
    HealthProbe,
    check_health,
    probe_or_wait,
)
from airflow_kafka_spark.triggers.health import StreamingHealthStartTrigger, StreamingHealthTrigger
from airflow_kafka_spark.watch.metrics import group_label

_AIRFLOW_VERSION = tuple(int(p) for p in airflow_version.split(".")[:2] if p.isdigit())


def _params_without_default(task: BaseSensorOperator) -> list[str]:
    """The names of the task's and its DAG's params that have no default (``Param(type=...)`` alone)."""
    found: set[str] = set()
    for params in (getattr(getattr(task, "dag", None), "params", None), getattr(task, "params", None)):
        for name in params or {}:
            if getattr(params.get_param(name), "value", None) is NOTSET:
                found.add(name)
    return sorted(found)


class StreamingHealthSensor(BaseSensorOperator):
    """Wait until the job's last submitted driver commits ``min_batches`` new batches with a lag that is not growing.

    :param job: the job's registry name (templated).
    :param min_batches: new committed batches required (templated); default the registry's
        ``health_gate.min_batches``.
    :param gate_timeout_s: fail after this long; default the registry's ``health_gate.timeout_s``.
        (This replaces the sensor's ``timeout``.)
    :param promote: on success, record the submitted application as the last good one.
    :param dry_run: succeed at once (a safe-restart dry run starts nothing to wait for).
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param start_from_trigger: with ``deferrable``, start the gate in the triggerer: no worker runs it
        until its verdict (Airflow 3.3+, which renders the template fields there; older releases start
        it on a worker, with a warning). A ``dry_run`` that is another task's plain XCom is pulled there.
    """

    template_fields = ("job", "min_batches", "dry_run")
    ui_color = "#d6eaf8"

    def __init__(self, *, job: str, min_batches: int | str | None = None, gate_timeout_s: float | None = None,
                 registry_path: str | None = None, promote: bool = True, dry_run: bool | str = False,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 start_from_trigger: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("poke_interval", 15.0)
        super().__init__(**kwargs)
        self.job = job
        self.min_batches = min_batches
        self.gate_timeout_s = gate_timeout_s
        self.registry_path = registry_path
        self.promote = promote
        self.dry_run = dry_run
        self.deferrable = deferrable
        self._samples: list[list[Any]] = []
        self._target: GateTarget | None = None
        self.start_from_trigger = False
        if start_from_trigger:
            self._start_in_triggerer()

    def _start_in_triggerer(self) -> None:
        """Set ``start_trigger_args`` so the scheduler defers the gate to the triggerer without a worker."""
        if not self.deferrable:
            raise ValueError(f"{self.task_id}: start_from_trigger needs deferrable=True (it waits in the triggerer)")
        why_not = None
        if _AIRFLOW_VERSION < (3, 3):
            why_not = f"Airflow {airflow_version} renders no template field in the triggerer (3.3 does)"
        elif any(isinstance(v, XComArg) for v in (self.job, self.min_batches)):
            why_not = "job and min_batches must not be XCom arguments (the triggerer renders templates only)"
        elif isinstance(self.dry_run, XComArg) and not isinstance(self.dry_run, PlainXComArg):
            why_not = "dry_run may be one task's XCom, not a derived one"
        elif required := _params_without_default(self):
            # Airflow 3.3.2's triggerer builds the template context from the serialized DAG, whose params it
            # cannot resolve when one has no default: the trigger runner process dies, and with it every
            # deferred task of the deployment (tests/airflow/test_operators.py shows the ParamValidationError).
            why_not = (f"the DAG's param(s) {', '.join(required)} have no default, which Airflow 3.3's triggerer "
                       "cannot render (give them a default, e.g. None, that their schema refuses)")
        if why_not:
            warnings.warn(f"{self.task_id}: the gate starts on a worker: {why_not}", UserWarning, stacklevel=3)
            return
        dry_run, dry_run_task, dry_run_key = self.dry_run, None, None
        if isinstance(dry_run, PlainXComArg):
            dry_run, dry_run_task, dry_run_key = None, dry_run.operator.task_id, dry_run.key
        self.start_from_trigger = True
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=f"{StreamingHealthStartTrigger.__module__}.{StreamingHealthStartTrigger.__qualname__}",
            next_method="execute_complete",
            trigger_kwargs={"job": self.job, "min_batches": self.min_batches, "dry_run": dry_run,
                            "dry_run_task": dry_run_task, "dry_run_key": dry_run_key,
                            "gate_timeout_s": self.gate_timeout_s, "registry_path": self.registry_path,
                            "poll_interval_s": float(self.poke_interval)},
            # The trigger ends on its own deadline with the last reason; this is only a backstop.
            timeout=timedelta(seconds=self.gate_timeout_s + max(60.0, self.poke_interval * 2))
            if self.gate_timeout_s else None)

    def _probe(self, target: GateTarget) -> HealthProbe:
        probe = probe_or_wait(lambda: check_health(target.look(self._samples)), self._samples)
        self._samples = probe.samples
        self.log.info("health gate %s: %s", self.job, probe.reason)
        return probe

    # -- modes -----------------------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        return run_reporting_failure(self, context, lambda: self._execute(context))

    def _execute(self, context: Any) -> Any:
        ti = context.get("ti")
        opening = open_gate(GateAsk(
            job=self.job, min_batches=self.min_batches, gate_timeout_s=self.gate_timeout_s,
            registry_path=self.registry_path, dry_run=flag(self.dry_run, name="dry_run"),
            run=run_holder(context) if ti is not None else "", try_number=int(getattr(ti, "try_number", 1) or 1)))
        if opening.kind is not Opening.WATCH or opening.target is None:
            return self._act_on(context, opening)
        self.timeout, self._target = opening.timeout_s, opening.target
        if not self.deferrable:
            return super().execute(context)
        started = time.time()
        first = self._probe(opening.target)
        if first.state != "waiting":
            return self._finish(context, {**first.to_dict(), "waited_s": 0.0})
        trigger = StreamingHealthTrigger(**opening.target.trigger_kwargs(), deadline_epoch_s=started + self.timeout,
                                         poll_interval_s=self.poke_interval)
        # The trigger reports its own timeout with the last reason; the task timeout is only a backstop.
        self.defer(trigger=trigger, method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout + max(60.0, self.poke_interval * 2)))

    def _act_on(self, context: Any, opening: GateOpening) -> Any:
        """What a gate that does not watch the checkpoint does, on the worker, wherever its first look ran.

        A retry repeats the verdict an earlier try of this run gave (``REPEAT``) instead of judging
        again: the gate is retried for the failures that leave no verdict (Airflow can fail a deferred
        task around its resume before any of its code runs, apache/airflow#72716; a worker can be
        killed), and a gate that did judge (``health_gate_failed`` in the record) must not pass on a
        second look.
        """
        if opening.kind is Opening.DRY_RUN:
            return {"job": opening.job, "dry_run": True, "state": opening.message}
        if opening.kind is Opening.REFUSED:
            raise UserError(opening.message)
        if opening.kind is Opening.REPEAT:
            fail(context, opening.message)
        _, spec = load_job(self.job, self.registry_path)
        step = GateStep(min_batches=gate_min_batches(self.min_batches, spec), promote=self.promote,
                        poll_s=self.poke_interval, timeout_s=opening.timeout_s)
        return steps_for(spec).worker_gate(spec, context, step, self.log)

    def poke(self, context: Any) -> bool | PokeReturnValue:
        if self._target is None:
            raise UserError(f"health gate of job {self.job}: poked before its first look")
        probe = self._probe(self._target)
        if probe.state == "waiting":
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(context, probe.to_dict()))

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        def body() -> Any:
            if not event:
                raise UserError("the health gate trigger ended without an event")
            opening = GateOpening.from_event(event)
            if opening is not None:   # the start trigger's first look decided not to watch
                return self._act_on(context, opening)
            return self._finish(context, dict(event))

        return run_reporting_failure(self, context, body)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowException as exc:   # e.g. the backstop timeout: still say why in the failure XCom
            push_failure(context, f"health gate: {exc}")
            raise

    # -- outcome ---------------------------------------------------------------------------------------

    def _finish(self, context: Any, result: dict[str, Any]) -> dict[str, Any]:
        _, spec = load_job(self.job, self.registry_path)
        result.pop("samples", None)
        result["job"] = spec.name
        result.setdefault("first_look", "worker")
        gate_outcome(group_label(spec), "health", "passed" if result.get("state") == HEALTHY else "failed")
        state, reason = str(result.get("state")), str(result.get("reason"))
        if state != HEALTHY:
            fail_health_gate(context, spec, state=state, reason=reason, lag_records=result.get("lag_records"),
                             log=self.log, message=f"health gate of job {spec.name} failed: {reason}" if state == FAILED
                             else f"health gate of job {spec.name} ended in state {state}: {reason}")
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        state = read_checkpoint(spec.checkpoint)
        consumed = None
        if record.next_starting_offsets and state.offset_batch_ids:
            consumed = record.take_next_starting_offsets(actor=actor(context))
            submit.remove_starting_offsets(submit.starting_offsets_path(spec))
        good = app_versions.promote_submitted(record, actor=actor(context)) if self.promote else None
        record.add_event(LifecycleEvent.HEALTH_GATE_PASSED, actor=actor(context), new_batches=result.get("new_batches"),
                         last_committed=result.get("last_committed"), lag_records=result.get("lag_records"),
                         status=result.get("status"), idle=bool(result.get("idle")), promoted=bool(good))
        record.save()
        result.update(starting_offsets_consumed=consumed, promoted=good is not None,
                      compatibility_version=(good or {}).get("compatibility_version"))
        return result
