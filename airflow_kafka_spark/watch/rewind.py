"""Offsets that went backwards: the REWIND findings of a job's status, from its checkpoint and the broker.

Three sources, each per partition: (a) the offsets of a partition went backwards between two batches
of the history and the job has not climbed back to the offset it had reached before (Burrow rule 2
with ``checkIfRewindRecovered``, PR #716); (b) the broker's log end is below the job's position
(topic deleted and recreated, truncated, or another cluster: S02/S06), or below a log end seen in an
earlier sample; (c) a partition of the checkpoint is gone from the broker (S05). A log-end regression
seen only in the newest sample, while the previous sample was fine, is a possible transient
regression (S26: a leader change can report a stale offset once): it is reported apart, so the
status says WARN now and REWIND if the next run sees it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING

from airflow_kafka_spark.watch.lag_trend import position_at

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition


@dataclass(frozen=True)
class Rewinds:
    """One line per partition: ``rewind`` (REWIND now), ``transient`` (seen once, WARN), and the
    history's rewinds the job has ``recovered`` from (findings only)."""

    rewind: dict[TopicPartition, str] = field(default_factory=dict)
    transient: dict[TopicPartition, str] = field(default_factory=dict)
    recovered: list[str] = field(default_factory=list)


def _regressions(
    log_end: PartitionOffsets, position: PartitionOffsets | None, earlier: Sequence[PartitionOffsets]
) -> dict[TopicPartition, str]:
    """Partitions whose log end is below the job's position or below an earlier sample's log end."""
    out: dict[TopicPartition, str] = {}
    for tp, end in log_end.items():
        if position is not None and tp in position and end < position[tp]:
            out[tp] = f"{tp}: log end {end} < position {position[tp]}"
            continue
        peak = max((e[tp] for e in earlier if tp in e), default=None)
        if peak is not None and end < peak:
            out[tp] = f"{tp}: log end went backwards from {peak} to {end}"
    return out


def find_rewinds(
    batches: Sequence[BatchOffsets],
    position: PartitionOffsets,
    broker_latest: PartitionOffsets,
    samples: Sequence[tuple[int, PartitionOffsets]],
) -> Rewinds:
    """Rewinds of ``batches`` (with Kafka offsets, in batch order) against the broker now and before.

    ``position``: the job's committed (else planned) offsets; ``samples``: earlier broker log ends
    ``(sampled_at_ms, latest)``, oldest first, all before now.
    """
    rewind: dict[TopicPartition, str] = {}
    recovered: list[str] = []
    for tp in sorted({tp for b in batches for tp in b.kafka_offsets}):
        seq = [(b.batch_id, b.kafka_offsets[tp]) for b in batches if tp in b.kafka_offsets]
        last_off = seq[-1][1]
        peak = seq[0][1]
        for (_, a), (bid, b) in pairwise(seq):
            if b < a:
                line = f"{tp}: batch {bid} went back from {a} to {b}"
                if last_off < peak:
                    rewind[tp] = f"{line}; {peak - last_off} records to replay before {peak} is reached again"
                else:
                    recovered.append(f"{line} (recovered: now at {last_off} ≥ {peak})")
            peak = max(peak, b)

    planned = batches[-1].kafka_offsets
    for tp in sorted(tp for tp in planned if tp not in broker_latest):
        rewind.setdefault(tp, f"{tp}: partition gone from the broker (topic deleted or partitions removed)")
    ref_position = {tp: max(planned[tp], position.get(tp, planned[tp])) for tp in planned}
    regressed_now = _regressions(broker_latest, ref_position, [e for _, e in samples])
    transient: dict[TopicPartition, str] = {}
    if regressed_now:
        if samples:
            prev_t, prev_end = samples[-1]
            timed = [b for b in batches if b.batch_timestamp_ms is not None]
            regressed_prev = _regressions(prev_end, position_at(timed, prev_t), [e for _, e in samples[:-1]])
        else:
            regressed_prev = dict(regressed_now)
        for tp, line in regressed_now.items():
            if tp in regressed_prev:
                rewind.setdefault(tp, line)
            else:
                transient[tp] = line
    return Rewinds(rewind, transient, recovered)
