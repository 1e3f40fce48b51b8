"""What one safe-restart step asks of a kind of job: the typed requests and the one interface.

The operators of the ``streaming_safe_restart`` DAG parse their templated arguments once into the
frozen requests below and hand them, with the job, to the :class:`KindSteps` of the job's registry
``kind`` (:func:`airflow_kafka_spark.airflow_glue.kinds.steps_for`). Each kind is one module with
one implementation — the Flink Kubernetes operator's shape, one reconciler per deployment mode — so
the operators hold no ``if the job is a DStream job`` branch, and a new kind is one new module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.registry.model import JobSpec


@dataclass(frozen=True)
class ValidateStep:
    """``validate_before``, and the submit's judgement before it starts: the job's position against Kafka."""

    override: bool
    dry_run: bool
    reason: str | None = None
    #: None: a first start (no checkpoint and no application ever passed a gate) expects a new query
    expect_new_checkpoint: bool | None = None
    kafka_timeout_s: float = 10.0
    #: the lease holder that is not "someone else": the submit task judging before it starts, whose own
    #: earlier try may have been killed while it held the record's lease
    owner: str | None = None


@dataclass(frozen=True)
class BackupStep:
    """The stop task's backup: a verified copy of what holds the job's position (the job is stopped)."""

    dry_run: bool
    reason: str | None = None
    missing_ok: bool = False
    seal_key: bytes | None = None
    keep_backup_id: str | None = None   # a backup retention must not prune in this run
    #: False: the job's retention is not applied here but by :meth:`KindSteps.prune` after the restart
    #: window (the safe restart's finish task): reading every kept manifest is seconds at 20,000 files
    prune: bool = True
    #: the stop's pre-copy held in memory by this task (``ops.backup.precopy.PassChain``), not read back
    precopy: Manifest | None = None


@dataclass(frozen=True)
class RestoreStep:
    """``restore``: roll the job's position back to one named backup."""

    backup_id: str
    dry_run: bool
    seal_key: bytes | None = None


@dataclass(frozen=True)
class ResetStep:
    """``reset``: a new start at a planned position. The texts are the form's, already stripped of
    the empty values a template sends; each kind parses what it supports and refuses the rest."""

    mode: str | None
    dry_run: bool
    to_datetime: str | None = None
    shift_by: str | None = None
    to_offsets: str | None = None
    accept_data_loss: bool = False
    sink_log: str = "refuse"
    max_records_skipped: str | None = None
    seal_key: bytes | None = None   # keys the seal of the backup the reset takes first
    fresh_backup: bool = False      # never adopt the newest backup (ops.backup.adopt): take one


@dataclass(frozen=True)
class GateStep:
    """``health_gate`` of a kind whose gate is polled on the worker."""

    min_batches: int
    timeout_s: float
    poll_s: float
    promote: bool


class KindSteps(Protocol):
    """The safe-restart steps of one kind of job; each returns the step's XCom document."""

    #: the stop task may pre-copy a backup of this kind while the driver still runs
    precopies_backup: bool
    #: the job's progress is its checkpoint's ``commits/`` log (a Structured Streaming query)
    commits_to_checkpoint: bool
    #: a reset or restore of this kind is an offsets plan (ops/approval.py) a person may have to approve
    plans_offsets: bool

    def validate(self, spec: JobSpec, context: Any, step: ValidateStep, log: Any) -> dict[str, Any]: ...

    def backup(self, spec: JobSpec, context: Any, step: BackupStep, log: Any) -> dict[str, Any]: ...

    def restore(self, spec: JobSpec, context: Any, step: RestoreStep, log: Any) -> dict[str, Any]: ...

    def reset(self, spec: JobSpec, context: Any, step: ResetStep, log: Any) -> dict[str, Any]: ...

    def rollback(self, spec: JobSpec, context: Any, backup_task: Mapping[str, Any], log: Any) -> dict[str, Any]:
        """Put back this run's backup (the driver this run started is already stopped).

        The result holds ``restored_backup_id`` (None when nothing was restored) and ``notes``
        (lines for the audit entry); anything else is the kind's own account of the restore.
        """
        ...

    def prune(self, spec: JobSpec, backup_task: Mapping[str, Any], seal_key: bytes | None, log: Any) -> list[str]:
        """The job's ``backup_retention`` after a backup taken with ``BackupStep(prune=False)``, whose
        document is ``backup_task`` (that backup is kept); the names of the backups removed.

        Housekeeping: a store that refuses is logged and nothing is raised."""
        ...

    def worker_gate(self, spec: JobSpec, context: Any, step: GateStep, log: Any) -> dict[str, Any] | None:
        """The health gate polled on the worker, or None: this kind's gate is the sensor's deferrable
        checkpoint gate (:class:`airflow_kafka_spark.sensors.health.StreamingHealthSensor`)."""
        ...
