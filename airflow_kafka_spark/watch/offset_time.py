"""When did a partition's log end pass a given offset? The piecewise-linear curve the time lag interpolates on.

Built from the checkpoint's offsets history (``batchTimestampMs`` and the planned end offsets) and
broker samples; used by :mod:`.lag` (seconds behind, method ``interpolated``) and :mod:`.headroom`
(the time of the position when no record timestamp is known).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets

#: A broker sample: ``(sampled_at_ms, log end offsets)``.
OffsetSample: TypeAlias = tuple[int, PartitionOffsets]


@dataclass(frozen=True)
class OffsetTimeCurve:
    """When did the log end of one partition pass a given offset? A piecewise-linear answer.

    Points are ``(time_ms, offset)``. Two kinds feed it:

    * **Broker samples** ``(sampled_at, log_end)`` are exact: at that time the log held exactly the
      offsets below ``log_end``. This is kafka-lag-exporter's lookup table.
    * **Checkpoint batches** ``(batchTimestampMs, end offset)`` are lower bounds of the log end at
      that time: Spark planned the batch at ``batchTimestampMs`` up to an offset that existed then.
      Without a rate limit Spark plans up to the log end, so the point is (almost) exact; with
      ``maxOffsetsPerTrigger`` a job that is behind plans less than what exists, so the curve runs
      late and the interpolated lag of such a job is an *underestimate*.

    The curve is made monotone by taking, at every time, the highest offset known to exist by then
    (a later batch may legitimately plan below an earlier broker sample). A broker sample *lower*
    than an earlier broker sample means the log went backwards (topic recreated, S02/S03): the points
    before it describe another log, so they are dropped. Flat runs keep their first and last point
    (kafka-lag-exporter's ``isFlat`` compression); the last one matters: it is the latest time at
    which the offset was known not to exist yet.
    """

    points: tuple[tuple[int, int], ...]

    @classmethod
    def build(
        cls,
        tp: TopicPartition,
        *,
        history: Iterable[BatchOffsets] = (),
        samples: Iterable[OffsetSample] = (),
    ) -> OffsetTimeCurve:
        raw: list[tuple[int, int, bool]] = []  # (time, offset, exact)
        for batch in history:
            ts = batch.batch_timestamp_ms
            off = batch.kafka_offsets.get(tp)
            if ts is not None and off is not None and off >= 0:
                raw.append((ts, off, False))
        for ts, offsets in samples:
            off = offsets.get(tp)
            if off is not None and off >= 0:
                raw.append((ts, off, True))
        raw.sort(key=lambda p: (p[0], p[1]))
        # Drop everything before the last regression between exact samples.
        start, last_exact = 0, None
        for i, (_, off, exact) in enumerate(raw):
            if exact:
                if last_exact is not None and off < last_exact:
                    start = i
                last_exact = off
        pts: list[tuple[int, int]] = []
        high = -1
        for ts, off, _ in raw[start:]:
            high = max(high, off)
            if pts and pts[-1][0] == ts:
                pts[-1] = (ts, high)
            else:
                pts.append((ts, high))
        # Compress flat runs to their first and last point.
        compressed: list[tuple[int, int]] = []
        for i, p in enumerate(pts):
            if 0 < i < len(pts) - 1 and pts[i - 1][1] == p[1] == pts[i + 1][1]:
                continue
            compressed.append(p)
        return cls(tuple(compressed))

    def time_of(self, offset: int) -> tuple[float, bool] | None:
        """Estimated time (ms) at which ``offset`` was appended, and whether that is extrapolated.

        ``None`` when the curve has fewer than two points or ``offset`` is beyond its highest point
        (not appended yet as far as the curve knows).
        """
        pts = self.points
        if len(pts) < 2:
            return None
        right = next((i for i, (_, off) in enumerate(pts) if off > offset), None)
        if right is None:
            return None
        if right == 0:
            (t0, o0), (t1, o1) = pts[0], pts[-1]
            if o1 <= o0 or t1 <= t0:
                return None
            return t0 - (o0 - offset) * (t1 - t0) / (o1 - o0), True
        (lt, lo), (rt, ro) = pts[right - 1], pts[right]
        return rt - (ro - offset) * (rt - lt) / (ro - lo), False


class CurveBook:
    """The curves of many partitions over one history and one set of samples, each built on first use.

    Lag and headroom ask for the same partitions' curves, and most partitions of a healthy job never
    need one (caught up, or the first unread record's timestamp is known): building all of them
    eagerly, twice, was 2 s at 5,000 partitions.
    """

    def __init__(self, history: Iterable[BatchOffsets] = (), samples: Iterable[OffsetSample] = ()) -> None:
        self.history = list(history)
        self.samples = list(samples)
        self._built: dict[TopicPartition, OffsetTimeCurve] = {}

    def curve(self, tp: TopicPartition) -> OffsetTimeCurve:
        found = self._built.get(tp)
        if found is None:
            found = self._built[tp] = OffsetTimeCurve.build(tp, history=self.history, samples=self.samples)
        return found

    def lazy(self, tp: TopicPartition) -> LazyCurve:
        return LazyCurve(self, tp)


@dataclass(frozen=True)
class LazyCurve:
    """Stands for ``book.curve(tp)`` and builds it only when a time is asked for."""

    book: CurveBook
    tp: TopicPartition

    def time_of(self, offset: int) -> tuple[float, bool] | None:
        return self.book.curve(self.tp).time_of(offset)

