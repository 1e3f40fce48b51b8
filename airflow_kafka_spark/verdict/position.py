"""Where a restart of an existing checkpoint reads from: the committed position and a pending batch's end.

This is the verdict's reading of the format reference §2.4 (failure-scenarios.md §1.2); every other
place that asks "where does the job resume" should ask :func:`position_of` / :func:`resume_offsets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from airflow_kafka_spark.kafka.offsets import PartitionOffsets

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState


@dataclass(frozen=True)
class Position:
    """Where a restart reads from: ``start`` (Spark's start offsets) and, for a pending batch,
    the recorded end ``pending`` that the re-run reads up to (failure-scenarios.md §1.2)."""

    start: PartitionOffsets
    label: str                        # where ``start`` comes from, for messages
    known: bool                       # False when the files that hold it are unreadable
    pending_batch: int | None = None
    pending: PartitionOffsets = field(default_factory=dict)
    reference_ts: int | None = None   # newest batchTimestampMs: records below ``start`` are older
    reference_batch: int | None = None


def _merged(offsets_by_source: Mapping[str, PartitionOffsets]) -> PartitionOffsets:
    out: PartitionOffsets = {}
    for offs in offsets_by_source.values():
        out.update(offs or {})
    return out


def position_of(cp: CheckpointState) -> Position | None:
    """The restart position per §2.4 of the format reference, or None for a new query."""
    if not cp.exists:
        return None
    initial = _merged(cp.initial_offsets)
    if not cp.offset_batch_ids:
        if initial:  # sources/<n>/0 without batches: Spark's initialOffset reads it, not startingOffsets
            return Position(start=initial, label="sources/<n>/0, the resolved starting offsets", known=True)
        return None
    planned, committed = cp.latest_planned, cp.latest_committed
    batches = [b for b in (planned, committed) if b is not None and b.batch_timestamp_ms is not None]
    newest = max(batches, key=lambda b: b.batch_timestamp_ms or 0, default=None)
    ref = {"reference_ts": newest.batch_timestamp_ms if newest else None,
           "reference_batch": newest.batch_id if newest else None}
    pending = cp.pending_batch
    if pending is None:
        if committed is None:
            return Position(start={}, label="unreadable offsets", known=False, **ref)
        return Position(start=committed.kafka_offsets, label=f"committed offsets/{committed.batch_id}",
                         known=True, **ref)
    last = pending.batch_id
    pend = {"pending_batch": last, "pending": pending.kafka_offsets}
    if committed is not None and committed.batch_id == last - 1:
        return Position(start=committed.kafka_offsets, label=f"committed offsets/{last - 1}", known=True,
                         **pend, **ref)
    previous = next((b for b in cp.history if b.batch_id == last - 1), None)
    if previous is not None:
        return Position(start=previous.kafka_offsets, label=f"offsets/{last - 1}", known=True, **pend, **ref)
    if last == 0:
        return Position(start=initial, label="sources/<n>/0, the start of batch 0", known=bool(initial),
                         **pend, **ref)
    return Position(start={}, label=f"unreadable offsets/{last - 1}", known=False, **pend, **ref)


def resume_offsets(checkpoint: CheckpointState) -> PartitionOffsets:
    """Per partition the highest offset a restart will read up to (the committed position, or a pending
    batch's end): the reference below which a broker's log end counts as a regression (S26)."""
    pos = position_of(checkpoint)
    if pos is None:
        return {}
    out = dict(pos.start)
    for tp, end in pos.pending.items():
        out[tp] = max(end, out.get(tp, end))
    return out
