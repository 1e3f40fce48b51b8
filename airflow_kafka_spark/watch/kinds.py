"""What a job's kind (registry ``kind``) means where its position is read: the audit, ``aks watch``'s
commands and the CLI's ``--job`` checks.

One class per kind behind one small interface, as :mod:`airflow_kafka_spark.runtime.kinds` is for
the submit and the stop, so neither :mod:`.audit.job` nor the CLI branches on the kind: a
Structured Streaming job's position is its checkpoint; a DStream job's is the consumer group it
commits to, its optional DStream checkpoint is the only storage it writes besides, and its backups
are the group's offsets under ``dstream-<stamp>/`` (:mod:`airflow_kafka_spark.ops.dstream_backup`).
Here, below the runtime layer, because the watch layer and the CLI both read it.
"""

from __future__ import annotations

from typing import Any, Protocol

from airflow_kafka_spark.registry.model import JobKind, JobSpec


class PositionKind(Protocol):
    def scanned_location(self, spec: JobSpec) -> str | None:
        """What holds the job's position on storage (the audit lists its size and stale temp files), if anything."""
        ...

    def backup_summary(self, spec: JobSpec, now_ms: int, storage_options: dict | None) -> dict[str, Any]:
        """The audit's line on the job's backups: ``count``, ``invalid``, the newest's id, creation and age."""
        ...

    def flag_conflict(self, spec: JobSpec, *, checkpoint: str | None, group: str | None) -> str | None:
        """Why a command line's ``--checkpoint``/``--group`` cannot go with ``--job`` for this job (None: it can)."""
        ...

    def mirror_refusal(self, spec: JobSpec) -> str | None:
        """Why ``aks mirror`` has nothing to do for this job (None: it mirrors the checkpoint's batches)."""
        ...


def _age_s(now_ms: int, created_ms: int | None) -> float | None:
    return None if created_ms is None else round((now_ms - created_ms) / 1000.0, 1)


class StructuredPosition:
    """The checkpoint is the position, and what the backups copy (``ops/backup``)."""

    def scanned_location(self, spec: JobSpec) -> str | None:
        return spec.checkpoint

    def backup_summary(self, spec: JobSpec, now_ms: int, storage_options: dict | None) -> dict[str, Any]:
        from airflow_kafka_spark.ops.backup.catalog import list_backups

        catalog = list_backups(spec.backup_root, spec.name, storage_options=storage_options)
        newest = catalog.newest
        return {"count": len(catalog.backups), "invalid": len(catalog.invalid),
                "latest_id": newest.backup_id if newest else None,
                "latest_created_at_ms": newest.created_at_ms if newest else None,
                "latest_age_s": _age_s(now_ms, newest.created_at_ms) if newest else None}

    def flag_conflict(self, spec: JobSpec, *, checkpoint: str | None, group: str | None) -> str | None:
        if not group:
            return None
        return (f"--group {group} conflicts with --job {spec.name}: a Structured Streaming job keeps its position in "
                "its checkpoint; drop --group (or --job to look at a consumer group)")

    def mirror_refusal(self, spec: JobSpec) -> None:
        return None


class DStreamPosition:
    """The consumer group is the position; the backups are its offsets (and a copy of ``ssc.checkpoint``)."""

    def scanned_location(self, spec: JobSpec) -> str | None:
        return spec.dstream_checkpoint

    def backup_summary(self, spec: JobSpec, now_ms: int, storage_options: dict | None) -> dict[str, Any]:
        """A DStream job's backups: the ``dstream-<stamp>/`` folders with the group's offsets its safe restart wrote."""
        from airflow_kafka_spark.ops.dstream_backup import list_dstream_backups

        found = list_dstream_backups(spec, storage_options)
        newest = found[-1] if found else None
        created_ms = newest.created_at_ms if newest else None
        return {"count": len(found), "invalid": 0, "latest_id": newest.backup_id if newest else None,
                "latest_created_at_ms": created_ms, "latest_age_s": _age_s(now_ms, created_ms)}

    def flag_conflict(self, spec: JobSpec, *, checkpoint: str | None, group: str | None) -> str | None:
        if not checkpoint:
            return None
        return (f"--checkpoint conflicts with --job {spec.name}: a DStream job's position is its consumer group "
                f"{spec.group}; drop --checkpoint")

    def mirror_refusal(self, spec: JobSpec) -> str:
        return (f"job {spec.name} is a DStream job: it commits its position to group {spec.group} itself, so "
                "Kafka's lag tools already see it; there is nothing to mirror")


_KINDS: dict[JobKind, PositionKind] = {JobKind.STRUCTURED: StructuredPosition(), JobKind.DSTREAM: DStreamPosition()}


def position_kind(spec: JobSpec) -> PositionKind:
    """Where ``spec``'s kind keeps the job's position, and what that means for the audit and the CLI."""
    return _KINDS[spec.kind]
