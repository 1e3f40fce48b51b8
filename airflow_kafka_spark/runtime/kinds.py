"""What a submit does for each kind of job (registry ``kind``) besides spark-submit itself.

One implementation per kind behind one small interface, so the submit (:mod:`.start_stop`) holds
no ``if the job is a DStream job`` branch: a Structured Streaming job's position is its checkpoint,
which Spark reads itself; a DStream job's position is its consumer group, and its optional DStream
checkpoint can be read only by the build that wrote it (:mod:`.dstream`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime import dstream


class SubmitKind(Protocol):
    def before_start(self, spec: JobSpec, *, previous: bool) -> str | None:
        """Make the job's storage ready for this build; returns what was moved aside (a location), if anything."""
        ...

    def at_submit(
        self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """What the health gate needs recorded at submit beyond the checkpoint (written into ``record``)."""
        ...


class StructuredSubmit:
    """Spark's checkpoint is the whole position: Spark reads it, nothing to prepare or record."""

    def before_start(self, spec: JobSpec, *, previous: bool) -> None:
        return None

    def at_submit(self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]) -> None:
        return None


class DStreamSubmit:
    """Never start a build on another build's DStream checkpoint; record the group's offsets (the gate's baseline)."""

    def before_start(self, spec: JobSpec, *, previous: bool) -> str | None:
        return dstream.checkpoint_for_start(spec, previous=previous)

    def at_submit(self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]) -> dict[str, Any]:
        view = KafkaView(dict(kafka_config), timeout=30.0)
        try:
            return dstream.record_submit(spec, record, kafka=view)
        finally:
            view.close()


_KINDS: dict[JobKind, SubmitKind] = {JobKind.STRUCTURED: StructuredSubmit(), JobKind.DSTREAM: DStreamSubmit()}


def submit_kind(spec: JobSpec) -> SubmitKind:
    """The submit-time steps of ``spec``'s kind."""
    return _KINDS[spec.kind]
