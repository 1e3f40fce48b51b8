"""The Kafka connector for a driver on a ``local`` master: it is not part of Spark.

A cluster job names the connector in its spark_conf (``spark.jars``/``spark.jars.packages``) or has
it installed; a local one gets the jars ``[kafka_spark] connector_jars`` lists (the dev stack and the
test suite set it), else the connector matching the installed pyspark from Maven.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata

from airflow_kafka_spark import settings
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry.model import JobSpec

# Where the Kafka connector jars for a local master come from when the job's spark_conf names none:
# comma-separated paths (the dev stack and the test suite set it from devstack.jars), else Maven.
CONNECTOR_JARS_ENV = settings.BY_NAME["connector_jars"].env  # AIRFLOW__KAFKA_SPARK__CONNECTOR_JARS
CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13"


def needs_local_connector_jars(spec: JobSpec, master: str) -> bool:
    """The Kafka connector is not part of Spark. On a ``local`` master :func:`local_connector` adds it;
    a cluster job names it in spark_conf (``spark.jars``/``spark.jars.packages``) or has it installed."""
    declared = any(k in spec.spark_conf for k in ("spark.jars", "spark.jars.packages")) or any(
        "spark-sql-kafka" in item for item in (*spec.jars, *spec.packages))
    return master.strip().lower().startswith("local") and not declared


@dataclass(frozen=True)
class ConnectorJars:
    """How a local driver gets the Kafka connector: jar paths, or a Maven coordinate for spark.jars.packages."""

    jars: tuple[str, ...] = ()
    packages: str | None = None


def local_connector(spec: JobSpec, master: str, env: Mapping[str, str]) -> ConnectorJars:
    """The connector for a ``local`` master whose spark_conf names none (else nothing to add).

    ``[kafka_spark] connector_jars`` (comma-separated paths) when set, else the connector matching the
    installed pyspark from Maven (``spark.jars.packages``; needs network access at driver start).
    """
    if not needs_local_connector_jars(spec, master):
        return ConnectorJars()
    setting = settings.value("connector_jars", None if env is os.environ else env) or ""
    listed = tuple(j.strip() for j in setting.split(",") if j.strip())
    if listed:
        return ConnectorJars(jars=listed)
    try:
        version = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        raise UserError(
            f"job {spec.name}: a local master needs the Kafka connector; set spark.jars or "
            "spark.jars.packages in its spark_conf, or [kafka_spark] connector_jars to the jar "
            "paths"
        ) from None
    return ConnectorJars(packages=f"{CONNECTOR_PACKAGE}:{version}")
