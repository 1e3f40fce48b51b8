"""The health gate's first look: which driver it judges, against what, or why it does not judge at all.

One place for what the gate decides before it polls, so the two ways a gate starts take the same
decision: on a worker (:class:`airflow_kafka_spark.sensors.health.StreamingHealthSensor`'s
``execute``), or in the triggerer with no task process at all
(:class:`airflow_kafka_spark.triggers.health.StreamingHealthStartTrigger`, Airflow's
``start_from_trigger``). The second matters during a restart: the gate starts while the new
driver's JVMs start, and on a worker it is a process start (imports, DAG parse: ~2 CPU-s) beside
them on the same machine.

The decision is a :class:`GateOpening`: the gate is a dry run's, refused (bad input: one line, nothing
changed), the repeat of a verdict an earlier try of this run gave, the kind's own gate polled on the
worker (a DStream job's group), or the checkpoint gate to watch (:class:`GateTarget`). It travels from
the triggerer to the worker in the trigger's event, so it has a dict form (:meth:`GateOpening.to_event`)
read back by :meth:`GateOpening.from_event`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from airflow_kafka_spark._util.text import redact_url_secrets
from airflow_kafka_spark.airflow_glue.jobs import cluster_endpoint, load_job, optional_text, recorded_gate_failure
from airflow_kafka_spark.airflow_glue.kinds import steps_for
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import app_versions, submit
from airflow_kafka_spark.runtime.health import HealthLook, failed_gate_log, make_control

#: the key of a trigger event that carries an opening rather than a health verdict
OPENING_KEY = "opening"


class Opening(StrEnum):
    DRY_RUN = "dry_run"      # a dry run started nothing to wait for
    REFUSED = "refused"      # bad input: the message says what and how to fix it
    REPEAT = "repeat"        # an earlier try of this run gave a verdict: repeat it
    ON_WORKER = "on_worker"  # this kind's gate polls on a worker (steps_for(spec).worker_gate)
    WATCH = "watch"          # the checkpoint gate, with its target


@dataclass(frozen=True)
class GateTarget:
    """What the checkpoint gate watches: the last submit's driver, and the position it started from.

    Plain JSON values only (they are a trigger's kwargs, stored by Airflow): no secret is among them,
    the Kafka config is read from ``kafka_conn_id`` where it is used.
    """

    checkpoint: str
    topics: list[str]
    kafka_conn_id: str
    min_batches: int
    baseline_batch: int | None
    baseline_query_id: str | None
    driver: dict[str, Any]
    endpoint: dict[str, Any] | None
    log_path: str | None
    idle_pass_s: float | None
    submitted_at_ms: int | None

    def trigger_kwargs(self) -> dict[str, Any]:
        return asdict(self)

    def look(self, samples: list[list[Any]]) -> HealthLook:
        """One look at the job (``runtime.health.check_health``), for the worker's probe and the trigger alike.

        The Kafka config is read from the connection when the look needs it (never carried), and the
        driver's log tail is redacted with it.
        """
        config: dict[str, Any] = {}

        def kafka_config() -> dict[str, Any]:
            if "c" not in config:
                config["c"] = StreamingKafkaHook(self.kafka_conn_id).kafka_config()
            return config["c"]

        ctl = make_control(self.driver, endpoint=self.endpoint)
        local_tail = lambda: submit.log_tail(self.log_path, kafka_config=config.get("c"))  # noqa: E731
        return HealthLook(checkpoint=self.checkpoint, topics=self.topics, kafka_config=kafka_config,
                          min_batches=self.min_batches, baseline_batch=self.baseline_batch,
                          baseline_query_id=self.baseline_query_id, alive=ctl.is_alive,
                          log_tail=failed_gate_log(ctl, local_tail), samples=samples,
                          idle_pass_s=self.idle_pass_s, submitted_at_ms=self.submitted_at_ms)


@dataclass(frozen=True)
class GateOpening:
    kind: Opening
    job: str
    message: str = ""
    target: GateTarget | None = None
    timeout_s: float = 0.0

    def to_event(self) -> dict[str, Any]:
        return {OPENING_KEY: self.kind.value, "job": self.job, "message": self.message, "timeout_s": self.timeout_s}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> GateOpening | None:
        """The opening an event carries, or None for a health verdict (the target never travels)."""
        if OPENING_KEY not in event:
            return None
        return cls(Opening(event[OPENING_KEY]), str(event.get("job")), str(event.get("message") or ""),
                   timeout_s=float(event.get("timeout_s") or 0.0))


def gate_min_batches(raw: Any, spec: JobSpec) -> int:
    """``min_batches`` as given (a number or its rendered text), else the registry's ``health_gate.min_batches``."""
    text = optional_text(raw)
    try:
        min_batches = int(text) if text is not None else spec.health_gate.min_batches
    except ValueError:
        raise UserError(f"min_batches must be a whole number, got {text!r}") from None
    if min_batches < 1:
        raise UserError(f"min_batches must be at least 1, got {min_batches}")
    return min_batches


def last_submit_target(spec: JobSpec, min_batches: int) -> GateTarget:
    """The driver of the job's last submit and the batch/query it started after; refused if there is none."""
    record = LifecycleRecord.load(spec.checkpoint)
    sub = app_versions.submitted_app(record)
    if record is None or sub is None or record.driver is None:
        raise UserError(f"job {spec.name}: no submitted driver is recorded beside {spec.checkpoint}; "
                        "submit the job before gating it")
    if record.driver.id != (sub.get("driver") or {}).get("id"):
        raise UserError(f"job {spec.name}: the recorded driver {record.driver.id} is not the one of the last submit")
    endpoint = cluster_endpoint(spec, sub) if sub["driver"]["kind"] != DriverKind.LOCAL else None
    return GateTarget(checkpoint=spec.checkpoint, topics=list(spec.topics), kafka_conn_id=spec.kafka_conn_id,
                      min_batches=min_batches, baseline_batch=sub.get("committed_before"),
                      baseline_query_id=sub.get("query_id_before"), driver=dict(sub["driver"]), endpoint=endpoint,
                      log_path=sub.get("log_path"), idle_pass_s=spec.health_gate.idle_pass_s,
                      submitted_at_ms=sub["driver"].get("started_at"))


@dataclass(frozen=True)
class GateAsk:
    """The gate's arguments as rendered, and which try of which run asks."""

    job: Any
    min_batches: Any = None
    gate_timeout_s: float | None = None
    registry_path: str | None = None
    dry_run: bool = False
    run: str = ""           # "<dag_id>/<run_id>": whose earlier verdict counts
    try_number: int = 1


def open_gate(ask: GateAsk) -> GateOpening:
    """The gate's first decision (see the module's docstring); reads the registry and the lifecycle record."""
    job = str(ask.job)
    if ask.dry_run:
        return GateOpening(Opening.DRY_RUN, job, "skipped (dry run: nothing was started)")
    try:
        _, spec = load_job(ask.job, ask.registry_path)
        if ask.try_number > 1 and (earlier := recorded_gate_failure(spec, ask.run)):
            return GateOpening(Opening.REPEAT, spec.name,
                               f"health gate of job {spec.name} failed in an earlier try of this run: {earlier}")
        min_batches = gate_min_batches(ask.min_batches, spec)
        timeout_s = float(ask.gate_timeout_s or spec.health_gate.timeout_s)
        if not steps_for(spec).commits_to_checkpoint:
            return GateOpening(Opening.ON_WORKER, spec.name, timeout_s=timeout_s)
        return GateOpening(Opening.WATCH, spec.name, target=last_submit_target(spec, min_batches),
                           timeout_s=timeout_s)
    except UserError as exc:   # it travels in a trigger event (stored, logged): redacted as a task failure is
        return GateOpening(Opening.REFUSED, job, redact_url_secrets(str(exc)))
