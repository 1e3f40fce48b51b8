"""Where a job resumes: THE one reading of a checkpoint's position.

Every question of the form "where does this job stand / start again" is answered here, from a
:class:`~airflow_kafka_spark.checkpoint.model.CheckpointState`: the verdict (Spark's restart start
and the regression reference), reset and restore (what was processed up to), the watchers (lag is
counted from the committed position) and the health gate (where an idle job reads next).

Two readings, one value: ``start`` is where Spark's restart reads from (for a pending batch
``offsets/L`` it is the end of ``offsets/L-1``, which Spark reads on every restart), ``committed``
is the end of the last committed batch (what was processed up to); they differ only in damaged or
unusual checkpoints.
Before the first commit both fall back to ``sources/<n>/0``, the offsets Spark resolved for batch 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets

#: ``committed_label`` before the first commit: the position is where batch 0 starts.
NOTHING_COMMITTED = "sources/<n>/0 (nothing committed yet)"


@dataclass(frozen=True)
class ResumePosition:
    """Where a restart reads from, and what the last committed batch covered.

    ``start`` are Spark's start offsets (``label`` says where they come from, ``known`` is False when
    the files that hold them are unreadable); a pending batch re-runs up to ``pending``.
    ``committed`` is the end of the last committed batch (``committed_batch``), or ``sources/<n>/0``
    when nothing was committed yet (``committed_batch`` None).
    """

    start: PartitionOffsets
    label: str                        # where ``start`` comes from, for messages
    known: bool                       # False when the files that hold it are unreadable
    pending_batch: int | None = None
    pending: PartitionOffsets = field(default_factory=dict)
    reference_ts: int | None = None   # newest batchTimestampMs: records below ``start`` are older
    reference_batch: int | None = None
    committed: PartitionOffsets = field(default_factory=dict)
    committed_batch: int | None = None

    @property
    def committed_label(self) -> str:
        """Where ``committed`` comes from, for plans and messages."""
        if self.committed_batch is None:
            return NOTHING_COMMITTED
        return f"offsets/{self.committed_batch} (last committed)"

    @property
    def read_up_to(self) -> PartitionOffsets:
        """Per partition the highest offset a restart reads up to (``start``, or a pending batch's end)."""
        out = dict(self.start)
        for tp, end in self.pending.items():
            out[tp] = max(end, out.get(tp, end))
        return out


def _merged(offsets_by_source: Mapping[str, PartitionOffsets]) -> PartitionOffsets:
    out: PartitionOffsets = {}
    for offs in offsets_by_source.values():
        out.update(offs or {})
    return out


def resume_position(cp: CheckpointState) -> ResumePosition | None:
    """Where Spark's restart of this checkpoint reads from, or None for a new query (nothing to resume)."""
    if not cp.exists:
        return None
    initial = _merged(cp.initial_offsets)
    committed = cp.latest_committed
    processed = committed
    if committed is None and cp.commit_log_absent and cp.before_latest is not None:
        # Spark 2.1 wrote no commit log and planned batch L only after finishing L-1: its restart
        # re-runs L from offsets/L-1, so that is what was processed up to (not sources/<n>/0).
        processed = cp.before_latest
    done = {"committed": dict(processed.kafka_offsets) if processed is not None else initial,
            "committed_batch": processed.batch_id if processed is not None else None}
    if not cp.offset_batch_ids:
        if initial:  # sources/<n>/0 without batches: Spark's initialOffset reads it, not startingOffsets
            return ResumePosition(start=initial, label="sources/<n>/0, the resolved starting offsets", known=True,
                                  **done)
        return None
    planned = cp.latest_planned
    batches = [b for b in (planned, committed) if b is not None and b.batch_timestamp_ms is not None]
    newest = max(batches, key=lambda b: b.batch_timestamp_ms or 0, default=None)
    ref = {"reference_ts": newest.batch_timestamp_ms if newest else None,
           "reference_batch": newest.batch_id if newest else None, **done}
    pending = cp.pending_batch
    if pending is None:
        if committed is None:
            return ResumePosition(start={}, label="unreadable offsets", known=False, **ref)
        return ResumePosition(start=committed.kafka_offsets, label=f"committed offsets/{committed.batch_id}",
                              known=True, **ref)
    last = pending.batch_id
    pend = {"pending_batch": last, "pending": pending.kafka_offsets}
    if committed is not None and committed.batch_id == last - 1:
        return ResumePosition(start=committed.kafka_offsets, label=f"committed offsets/{last - 1}", known=True,
                              **pend, **ref)
    previous = cp.before_latest if cp.before_latest is not None and cp.before_latest.batch_id == last - 1 \
        else next((b for b in cp.history if b.batch_id == last - 1), None)
    if previous is not None:
        return ResumePosition(start=previous.kafka_offsets, label=f"offsets/{last - 1}", known=True, **pend, **ref)
    if last == 0:
        return ResumePosition(start=initial, label="sources/<n>/0, the start of batch 0", known=bool(initial),
                              **pend, **ref)
    why = "unreadable" if last - 1 in cp.offset_batch_ids else "missing"
    return ResumePosition(start={}, label=f"{why} offsets/{last - 1}", known=False, **pend, **ref)


def resume_offsets(cp: CheckpointState) -> PartitionOffsets:
    """Per partition the highest offset a restart will read up to (the committed position, or a pending
    batch's end): the reference below which a broker's log end counts as a regression (S26)."""
    pos = resume_position(cp)
    return {} if pos is None else pos.read_up_to
