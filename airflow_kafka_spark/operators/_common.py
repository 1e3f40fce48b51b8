"""The base of the job operators: ``job`` and ``reason`` templated, the registry read in ``execute``.

**No I/O in ``__init__``.** The scheduler and the DAG processor build operators on every parse;
the registry, connections and files are read in ``execute()`` only. The glue the sensors share
(job lookup, failure shape) is in :mod:`airflow_kafka_spark.airflow_glue.jobs`.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from airflow_kafka_spark.airflow_glue.jobs import load_job, run_reporting_failure
from airflow_kafka_spark.registry.model import JobSpec, Registry


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
