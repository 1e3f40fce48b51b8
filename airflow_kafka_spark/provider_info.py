"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point.

Why this file is so plain: Airflow calls :func:`get_provider_info` while it *initialises its
configuration*, i.e. during ``import airflow`` itself (observed with 3.3.2). If this module is
missing, fails to import, or the function raises, every Airflow command and every
``import airflow`` in the process crashes, not only this provider. So it reads no file and
computes nothing; it returns a literal plus the ``config`` section built from
:data:`airflow_kafka_spark.settings.SETTINGS` (standard library only, no I/O), which is how
``airflow config list`` knows the ``[kafka_spark]`` options.

Rules kept here on purpose:

* ``package-name`` must equal the canonical distribution name (``airflow-kafka-spark``), or
  provider discovery raises ``ValueError`` and takes all providers down with it.
* The version is not repeated here: Airflow takes it from the installed distribution.
* No ``connection-types``: the jobs use the Kafka provider's ``kafka`` connection (its extra is
  the librdkafka config) and the Spark provider's ``spark`` connection. Registering either type
  again would race with those providers for the same type ("only one of them will succeed").
* Module lists are explicit, not discovered, so that a half-written module dropped into a
  package is not advertised; ``tests/airflow/test_provider.py`` fails when a public module in
  ``hooks/``, ``operators/``, ``sensors/`` or ``triggers/`` is not declared here (or the reverse).
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_spark.settings import provider_config

INTEGRATION = "Spark Structured Streaming on Kafka"


def get_provider_info() -> dict[str, Any]:
    """Return the provider dict validated against Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "airflow-kafka-spark",
        "name": "Kafka Spark Streaming",
        "description": (
            "Lifecycle of Spark Structured Streaming jobs that read from Kafka: checkpoint/Kafka "
            "validation, backup, restore, reset, safe restarts, lag and retention audits."
        ),
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://spark.apache.org/docs/latest/streaming/structured-streaming-kafka-integration.html",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_kafka_spark.hooks.streaming"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_kafka_spark.operators.approval",
                    "airflow_kafka_spark.operators.checkpoint",
                    "airflow_kafka_spark.operators.probe",
                    "airflow_kafka_spark.operators.links",
                    "airflow_kafka_spark.operators.restart_window",
                    "airflow_kafka_spark.operators.safe_restart",
                    "airflow_kafka_spark.operators.streaming",
                ],
            }
        ],
        # The task page's links (Spark application, finding docs, audit report): operators/links.py.
        "extra-links": [
            "airflow_kafka_spark.operators.links.SparkApplicationLink",
            "airflow_kafka_spark.operators.links.FindingDocsLink",
            "airflow_kafka_spark.operators.links.SecondFindingDocsLink",
            "airflow_kafka_spark.operators.links.ThirdFindingDocsLink",
            "airflow_kafka_spark.operators.links.AuditReportLink",
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_kafka_spark.sensors.health", "airflow_kafka_spark.sensors.lag"],
            }
        ],
        "config": provider_config(),
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_kafka_spark.triggers.health", "airflow_kafka_spark.triggers.lag"],
            }
        ],
        # The streaming-jobs page in the UI (a FastAPI app + nav entry). Airflow imports the class only
        # where it loads plugins (the API server, ...), never from this function.
        "plugins": [
            {"name": "airflow_kafka_spark", "plugin-class": "airflow_kafka_spark.ui.plugin.StreamingJobsPlugin"}
        ],
    }
