"""Airflow glue that every operator and sensor of this provider shares: job lookup, Kafka config, actor, failure shape.

Why a package of its own (``airflow_glue``, a layer between triggers and hooks) and not
``operators/``: the sensors need the same lookup and failure shape as the operators, and the layers
forbid sensors -> operators; and not ``hooks/``: these are not hooks (the provider declares every
module of ``hooks/`` to Airflow as a hook). Everything here resolves an
Airflow thing (a connection, the task context, ``[core] dags_folder``) into the plain values the
core takes, or turns a core error into Airflow's failure; no domain rule lives here.

* **A job is a registry name, nothing else.** Every task takes ``job`` and resolves the
  checkpoint, backup root, stop marker, application and connections from the job registry. An
  unknown name, a path-like name (``../x``) or a broken registry fails the task with the
  registry's one-line message, before anything is read or written.
* **One failure shape.** A :class:`~airflow_kafka_spark.errors.UserError` (bad input, a BLOCK, an
  unreachable broker) becomes an ``AirflowFailException`` carrying that one line: retrying would
  not change a BLOCK, and the line is all a person sees in the task list. The same line is pushed
  as the XCom ``failure`` so the safe-restart DAG's last task can say why the run failed without
  reading logs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_kafka_spark._util.text import redact_url_secrets
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import JobKind, JobSpec, Registry
from airflow_kafka_spark.runtime import start_stop
from airflow_kafka_spark.runtime.health import record_failed_gate

FAILURE_KEY = "failure"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", "", "none", "null"}


def flag(value: Any, *, name: str) -> bool:
    """A boolean argument that may arrive rendered from a template (``"True"``) or from XCom."""
    if isinstance(value, bool):
        return value
    if value is None:
        return False
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UserError(f"{name} must be true or false, got {value!r}")


def optional_text(value: Any) -> str | None:
    """``None`` for the empty values a form or an unset template sends ("", "None", null)."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None", "null") else text


def registry_dags_folder() -> str | None:
    """``[core] dags_folder``: the registry file sits beside the DAGs unless ``$AKS_JOB_REGISTRY`` says otherwise."""
    try:
        return conf.get("core", "dags_folder")
    except Exception:  # an unconfigured Airflow: the registry's own search applies
        return None


def load_job(job: Any, registry_path: str | None = None) -> tuple[Registry, JobSpec]:
    """The registry and the job called ``job``; any problem is the registry's one-line UserError.

    A ``kind: dstream`` job is returned too: the safe-restart DAG's operators hand it to
    :mod:`airflow_kafka_spark.airflow_glue.kinds`; a task that only knows Structured Streaming
    refuses it with :func:`require_structured`.
    """
    registry = load_registry(registry_path, dags_folder=None if registry_path else registry_dags_folder())
    return registry, registry.get(job)


def require_structured(spec: JobSpec, what: str) -> JobSpec:
    """Refuse a DStream job in a task that reads Structured Streaming checkpoints (one line, nothing changed)."""
    if spec.kind is not JobKind.STRUCTURED:
        raise UserError(f"job {spec.name!r} is a DStream job (kind: dstream, group {spec.group}): {what} works on "
                        "Structured Streaming checkpoints only; the streaming_safe_restart DAG (modes auto, keep, "
                        "reset-preserve) manages DStream jobs")
    return spec


def kafka_config(spec: JobSpec) -> dict[str, Any]:
    """The job's librdkafka config from its ``kafka`` connection (secrets registered with the masker)."""
    return StreamingKafkaHook(spec.kafka_conn_id).kafka_config()


def who(context: Mapping[str, Any]) -> str:
    """The person (or system) that triggered the run, for audit entries."""
    dag_run = context.get("dag_run")
    user = getattr(dag_run, "triggering_user_name", None) if dag_run is not None else None
    return str(user or "unknown")


def task_holder(context: Mapping[str, Any]) -> str:
    """``dag_id/run_id/task_id``: identifies one task of one run (lease holder, event actor)."""
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}"


def run_holder(context: Mapping[str, Any]) -> str:
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.run_id}"


def actor(context: Mapping[str, Any]) -> str:
    return f"{who(context)} via {task_holder(context)}"


def cluster_endpoint(spec: JobSpec, submitted: Mapping[str, Any]) -> dict[str, Any]:
    """Where the cluster driver of the last submit answers (JSON): as recorded, else resolved from the connection."""
    drv = submitted.get("driver") or {}
    info = DriverInfo(kind=str(drv.get("kind")), id=str(drv.get("id")), host=drv.get("host"))
    return start_stop.driver_endpoint(info, lambda: spark_target(spec), submitted).to_dict()


def run_reporting_failure(task: Any, context: Any, body: Callable[[], Any]) -> Any:
    """Run ``body``; a failure becomes one line in the task log, the ``failure`` XCom and the exception.

    Skips and deferrals pass through untouched (``TaskDeferred`` is a BaseException).
    """
    try:
        return body()
    except AirflowSkipException:
        raise
    except UserError as exc:
        message = redact_url_secrets(str(exc))
        push_failure(context, message)
        raise AirflowFailException(message) from None
    except AirflowException as exc:
        push_failure(context, str(exc) or type(exc).__name__)
        raise
    except Exception as exc:   # a bug or an unexpected library error: the audit still says what it was
        push_failure(context, redact_url_secrets(f"{type(exc).__name__}: {exc}"))
        raise


def fail(context: Any, message: str) -> None:
    """Fail the task with ``message`` (pushed as the ``failure`` XCom too)."""
    push_failure(context, message)
    raise AirflowFailException(message)


def fail_health_gate(context: Any, spec: JobSpec, *, state: str, reason: str, message: str,
                     lag_records: int | None, log: Any) -> None:
    """Fail a health gate: the ``failure`` XCom first, then ``health_gate_failed`` in the record.

    In that order because the XCom is what the run's audit and the rollback read: a record that
    cannot be written (a locked or unreachable store) is logged and must not replace why the gate
    failed with why the bookkeeping failed.
    """
    push_failure(context, message)
    try:
        record_failed_gate(spec.name, spec.checkpoint, actor=actor(context), state=state, reason=reason,
                           lag_records=lag_records)
    except Exception as exc:
        log.warning("health_gate_failed not written to the lifecycle record of %s: %s", spec.name, exc)
    raise AirflowFailException(message)


def recorded_gate_failure(spec: JobSpec, run: str) -> str | None:
    """Why run ``run``'s health gate failed, from its ``health_gate_failed`` entry in the job's record.

    Read by the run's audit when the gate's ``failure`` XCom never arrived (its worker was killed, or
    the push failed), and by a retried gate: a verdict the gate already gave is repeated, not judged again.
    """
    record = LifecycleRecord.load(spec.checkpoint)
    for event in reversed(record.history if record else []):
        if event.get("event") == LifecycleEvent.HEALTH_GATE_FAILED and f"{run}/" in str(event.get("actor")):
            details = event.get("details") or {}
            return f"health gate {details.get('state')}: {details.get('reason')}"
    return None


def push_failure(context: Any, message: str) -> None:
    ti = context.get("ti") if isinstance(context, Mapping) else None
    if ti is None:
        return
    with contextlib.suppress(Exception):   # reporting must never hide the original failure
        ti.xcom_push(key=FAILURE_KEY, value=" ".join(message.split())[:4000])
