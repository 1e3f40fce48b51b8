"""``CompatibilityProbeOperator``: ask Spark itself whether an application runs on a job's checkpoint.

The task form of :func:`airflow_kafka_spark.runtime.probe.probe_application` (docs/probe.md): the
safe-restart plan runs the same probe for ``auto``; this operator lets a DAG ask before a deploy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from airflow_kafka_spark.airflow_glue.jobs import fail, kafka_config
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.operators._common import StreamingJobOperator
from airflow_kafka_spark.runtime import probe


class CompatibilityProbeOperator(StreamingJobOperator):
    """Ask Spark whether an application runs on the job's checkpoint (the compatibility probe, docs/probe.md).

    A shadow start of the application on a staged copy of the checkpoint with the ``noop`` sink;
    neither the checkpoint nor the sink is touched. Returns the :class:`~airflow_kafka_spark.runtime.probe.ProbeResult`
    as a dict (``answer``: compatible | breaking | unknown, ``reason``, ``error_class``...).

    :param application: the new application's file (default: the registry's). Not templated: it is
        what a DAG author deploys, never a trigger-form value.
    :param application_args: the new application's own arguments (default: the registry's).
    :param fail_on: ``breaking`` (default) fails the task when Spark refuses the checkpoint;
        ``unknown`` also when the probe could not tell; ``never`` only reports.
    """

    def __init__(self, *, job: str, application: str | None = None, application_args: list[str] | None = None,
                 fail_on: str = "breaking", **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.application = application
        self.application_args = application_args
        self.fail_on = fail_on

    def run(self, context: Any) -> dict[str, Any]:
        if self.fail_on not in ("breaking", "unknown", "never"):
            raise UserError(f"fail_on {self.fail_on!r} is not one of breaking, unknown, never")
        _, spec = self.load()
        if self.application is not None or self.application_args is not None:
            spec = dataclasses.replace(
                spec, application=self.application or spec.application,
                application_args=spec.application_args if self.application_args is None
                else tuple(str(a) for a in self.application_args))
        found = probe.probe_application(spec, kafka_config=kafka_config(spec), target=spark_target(spec))
        self.log.info("compatibility probe of %s on job %s: %s in %.1fs: %s", spec.application, spec.name,
                      found.answer, found.seconds, found.reason)
        failing = {"breaking": (probe.ProbeAnswer.BREAKING,),
                   "unknown": (probe.ProbeAnswer.BREAKING, probe.ProbeAnswer.UNKNOWN), "never": ()}[self.fail_on]
        if found.answer in failing:
            fail(context, f"job {spec.name}: the compatibility probe says {found.answer}: {found.reason}")
        return found.to_dict()
