"""Lag in records and seconds (airflow_kafka_spark.watch.lag): definitions, S25 markers, interpolation.

Generated cases use seeded ``random`` (hypothesis is not installed), so every run sees the same cases.
"""

from __future__ import annotations

import json
import random

import pytest

from airflow_kafka_spark.checkpoint.model import BatchOffsets
from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, TopicPartition
from airflow_kafka_spark.watch.lag import compute_lag, partition_lag, produce_rates
from airflow_kafka_spark.watch.offset_time import OffsetTimeCurve

T = "orders"


def tp(p: int, topic: str = T) -> TopicPartition:
    return TopicPartition(topic, p)


def batch(batch_id: int, ts: int | None, offsets: dict[TopicPartition, int]) -> BatchOffsets:
    return BatchOffsets(batch_id=batch_id, version=1, batch_timestamp_ms=ts, batch_watermark_ms=0,
                        conf={}, sources={"0": dict(offsets)})


def broker(earliest: dict, latest: dict, sampled_at_ms: int = 0) -> BrokerState:
    topics = {t: TopicInfo(t, None, len([k for k in latest if k.topic == t]), 604_800_000, -1, "delete")
              for t in {k.topic for k in latest}}
    return BrokerState("localhost:9092", "cluster", topics, [], dict(earliest), dict(latest), sampled_at_ms)


def kafka_consumer_groups_lag(current: int, log_end: int) -> int:
    """What ConsumerGroupCommand.getLag computes: logEndOffset − offset, unclamped."""
    return log_end - current


# ------------------------------------------------------------------------------------------------
# records
# ------------------------------------------------------------------------------------------------


def test_caught_up_is_zero_records_zero_seconds():
    lag = compute_lag({tp(0): 500}, broker({tp(0): 0}, {tp(0): 500}), now_ms=10_000)
    p = lag.partitions[0]
    assert (p.records, p.records_effective, p.seconds, p.method) == (0, 0, 0.0, None)
    assert lag.records == lag.records_effective == 0 and lag.seconds == 0.0 and lag.caught_up


def test_records_match_kafka_consumer_groups_on_generated_cases():
    rng = random.Random(20231)
    for _ in range(300):
        n = rng.randint(1, 6)
        earliest, latest, pos = {}, {}, {}
        for p in range(n):
            ls = rng.randint(0, 1000)
            le = ls + rng.randint(0, 5000)
            earliest[tp(p)], latest[tp(p)] = ls, le
            pos[tp(p)] = rng.choice([le, ls, rng.randint(max(0, ls - 50), le + 50)])
        lag = compute_lag(pos, broker(earliest, latest), now_ms=1_000_000)
        for part in lag.partitions:
            assert part.records == kafka_consumer_groups_lag(pos[part.tp], latest[part.tp])
            assert 0 <= part.records_effective <= max(0, part.records)
            assert part.lost_records == max(0, earliest[part.tp] - pos[part.tp])
            assert part.ahead_of_log_end == (pos[part.tp] > latest[part.tp])
        assert lag.records == sum(max(0, latest[k] - pos[k]) for k in pos)
        assert lag.records_effective == sum(p.records_effective for p in lag.partitions)
        assert sorted(lag.ahead) == sorted(k for k in pos if pos[k] > latest[k])


def test_position_ahead_of_log_end_is_flagged_not_subtracted():
    lag = compute_lag({tp(0): 500, tp(1): 100}, broker({tp(0): 0, tp(1): 0}, {tp(0): 300, tp(1): 150}),
                      now_ms=0)
    p0 = lag.by_tp()[tp(0)]
    assert p0.records == -200 and p0.records_effective == 0 and p0.seconds is None
    assert "went backwards" in p0.note
    assert lag.records == 50 and lag.ahead == [tp(0)]


def test_missing_partition_is_unknown_not_zero():
    lag = compute_lag({tp(0): 10, tp(1): 10}, broker({tp(0): 0}, {tp(0): 20}), now_ms=0)
    p1 = lag.by_tp()[tp(1)]
    assert p1.records is None and p1.records_effective is None and p1.seconds is None
    assert lag.missing == [tp(1)] and lag.records == 10


def test_below_log_start_counts_lost_and_effective_excludes_them():
    lag = compute_lag({tp(0): 100}, broker({tp(0): 400}, {tp(0): 1000}), now_ms=0)
    p = lag.partitions[0]
    assert p.records == 900 and p.lost_records == 300 and p.records_effective == 600
    assert "deleted before being read" in p.note


def test_sentinels_resolve_against_the_broker():
    b = broker({tp(0): 40, tp(1): 0}, {tp(0): 90, tp(1): 70})
    lag = compute_lag({tp(0): EARLIEST, tp(1): LATEST}, b, now_ms=0)
    assert lag.by_tp()[tp(0)].position == 40 and lag.by_tp()[tp(0)].records == 50
    assert lag.by_tp()[tp(1)].records == 0


def test_new_partitions_of_subscribed_topics_count_from_earliest():
    b = broker({tp(0): 0, tp(1): 0, tp(2): 5, tp(0, "other"): 0},
               {tp(0): 10, tp(1): 10, tp(2): 25, tp(0, "other"): 99})
    lag = compute_lag({tp(0): 10, tp(1): 10}, b, now_ms=0)
    assert [p.tp for p in lag.partitions] == [tp(0), tp(1), tp(2)]
    assert lag.by_tp()[tp(2)].new_partition and lag.by_tp()[tp(2)].records == 20
    assert lag.records == 20
    assert compute_lag({tp(0): 10, tp(1): 10}, b, now_ms=0, include_new_partitions=False).records == 0


# ------------------------------------------------------------------------------------------------
# S25: transaction markers, aborted records, compaction
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lookup", [None, (1000, None), (1000, 123), (1005, 77)])
def test_trailing_markers_are_no_effective_lag(lookup):
    """LE − C = 1 after a committed transaction: the CLI prints 1, nothing is readable, 0 seconds."""
    lag = compute_lag({tp(0): 999}, broker({tp(0): 0}, {tp(0): 1000}), now_ms=50_000,
                      first_unread_ts={tp(0): lookup})
    p = lag.partitions[0]
    assert p.records == kafka_consumer_groups_lag(999, 1000) == 1
    assert p.records_effective == 0 and p.seconds == 0.0 and p.method is None
    assert "markers" in p.note
    assert lag.caught_up and lag.records == 1 and lag.records_effective == 0


def test_marker_residue_on_generated_transactional_logs():
    """Simulated read_committed log: 10-record transactions, every 10th aborted, one marker each."""
    rng = random.Random(25)
    for _ in range(100):
        offset, readable = 0, []  # offsets of records a read_committed consumer gets
        for txn in range(rng.randint(1, 30)):
            size = rng.randint(1, 10)
            if txn % 10 != 9:
                readable.extend(range(offset, offset + size))
            offset += size + 1  # + the commit/abort marker
        log_end = offset
        position = rng.choice([*readable, log_end - 1, log_end]) + rng.choice([0, 1])
        position = min(position, log_end)
        nxt = next((o for o in readable if o >= position), None)
        lookup = None if nxt is None else (nxt, 1_000 + nxt)
        p = compute_lag({tp(0): position}, broker({tp(0): 0}, {tp(0): log_end}), now_ms=10_000_000,
                        first_unread_ts={tp(0): lookup}).partitions[0]
        assert p.records == log_end - position
        if nxt is None:
            assert p.records_effective == 0 and p.seconds == 0.0
        else:
            assert p.records_effective == log_end - nxt
            assert p.first_unread_offset == nxt and p.method == "record-timestamp"
            assert p.seconds == pytest.approx((10_000_000 - 1_000 - nxt) / 1000)


def test_timestamp_only_lookup_keeps_records_and_uses_the_timestamp():
    lag = compute_lag({tp(0): 10}, broker({tp(0): 0}, {tp(0): 30}), now_ms=9_000,
                      first_unread_ts={tp(0): 4_000})
    p = lag.partitions[0]
    assert p.records_effective == 20 and p.seconds == 5.0 and p.method == "record-timestamp"
    assert p.first_unread_ts_ms == 4_000


def test_future_record_timestamp_clamps_to_zero_with_a_note():
    p = compute_lag({tp(0): 10}, broker({tp(0): 0}, {tp(0): 30}), now_ms=9_000,
                    first_unread_ts={tp(0): 12_000}).partitions[0]
    assert p.seconds == 0.0 and "clock skew" in p.note


def test_negative_record_timestamp_falls_back_to_interpolation():
    hist = [batch(0, 0, {tp(0): 0}), batch(1, 10_000, {tp(0): 100})]
    p = compute_lag({tp(0): 100}, broker({tp(0): 0}, {tp(0): 200}, 20_000), now_ms=20_000,
                    first_unread_ts={tp(0): (100, -1)}, history=hist).partitions[0]
    assert p.method == "interpolated" and p.seconds == pytest.approx(10.0)


# ------------------------------------------------------------------------------------------------
# interpolation (kafka-lag-exporter's lookup table)
# ------------------------------------------------------------------------------------------------


def test_curve_solves_the_line_between_neighbours():
    curve = OffsetTimeCurve(((0, 0), (10_000, 100)))
    assert curve.time_of(50) == (5_000.0, False)
    assert curve.time_of(0) == (0.0, False)
    assert curve.time_of(100) is None  # not appended yet as far as the curve knows
    assert OffsetTimeCurve(((0, 0),)).time_of(0) is None  # too few points


def test_curve_extrapolates_below_its_oldest_point():
    curve = OffsetTimeCurve(((10_000, 100), (20_000, 200)))
    t, extrapolated = curve.time_of(50)
    assert extrapolated and t == pytest.approx(5_000)


def test_curve_is_monotone_compressed_and_forgets_a_recreated_log():
    h = [batch(0, 1_000, {tp(0): 10}), batch(1, 2_000, {tp(0): 10}), batch(2, 3_000, {tp(0): 10}),
         batch(3, 4_000, {tp(0): 5}), batch(4, 5_000, {tp(0): 30})]
    curve = OffsetTimeCurve.build(tp(0), history=h)
    # the dip to 5 is a lower bound, absorbed; the flat run keeps first and last point
    assert curve.points == ((1_000, 10), (4_000, 10), (5_000, 30))
    # a broker sample below an earlier one: log recreated, older points dropped
    samples = [(1_500, {tp(0): 500}), (6_000, {tp(0): 40}), (7_000, {tp(0): 60})]
    curve = OffsetTimeCurve.build(tp(0), history=h, samples=samples)
    assert curve.points == ((6_000, 40), (7_000, 60))


def test_curve_properties_on_generated_tables():
    rng = random.Random(7)
    for _ in range(200):
        t, off, pts = 0, rng.randint(0, 100), []
        for _ in range(rng.randint(2, 30)):
            t += rng.randint(1, 5_000)
            off += rng.choice([0, 0, rng.randint(1, 500)])
            pts.append((t, off))
        curve = OffsetTimeCurve.build(tp(0), samples=[(ts, {tp(0): o}) for ts, o in pts])
        assert all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(curve.points, curve.points[1:], strict=False))
        last = None
        for probe in range(pts[0][1], pts[-1][1]):
            est = curve.time_of(probe)
            assert est is not None and not est[1]
            # appended after the last time it was known absent, no later than first time known present
            absent = max(ts for ts, o in pts if o <= probe)
            present = min(ts for ts, o in pts if o > probe)
            assert absent <= est[0] <= present
            assert last is None or est[0] >= last
            last = est[0]


def _simulate_unthrottled(rng: random.Random, rate_per_s: float, trigger_ms: int, until_ms: int):
    """Producer appends at ~rate with timestamps = append time; job plans to the log end each trigger."""
    appended: list[int] = []  # timestamp of each offset
    t = 0
    while t < until_ms:
        t += rng.randint(1, int(2_000 / rate_per_s))
        appended.append(t)
    history = []
    for i, ts in enumerate(range(0, until_ms, trigger_ms)):
        history.append(batch(i, ts, {tp(0): sum(1 for a in appended if a <= ts)}))
    return appended, history


def test_interpolated_seconds_bound_the_true_age_of_the_first_unread_record():
    rng = random.Random(23)
    for _ in range(40):
        appended, history = _simulate_unthrottled(
            rng, rate_per_s=rng.choice([5, 50, 200]), trigger_ms=rng.choice([1_000, 2_000, 5_000]),
            until_ms=60_000)
        now = rng.randint(40_000, 60_000)
        le = sum(1 for a in appended if a <= now)
        hist = [b for b in history if b.batch_timestamp_ms <= now]
        c = hist[-1].kafka_offsets[tp(0)]
        if c >= le:
            continue
        true_age = (now - appended[c]) / 1000
        exact = compute_lag({tp(0): c}, broker({tp(0): 0}, {tp(0): le}, now), now_ms=now,
                            first_unread_ts={tp(0): (c, appended[c])}).partitions[0]
        assert exact.seconds == pytest.approx(true_age)
        est = compute_lag({tp(0): c}, broker({tp(0): 0}, {tp(0): le}, now), now_ms=now,
                          history=hist).partitions[0]
        assert est.method == "interpolated"
        # without a rate limit the batch at C saw the log end == C, so the record came later:
        # the estimate (time since that batch) is an upper bound, off by less than one trigger
        assert true_age <= est.seconds + 1e-9
        assert est.seconds - true_age <= (now - hist[-1].batch_timestamp_ms) / 1000 + 1e-9
        # broker samples every second tighten it to about a second
        samples = [(s, {tp(0): sum(1 for a in appended if a <= s)}) for s in range(0, now, 1_000)]
        tight = compute_lag({tp(0): c}, broker({tp(0): 0}, {tp(0): le}, now), now_ms=now, history=hist,
                            samples=samples).partitions[0]
        assert abs(tight.seconds - true_age) <= 1.0 + 1e-9


def test_interpolation_needs_two_points_else_unknown_not_nan():
    lag = compute_lag({tp(0): 10, tp(1): 5}, broker({tp(0): 0, tp(1): 0}, {tp(0): 20, tp(1): 5}),
                      now_ms=1_000)
    p0 = lag.by_tp()[tp(0)]
    assert p0.seconds is None and p0.method is None and "unknown" in p0.note
    assert lag.seconds == 0.0 and lag.seconds_unknown == [tp(0)]  # aggregate over the known ones


def test_job_seconds_is_the_max_and_names_the_partition():
    rng = random.Random(3)
    for _ in range(50):
        n = rng.randint(1, 8)
        now = 1_000_000
        pos = {tp(p): 100 for p in range(n)}
        latest = {tp(p): 100 + rng.randint(0, 3) for p in range(n)}
        ts = {tp(p): now - rng.randint(0, 100_000) for p in range(n)}
        lag = compute_lag(pos, broker(dict.fromkeys(pos, 0), latest), now_ms=now,
                          first_unread_ts={k: (100, ts[k]) for k in pos})
        expected = [((now - ts[k]) / 1000 if latest[k] > 100 else 0.0) for k in sorted(pos)]
        assert lag.seconds == pytest.approx(max(expected))
        assert lag.by_tp()[lag.seconds_partition].seconds == lag.seconds


def test_partition_lag_direct_call_and_json():
    p = partition_lag(tp(0), 5, log_end=None, log_start=None, now_ms=0)
    assert p.records is None and "not on the broker" in p.note
    lag = compute_lag({tp(0): 10}, broker({tp(0): 0}, {tp(0): 30}), now_ms=9_000,
                      first_unread_ts={tp(0): 4_000})
    doc = json.loads(json.dumps(lag.to_dict()))
    assert doc["records"] == 20 and doc["partitions"][0]["method"] == "record-timestamp"
    assert doc["seconds_partition"] == "orders-0"


def test_produce_rates():
    s = [(0, {tp(0): 0, tp(1): 50}), (5_000, {tp(0): 10}), (10_000, {tp(0): 100, tp(1): 20})]
    assert produce_rates(s) == {tp(0): 10.0}  # tp(1) went backwards: no rate
    assert produce_rates(s[:1]) == {}
