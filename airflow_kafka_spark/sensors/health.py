"""The health gate as a sensor: did the job just (re)started actually come up?

It reads what the last submit recorded in the lifecycle record (driver, the batch committed
before the start, the query id) and succeeds once the job has committed ``min_batches`` new
batches and its lag is not growing; it fails as soon as the driver is gone, and on timeout. The
rules live in :mod:`airflow_kafka_spark.triggers.health`.

Deferrable by default in the safe-restart DAG: one cheap probe on the worker (a healthy job is
done without deferring), then :class:`~airflow_kafka_spark.triggers.health.StreamingHealthTrigger`
waits in the triggerer and no worker slot is held. ``deferrable=False`` gives the classic poke loop
(``mode="reschedule"`` works too, at the price of forgetting the lag samples between pokes).

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
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException

from airflow_kafka_spark.airflow_glue.jobs import (
    actor,
    cluster_endpoint,
    fail,
    fail_health_gate,
    flag,
    kafka_config,
    load_job,
    optional_text,
    push_failure,
    recorded_gate_failure,
    run_holder,
    run_reporting_failure,
)
from airflow_kafka_spark.airflow_glue.kinds import GateStep, steps_for
from airflow_kafka_spark.airflow_glue.stats import gate_outcome
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import app_versions, submit
from airflow_kafka_spark.runtime.health import (
    FAILED,
    HEALTHY,
    HealthLook,
    HealthProbe,
    check_health,
    failed_gate_log,
    make_control,
    probe_or_wait,
)
from airflow_kafka_spark.triggers.health import StreamingHealthTrigger
from airflow_kafka_spark.watch.metrics import group_label


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
    """

    template_fields = ("job", "min_batches", "dry_run")
    ui_color = "#d6eaf8"

    def __init__(self, *, job: str, min_batches: int | str | None = None, gate_timeout_s: float | None = None,
                 registry_path: str | None = None, promote: bool = True, dry_run: bool | str = False,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
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
        self._spec: JobSpec | None = None
        self._gate: dict[str, Any] | None = None

    # -- setup ---------------------------------------------------------------------------------------

    def _prepare(self) -> tuple[JobSpec, dict[str, Any]]:
        _, spec = load_job(self.job, self.registry_path)
        record = LifecycleRecord.load(spec.checkpoint)
        sub = app_versions.submitted_app(record)
        if record is None or sub is None or record.driver is None:
            raise UserError(f"job {spec.name}: no submitted driver is recorded beside {spec.checkpoint}; "
                            "submit the job before gating it")
        if record.driver.id != (sub.get("driver") or {}).get("id"):
            raise UserError(f"job {spec.name}: the recorded driver {record.driver.id} is not the one of the last "
                            "submit")
        min_batches = self._min_batches(spec)
        self.timeout = float(self.gate_timeout_s or spec.health_gate.timeout_s)
        endpoint = None
        if sub["driver"]["kind"] != DriverKind.LOCAL:
            endpoint = cluster_endpoint(spec, sub)
        gate = {"checkpoint": spec.checkpoint, "topics": list(spec.topics), "kafka_conn_id": spec.kafka_conn_id,
                "min_batches": min_batches, "baseline_batch": sub.get("committed_before"),
                "baseline_query_id": sub.get("query_id_before"), "driver": dict(sub["driver"]),
                "endpoint": endpoint, "log_path": sub.get("log_path"),
                "idle_pass_s": spec.health_gate.idle_pass_s, "submitted_at_ms": sub["driver"].get("started_at")}
        self._spec, self._gate = spec, gate
        return spec, gate

    def _min_batches(self, spec: JobSpec) -> int:
        raw = optional_text(self.min_batches)
        try:
            min_batches = int(raw) if raw is not None else spec.health_gate.min_batches
        except ValueError:
            raise UserError(f"min_batches must be a whole number, got {raw!r}") from None
        if min_batches < 1:
            raise UserError(f"min_batches must be at least 1, got {min_batches}")
        return min_batches

    def _probe(self, spec: JobSpec, gate: dict[str, Any]) -> HealthProbe:
        config: dict[str, Any] = {}

        def get_config() -> dict[str, Any]:
            if "c" not in config:
                config["c"] = kafka_config(spec)
            return config["c"]

        ctl = make_control(gate["driver"], endpoint=gate["endpoint"])
        local_tail = lambda: submit.log_tail(gate["log_path"], kafka_config=config.get("c"))  # noqa: E731
        look = HealthLook(
            checkpoint=gate["checkpoint"], topics=gate["topics"], kafka_config=get_config,
            min_batches=gate["min_batches"], baseline_batch=gate["baseline_batch"],
            baseline_query_id=gate["baseline_query_id"], alive=ctl.is_alive, log_tail=failed_gate_log(ctl, local_tail),
            samples=self._samples, idle_pass_s=gate["idle_pass_s"], submitted_at_ms=gate["submitted_at_ms"])
        probe = probe_or_wait(lambda: check_health(look), self._samples)
        self._samples = probe.samples
        self.log.info("health gate %s: %s", spec.name, probe.reason)
        return probe

    # -- modes -----------------------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        return run_reporting_failure(self, context, lambda: self._execute(context))

    def _execute(self, context: Any) -> Any:
        if flag(self.dry_run, name="dry_run"):
            return {"job": str(self.job), "dry_run": True, "state": "skipped (dry run: nothing was started)"}
        _, spec = load_job(self.job, self.registry_path)
        self._repeat_an_earlier_verdict(context, spec)
        step = GateStep(min_batches=self._min_batches(spec), promote=self.promote, poll_s=self.poke_interval,
                        timeout_s=float(self.gate_timeout_s or spec.health_gate.timeout_s))
        on_worker = steps_for(spec).worker_gate(spec, context, step, self.log)
        if on_worker is not None:
            return on_worker
        spec, gate = self._prepare()
        if not self.deferrable:
            return super().execute(context)
        started = time.time()
        first = self._probe(spec, gate)
        if first.state != "waiting":
            return self._finish(context, spec, {**first.to_dict(), "waited_s": 0.0})
        trigger = StreamingHealthTrigger(**gate, deadline_epoch_s=started + self.timeout,
                                         poll_interval_s=self.poke_interval)
        # The trigger reports its own timeout with the last reason; the task timeout is only a backstop.
        self.defer(trigger=trigger, method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout + max(60.0, self.poke_interval * 2)))

    def _repeat_an_earlier_verdict(self, context: Any, spec: JobSpec) -> None:
        """A retry of a gate that already failed this run repeats that verdict instead of judging again.

        The gate is retried for the failures that leave no verdict: Airflow can fail a deferred task
        whose trigger fired quickly before any of its code runs (a stale executor event from the
        deferring worker's exit, apache/airflow#72716), and a worker can be killed. Those retries look
        again; a gate that did judge (``health_gate_failed`` in the record) must not pass on a second look.
        """
        ti = context.get("ti")
        if ti is None or int(getattr(ti, "try_number", 1) or 1) <= 1:
            return
        earlier = recorded_gate_failure(spec, run_holder(context))
        if earlier:
            fail(context, f"health gate of job {spec.name} failed in an earlier try of this run: {earlier}")
        self.log.info("health gate %s: try %s looks again (no earlier try of this run gave a verdict)",
                      spec.name, ti.try_number)

    def poke(self, context: Any) -> bool | PokeReturnValue:
        spec, gate = (self._spec, self._gate) if self._spec and self._gate else self._prepare()
        probe = self._probe(spec, gate)
        if probe.state == "waiting":
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(context, spec, probe.to_dict()))

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        def body() -> Any:
            if not event:
                raise UserError("the health gate trigger ended without an event")
            _, spec = load_job(self.job, self.registry_path)
            return self._finish(context, spec, dict(event))

        return run_reporting_failure(self, context, body)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except AirflowException as exc:   # e.g. the backstop timeout: still say why in the failure XCom
            push_failure(context, f"health gate: {exc}")
            raise

    # -- outcome ---------------------------------------------------------------------------------------

    def _finish(self, context: Any, spec: JobSpec, result: dict[str, Any]) -> dict[str, Any]:
        result.pop("samples", None)
        result["job"] = spec.name
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
