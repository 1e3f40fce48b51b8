"""Burrow-style status from the offsets history (airflow_kafka_spark.watch.status).

A small seeded simulator stands in for the real job: a producer appending at a noisy rate, and a
micro-batch planner that, at each trigger, plans up to the log end (or up to maxOffsetsPerTrigger),
takes ``overhead + records / capacity`` seconds per batch, can hang (S30) and writes one
``offsets/N`` per batch with ``batchTimestampMs``. Evaluations then run at chosen instants.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from itertools import pairwise

import pytest

from airflow_kafka_spark.checkpoint.model import BatchOffsets
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.watch.lag import compute_lag
from airflow_kafka_spark.watch.status import (
    JobStatus,
    Status,
    StatusThresholds,
    evaluate_status,
)

T = "events"


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


def batch(batch_id: int, ts: int | None, offsets: dict[TopicPartition, int]) -> BatchOffsets:
    return BatchOffsets(batch_id=batch_id, version=1, batch_timestamp_ms=ts, batch_watermark_ms=0,
                        conf={}, sources={"0": dict(offsets)})


@dataclass
class Sim:
    """Producer + micro-batch job, in milliseconds."""

    seed: int
    partitions: int = 3
    rate: float = 50.0                  # records/s per partition
    trigger_ms: int = 2_000
    max_offsets: int | None = None      # maxOffsetsPerTrigger (total, prorated like Spark)
    capacity: float | None = None       # records/s the job processes; None = instant
    overhead_ms: int = 200
    hang_at_ms: int | None = None       # driver hung (kill -STOP): no batch planned from then on
    resume_at_ms: int | None = None     # kill -CONT
    produce_until_ms: int | None = None
    extra_records: list[tuple[int, int]] = field(default_factory=list)  # (time, partition)
    until_ms: int = 300_000
    step_ms: int = 100

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        self.times: list[int] = []
        self.ends: list[dict[TopicPartition, int]] = []
        cur = dict.fromkeys(map(tp, range(self.partitions)), 0)
        per_step = self.rate * self.step_ms / 1000
        extra = sorted(self.extra_records)
        for t in range(0, self.until_ms + self.step_ms, self.step_ms):
            if self.produce_until_ms is None or t <= self.produce_until_ms:
                for k in cur:
                    cur[k] += rng.randint(int(per_step * 0.7), int(per_step * 1.3 + 0.999))
            while extra and extra[0][0] <= t:
                cur[tp(extra.pop(0)[1])] += 1
            self.times.append(t)
            self.ends.append(dict(cur))
        self.history: list[BatchOffsets] = []
        self.finished: list[int] = []   # time each batch finished (commits/N written)
        pos = dict.fromkeys(cur, 0)
        t = 0
        while t <= self.until_ms:
            if self.hang_at_ms is not None and t >= self.hang_at_ms and (
                    self.resume_at_ms is None or t < self.resume_at_ms):
                t = self.resume_at_ms if self.resume_at_ms is not None else self.until_ms + 1
                continue
            le = self.log_end(t)
            avail = {k: le[k] - pos[k] for k in pos}
            total = sum(avail.values())
            if total == 0:
                t += self.trigger_ms
                continue
            take = dict(avail)
            if self.max_offsets is not None and total > self.max_offsets:
                take = {k: int(self.max_offsets * v / total) for k, v in avail.items()}
            pos = {k: pos[k] + take[k] for k in pos}
            self.history.append(batch(len(self.history), t, pos))
            dur = self.overhead_ms + (1000 * sum(take.values()) / self.capacity if self.capacity else 0)
            self.finished.append(int(t + dur))
            nxt = t + self.trigger_ms
            t = int(nxt if t + dur <= nxt else t + dur)

    def log_end(self, t_ms: int) -> dict[TopicPartition, int]:
        i = min(len(self.times) - 1, max(0, t_ms // self.step_ms))
        return dict(self.ends[i])

    def hist_at(self, now: int) -> list[BatchOffsets]:
        """What the checkpoint holds at ``now``: the batches planned by then (last ~100)."""
        return [b for b in self.history if b.batch_timestamp_ms <= now][-100:]

    def committed_at(self, now: int) -> dict[TopicPartition, int] | None:
        done = [b for b, f in zip(self.history, self.finished, strict=True) if f <= now]
        return done[-1].kafka_offsets if done else None

    def samples(self, start: int, end: int, every: int) -> list[tuple[int, dict[TopicPartition, int]]]:
        return [(t, self.log_end(t)) for t in range(start, end, every)]

    def status(self, now: int, *, samples_every: int | None = None, since: int = 0,
               thresholds: StatusThresholds | None = None, with_lag: bool = False,
               committed: bool = False) -> JobStatus:
        prev = self.samples(since, now, samples_every) if samples_every else None
        hist = self.hist_at(now)
        cur_lag = None
        if with_lag and hist:
            pos = self.committed_at(now) if committed else hist[-1].kafka_offsets
            le = self.log_end(now)
            state = BrokerState("b", None, {T: TopicInfo(T, None, self.partitions, -1, -1, "delete")}, [],
                                dict.fromkeys(le, 0), le, now)
            cur_lag = compute_lag(pos or {}, state, now_ms=now, history=hist,
                                  first_unread_ts=self.first_unread(pos or {}, le))
        return evaluate_status(hist, self.log_end(now), now, previous_latest=prev, thresholds=thresholds,
                               committed=self.committed_at(now) if committed else None, current_lag=cur_lag)

    def first_unread(self, pos: dict, le: dict) -> dict:
        """Timestamp of the record at each position: the first time the log end passed it."""
        out = {}
        for k, off in pos.items():
            if off >= le[k]:
                out[k] = None
                continue
            i = next(i for i, e in enumerate(self.ends) if e[k] > off)
            out[k] = (off, self.times[i])
        return out


# ------------------------------------------------------------------------------------------------
# healthy jobs: no false alarms
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("samples_every", [None, 5_000, 20_000])
def test_healthy_job_without_rate_limit_is_ok_at_every_instant(samples_every):
    bad = []
    for seed in range(12):
        sim = Sim(seed, capacity=5_000, until_ms=200_000)
        rng = random.Random(seed)
        for _ in range(15):
            now = rng.randint(60_000, 200_000)
            st = sim.status(now, samples_every=samples_every, since=now - 120_000)
            if st.status is not Status.OK:
                bad.append((seed, now, st.reason))
    assert not bad


def test_healthy_rate_limited_job_with_headroom_is_ok():
    """maxOffsetsPerTrigger above the produce rate: batches are not saturated."""
    for seed in range(10):
        sim = Sim(seed, rate=100, max_offsets=2_000, capacity=10_000, until_ms=200_000)
        for now in (100_000, 150_001, 199_999):
            assert sim.status(now, samples_every=10_000, since=now - 100_000).status is Status.OK


# ------------------------------------------------------------------------------------------------
# S23: lag growing -> WARN
# ------------------------------------------------------------------------------------------------


def test_s23_rate_limited_job_falling_behind_warns_with_samples():
    """--max-offsets-per-trigger 100 --trigger 2 s, producer 200 rec/s: lag grows ~100 rec/s."""
    for seed in range(10):
        sim = Sim(seed, partitions=2, rate=100, max_offsets=100, capacity=10_000, until_ms=60_000)
        st = sim.status(60_000, samples_every=5_000, since=20_000)
        assert st.status is Status.WARN, st.reason
        assert st.numbers["trend_mode"] == "samples+batch-sizes" and "lag grew" in st.reason
        growth = st.numbers["evaluations"][-1][1] - st.numbers["evaluations"][0][1]
        span = (st.numbers["evaluations"][-1][0] - st.numbers["evaluations"][0][0]) / 1000
        assert growth / span == pytest.approx(150, rel=0.25)  # 200 produced − 50 consumed per second


def test_s23_without_samples_the_trend_is_unknown_but_said_so():
    sim = Sim(1, partitions=2, rate=100, max_offsets=100, capacity=10_000, until_ms=60_000)
    st = sim.status(60_000)
    assert st.status is Status.OK and st.numbers["trend_mode"] == "batch-sizes"
    assert any("previous_latest" in f for f in st.findings)
    # one older sample is enough for the rate rule
    st = evaluate_status(sim.hist_at(60_000), sim.log_end(60_000), 60_000,
                         previous_latest=[(10_000, sim.log_end(10_000))])
    assert st.status is Status.WARN and "rec/s" in st.reason
    assert st.numbers["trend_mode"] == "batch-sizes+rates"
    assert st.numbers["produce_rate"] == pytest.approx(200, rel=0.1)
    assert st.numbers["consume_rate"] == pytest.approx(50, rel=0.1)
    # and a user threshold catches it regardless
    st = sim.status(60_000, thresholds=StatusThresholds(max_lag_records=1_000))
    assert st.status is Status.WARN and "max_lag_records" in st.reason


def test_s23_drain_after_the_producer_stops_is_ok_then_idle():
    sim = Sim(2, partitions=2, rate=100, max_offsets=100, capacity=10_000, produce_until_ms=60_000,
              until_ms=600_000)
    mid = sim.status(120_000, samples_every=5_000, since=60_000)
    assert mid.status is Status.OK and mid.numbers["lag_records"] > 0, mid.reason
    done_at = max(b.batch_timestamp_ms for b in sim.history)
    assert sim.status(done_at + 1_000, samples_every=5_000, since=done_at - 60_000).reason == "OK: caught up"
    idle = sim.status(done_at + 100_000, samples_every=5_000, since=done_at - 60_000)
    assert idle.status is Status.IDLE and not idle.is_alert


def test_slow_job_without_rate_limit_warns_from_batch_sizes_alone():
    """Capacity below the produce rate: every batch finds more than the last."""
    warned = 0
    for seed in range(10):
        sim = Sim(seed, partitions=2, rate=60, capacity=100, until_ms=90_000)
        hist = sim.hist_at(90_000)
        last = hist[-1].batch_timestamp_ms
        st = sim.status(last + 500)
        assert st.status in (Status.WARN, Status.OK), st.reason
        assert st.status is not Status.STALLED
        warned += st.status is Status.WARN
        assert sim.status(last + 500, samples_every=3_000, since=last - 40_000).status is Status.WARN
    assert warned >= 8


# ------------------------------------------------------------------------------------------------
# S30: stalled / stopped, and the idle control
# ------------------------------------------------------------------------------------------------


def test_s30_hung_driver_stalls_then_stops_then_recovers():
    for seed in range(8):
        sim = Sim(seed, hang_at_ms=100_000, resume_at_ms=600_000, capacity=5_000, until_ms=700_000)
        last = max(b.batch_timestamp_ms for b in sim.history if b.batch_timestamp_ms < 100_000)
        early = sim.status(last + 10_000, samples_every=5_000, since=40_000)
        assert early.status not in (Status.STALLED, Status.STOPPED)
        st = sim.status(last + 31_000, samples_every=5_000, since=40_000)
        assert st.status is Status.STALLED, st.reason
        assert st.numbers["stall_after_s"] == 30.0 and st.numbers["stall_after_source"] == "derived"
        assert all(p.status is Status.STALLED for p in st.partitions)
        st = sim.status(last + 301_000, samples_every=5_000, since=200_000)
        assert st.status is Status.STOPPED and st.is_alert, st.reason
        back = sim.status(660_000, samples_every=5_000, since=620_000)
        assert back.status is Status.OK, back.reason


def test_s30_idle_producer_is_idle_not_stalled():
    for seed in range(8):
        sim = Sim(seed, produce_until_ms=100_000, capacity=5_000, until_ms=2_000_000)
        for now in (150_000, 500_000, 2_000_000):
            st = sim.status(now, samples_every=10_000, since=now - 100_000)
            assert st.status is Status.IDLE and not st.is_alert, st.reason
            assert all(p.status is Status.IDLE for p in st.partitions)


def test_stall_after_follows_the_jobs_rhythm_and_overrides():
    sim = Sim(3, trigger_ms=20_000, capacity=5_000, hang_at_ms=400_000, until_ms=2_000_000)
    last = max(b.batch_timestamp_ms for b in sim.history)
    st = sim.status(last + 59_000)
    assert st.numbers["median_batch_interval_s"] == 20.0 and st.numbers["stall_after_s"] == 60.0
    assert st.status is not Status.STALLED
    assert sim.status(last + 61_000).status is Status.STALLED
    st = sim.status(last + 301_000)
    assert st.numbers["stopped_after_s"] == 300.0  # max(10 × 20 s, 300 s)
    assert st.status is Status.STOPPED
    assert sim.status(last + 299_000).status is Status.STALLED
    # 10 × 60 s trigger = 600 s
    slow = Sim(3, trigger_ms=60_000, capacity=5_000, until_ms=1_000_000, hang_at_ms=500_000)
    assert slow.status(900_000).numbers["stopped_after_s"] == 600.0
    th = StatusThresholds(stall_after_s=10, stopped_after_s=20)
    fast = sim.status(last + 15_000, thresholds=th)
    assert fast.status is Status.STALLED and fast.numbers["stall_after_source"] == "threshold"
    assert sim.status(last + 21_000, thresholds=th).status is Status.STOPPED
    # stopped_after is never below stall_after
    assert sim.status(last + 21_000, thresholds=StatusThresholds(stall_after_s=100)).numbers[
        "stopped_after_s"] == 300.0
    assert sim.status(last + 21_000, thresholds=StatusThresholds(stall_after_s=400)).numbers[
        "stopped_after_s"] == 400.0


def test_slow_topic_one_new_record_is_not_a_stop_given_evidence():
    """Burrow PR #338: idle for an hour, one record a second ago — not STOPPED when we can tell."""
    sim = Sim(4, produce_until_ms=100_000, capacity=5_000, until_ms=4_000_000,
              extra_records=[(3_600_000, 0)], hang_at_ms=3_600_000)  # the job has not planned it yet
    now = 3_601_000
    no_evidence = sim.status(now)
    assert no_evidence.status is Status.STOPPED  # conservative without evidence, documented
    assert no_evidence.numbers["stall_clock_from"] == "last batch"
    # samples ..., 3 580 000 (quiet), 3 600 000 (the record is there)
    with_sample = sim.status(now, samples_every=20_000, since=3_000_000)
    assert with_sample.status is Status.OK, with_sample.reason
    assert with_sample.numbers["waiting_since_ms"] == 3_580_000
    assert with_sample.numbers["stall_clock_from"] == "broker sample that showed nothing to read"
    with_ts = sim.status(now, with_lag=True)
    assert with_ts.status is Status.OK, with_ts.reason
    assert with_ts.numbers["stall_clock_from"] == "timestamp of the oldest unread record"
    # and if the record keeps waiting it becomes STALLED after stall_after
    later = sim.status(now + 40_000, with_lag=True)
    assert later.status is Status.STALLED


def test_hung_mid_batch_with_producer_stopped_stalls_on_committed_position():
    """offsets/N written, commits/N never: nothing new arrives, but batch N is not done."""
    hist = [batch(i, i * 2_000, {tp(0): 100 * i}) for i in range(51)]  # last planned at 100 s
    le = {tp(0): 5_000}
    now = 140_000
    assert evaluate_status(hist, le, now).status is Status.IDLE  # P == log end: idle if only P is known
    hung = evaluate_status(hist, le, now, committed={tp(0): 4_900})
    assert hung.status is Status.STALLED, hung.reason
    assert hung.numbers["position_basis"] == "committed" and hung.numbers["lag_records"] == 100
    # a broker sample after the last batch showing log end == P is no evidence of quiet: batch N is pending
    hung = evaluate_status(hist, le, now, committed={tp(0): 4_900}, previous_latest=[(130_000, le)])
    assert hung.status is Status.STALLED


# ------------------------------------------------------------------------------------------------
# S25: transaction markers do not alarm
# ------------------------------------------------------------------------------------------------


def test_trailing_transaction_marker_is_idle_not_stopped():
    hist = [batch(i, i * 2_000, {tp(0): 11 * i}) for i in range(1, 20)]
    le = {tp(0): 11 * 19 + 1}  # the commit marker of the last transaction
    now = 19 * 2_000 + 3_600_000
    raw = evaluate_status(hist, le, now)
    assert raw.status is Status.STOPPED and raw.numbers["lag_records"] == 1
    b = BrokerState("b", None, {}, [], {tp(0): 0}, le, now)
    lag = compute_lag({tp(0): 11 * 19}, b, now_ms=now, first_unread_ts={tp(0): None})
    st = evaluate_status(hist, le, now, current_lag=lag)
    assert st.status is Status.IDLE and st.numbers["lag_records"] == 1
    assert st.numbers["lag_records_effective"] == 0
    tolerant = StatusThresholds(allowed_lag_records=1)
    assert evaluate_status(hist, le, now, thresholds=tolerant).status is Status.IDLE


# ------------------------------------------------------------------------------------------------
# REWIND
# ------------------------------------------------------------------------------------------------


def _steady(n: int = 12, step: int = 100) -> list[BatchOffsets]:
    return [batch(i, i * 2_000, {tp(0): step * i, tp(1): step * i}) for i in range(n)]


def test_rewind_in_history_until_recovered():
    hist = _steady(10)
    hist.append(batch(10, 20_000, {tp(0): 300, tp(1): 1_000}))  # tp0 went back from 900 to 300
    le = {tp(0): 1_000, tp(1): 1_000}
    st = evaluate_status(hist, le, 21_000)
    assert st.status is Status.REWIND and "went back from 900 to 300" in st.reason
    assert "600 records to replay" in st.reason
    assert {p.tp: p.status for p in st.partitions} == {tp(0): Status.REWIND, tp(1): Status.OK}
    hist.append(batch(11, 22_000, {tp(0): 950, tp(1): 1_050}))  # climbed back above 900
    st = evaluate_status(hist, {tp(0): 1_000, tp(1): 1_100}, 23_000)
    assert st.status is not Status.REWIND
    assert any("recovered" in f for f in st.findings)


def test_rewind_generated_histories():
    rng = random.Random(99)
    for _ in range(200):
        offs, peak, unrecovered = [0], 0, False
        for _ in range(rng.randint(3, 30)):
            nxt = offs[-1] + rng.randint(0, 50) if rng.random() > 0.1 else rng.randint(0, offs[-1])
            offs.append(nxt)
        peak_before = None
        for a, b in pairwise(offs):
            peak = max(peak, a)
            if b < a and offs[-1] < peak:
                unrecovered = True
            peak_before = peak
        assert peak_before is not None
        hist = [batch(i, i * 1_000, {tp(0): o}) for i, o in enumerate(offs)]
        st = evaluate_status(hist, {tp(0): max(offs) + 10}, len(offs) * 1_000)
        assert (st.status is Status.REWIND) == unrecovered, (offs, st.reason)


def test_log_end_below_position_is_rewind_without_previous_samples():
    st = evaluate_status(_steady(), {tp(0): 300, tp(1): 1_100}, 23_000)
    assert st.status is Status.REWIND and "log end 300 < position 1100" in st.reason


def test_single_regressed_sample_is_a_transient_warning_then_rewind():
    hist = _steady()
    prev = [(21_000, {tp(0): 1_120, tp(1): 1_120})]
    st = evaluate_status(hist, {tp(0): 300, tp(1): 1_130}, 23_000, previous_latest=prev)
    assert st.status is Status.WARN and "transient" in st.reason
    assert {p.tp: p.status for p in st.partitions}[tp(0)] is Status.WARN
    prev.append((22_000, {tp(0): 300, tp(1): 1_125}))  # the regression was seen last time too
    st = evaluate_status(hist, {tp(0): 300, tp(1): 1_130}, 23_000, previous_latest=prev)
    assert st.status is Status.REWIND
    # healed: the log end is back above the position and the earlier peak
    prev = [(21_000, {tp(0): 1_120, tp(1): 1_120}), (22_000, {tp(0): 300, tp(1): 1_125})]
    st = evaluate_status(hist, {tp(0): 1_125, tp(1): 1_130}, 23_000, previous_latest=prev)
    assert st.status is Status.OK, st.reason


def test_transient_regression_is_reported_under_a_stronger_status_too():
    hist = _steady()
    prev = [(21_000, {tp(0): 1_120, tp(1): 1_120})]
    st = evaluate_status(hist, {tp(0): 300, tp(1): 1_130}, 23_000 + 3_600_000, previous_latest=prev)
    assert st.status is Status.STOPPED  # tp1 has waited an hour
    assert any("transient" in f for f in st.findings)
    assert {p.tp: p.status for p in st.partitions}[tp(0)] is Status.WARN


def test_log_end_went_backwards_but_above_position_is_rewind_when_persistent():
    """S03: recreated and refilled past the checkpoint; only the broker samples can tell."""
    hist = _steady()
    prev = [(20_000, {tp(0): 5_000, tp(1): 1_110}), (21_000, {tp(0): 1_200, tp(1): 1_115})]
    st = evaluate_status(hist, {tp(0): 1_250, tp(1): 1_120}, 23_000, previous_latest=prev)
    assert st.status is Status.REWIND and "went backwards from 5000" in st.reason


def test_partition_gone_is_rewind():
    st = evaluate_status(_steady(), {tp(0): 1_100}, 23_000)
    assert st.status is Status.REWIND and "gone" in st.reason


# ------------------------------------------------------------------------------------------------
# thresholds, unknown, serialisation
# ------------------------------------------------------------------------------------------------


def test_thresholds_on_lag_records_and_seconds():
    sim = Sim(6, capacity=5_000, until_ms=100_000)
    now = 99_000
    base = sim.status(now, with_lag=True)
    assert base.status is Status.OK and base.numbers["lag_seconds"] is not None
    st = sim.status(now, with_lag=True, thresholds=StatusThresholds(max_lag_records=1))
    assert st.status is Status.WARN and "max_lag_records 1" in st.reason
    st = sim.status(now, with_lag=True, thresholds=StatusThresholds(max_lag_seconds=0.001))
    assert st.status is Status.WARN and "max_lag_seconds" in st.reason
    st = sim.status(now, thresholds=StatusThresholds(max_lag_seconds=0.001))
    assert any("time lag is unknown" in f for f in st.findings)


def test_thresholds_from_registry_mapping():
    th = StatusThresholds.from_mapping({"max_lag_records": 10, "stall_after_s": 45, "max_lag_seconds": None})
    assert th.max_lag_records == 10 and th.stall_after_s == 45 and th.max_lag_seconds is None
    assert StatusThresholds.from_mapping(None) == StatusThresholds()
    with pytest.raises(UserError, match="unknown status threshold"):
        StatusThresholds.from_mapping({"max_lag": 3})
    for bad in ({"max_lag_records": 0}, {"stall_after_s": -1}, {"allowed_lag_records": -1}, {"window": 1},
                {"max_lag_seconds": True}):
        with pytest.raises(UserError):
            StatusThresholds.from_mapping(bad)


def test_no_history_is_unknown():
    st = evaluate_status([], {tp(0): 10}, 1_000)
    assert st.status is Status.UNKNOWN and not st.is_alert
    st = evaluate_status([batch(0, 0, {})], {tp(0): 10}, 1_000)
    assert st.status is Status.UNKNOWN


def test_batches_without_timestamps_skip_time_rules():
    hist = [batch(i, None, {tp(0): 10 * i}) for i in range(5)]
    st = evaluate_status(hist, {tp(0): 100}, 10**9)
    assert st.status is Status.OK and st.numbers["stall_clock_s"] is None


def test_status_order_and_severity():
    assert [s.severity for s in (Status.OK, Status.WARN, Status.STALLED, Status.STOPPED, Status.REWIND)] == \
        [0, 2, 3, 4, 5]
    assert Status.IDLE.severity == 0 and not Status.IDLE.is_alert and Status.WARN.is_alert


def test_to_dict_is_json():
    sim = Sim(7, partitions=2, rate=100, max_offsets=100, capacity=10_000, until_ms=60_000)
    st = sim.status(60_000, samples_every=5_000, since=20_000, with_lag=True)
    doc = json.loads(json.dumps(st.to_dict()))
    assert doc["status"] == "WARN" and doc["is_alert"] is True
    assert doc["numbers"]["trend_mode"] == "samples+batch-sizes" and len(doc["partitions"]) == 2
    assert doc["partitions"][0]["topic"] == T
