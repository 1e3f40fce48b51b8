"""What every operator of this provider shares: the job lookup, the Kafka config, the failure shape.

Why a common base:

* **A job is a registry name, nothing else.** Every operator takes ``job`` and resolves the
  checkpoint, backup root, stop marker, application and connections from the job registry. An
  unknown name, a path-like name (``../x``) or a broken registry fails the task with the
  registry's one-line message, before anything is read or written.
* **One failure shape.** A :class:`~airflow_kafka_spark.errors.UserError` (bad input, a BLOCK, an
  unreachable broker) becomes an ``AirflowFailException`` carrying that one line: retrying would
  not change a BLOCK, and the line is all a person sees in the task list. The same line is pushed
  as the XCom ``failure`` so the safe-restart DAG's last task can say why the run failed without
  reading logs.
* **No I/O in ``__init__``.** The scheduler and the DAG processor build operators on every parse;
  the registry, connections and files are read in ``execute()`` only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
from airflow_kafka_spark.lifecycle.record import DriverInfo
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import JobSpec, Registry
from airflow_kafka_spark.runtime import drivers

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
    """The registry and the job called ``job``; any problem is the registry's one-line UserError."""
    registry = load_registry(registry_path, dags_folder=None if registry_path else registry_dags_folder())
    return registry, registry.get(job)


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


def driver_control(spec: JobSpec, driver: DriverInfo, submitted: Mapping[str, Any] | None = None
                   ) -> tuple[Callable[[], bool], Callable[[], None]]:
    """``(is_alive, kill)`` for a recorded driver, whatever ran it.

    Local drivers are checked by pid on this host. Cluster drivers go through the cluster
    manager's CLI with the master recorded at submit time (the connection may have moved on), and
    the spark binary of the job's Spark connection.
    """
    if driver.kind == drivers.LOCAL:
        return (lambda: drivers.local_alive(driver)), (lambda: drivers.kill_local(driver))
    from airflow_kafka_spark.runtime import submit

    master, binary = cluster_endpoint(spec, submitted)
    env = submit.driver_env([binary], master)
    return ((lambda: submit.cluster_alive(driver, master=master, spark_binary=binary, env=env)),
            (lambda: submit.cluster_kill(driver, master=master, spark_binary=binary, env=env)))


def cluster_endpoint(spec: JobSpec, submitted: Mapping[str, Any] | None) -> tuple[str, str]:
    """(master, spark binary) to reach a cluster driver: the recorded master, the connection's binary."""
    from airflow_kafka_spark.runtime import submit

    hook = spark_hook(spec)
    master = str((submitted or {}).get("master") or hook._connection["master"])
    binary = submit.resolve_binary([hook._connection["spark_binary"]], os.environ)[0]
    return master, binary


def spark_hook(spec: JobSpec, **kwargs: Any) -> Any:
    """A ``SparkSubmitHook`` on the job's Spark connection, refusing a connection that does not exist.

    The hook itself silently falls back to ``master=yarn`` when the connection is missing, which
    would submit a local job to whatever YARN the worker can reach.
    """
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(spec.spark_conn_id)
    except AirflowNotFoundException:
        raise UserError(f"Spark connection {spec.spark_conn_id!r} is not defined; create it (type spark, host e.g. "
                        "local[*], yarn, k8s://https://host or spark://host:7077) or fix spark_conn_id in the job "
                        "registry") from None
    try:
        return SparkSubmitHook(conn_id=spec.spark_conn_id, **kwargs)
    except ValueError as exc:   # e.g. a spark-binary extra outside the provider's allowed list
        raise UserError(f"Spark connection {spec.spark_conn_id!r}: {exc}") from None


class StreamingJobOperator(BaseOperator):
    """Base of the job operators: ``job`` and ``reason`` templated, the registry read in ``execute``.

    :param job: the job's name in the job registry (templated). Never a path.
    :param reason: why this is done, kept in the lifecycle record's history (templated).
    :param registry_path: the registry file; default ``$AKS_JOB_REGISTRY`` or
        ``<dags_folder>/streaming_jobs.yaml``.
    """

    template_fields: tuple[str, ...] = ("job", "reason")
    ui_color = "#e8f4ea"

    def __init__(self, *, job: str, reason: str | None = None, registry_path: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.reason = reason
        self.registry_path = registry_path

    def load(self) -> tuple[Registry, JobSpec]:
        return load_job(self.job, self.registry_path)

    def execute(self, context: Any) -> Any:
        return run_reporting_failure(self, context, lambda: self.run(context))

    def run(self, context: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


def run_reporting_failure(task: BaseOperator, context: Any, body: Callable[[], Any]) -> Any:
    """Run ``body``; a failure becomes one line in the task log, the ``failure`` XCom and the exception.

    Skips and deferrals pass through untouched (``TaskDeferred`` is a BaseException).
    """
    try:
        return body()
    except AirflowSkipException:
        raise
    except UserError as exc:
        message = str(exc)
        _push_failure(context, message)
        raise AirflowFailException(message) from None
    except AirflowException as exc:
        _push_failure(context, str(exc) or type(exc).__name__)
        raise


def fail(context: Any, message: str) -> None:
    """Fail the task with ``message`` (pushed as the ``failure`` XCom too)."""
    _push_failure(context, message)
    raise AirflowFailException(message)


def _push_failure(context: Any, message: str) -> None:
    ti = context.get("ti") if isinstance(context, Mapping) else None
    if ti is None:
        return
    with contextlib.suppress(Exception):   # reporting must never hide the original failure
        ti.xcom_push(key=FAILURE_KEY, value=" ".join(message.split())[:4000])
