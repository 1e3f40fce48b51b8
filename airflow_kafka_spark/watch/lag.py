"""Lag of a Structured Streaming job, in records and in seconds, per partition and for the job.

Structured Streaming never commits its Kafka position to a consumer group, so Burrow,
kafka-lag-exporter, KMinion and ``kafka-consumer-groups.sh`` cannot see it (S23). The position
lives in the checkpoint: ``C``, the end offsets of the last committed batch (or ``P``, those of the
latest planned batch). Everything here is pure: the caller reads the checkpoint and the broker and
passes what it read, with ``now_ms``.

Records. ``records = log_end − position``, unclamped and per partition: exactly what
``kafka-consumer-groups.sh --describe`` prints in its LAG column for a group whose committed
offset is the position (its ``getLag`` is ``logEndOffset − offset``; the log end it reads is the
high watermark). Offsets are not dense, though: transaction commit/abort markers, aborted records
and compaction leave offsets that are never delivered (S25). After a transaction the last offset of
a partition is a marker, so ``records`` stays at 1 forever although nothing is left to read.
``records_effective`` is the lag that can still be read: ``log_end − first readable offset ≥
position`` and 0 when nothing readable remains. The caller learns the first readable offset with
``KafkaView.first_record_at_or_after(tp, position)``; without it ``records_effective`` only drops
the prefix already deleted by retention (``position < log_start``). Markers *between* readable
records are still counted: only reading the range would tell them apart.

Seconds. The age of the oldest unread record, ``now − timestamp(first record at or after the
position)`` (method ``record-timestamp``), which is what the user means by "how far behind". When
that timestamp is not known the lag is estimated the way kafka-lag-exporter does it: from an
offset→time curve (method ``interpolated``); see :class:`.offset_time.OffsetTimeCurve` for how the
curve is built from the checkpoint's offsets history (``batchTimestampMs`` against the end offsets of
each batch) and from broker samples, and for how exact that is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from airflow_kafka_spark.watch.offset_time import CurveBook, LazyCurve, OffsetSample, OffsetTimeCurve

if TYPE_CHECKING:  # only attribute access at run time: keeps this module free of I/O imports
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.kafka.model import BrokerState

LagMethod = Literal["record-timestamp", "interpolated"]
Basis = Literal["committed", "planned"]

#: What the caller learnt about the first record at or after the position, per partition:
#:
#: * key absent: not looked up (seconds fall back to interpolation);
#: * ``None``: looked up, no readable record at or after the position (only control markers,
#:   aborted or compacted-away offsets remain) — nothing to read;
#: * ``int``: the timestamp (ms) of that record;
#: * ``(offset, timestamp)``: what ``KafkaView.first_record_at_or_after`` returns; an offset at or
#:   beyond the log end again means nothing readable; a timestamp ``None`` or negative (records
#:   without timestamps) leaves the seconds to interpolation.
FirstUnread: TypeAlias = int | tuple[int, int | None] | None


# --------------------------------------------------------------------------------------------
# results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    """Lag of one partition. ``None`` fields mean "not known", never "infinite" or "zero".

    ``seconds == 0`` with ``method is None`` means caught up (nothing readable left);
    ``seconds is None`` means the time lag could not be measured nor estimated.
    """

    tp: TopicPartition
    position: int                      # C (or P); -2/-1 sentinels resolved against the broker
    log_end: int | None                # None: the partition is not on the broker
    log_start: int | None
    records: int | None                # log_end − position, unclamped (= kafka-consumer-groups LAG)
    records_effective: int | None      # readable records left; 0 when only markers/gaps remain
    seconds: float | None
    method: LagMethod | None
    first_unread_offset: int | None = None
    first_unread_ts_ms: int | None = None
    lost_records: int = 0              # log_start − position when retention already deleted unread offsets
    new_partition: bool = False        # not in the checkpoint: Spark will read it from earliest (S04)
    note: str | None = None

    @property
    def ahead_of_log_end(self) -> bool:
        """Position beyond the log end: the log went backwards (S02); see status REWIND."""
        return self.records is not None and self.records < 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "position": self.position,
            "log_start": self.log_start,
            "log_end": self.log_end,
            "records": self.records,
            "records_effective": self.records_effective,
            "seconds": self.seconds,
            "method": self.method,
            "first_unread_offset": self.first_unread_offset,
            "first_unread_ts_ms": self.first_unread_ts_ms,
            "lost_records": self.lost_records,
            "new_partition": self.new_partition,
            "note": self.note,
        }


@dataclass(frozen=True)
class JobLag:
    """Lag of a job: the partitions plus totals (sum of records, max of seconds).

    Totals never turn into NaN because one partition is unknown (kafka-lag-exporter #125): they
    aggregate the partitions that are known and list the others in ``seconds_unknown`` /
    ``missing``. ``records`` sums ``max(0, records)`` so a partition ahead of its log end (a REWIND
    symptom, listed in ``ahead``) does not cancel real lag elsewhere.
    """

    partitions: list[PartitionLag]
    basis: Basis
    now_ms: int
    sampled_at_ms: int | None
    records: int
    records_effective: int
    seconds: float | None
    seconds_partition: TopicPartition | None
    seconds_unknown: list[TopicPartition] = field(default_factory=list)
    missing: list[TopicPartition] = field(default_factory=list)
    ahead: list[TopicPartition] = field(default_factory=list)

    def by_tp(self) -> dict[TopicPartition, PartitionLag]:
        return {p.tp: p for p in self.partitions}

    @property
    def caught_up(self) -> bool:
        """Nothing readable is left on any partition that exists."""
        return self.records_effective == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "now_ms": self.now_ms,
            "sampled_at_ms": self.sampled_at_ms,
            "records": self.records,
            "records_effective": self.records_effective,
            "seconds": self.seconds,
            "seconds_partition": str(self.seconds_partition) if self.seconds_partition else None,
            "seconds_unknown": [str(tp) for tp in self.seconds_unknown],
            "missing": [str(tp) for tp in self.missing],
            "ahead": [str(tp) for tp in self.ahead],
            "partitions": [p.to_dict() for p in self.partitions],
        }


# --------------------------------------------------------------------------------------------
# computation
# --------------------------------------------------------------------------------------------


def _split_first_unread(value: FirstUnread) -> tuple[int | None, int | None]:
    """(offset, timestamp) from the accepted shapes; negative timestamps count as missing."""
    if value is None:
        return None, None
    if isinstance(value, tuple):
        off, ts = value
    else:
        off, ts = None, value
    if ts is not None and ts < 0:
        ts = None
    return off, ts


def partition_lag(
    tp: TopicPartition,
    position: int,
    *,
    log_end: int | None,
    log_start: int | None,
    now_ms: int,
    first_unread: FirstUnread = None,
    first_unread_known: bool = False,
    curve: OffsetTimeCurve | LazyCurve | None = None,
    new_partition: bool = False,
) -> PartitionLag:
    """Lag of one partition; see the module docstring for the definitions.

    ``first_unread_known`` says whether ``first_unread`` is a lookup result (``None`` then means
    "nothing readable") or just absent.
    """
    if position == EARLIEST and log_start is not None:
        position = log_start
    elif position == LATEST and log_end is not None:
        position = log_end
    base = {"tp": tp, "position": position, "log_end": log_end, "log_start": log_start,
            "new_partition": new_partition}
    if log_end is None:
        return PartitionLag(**base, records=None, records_effective=None, seconds=None, method=None,
                            note="partition not on the broker (topic deleted or partitions removed)")
    records = log_end - position
    lost = max(0, log_start - position) if log_start is not None else 0
    if records <= 0:
        note = None if records == 0 else (
            f"position {position} is {-records} beyond the log end {log_end}: the log went backwards "
            "(topic recreated or truncated?)")
        return PartitionLag(**base, records=records, records_effective=0,
                            seconds=0.0 if records == 0 else None, method=None, note=note)

    readable_from = max(position, log_start) if log_start is not None else position
    notes: list[str] = []
    if lost:
        notes.append(f"{lost} offsets below the log start {log_start} were deleted before being read")
    ts: int | None = None
    if first_unread_known:
        off, ts = _split_first_unread(first_unread)
        if first_unread is None or (off is not None and off >= log_end):
            notes.append(f"no readable record in [{position}, {log_end}): the {records} offsets left are "
                         "transaction markers, aborted or compacted-away records")
            return PartitionLag(**base, records=records, records_effective=0, seconds=0.0, method=None,
                                lost_records=lost, note="; ".join(notes))
        if off is not None:
            readable_from = max(readable_from, off)
    effective = log_end - readable_from
    first_off = readable_from if first_unread_known else None

    if ts is not None:
        if ts > now_ms:
            notes.append(f"first unread record is stamped {ts - now_ms} ms in the future (clock skew)")
        return PartitionLag(**base, records=records, records_effective=effective,
                            seconds=max(0, now_ms - ts) / 1000.0, method="record-timestamp",
                            first_unread_offset=first_off, first_unread_ts_ms=ts, lost_records=lost,
                            note="; ".join(notes) or None)

    est = curve.time_of(readable_from) if curve is not None else None
    if est is None:
        notes.append("time lag unknown: no record timestamp and too few points to interpolate")
        return PartitionLag(**base, records=records, records_effective=effective, seconds=None, method=None,
                            first_unread_offset=first_off, lost_records=lost, note="; ".join(notes))
    at_ms, extrapolated = est
    if extrapolated:
        notes.append("time lag extrapolated: the position is older than every point of the offset→time "
                     "curve")
    return PartitionLag(**base, records=records, records_effective=effective,
                        seconds=max(0.0, now_ms - at_ms) / 1000.0, method="interpolated",
                        first_unread_offset=first_off, lost_records=lost, note="; ".join(notes) or None)


def compute_lag(
    positions: PartitionOffsets,
    broker: BrokerState,
    *,
    first_unread_ts: Mapping[TopicPartition, FirstUnread] | None = None,
    history: Sequence[BatchOffsets] | None = None,
    now_ms: int,
    samples: Sequence[OffsetSample] | None = None,
    basis: Basis = "committed",
    include_new_partitions: bool = True,
    curves: CurveBook | None = None,
) -> JobLag:
    """Lag of a job whose Kafka position is ``positions`` (``C`` from ``latest_committed``, or ``P``).

    ``first_unread_ts``: per partition, the result of ``first_record_at_or_after(tp, position)``
    (see :data:`FirstUnread`); preferred for seconds and the only way to see that nothing readable
    is left after transaction markers (S25).

    ``history``: the checkpoint's offsets history, for the interpolated fallback. ``samples``:
    earlier broker samples ``(sampled_at_ms, latest)``; the current one (``broker.sampled_at_ms``,
    ``broker.latest``) is always added. More samples make the interpolation tighter: with only the
    history and the current sample, the estimated age of the first unread record is the time since
    the batch that reached the position, an overestimate for a job without rate limit that has
    just caught up after an idle period, an underestimate for a rate-limited job that is behind.

    ``include_new_partitions``: partitions of the subscribed topics that the checkpoint does not
    know yet are counted from their log start, because ``subscribe``/``subscribePattern`` picks them
    up from earliest (S04). Pass ``False`` for jobs using ``assign``.

    ``curves``: a :class:`.offset_time.CurveBook` over ``history`` and the samples including the
    current one, to share the curves with :func:`~.headroom.compute_headroom`; built here if absent.
    """
    first_unread_ts = first_unread_ts or {}
    all_samples: list[OffsetSample] = [*(samples or ()), (broker.sampled_at_ms, broker.latest)]
    pos = dict(positions)
    new: set[TopicPartition] = set()
    if include_new_partitions:
        topics = {tp.topic for tp in pos}
        for tp in broker.latest:
            if tp.topic in topics and tp not in pos:
                pos[tp] = broker.earliest.get(tp, 0)
                new.add(tp)

    book = curves if curves is not None else CurveBook(history or (), all_samples)
    parts: list[PartitionLag] = []
    for tp in sorted(pos):
        curve = None
        if tp not in first_unread_ts or first_unread_ts[tp] is not None:
            curve = book.lazy(tp)   # built only if this partition's seconds need interpolation
        parts.append(partition_lag(
            tp, pos[tp], log_end=broker.latest.get(tp), log_start=broker.earliest.get(tp), now_ms=now_ms,
            first_unread=first_unread_ts.get(tp), first_unread_known=tp in first_unread_ts, curve=curve,
            new_partition=tp in new,
        ))
    return summarize(parts, basis=basis, now_ms=now_ms, sampled_at_ms=broker.sampled_at_ms)


def summarize(parts: list[PartitionLag], *, basis: Basis, now_ms: int, sampled_at_ms: int | None) -> JobLag:
    """Totals over partitions (see :class:`JobLag` for how unknowns are treated)."""
    known = [p for p in parts if p.records is not None]
    timed = [p for p in known if p.seconds is not None]
    worst = max(timed, key=lambda p: (p.seconds, p.tp), default=None)
    return JobLag(
        partitions=parts,
        basis=basis,
        now_ms=now_ms,
        sampled_at_ms=sampled_at_ms,
        records=sum(max(0, p.records or 0) for p in known),
        records_effective=sum(p.records_effective or 0 for p in known),
        seconds=worst.seconds if worst is not None else None,
        seconds_partition=worst.tp if worst is not None else None,
        seconds_unknown=[p.tp for p in known if p.seconds is None],
        missing=[p.tp for p in parts if p.records is None],
        ahead=[p.tp for p in known if p.ahead_of_log_end],
    )


def produce_rates(samples: Sequence[OffsetSample]) -> dict[TopicPartition, float]:
    """Records per second appended to each partition between the first and the last sample.

    Partitions whose log end went backwards between those samples are left out (the rate of a
    recreated log is meaningless); so are partitions missing from either sample.
    """
    ordered = sorted(samples, key=lambda s: s[0])
    if len(ordered) < 2 or ordered[-1][0] <= ordered[0][0]:
        return {}
    (t0, first), (t1, last) = ordered[0], ordered[-1]
    span_s = (t1 - t0) / 1000.0
    out: dict[TopicPartition, float] = {}
    for tp, end in last.items():
        start = first.get(tp)
        if start is not None and end >= start:
            out[tp] = (end - start) / span_s
    return out

