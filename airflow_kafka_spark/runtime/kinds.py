"""What the submit and the stop do for each kind of job (registry ``kind``) besides spark-submit itself.

One implementation per kind behind one small interface, so :mod:`.start_stop` holds no ``if the job
is a DStream job`` branch: a Structured Streaming job's position is its checkpoint,
which Spark reads itself; a DStream job's position is its consumer group, and its optional DStream
checkpoint can be read only by the build that wrote it (:mod:`.dstream`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime import dstream
from airflow_kafka_spark.runtime.drivers import StopResult


class RuntimeKind(Protocol):
    def before_start(self, spec: JobSpec, *, previous: bool) -> str | None:
        """Make the job's storage ready for this build; returns what was moved aside (a location), if anything."""
        ...

    def at_submit(
        self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """What the health gate needs recorded at submit beyond the checkpoint (written into ``record``)."""
        ...

    def judge_stop(self, spec: JobSpec, result: StopResult, witness: Mapping[str, Any] | None) -> StopResult:
        """The stop's outcome in this kind's terms. ``result`` is judged from the Spark checkpoint's files;
        ``witness`` is the job's own account (the agent's report), if it wrote one."""
        ...


class StructuredRuntime:
    """Spark's checkpoint is the whole position: Spark reads it, nothing to prepare or record."""

    def before_start(self, spec: JobSpec, *, previous: bool) -> None:
        return None

    def at_submit(self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]) -> None:
        return None

    def judge_stop(self, spec: JobSpec, result: StopResult, witness: Mapping[str, Any] | None) -> StopResult:
        return result   # the checkpoint's offsets and commits say whether the stop fell between batches


class DStreamRuntime:
    """Never start a build on another build's DStream checkpoint; record the group's offsets (the gate's baseline)."""

    def before_start(self, spec: JobSpec, *, previous: bool) -> str | None:
        return dstream.checkpoint_for_start(spec, previous=previous)

    def at_submit(self, spec: JobSpec, record: LifecycleRecord, kafka_config: Mapping[str, Any]) -> dict[str, Any]:
        view = KafkaView(dict(kafka_config), timeout=30.0)
        try:
            return dstream.record_submit(spec, record, kafka=view)
        finally:
            view.close()

    def judge_stop(self, spec: JobSpec, result: StopResult, witness: Mapping[str, Any] | None) -> StopResult:
        """A DStream job has no offset log to judge by: its ``checkpoint`` only holds the lifecycle record.

        What is known: whether the driver exited by itself or was killed, and, with the agent, whether
        its graceful ``StreamingContext.stop`` completed every batch it had received. Either way the
        restart re-reads from the group's commits (``commitAsync`` is one batch late); the plan after the
        stop announces how many records.
        """
        if result.outcome == "NOT_RUNNING":
            return replace(result, message="no driver was running")
        reported = (witness or {}).get("dstream") or {}
        again = (f"the next start re-reads from group {spec.group}'s commits (the restart plan after the stop "
                 "announces how many records)")
        if result.killed:
            return replace(result, outcome="KILLED", message=(
                f"killed after {result.waited_s:.0f}s (it did not stop by itself); the batches it had received "
                f"are not all done: {again}"))
        if reported.get("graceful_stop_returned") and reported.get("batches_not_completed") == []:
            return replace(result, outcome="STOPPED", message=(
                f"stopped gracefully after {result.waited_s:.0f}s: every batch it received completed (the last at "
                f"{reported.get('last_completed_batch')}); {again}"))
        if reported.get("batches_not_completed"):
            return replace(result, outcome="STOPPED_MID_BATCH", message=(
                f"exited after {result.waited_s:.0f}s with batches {reported['batches_not_completed']} not completed; "
                f"{again}"))
        # The driver exited by itself when asked (graceful, not killed); without a report nobody says more.
        return replace(result, outcome="STOPPED", message=(
            f"exited by itself after {result.waited_s:.0f}s when asked to stop; no agent report says whether every "
            f"batch it received completed: {again}"))


@dataclass
class KindStopJudge:
    """The stop's outcome as the job's kind judges it, decided once in :func:`.drivers.stop` (a
    :data:`~.drivers.StopJudge`): the job's own account (``witness_of``: its integration's stop witness)
    is read once a running driver is gone and kept in ``witness`` for the stop's report."""

    spec: JobSpec
    witness_of: Callable[[], Mapping[str, Any] | None]
    witness: Mapping[str, Any] | None = None

    def __call__(self, files_say: StopResult) -> StopResult:
        if files_say.outcome != "NOT_RUNNING":   # a driver ran and is gone: its report (if any) is written
            self.witness = self.witness_of()
        return runtime_kind(self.spec).judge_stop(self.spec, files_say, self.witness)


_KINDS: dict[JobKind, RuntimeKind] = {JobKind.STRUCTURED: StructuredRuntime(), JobKind.DSTREAM: DStreamRuntime()}


def runtime_kind(spec: JobSpec) -> RuntimeKind:
    """The submit- and stop-time steps of ``spec``'s kind."""
    return _KINDS[spec.kind]
