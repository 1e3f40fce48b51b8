"""Retention headroom and catch-up estimates (airflow_kafka_spark.watch.headroom).

The estimates are checked against a small model of the broker's own deletion rules
(``UnifiedLog.deleteRetentionMsBreachedSegments`` / ``deleteRetentionSizeBreachedSegments``):
segments roll at ``segment.bytes``; by time a segment goes once its largest timestamp is older
than ``retention.ms``; by size the oldest segments go while the rest stays ≥ ``retention.bytes``.
Generated with seeded ``random``.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

import pytest

from airflow_kafka_spark.checkpoint.model import BatchOffsets
from airflow_kafka_spark.checkpoint.throughput import processing_rates as processing_rates_from_history
from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.watch.catch_up import estimate_catch_up
from airflow_kafka_spark.watch.headroom import Measured, PartitionFacts, compute_headroom, partition_headroom
from airflow_kafka_spark.watch.offset_time import OffsetTimeCurve

T = "clicks"
HOUR = 3_600_000


def tp(p: int, topic: str = T) -> TopicPartition:
    return TopicPartition(topic, p)


def topic_info(retention_ms=HOUR, retention_bytes=-1, policy="delete", name=T) -> TopicInfo:
    return TopicInfo(name, None, 1, retention_ms, retention_bytes, policy)


def broker(earliest, latest, *, topics=None, sampled_at_ms=0) -> BrokerState:
    return BrokerState("b", None, topics if topics is not None else {T: topic_info()}, [], dict(earliest),
                       dict(latest), sampled_at_ms)


def batch(batch_id: int, ts: int, offsets: dict) -> BatchOffsets:
    return BatchOffsets(batch_id, 1, ts, 0, {}, {"0": dict(offsets)})


# ------------------------------------------------------------------------------------------------
# a model of one partition's log on the broker
# ------------------------------------------------------------------------------------------------


@dataclass
class Segment:
    base: int
    ts: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(self.sizes)

    @property
    def largest_ts(self) -> int:
        return max(self.ts)

    @property
    def end(self) -> int:
        return self.base + len(self.ts)


@dataclass
class Log:
    segment_bytes: int
    segments: list[Segment] = field(default_factory=list)

    def append(self, ts: int, size: int) -> None:
        if not self.segments:
            self.segments.append(Segment(0))
        active = self.segments[-1]
        if active.sizes and active.size + size > self.segment_bytes:
            self.segments.append(Segment(active.end))
            active = self.segments[-1]
        active.ts.append(ts)
        active.sizes.append(size)

    @property
    def log_start(self) -> int:
        return self.segments[0].base

    @property
    def log_end(self) -> int:
        return self.segments[-1].end

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def segment_of(self, offset: int) -> Segment:
        return next(s for s in self.segments if s.base <= offset < s.end)

    def ts_of(self, offset: int) -> int:
        s = self.segment_of(offset)
        return s.ts[offset - s.base]

    def delete_by_size(self, retention_bytes: int) -> None:
        diff = self.size - retention_bytes
        while len(self.segments) > 1 and diff - self.segments[0].size >= 0:
            diff -= self.segments.pop(0).size


def generated_log(rng: random.Random, *, start_ms: int, records: int, segment_bytes: int,
                  gap_ms: tuple[int, int] = (1, 2_000), size: tuple[int, int] = (80, 120)) -> Log:
    log, t = Log(segment_bytes), start_ms
    for _ in range(records):
        t += rng.randint(*gap_ms)
        log.append(t, rng.randint(*size))
    return log


# ------------------------------------------------------------------------------------------------
# by time
# ------------------------------------------------------------------------------------------------


def test_time_headroom_is_a_lower_bound_and_exact_with_segment_max_ts():
    rng = random.Random(11)
    for _ in range(200):
        log = generated_log(rng, start_ms=0, records=rng.randint(50, 400),
                            segment_bytes=rng.choice([500, 2_000, 8_000]))
        retention = rng.choice([HOUR, 6 * HOUR, 24 * HOUR])
        now = log.segments[-1].largest_ts + rng.randint(0, retention // 2)
        c = rng.randint(0, log.log_end - 1)
        seg = log.segment_of(c)
        if seg is log.segments[-1]:
            continue  # the active segment survives while written to; see the module docstring
        actual_deletion = seg.largest_ts + retention  # the broker's rule (before the check interval)
        b = broker({tp(0): log.log_start}, {tp(0): log.log_end}, topics={T: topic_info(retention)})
        first = compute_headroom({tp(0): c}, b, now_ms=now, first_unread_ts={tp(0): (c, log.ts_of(c))})
        exact = compute_headroom({tp(0): c}, b, now_ms=now, first_unread_ts={tp(0): (c, log.ts_of(c))},
                                 measured=Measured(segment_max_ts={tp(0): seg.largest_ts}))
        p_first, p_exact = first.partitions[0], exact.partitions[0]
        assert p_first.by_time_basis == "first-unread-record" and p_exact.by_time_basis == "segment-max-ts"
        assert p_exact.seconds == pytest.approx(max(0, actual_deletion - now) / 1000)
        assert p_first.seconds <= p_exact.seconds + 1e-9
        assert p_first.limited_by == "time" and p_first.deletes_at_ms <= actual_deletion + 1
        # the lower bound is off by at most the time span of the rest of that segment
        assert p_exact.seconds - p_first.seconds <= (seg.largest_ts - log.ts_of(c)) / 1000 + 1e-9


def test_time_headroom_simple_numbers():
    now = 10 * HOUR
    b = broker({tp(0): 0}, {tp(0): 100})
    h = compute_headroom({tp(0): 40}, b, now_ms=now, first_unread_ts={tp(0): (40, now - 10 * 60_000)})
    assert h.seconds == pytest.approx(50 * 60) and h.limiting == tp(0) and h.limited_by == "time"
    assert h.deletes_at_ms == now + 50 * 60_000
    overdue = compute_headroom({tp(0): 40}, b, now_ms=now, first_unread_ts={tp(0): (40, now - 2 * HOUR)})
    assert overdue.seconds == 0.0


def test_nothing_unread_gets_the_full_retention():
    now = 10 * HOUR
    b = broker({tp(0): 0, tp(1): 0}, {tp(0): 100, tp(1): 51})
    h = compute_headroom({tp(0): 100, tp(1): 50}, b, now_ms=now, first_unread_ts={tp(1): None})
    for p in h.partitions:  # caught up, or only a trailing transaction marker left (S25)
        assert p.by_time_basis == "nothing-unread" and p.seconds == HOUR / 1000 and p.unread_records == 0


def test_already_lost_is_zero_and_counted():
    h = compute_headroom({tp(0): 10}, broker({tp(0): 250}, {tp(0): 900}), now_ms=HOUR)
    p = h.partitions[0]
    assert p.seconds == 0.0 and p.lost_records == 240 and p.by_time_basis == "already-lost"
    assert h.lost_records == 240 and p.unread_records == 650


@pytest.mark.parametrize(("retention_ms", "retention_bytes", "policy"), [
    (-1, -1, "delete"), (HOUR, 1_000, "compact"), (None, None, "compact"),
])
def test_infinite_headroom(retention_ms, retention_bytes, policy):
    b = broker({tp(0): 0}, {tp(0): 100}, topics={T: topic_info(retention_ms, retention_bytes, policy)})
    h = compute_headroom({tp(0): 10}, b, now_ms=HOUR, first_unread_ts={tp(0): (10, 0)})
    assert h.seconds is None and h.infinite and h.partitions[0].infinite and not h.unknown
    assert json.loads(json.dumps(h.to_dict()))["infinite"] is True


@pytest.mark.parametrize(("retention_ms", "retention_bytes", "policy", "why"), [
    (None, -1, "delete", "retention.ms not known"),
    (HOUR, None, "delete", "retention.bytes not known"),
    (HOUR, -1, "unknown", "cleanup.policy 'unknown' not known"),
])
def test_unreadable_topic_config_is_unknown_not_infinite(retention_ms, retention_bytes, policy, why):
    """kafka_view reports None / "unknown" when the broker refuses DESCRIBE_CONFIGS."""
    b = broker({tp(0): 0}, {tp(0): 100}, topics={T: topic_info(retention_ms, retention_bytes, policy)})
    h = compute_headroom({tp(0): 10}, b, now_ms=HOUR, first_unread_ts={tp(0): (10, 0)})
    assert h.seconds is None and not h.infinite and h.unknown == [tp(0)]
    assert why in h.partitions[0].unknown


def test_compact_delete_still_deletes():
    b = broker({tp(0): 0}, {tp(0): 100}, topics={T: topic_info(HOUR, -1, "compact,delete")})
    assert compute_headroom({tp(0): 10}, b, now_ms=HOUR, first_unread_ts={tp(0): (10, 0)}).seconds == 0.0


def test_unknown_is_never_infinite():
    b = broker({tp(0): 0, tp(1): 0}, {tp(0): 100, tp(1): 100})
    h = compute_headroom({tp(0): 10, tp(1): 10}, b, now_ms=HOUR, first_unread_ts={tp(1): (10, HOUR - 60_000)})
    p0 = h.by_tp()[tp(0)]
    assert p0.seconds is None and not p0.infinite and "unknown" in p0.unknown
    assert h.unknown == [tp(0)] and not h.infinite
    assert h.seconds == pytest.approx(59 * 60) and h.limiting == tp(1)  # the minimum over the known ones
    gone = compute_headroom({tp(5): 1}, b, now_ms=0).partitions[0]
    assert gone.unknown == "partition not on the broker"
    no_topic = compute_headroom({tp(0): 1}, broker({tp(0): 0}, {tp(0): 5}, topics={}), now_ms=0,
                                first_unread_ts={tp(0): (1, 0)})
    assert "topic configuration unknown" in no_topic.partitions[0].unknown


def test_time_of_first_unread_interpolated_from_history():
    hist = [batch(i, i * 60_000, {tp(0): 100 * i}) for i in range(11)]  # 100 records a minute
    b = broker({tp(0): 0}, {tp(0): 1_000}, sampled_at_ms=10 * 60_000)
    # C = 250: appended between minute 2 (offset 200) and minute 3 (offset 300): ~2.5 min
    h = compute_headroom({tp(0): 250}, b, now_ms=10 * 60_000, history=hist)
    p = h.partitions[0]
    assert p.by_time_basis == "interpolated"
    assert p.seconds == pytest.approx((HOUR - 7.5 * 60_000) / 1000)
    assert OffsetTimeCurve.build(tp(0), history=hist).time_of(250) == (150_000.0, False)


# ------------------------------------------------------------------------------------------------
# by size
# ------------------------------------------------------------------------------------------------


def test_size_headroom_against_the_broker_rule_on_generated_logs():
    rng = random.Random(5)
    checked = 0
    for _ in range(120):
        seg_bytes = rng.choice([2_000, 5_000, 20_000])
        retention_bytes = rng.choice([20_000, 50_000, 100_000])
        rate = rng.choice([5, 20, 100])  # records/s, ~100 B each
        log = Log(seg_bytes)
        t = 0
        for _ in range(rng.randint(100, 1_500)):
            t += 1_000 // rate
            log.append(t, rng.randint(90, 110))
            log.delete_by_size(retention_bytes)
        c = rng.randint(log.log_start, log.log_end)
        now = t
        b = broker({tp(0): log.log_start}, {tp(0): log.log_end},
                   topics={T: topic_info(-1, retention_bytes)}, sampled_at_ms=now)
        samples = [(now - 60_000, {tp(0): log.log_end - 60 * rate})]
        h = compute_headroom({tp(0): c}, b, now_ms=now, samples=samples,
                             measured=Measured(partition_bytes={tp(0): log.size}))
        p = h.partitions[0]
        assert p.by_time_s is None and p.limited_by in ("size", None)
        if c == log.log_end:
            assert p.by_size_basis == "nothing-unread"
        # play the producer forward until the segment holding C is deleted
        while log.log_start <= c and t < now + 10**8:
            t += 1_000 // rate
            log.append(t, rng.randint(90, 110))
            log.delete_by_size(retention_bytes)
        actual_s = (t - now) / 1000
        estimate = p.seconds
        assert estimate is not None
        # a lower bound (within the noise of the average record size) ...
        assert estimate <= actual_s * 1.05 + 2 * (1_000 // rate) / 1000
        # ... late by at most about one segment of production
        assert actual_s - estimate <= (seg_bytes / 90) / rate * 1.1 + 2
        checked += 1
    assert checked == 120


def test_size_headroom_simple_numbers_and_rates():
    b = broker({tp(0): 0}, {tp(0): 1_000}, topics={T: topic_info(-1, 200_000)}, sampled_at_ms=100_000)
    # 1 000 records in 100 000 B: 100 B each; C = 500 → 50 000 B unread; 150 000 B to go
    h = compute_headroom({tp(0): 500}, b, now_ms=100_000,
                         measured=Measured(partition_bytes={tp(0): 100_000}, produce_bytes_per_s={tp(0): 1_000.0}))
    p = h.partitions[0]
    assert p.by_size_basis == "unread-bytes" and p.seconds == pytest.approx(150.0) and p.limited_by == "size"
    # the same rate from broker samples: 10 records/s × 100 B
    h = compute_headroom({tp(0): 500}, b, now_ms=100_000, samples=[(0, {tp(0): 0})],
                         measured=Measured(partition_bytes={tp(0): 100_000}))
    assert h.seconds == pytest.approx(150.0)
    # not growing: never reached by size
    h = compute_headroom({tp(0): 500}, b, now_ms=100_000, samples=[(0, {tp(0): 1_000})],
                         measured=Measured(partition_bytes={tp(0): 100_000}))
    assert h.seconds is None and h.infinite
    # already past: 0
    small = broker({tp(0): 0}, {tp(0): 1_000}, topics={T: topic_info(-1, 10_000)})
    h = compute_headroom({tp(0): 500}, small, now_ms=0,
                         measured=Measured(partition_bytes={tp(0): 100_000}, produce_bytes_per_s={tp(0): 1.0}))
    assert h.seconds == 0.0 and "retention.bytes" in h.partitions[0].notes[0]
    # size and rate needed; unknown otherwise
    assert "partition size unknown" in compute_headroom({tp(0): 500}, b, now_ms=0).partitions[0].unknown
    assert "produce rate unknown" in compute_headroom(
        {tp(0): 500}, b, now_ms=0, measured=Measured(partition_bytes={tp(0): 1})).partitions[0].unknown


def test_minimum_of_time_and_size_and_over_partitions():
    rng = random.Random(42)
    for _ in range(100):
        now = 100 * HOUR
        n = rng.randint(1, 6)
        topics = {T: topic_info(rng.choice([HOUR, 24 * HOUR, -1]), rng.choice([10**6, 10**8, -1]))}
        earliest = dict.fromkeys(map(tp, range(n)), 0)
        latest = {tp(p): rng.randint(1, 10_000) for p in range(n)}
        pos = {k: rng.randint(0, v) for k, v in latest.items()}
        first = {k: (pos[k], now - rng.randint(0, 2 * HOUR)) for k in pos}
        sizes = {k: latest[k] * 100 for k in pos}
        rates = {k: rng.choice([0.0, 10.0, 1_000.0]) for k in pos}
        h = compute_headroom(pos, broker(earliest, latest, topics=topics), now_ms=now, first_unread_ts=first,
                             measured=Measured(partition_bytes=sizes, produce_bytes_per_s=rates))
        for p in h.partitions:
            parts = [s for s in (p.by_time_s, p.by_size_s) if s is not None]
            assert p.seconds == (min(parts) if parts else None)
        known = [p.seconds for p in h.partitions if p.seconds is not None]
        assert h.seconds == (min(known) if known else None)
        json.dumps(h.to_dict())


def test_partition_headroom_direct_sentinels():
    from airflow_kafka_spark.kafka.offsets import EARLIEST
    p = partition_headroom(tp(0), EARLIEST, PartitionFacts(log_start=7, log_end=9, first_unread=(7, 0),
                                                           first_unread_known=True), topic=topic_info(), now_ms=HOUR)
    assert p.position == 7 and p.seconds == 0.0 and p.unread_records == 2


# ------------------------------------------------------------------------------------------------
# catch-up
# ------------------------------------------------------------------------------------------------


def test_catch_up_formula_on_generated_inputs():
    rng = random.Random(8)
    for _ in range(200):
        backlog = rng.randint(0, 10**7)
        proc = rng.uniform(1, 10_000)
        prod = rng.uniform(0, 10_000)
        mo = rng.choice([None, rng.randint(1, 10**6)])
        est = estimate_catch_up(backlog, processing_rate=proc, produce_rate=prod, max_offsets_per_trigger=mo)
        if backlog == 0:
            assert est.seconds == 0.0 and not est.never
        elif proc <= prod:
            assert est.seconds is None and est.never
        else:
            assert est.seconds == pytest.approx(backlog / (proc - prod))
        if mo:
            assert est.batches == math.ceil(backlog / mo) and est.first_batch_records == min(backlog, mo)
        else:
            assert est.first_batch_records == backlog and est.batches == (1 if backlog else 0)
        json.dumps(est.to_dict())


def test_s28_backlog_batches():
    est = estimate_catch_up(500_000, processing_rate=10_000, produce_rate=0, max_offsets_per_trigger=50_000)
    assert est.batches == 10 and est.first_batch_records == 50_000 and est.seconds == 50.0
    est = estimate_catch_up(500_000, processing_rate=10_000, produce_rate=0)
    assert est.batches == 1 and any("all 500000 records at once" in n for n in est.notes)


def test_rates_from_history_and_samples():
    # catching up back to back: 5 000-record batches (rate limit) taking 5 s each -> 1 000 rec/s
    busy = [batch(i, i * 5_000, {tp(0): 5_000 * i}) for i in range(12)]
    avg, peak = processing_rates_from_history(busy)
    assert avg == pytest.approx(1_000) and peak == pytest.approx(1_000)
    samples = [(0, {tp(0): 0}), (60_000, {tp(0): 12_000})]  # 200 rec/s produced
    est = estimate_catch_up(40_000, history=busy, samples=samples)
    assert est.processing_rate == pytest.approx(1_000) and est.produce_rate == pytest.approx(200)
    assert est.seconds == pytest.approx(50.0) and est.produce_rate_source == "broker samples"
    # a job that was keeping up shows the produce rate, not its capacity: "never" is flagged as such
    keeping_up = [batch(i, i * 2_000, {tp(0): 400 * i}) for i in range(12)]
    est = estimate_catch_up(40_000, history=keeping_up, samples=samples)
    assert est.never and any("processing_rate" in n for n in est.notes)
    # unknowns
    est = estimate_catch_up(10, history=[])
    assert est.seconds is None and not est.never and est.processing_rate_source == "unknown"
    est = estimate_catch_up(10, processing_rate=5)
    assert est.seconds == 2.0 and est.produce_rate_source.startswith("unknown")
    assert processing_rates_from_history(busy[:1]) == (None, None)
