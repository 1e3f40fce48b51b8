"""A folder holding only ``sources/<id>/0``: a new query whose start is already fixed.

Why: a reset leaves exactly that (ops/reset_start.py), and Spark's Kafka source reads the file
before it looks at ``startingOffsets`` (docs/exact-start.md), so the verdict must not call the
reset's carried-over offsets "ignored": it says where the new query starts, whatever the
application passes. The per-partition checks of that start are the alignment's, as for any resume
position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.verdict.findings import INFO, Finding

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState
    from airflow_kafka_spark.checkpoint.position import ResumePosition
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def started_by_reset(cp: CheckpointState, record: LifecycleRecord | None) -> bool:
    """No batch yet, and ``sources/<id>/0`` hold exactly the reset's ``next_starting_offsets``."""
    nso = getattr(record, "next_starting_offsets", None)
    if cp.offset_batch_ids or not cp.initial_offsets or not nso:
        return False
    merged: PartitionOffsets = {}
    for offs in cp.initial_offsets.values():
        merged.update(offs or {})
    return merged == parse_offsets_json(nso, what="next_starting_offsets")


def sources_only_finding(cp: CheckpointState, pos: ResumePosition, record: LifecycleRecord | None) -> Finding:
    """NEW_QUERY_START: the folder has ``sources/<id>/0`` and no batch: where Spark's new query starts."""
    files = ", ".join(f"sources/{sid}/0" for sid in sorted(cp.initial_offsets))
    by = "written by the reset" if started_by_reset(cp, record) else "left by an earlier start that planned no batch"
    return Finding(
        "NEW_QUERY_START", INFO, numbers={"starting_offsets": to_offsets_json(pos.start), "source_files": files},
        message=(f"{cp.location} holds no batch yet: Spark starts a new query (new id, batch 0) and will start "
                 f"at {to_offsets_json(pos.start)}, whatever startingOffsets the application sets ({files}, "
                 f"{by}, is read before startingOffsets)"))
