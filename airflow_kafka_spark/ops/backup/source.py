"""What a backup may copy: a checkpoint that exists, holds a Structured Streaming query, and has no links or
special files; checked once, before anything is read or written (``ops.backup.take``, ``ops.backup.precopy``);
and the Kafka offsets a backup's manifest records from it."""

from __future__ import annotations

from typing import Any

from airflow_kafka_spark._util.fs import Location, open_location, read_bytes
from airflow_kafka_spark._util.paths import irregular_entries
from airflow_kafka_spark.checkpoint.formats import parse_offsets_file
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import default_job_name, validate_job_name
from airflow_kafka_spark.ops.backup.catalog import open_backup_root
from airflow_kafka_spark.ops.guards import check_locations


def open_sides(checkpoint_location: str, backup_root: str, storage_options: dict | None,
               backup_storage_options: dict | None) -> tuple[Location, CheckpointState, Location, Any]:
    """Both ends of a pre-copy (``ops.backup.precopy``), opened from their URLs and checked once, in the order
    a backup checks them: the checkpoint (no links or special files), its state, the backup root, that neither
    holds the other, and the lifecycle record."""
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    refuse_irregular(ck)
    state = read_source(ck)
    root = open_backup_root(backup_root, backup_storage_options)
    check_locations(ck, root)
    return ck, state, root, LifecycleRecord.load(checkpoint_location, storage_options=storage_options)


def job_of(checkpoint_location: str, job: str | None, record: LifecycleRecord | None) -> str:
    """The job whose backups a checkpoint's are: ``job``, else the lifecycle record's, else the folder's name.

    One rule for both sides (:func:`~airflow_kafka_spark.names.default_job_name`): ``aks backup`` files
    backups by it and restore reads them by it, so a checkpoint backed up without ``--job`` is restored
    without it too.
    """
    name = job if job is not None else default_job_name(checkpoint_location, record.job_name if record else None)
    validate_job_name(name)
    return name


def read_source(ck: Location) -> CheckpointState:
    """Read a checkpoint that must exist and have something to back up."""
    state = read_checkpoint(ck)
    if not state.exists:
        if state.legacy_escaped:
            raise UserError(f"checkpoint location {ck.url} does not exist, but "
                            f"{state.problems[0].message}; back up {state.legacy_escaped} itself, or move it first")
        raise UserError(f"checkpoint location {ck.url} does not exist; pass the folder that holds "
                        "offsets/, commits/ and metadata")
    if not state.offset_batch_ids and not state.commit_batch_ids and state.query_id is None \
            and not state.initial_offsets:
        raise UserError(f"{ck.url} is not a Structured Streaming checkpoint (no metadata, offsets/ "
                        "or commits/); pass the folder that holds them")
    return state


def refuse_irregular(ck: Location) -> None:
    """Symbolic links and special files in a checkpoint are refused, before anything reads them.

    Spark never writes either. A link may lead out of the checkpoint (its target would be copied
    into the backup store), to ``/dev/zero`` (a copy without end) or nowhere; a FIFO blocks its
    first reader forever. Refusing is safer than skipping: a skipped link would make a backup that
    silently misses a file the query needs.
    """
    bad = irregular_entries(ck, limit=1)
    if bad:
        rel, kind = bad[0]
        raise UserError(f"checkpoint {ck.url} contains {rel}, {kind}: Spark writes only regular files there, so "
                        "this one was put there by hand; remove it (or replace it by the real file) and back up "
                        "again — nothing was copied")


def offsets_at(ck: Location, state: CheckpointState, batch: int | None) -> PartitionOffsets | None:
    """Kafka end offsets of ``offsets/<batch>`` (from the state already read when it is that batch)."""
    if batch is None:
        return None
    for b in (state.latest_committed, state.latest_planned):
        if b is not None and b.batch_id == batch:
            return b.kafka_offsets
    raw = read_bytes(ck.child("offsets", str(batch)))
    if raw is None:
        return None
    try:
        return parse_offsets_file(batch, raw).kafka_offsets
    except UserError:
        return None
