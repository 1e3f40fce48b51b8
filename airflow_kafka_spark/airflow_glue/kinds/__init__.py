"""The kinds of job (registry ``kind``), each one implementation of the safe-restart steps.

``steps_for(spec)`` is the one place a job's kind is looked at in the Airflow layer: the operators
and the health sensor call the steps it returns (:class:`~airflow_kafka_spark.airflow_glue.kinds.base.KindSteps`),
as astronomer-cosmos maps an enum value to one module. A new kind is one module and one line here.
"""

from __future__ import annotations

from airflow_kafka_spark.airflow_glue.kinds import dstream, structured
from airflow_kafka_spark.airflow_glue.kinds.base import (
    BackupStep,
    GateStep,
    KindSteps,
    ResetStep,
    RestoreStep,
    ValidateStep,
)
from airflow_kafka_spark.registry.model import JobKind, JobSpec

_STEPS: dict[JobKind, KindSteps] = {
    JobKind.STRUCTURED: structured.STEPS,
    JobKind.DSTREAM: dstream.STEPS,
}


def steps_for(spec: JobSpec) -> KindSteps:
    """The safe-restart steps of ``spec``'s kind."""
    return _STEPS[spec.kind]


__all__ = ["BackupStep", "GateStep", "KindSteps", "ResetStep", "RestoreStep", "ValidateStep", "steps_for"]
