"""Retention headroom (time to data loss) for a Structured Streaming job (catch-up: :mod:`.catch_up`).

Headroom answers "how long can this job stay down before Kafka deletes records it has not read?"
(feature 6 of the anchors; S01 is what happens when the answer is ignored). It is computed as if the
job stopped now — its position ``C`` frozen — so it is the downtime budget; for a job that keeps
running it is a lower bound of the time to loss. Per partition, the broker deletes records in two
ways, and the headroom is the sooner of the two:

By time (``retention.ms``). The broker deletes whole segments, oldest first, once the segment's
*largest* record timestamp is older than ``now − retention.ms`` (``UnifiedLog.deleteOldSegments``;
the log start offset moves at once, the files go ``file.delete.delay.ms`` later). The check runs
every ``log.retention.check.interval.ms`` (5 min by default), so deletion happens up to that much
after the estimate. The segment holding ``C`` has a largest timestamp ≥ that of the first unread
record, so ``ts(first unread) + retention.ms − now`` is the earliest the record can go: a lower
bound, returned with basis ``first-unread-record``. When the caller knows the segment's largest
timestamp (``segment_max_ts``, e.g. from the ``.timeindex`` or by reading the last record of the
segment) the estimate is the broker's own rule (basis ``segment-max-ts``). The *active* segment is
deletable only when the high watermark has reached the log end and every segment before it has
expired (the broker then rolls a new one first); under continuous production its largest timestamp
keeps moving, so it survives until rolled (``segment.ms``, ``segment.bytes``) — later than the
estimate. Record timestamps are what the broker uses too, so a producer clock skew moves the real
deletion and the estimate alike. Without a record timestamp the time of ``C`` can be interpolated
(basis ``interpolated``) from the offsets history and broker samples, like the time lag.

By size (``retention.bytes``, per partition). The broker deletes the oldest segments while the
partition stays at or above ``retention.bytes`` without them: the segment holding ``C`` goes once
the bytes *after* that segment reach ``retention.bytes``. Those bytes are at most the unread bytes
(from ``C`` to the log end), so the earliest deletion is when the unread bytes reach
``retention.bytes``: ``(retention.bytes − unread bytes) ÷ produce rate in bytes/s``, again a lower
bound, late by up to one segment (``segment.bytes``, 1 GiB by default) of produced data. Unread
bytes are estimated as unread records × the partition's average record size on disk
(``partition_bytes ÷ (log end − log start)``, batches, compression and markers included).

``None`` seconds mean infinite: no deletion policy (``cleanup.policy=compact`` alone — compaction
removes superseded values of a key, not offsets the job needs to read), ``retention.ms``/
``retention.bytes`` of -1, or no production. Unknown inputs never turn into infinite: such a
partition is listed in ``unknown`` with the reason, and the job's headroom is the minimum over the
partitions that are known. Tiered storage (``local.retention.*``) is not modelled: remote segments
stay readable, so the local figures would be pessimistic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from airflow_kafka_spark.watch.lag import FirstUnread, produce_rates
from airflow_kafka_spark.watch.offset_time import CurveBook, LazyCurve, OffsetSample, OffsetTimeCurve

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo

TimeBasis = Literal["segment-max-ts", "first-unread-record", "interpolated", "nothing-unread", "already-lost"]
SizeBasis = Literal["unread-bytes", "nothing-unread", "already-lost"]


@dataclass(frozen=True)
class PartitionHeadroom:
    """Time until retention deletes a record of this partition that the job has not read.

    ``seconds`` is ``min(by_time_s, by_size_s)``; ``None`` with ``unknown is None`` means infinite.
    """

    tp: TopicPartition
    position: int
    log_start: int | None
    log_end: int | None
    unread_records: int | None
    lost_records: int                      # > 0: retention already deleted offsets the job had not read (S01)
    by_time_s: float | None
    by_time_basis: TimeBasis | None
    by_size_s: float | None
    by_size_basis: SizeBasis | None
    seconds: float | None
    limited_by: Literal["time", "size"] | None
    deletes_at_ms: int | None
    unknown: str | None = None             # why it could not be computed (then it is not "infinite")
    notes: list[str] = field(default_factory=list)

    @property
    def infinite(self) -> bool:
        return self.seconds is None and self.unknown is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic, "partition": self.tp.partition, "position": self.position,
            "log_start": self.log_start, "log_end": self.log_end, "unread_records": self.unread_records,
            "lost_records": self.lost_records,
            "by_time_s": self.by_time_s, "by_time_basis": self.by_time_basis,
            "by_size_s": self.by_size_s, "by_size_basis": self.by_size_basis, "seconds": self.seconds,
            "infinite": self.infinite, "limited_by": self.limited_by, "deletes_at_ms": self.deletes_at_ms,
            "unknown": self.unknown, "notes": list(self.notes),
        }


@dataclass(frozen=True)
class JobHeadroom:
    """The job's headroom: the minimum over its partitions (``None`` = infinite if nothing is unknown)."""

    partitions: list[PartitionHeadroom]
    now_ms: int
    seconds: float | None
    limiting: TopicPartition | None
    limited_by: Literal["time", "size"] | None
    lost_records: int
    unknown: list[TopicPartition]

    @property
    def infinite(self) -> bool:
        return self.seconds is None and not self.unknown

    @property
    def deletes_at_ms(self) -> int | None:
        return None if self.seconds is None else self.now_ms + int(self.seconds * 1000)

    def by_tp(self) -> dict[TopicPartition, PartitionHeadroom]:
        return {p.tp: p for p in self.partitions}

    def to_dict(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms, "seconds": self.seconds, "infinite": self.infinite,
            "deletes_at_ms": self.deletes_at_ms,
            "limiting": str(self.limiting) if self.limiting else None, "limited_by": self.limited_by,
            "lost_records": self.lost_records, "unknown": [str(tp) for tp in self.unknown],
            "partitions": [p.to_dict() for p in self.partitions],
        }


def _deletes(topic: TopicInfo | None) -> bool | None:
    """Does retention delete on this topic? ``None`` when the policy is not known."""
    if topic is None:
        return None
    policies = {p.strip() for p in topic.cleanup_policy.split(",")}
    if "delete" in policies:
        return True
    return False if policies == {"compact"} else None  # e.g. "unknown" without DESCRIBE_CONFIGS


def _limit(value: int | None) -> int | None:
    """A retention limit, ``None`` when infinite (negative, i.e. -1)."""
    return value if value is not None and value >= 0 else None


@dataclass(frozen=True)
class PartitionFacts:
    """What the broker (and the caller's samples) say about one partition, for its headroom.

    ``first_unread``/``first_unread_known`` have the meaning of :data:`~airflow_kafka_spark.watch.lag.FirstUnread`.
    ``segment_max_ts``: largest timestamp of the segment holding the position (exact time rule).
    ``partition_bytes``: its size on the leader (for ``retention.bytes``). The produce rate in bytes/s
    is ``produce_bytes_per_s`` if given, else ``produce_records_per_s`` × the average record size.
    """

    log_start: int | None
    log_end: int | None
    first_unread: FirstUnread = None
    first_unread_known: bool = False
    segment_max_ts: int | None = None
    partition_bytes: int | None = None
    produce_bytes_per_s: float | None = None
    produce_records_per_s: float | None = None


def partition_headroom(tp: TopicPartition, position: int, facts: PartitionFacts, *, topic: TopicInfo | None,
                       now_ms: int, curve: OffsetTimeCurve | LazyCurve | None = None) -> PartitionHeadroom:
    """Headroom of one partition; see the module docstring for the rules and their approximations."""
    log_start, log_end = facts.log_start, facts.log_end
    if position == EARLIEST and log_start is not None:
        position = log_start
    elif position == LATEST and log_end is not None:
        position = log_end
    notes: list[str] = []
    base: dict[str, Any] = {"tp": tp, "position": position, "log_start": log_start, "log_end": log_end}
    if log_end is None:
        return PartitionHeadroom(**base, unread_records=None, lost_records=0, by_time_s=None,
                                 by_time_basis=None, by_size_s=None, by_size_basis=None, seconds=None,
                                 limited_by=None,
                                 deletes_at_ms=None, unknown="partition not on the broker")
    unread = _unread(position, facts)
    base.update(unread_records=unread.records, lost_records=unread.lost)

    deletes = _deletes(topic)
    if deletes is False:
        notes.append(f"cleanup.policy={topic.cleanup_policy if topic else '?'}: retention never deletes")
        return PartitionHeadroom(**base, by_time_s=None, by_time_basis=None, by_size_s=None,
                                 by_size_basis=None, seconds=None, limited_by=None, deletes_at_ms=None,
                                 notes=notes)
    unknown: list[str] = []
    if topic is None:
        unknown.append("topic configuration unknown")
    else:
        # An unreadable config (no DESCRIBE_CONFIGS) is unknown, never "infinite".
        if deletes is None:
            unknown.append(f"cleanup.policy {topic.cleanup_policy!r} not known")
        if topic.retention_ms is None:
            unknown.append("retention.ms not known")
        if topic.retention_bytes is None:
            unknown.append("retention.bytes not known")
    retention_ms = _limit(topic.retention_ms) if topic else None
    retention_bytes = _limit(topic.retention_bytes) if topic else None

    if unread.lost:
        notes.append(f"{unread.lost} unread offsets already deleted (log start {log_start} > position {position})")
    by_time, time_basis = _by_time(unread, facts, retention_ms, curve, now_ms, notes, unknown)
    by_size, size_basis = _by_size(unread, facts, retention_bytes, notes, unknown)

    if unknown:
        return PartitionHeadroom(**base, by_time_s=by_time, by_time_basis=time_basis, by_size_s=by_size,
                                 by_size_basis=size_basis, seconds=None, limited_by=None, deletes_at_ms=None,
                                 unknown="; ".join(unknown), notes=notes)
    candidates = [(s, kind) for s, kind in ((by_time, "time"), (by_size, "size")) if s is not None]
    if not candidates:
        return PartitionHeadroom(**base, by_time_s=None, by_time_basis=time_basis, by_size_s=None,
                                 by_size_basis=size_basis, seconds=None, limited_by=None, deletes_at_ms=None,
                                 notes=notes)
    seconds, kind = min(candidates)
    limited_by: Literal["time", "size"] = "time" if kind == "time" else "size"
    return PartitionHeadroom(**base, by_time_s=by_time, by_time_basis=time_basis, by_size_s=by_size,
                             by_size_basis=size_basis, seconds=seconds, limited_by=limited_by,
                             deletes_at_ms=now_ms + int(seconds * 1000), notes=notes)


@dataclass(frozen=True)
class _Unread:
    """From where the job reads next: offsets already lost, the first readable offset and its time, how many wait."""

    lost: int
    readable_from: int
    first_ts: int | None
    nothing_readable: bool
    records: int


def _unread(position: int, facts: PartitionFacts) -> _Unread:
    log_start, log_end = facts.log_start, int(facts.log_end or 0)
    lost = max(0, log_start - position) if log_start is not None else 0
    readable_from = max(position, log_start) if log_start is not None else position
    first_ts: int | None = None
    nothing_readable = readable_from >= log_end
    if facts.first_unread_known and not nothing_readable:
        first_unread = facts.first_unread
        if first_unread is None:
            nothing_readable = True
        else:
            off, first_ts = (first_unread if isinstance(first_unread, tuple) else (None, first_unread))
            if off is not None and off >= log_end:
                nothing_readable = True
            elif off is not None:
                readable_from = max(readable_from, off)
            if first_ts is not None and first_ts < 0:
                first_ts = None
    return _Unread(lost=lost, readable_from=readable_from, first_ts=first_ts, nothing_readable=nothing_readable,
                   records=0 if nothing_readable else log_end - readable_from)


def _by_time(unread: _Unread, facts: PartitionFacts, retention_ms: int | None,
             curve: OffsetTimeCurve | LazyCurve | None, now_ms: int, notes: list[str], unknown: list[str]
             ) -> tuple[float | None, TimeBasis | None]:
    """Seconds until ``retention.ms`` deletes the first unread record, and what that rests on."""
    if unread.lost:
        return 0.0, "already-lost"
    if retention_ms is None:
        return None, None
    if unread.nothing_readable:
        notes.append("nothing unread: a record produced from now on is kept at least retention.ms")
        return retention_ms / 1000.0, "nothing-unread"
    ref: float | None = None
    time_basis: TimeBasis | None = None
    if facts.segment_max_ts is not None:
        ref, time_basis = float(facts.segment_max_ts), "segment-max-ts"
    elif unread.first_ts is not None:
        ref, time_basis = float(unread.first_ts), "first-unread-record"
    elif curve is not None and (est := curve.time_of(unread.readable_from)) is not None:
        ref, time_basis = est[0], "interpolated"
    if ref is None:
        unknown.append("time of the first unread record unknown (no timestamp, too few points to interpolate)")
        return None, time_basis
    return max(0.0, ref + retention_ms - now_ms) / 1000.0, time_basis


def _by_size(unread: _Unread, facts: PartitionFacts, retention_bytes: int | None, notes: list[str],
             unknown: list[str]) -> tuple[float | None, SizeBasis | None]:
    """Seconds until ``retention.bytes`` reaches the position at the produce rate, and what that rests on."""
    if unread.lost:
        return 0.0, "already-lost"
    if retention_bytes is None:
        return None, None
    log_start, log_end = facts.log_start, int(facts.log_end or 0)
    records_on_disk = log_end - log_start if log_start is not None else None
    avg = (facts.partition_bytes / records_on_disk
           if facts.partition_bytes is not None and records_on_disk else None)
    rate = facts.produce_bytes_per_s
    if rate is None and facts.produce_records_per_s is not None and avg is not None:
        rate = facts.produce_records_per_s * avg
    size_basis: SizeBasis | None
    if unread.nothing_readable:
        unread_bytes: float | None = 0.0
        size_basis = "nothing-unread"
    else:
        unread_bytes = unread.records * avg if avg is not None else None
        size_basis = "unread-bytes"
    if unread_bytes is None:
        unknown.append("partition size unknown (pass partition_bytes) for retention.bytes")
        return None, None
    remaining = retention_bytes - unread_bytes
    if remaining <= 0:
        notes.append(f"unread data (~{unread_bytes:.0f} B) already ≥ retention.bytes "
                     f"{retention_bytes}: "
                     "the segment holding the position goes at the next retention check once it is "
                     "not the newest")
        return 0.0, size_basis
    if rate is None:
        unknown.append("produce rate unknown for retention.bytes (pass samples or produce_bytes_per_s)")
        return None, None
    if rate > 0:
        return remaining / rate, size_basis
    return None, size_basis     # rate == 0: the partition does not grow, size retention never reaches the position


@dataclass(frozen=True)
class Measured:
    """Per partition, what is known besides offsets: the largest timestamp of the segment holding the position
    (exact time rule), the partition's size on the leader (``describeLogDirs``, for ``retention.bytes``), and
    its produce rate in bytes/s."""

    segment_max_ts: Mapping[TopicPartition, int] | None = None
    partition_bytes: Mapping[TopicPartition, int] | None = None
    produce_bytes_per_s: Mapping[TopicPartition, float] | None = None


NOT_MEASURED = Measured()


def compute_headroom(
    positions: PartitionOffsets,
    broker: BrokerState,
    *,
    now_ms: int,
    first_unread_ts: Mapping[TopicPartition, FirstUnread] | None = None,
    measured: Measured = NOT_MEASURED,
    samples: Sequence[OffsetSample] | None = None,
    history: Sequence[BatchOffsets] | None = None,
    curves: CurveBook | None = None,
) -> JobHeadroom:
    """Headroom of every partition at ``positions`` (normally ``C``) and of the job.

    ``first_unread_ts``: as for :func:`~airflow_kafka_spark.watch.lag.compute_lag`. ``measured``: what
    else is known per partition (:class:`Measured`); a produce rate not given there is the record rate
    between the first of ``samples`` and the current broker sample × the average record size.
    ``history`` and ``samples`` also feed the interpolated time of ``C`` when its timestamp is unknown;
    ``curves`` shares those curves with :func:`~airflow_kafka_spark.watch.lag.compute_lag` (built here,
    lazily, if absent).
    """
    first_unread_ts = first_unread_ts or {}
    segment_max_ts = measured.segment_max_ts or {}
    partition_bytes = measured.partition_bytes or {}
    produce_bytes_per_s = measured.produce_bytes_per_s or {}
    all_samples: list[OffsetSample] = [*(samples or ()), (broker.sampled_at_ms, broker.latest)]
    rates = produce_rates(all_samples)
    book = curves if curves is not None else CurveBook(history or (), all_samples)
    parts: list[PartitionHeadroom] = []
    for tp in sorted(positions):
        facts = PartitionFacts(
            log_start=broker.earliest.get(tp), log_end=broker.latest.get(tp), first_unread=first_unread_ts.get(tp),
            first_unread_known=tp in first_unread_ts, segment_max_ts=segment_max_ts.get(tp),
            partition_bytes=partition_bytes.get(tp), produce_bytes_per_s=produce_bytes_per_s.get(tp),
            produce_records_per_s=rates.get(tp))
        parts.append(partition_headroom(tp, positions[tp], facts, topic=broker.topics.get(tp.topic), now_ms=now_ms,
                                        curve=book.lazy(tp)))
    return summarize_headroom(parts, now_ms=now_ms)


def summarize_headroom(parts: list[PartitionHeadroom], *, now_ms: int) -> JobHeadroom:
    known = [p for p in parts if p.seconds is not None]
    worst = min(known, key=lambda p: (p.seconds, p.tp), default=None)
    return JobHeadroom(
        partitions=parts, now_ms=now_ms,
        seconds=worst.seconds if worst else None,
        limiting=worst.tp if worst else None,
        limited_by=worst.limited_by if worst else None,
        lost_records=sum(p.lost_records for p in parts),
        unknown=[p.tp for p in parts if p.unknown is not None],
    )


__all__ = ["JobHeadroom", "PartitionHeadroom", "compute_headroom", "partition_headroom", "summarize_headroom"]
