"""The job's Spark connection through the Spark provider's ``SparkSubmitHook``, as plain values for the core.

Why the provider's hook and not our own reading of the connection: its ``spark`` connection (master,
``deploy-mode``, ``spark-binary``, queue, namespace, keytab, principal) and the command line it
builds from it are what ``SparkSubmitOperator`` users already rely on; a connection that works
there must work here unchanged.

The hook keeps the resolved connection and the command builder private (``_connection``,
``_build_spark_submit_command``). Each private use sits in exactly one function below and goes
through :func:`~airflow_kafka_spark.hooks._provider_api.private_member`, so a provider release that
renames them fails here with one line naming the provider version and the supported range, and
fails tests/support/provider_contract.py (run on the newest provider in tests/airflow and on the
oldest supported one, 6.0.0, in tests/install) before any user sees it.

**OpenLineage.** ``SparkSubmitOperator`` puts the task's OpenLineage parent job (namespace, job
name, run id, root run) and optionally the transport into the Spark conf, so the Spark job's
lineage events hang under the Airflow task. The product builds the hook itself, so it does the same
here with the same functions (``common.compat``'s, which are no-ops without the openlineage
provider) and the same switches: ``[openlineage] spark_inject_parent_job_info`` and
``spark_inject_transport_info``. One difference: transport credentials (``auth.*``, ``headers.*``)
are **not** put on the command line, which ``ps``, the task's XCom and the lifecycle record show;
give them to the driver through ``spark-defaults.conf`` or ``--properties-file`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook, conf
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.hooks._provider_api import private_member
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.submit import SparkTarget

SPARK_PROVIDER = "apache-airflow-providers-apache-spark"
log = logging.getLogger(__name__)


def spark_hook(spec: JobSpec, **kwargs: Any) -> SparkSubmitHook:
    """A ``SparkSubmitHook`` on the job's Spark connection, refusing a connection that does not exist.

    The hook itself silently falls back to ``master=yarn`` when the connection is missing, which
    would submit a local job to whatever YARN the worker can reach.
    """
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


def resolved_connection(hook: SparkSubmitHook) -> Mapping[str, Any]:
    """The hook's resolved connection (master, deploy_mode, spark_binary, queue...).

    PRIVATE API: ``SparkSubmitHook._connection`` (set in its ``__init__`` by ``_resolve_connection``).
    """
    return private_member(hook, SparkSubmitHook, "_connection", SPARK_PROVIDER)


def build_command(hook: SparkSubmitHook, application: str) -> list[str]:
    """The spark-submit argv the hook builds for ``application`` from its connection and keyword arguments.

    PRIVATE API: ``SparkSubmitHook._build_spark_submit_command`` (``submit()`` would also run it,
    attached, which is exactly what a weeks-long driver must not do).
    """
    return list(private_member(hook, SparkSubmitHook, "_build_spark_submit_command", SPARK_PROVIDER)(application))


# Transport properties that carry credentials: never on a command line (see the module doc).
_SECRET_TRANSPORT_PARTS = (".auth.", ".headers.")


def with_lineage(spark_conf: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``spark_conf`` plus the OpenLineage properties ``SparkSubmitOperator`` would inject for this task.

    Keys the job's own ``spark_conf`` already sets are left alone (the provider's rule).
    """
    out = dict(spark_conf)
    # Imported here, not with the module: it loads the OpenLineage listener (~1 s of imports), which every task
    # process would otherwise pay while it parses a DAG file, the submit task inside the restart's window too.
    if conf.getboolean("openlineage", "spark_inject_parent_job_info", fallback=False):
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
        )

        out = inject_parent_job_information_into_spark_properties(out, context)
    if conf.getboolean("openlineage", "spark_inject_transport_info", fallback=False):
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_transport_information_into_spark_properties,
        )

        injected = inject_transport_information_into_spark_properties(dict(out), context)
        secret = sorted(k for k in injected if k not in out and any(p in k for p in _SECRET_TRANSPORT_PARTS))
        if secret:
            log.warning("OpenLineage transport credentials (%s) are not put on the spark-submit command line; "
                        "give them to the driver through spark-defaults.conf or --properties-file", ", ".join(secret))
        out = {k: v for k, v in injected.items() if k not in secret}
    return out


def spark_target(spec: JobSpec, context: Mapping[str, Any] | None = None) -> SparkTarget:
    """The job's Spark connection as the plain values the core's submit needs.

    ``context`` (a task's) adds the OpenLineage parent job to the commands it builds when
    ``[openlineage]`` enables it (see the module doc).
    """
    probe = spark_hook(spec, deploy_mode=spec.deploy_mode) if spec.deploy_mode else spark_hook(spec)
    conn = resolved_connection(probe)

    def build(kwargs: Mapping[str, Any], application: str) -> list[str]:
        kwargs = dict(kwargs)
        if context is not None:
            kwargs["conf"] = with_lineage(kwargs.get("conf") or {}, context)
        return build_command(spark_hook(spec, **kwargs), application)

    extra = BaseHook.get_connection(spec.spark_conn_id).extra_dejson or {}
    return SparkTarget(master=str(conn["master"]), deploy_mode=conn["deploy_mode"],
                       spark_binary=str(conn["spark_binary"]), build_command=build, conn_extra=dict(extra))
