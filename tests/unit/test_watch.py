"""watch.observe without a broker: a checkpoint written like Spark's and a scripted Kafka view.

The real-broker acceptance lives in tests/integration/test_lag_real.py; these pin the wiring
(which offsets are probed, what the alerts and the lag gate say, how samples and groups work).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from airflow_kafka_spark._util.text import fmt_duration
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState, GroupInfo, TopicInfo
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.watch.observation import Sample, keep_recent, lag_gate
from airflow_kafka_spark.watch.observe import ObserveLimits, ObserveTarget, observe
from airflow_kafka_spark.watch.status import Status, StatusThresholds
from tests.support.checkpoint_factory import START_TIMESTAMP_MS, write_checkpoint

T = "orders"


def tp(p: int) -> TopicPartition:
    return TopicPartition(T, p)


@dataclass
class FakeView:
    """The three KafkaView calls observe() makes, answered from plain dicts."""

    latest: dict[TopicPartition, int]
    earliest: dict[TopicPartition, int] = field(default_factory=dict)
    record_ts: dict[TopicPartition, int] = field(default_factory=dict)   # timestamp of every record
    group: dict[TopicPartition, int] = field(default_factory=dict)
    now_ms: int = START_TIMESTAMP_MS + 60_000
    retention_ms: int = 3_600_000
    retention_bytes: int = -1
    markers_only: set[TopicPartition] = field(default_factory=set)   # only control records left after C
    probed: list[tuple[TopicPartition, int]] = field(default_factory=list)

    def broker_state(self, topics, *, reference=None, attempts=3, delay=0.5) -> BrokerState:
        topics = list(topics)
        parts = {t: len([p for p in self.latest if p.topic == t]) for t in topics}
        return BrokerState(
            bootstrap_servers="fake:9092", cluster_id="c1",
            topics={t: TopicInfo(t, "id-" + t, n, self.retention_ms, self.retention_bytes, "delete")
                    for t, n in parts.items() if n},
            missing_topics=[t for t, n in parts.items() if not n],
            earliest={p: self.earliest.get(p, 0) for p in self.latest}, latest=dict(self.latest),
            sampled_at_ms=self.now_ms)

    def first_record_at_or_after(self, tp: TopicPartition, offset: int):
        self.probed.append((tp, offset))
        if offset >= self.latest[tp] or tp in self.markers_only:
            return None
        return offset, self.record_ts.get(tp)

    def first_records_at_or_after(self, positions, *, deadline=None, bounds=None):
        """KafkaView's batched call: partitions not reached by ``deadline`` are left out."""
        out = {}
        for tp, offset in positions.items():
            if deadline is not None and time.monotonic() >= deadline:
                break
            out[tp] = self.first_record_at_or_after(tp, offset)
        return out

    def group_offsets(self, group_id, topics=None):
        return dict(self.group)

    def describe_group(self, group_id) -> GroupInfo:
        return GroupInfo(group_id, "EMPTY" if self.group else "DEAD", "CLASSIC", [])

    def close(self) -> None:
        pass


@pytest.fixture
def ck(tmp_path):
    # batches 0..4 committed, 10 records per partition per batch: C = 50 on both partitions,
    # planned at START + 0, 1, 2, 3, 4 s.
    return write_checkpoint(tmp_path / "ck", batches=5, sources=({T: 2},), records_per_batch=10)


def test_caught_up_job_is_ok_and_reads_nothing(ck):
    view = FakeView(latest={tp(0): 50, tp(1): 50}, now_ms=START_TIMESTAMP_MS + 5_000)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    assert obs.status.status is Status.OK and obs.lag.records == 0 and obs.lag.seconds == 0.0
    assert view.probed == []                       # nothing to read: no probe consumer at all
    assert obs.position == {tp(0): 50, tp(1): 50} and obs.last_committed_batch == 4
    assert obs.alerts() == []


def test_lag_seconds_come_from_the_first_unread_record(ck):
    now = START_TIMESTAMP_MS + 60_000
    view = FakeView(latest={tp(0): 80, tp(1): 55}, record_ts={tp(0): now - 42_000, tp(1): now - 7_500}, now_ms=now)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    by = obs.lag.by_tp()
    assert (by[tp(0)].records, by[tp(1)].records) == (30, 5)
    assert by[tp(0)].seconds == pytest.approx(42.0) and by[tp(0)].method == "record-timestamp"
    assert obs.lag.seconds == pytest.approx(42.0) and obs.lag.seconds_partition == tp(0)
    assert sorted(view.probed) == [(tp(0), 50), (tp(1), 50)]
    # the oldest unread record decides the headroom: 1 h retention - 42 s
    assert obs.headroom.seconds == pytest.approx(3600 - 42.0)
    assert obs.sample.at_ms == now and obs.sample.position == {tp(0): 50, tp(1): 50}


def test_a_trailing_transaction_marker_is_no_lag(ck):
    """S25: after a transaction the log end is one past a commit marker: LE - C = 1, nothing to read."""
    view = FakeView(latest={tp(0): 51, tp(1): 50}, markers_only={tp(0)}, now_ms=START_TIMESTAMP_MS + 10_000)
    obs = observe(ObserveTarget(checkpoint=ck.location), view, thresholds=StatusThresholds(stall_after_s=2))
    p0 = obs.lag.by_tp()[tp(0)]
    assert (p0.records, p0.records_effective, p0.seconds) == (1, 0, 0.0)   # kafka-consumer-groups says 1
    assert obs.status.status is Status.IDLE and obs.alerts() == []         # not STALLED on a marker
    assert obs.lag_within(0, None)[0]


def test_probe_budget_falls_back_to_interpolation(ck):
    now = START_TIMESTAMP_MS + 60_000
    view = FakeView(latest={tp(0): 80, tp(1): 55}, now_ms=now)
    obs = observe(ObserveTarget(checkpoint=ck.location), view, limits=ObserveLimits(probe_budget_s=0))
    assert view.probed == [] and obs.unprobed == [tp(0), tp(1)]
    assert all(p.method == "interpolated" for p in obs.lag.partitions)
    assert any("budget" in n for n in obs.notes)


def test_stalled_job_alerts_and_headroom_threshold(ck):
    now = START_TIMESTAMP_MS + 120_000
    view = FakeView(latest={tp(0): 60, tp(1): 50}, record_ts={tp(0): START_TIMESTAMP_MS + 5_000}, now_ms=now,
                    retention_ms=200_000)
    obs = observe(ObserveTarget(checkpoint=ck.location), view, thresholds=StatusThresholds(stall_after_s=10))
    assert obs.status.status is Status.STALLED
    codes = [a.code for a in obs.alerts(min_headroom_s=3600)]
    assert codes == ["STALLED", "HEADROOM_LOW"]
    assert not obs.alerts()[0].message.startswith("STALLED:")     # no "STALLED: STALLED: ..."
    assert [a.code for a in obs.alerts(min_headroom_s=10)] == ["STALLED"]


def test_unknown_size_retention_warns_but_a_low_time_headroom_still_alerts(ck):
    now = START_TIMESTAMP_MS + 60_000
    view = FakeView(latest={tp(0): 80, tp(1): 50}, record_ts={tp(0): now - 42_000}, now_ms=now,
                    retention_bytes=10_000_000)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    assert obs.headroom.seconds is None and obs.headroom.unknown == [tp(0), tp(1)]
    def headroom_alerts(limit):
        return [a for a in obs.alerts(min_headroom_s=limit) if a.code.startswith("HEADROOM")]

    assert headroom_alerts(60) == []                          # unknown alone never fires
    (alert,) = headroom_alerts(7200)                          # by time: 1 h - 42 s < 2 h
    assert "possibly sooner" in alert.message


def test_records_already_lost_is_an_alert(ck):
    view = FakeView(latest={tp(0): 90, tp(1): 50}, earliest={tp(0): 70}, record_ts={tp(0): START_TIMESTAMP_MS},
                    now_ms=START_TIMESTAMP_MS + 6_000)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    assert obs.headroom.lost_records == 20
    assert [a.code for a in obs.alerts()] == ["DATA_LOST"]
    assert view.probed == [(tp(0), 70)]              # read from the log start, not below it


def test_missing_checkpoint_and_bad_arguments(tmp_path):
    view = FakeView(latest={tp(0): 1})
    with pytest.raises(UserError, match="does not exist"):
        observe(ObserveTarget(checkpoint=str(tmp_path / "nope")), view)
    with pytest.raises(UserError, match="exactly one"):
        observe(ObserveTarget(), view)


def test_lag_gate_and_limits(ck):
    now = START_TIMESTAMP_MS + 60_000
    view = FakeView(latest={tp(0): 80, tp(1): 50}, record_ts={tp(0): now - 20_000}, now_ms=now)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    assert lag_gate(obs, max_lag_records=30, max_lag_seconds=None)["status"] == "success"
    assert lag_gate(obs, max_lag_records=29, max_lag_seconds=None) is None
    assert lag_gate(obs, max_lag_records=None, max_lag_seconds=19) is None
    assert lag_gate(obs, max_lag_records=100, max_lag_seconds=21)["observation"]["lag_records_effective"] == 30
    with pytest.raises(UserError, match="no lag limit"):
        obs.lag_within(None, None)
    unknown = observe(ObserveTarget(checkpoint=ck.location), FakeView(latest={tp(0): 80, tp(1): 50}, now_ms=now),
                      limits=ObserveLimits(probe_budget_s=0))
    if unknown.lag.seconds is None:              # an unknown time lag never opens a seconds gate
        assert lag_gate(unknown, max_lag_records=None, max_lag_seconds=1e9) is None


def test_fail_on_alert_ends_the_gate(ck):
    now = START_TIMESTAMP_MS + 120_000
    view = FakeView(latest={tp(0): 60, tp(1): 50}, record_ts={tp(0): START_TIMESTAMP_MS + 5_000}, now_ms=now)
    obs = observe(ObserveTarget(checkpoint=ck.location), view, thresholds=StatusThresholds(stall_after_s=10))
    assert lag_gate(obs, max_lag_records=1, max_lag_seconds=None) is None
    gate = lag_gate(obs, max_lag_records=1, max_lag_seconds=None, fail_on_alert=True)
    assert gate["status"] == "failed" and "STALLED" in gate["message"]


def test_samples_round_trip_and_keep_recent():
    s = Sample(5, {tp(0): 10, TopicPartition("b", 3): 7}, {tp(0): 4})
    assert Sample.from_dict(s.to_dict()) == s
    kept = keep_recent([Sample(i, {}) for i in range(40)], Sample(100, {}), keep=5)
    assert [k.at_ms for k in kept] == [36, 37, 38, 39, 100]


def test_group_job_builds_its_history_from_samples():
    now = START_TIMESTAMP_MS + 100_000
    view = FakeView(latest={tp(0): 100}, group={tp(0): 40}, record_ts={tp(0): START_TIMESTAMP_MS}, now_ms=now)
    samples = [Sample(START_TIMESTAMP_MS + i * 10_000, {tp(0): 40 + i}, {tp(0): 40}) for i in range(5)]
    obs = observe(ObserveTarget(group_id="g1", topics=[T]), view, thresholds=StatusThresholds(stall_after_s=30),
                  samples=samples)
    assert obs.source == "group" and obs.lag.records == 60
    # the committed position has not moved since the first sample, 100 s ago: the group is stalled
    assert obs.status.status in (Status.STALLED, Status.STOPPED)
    assert obs.last_batch_timestamp_ms == START_TIMESTAMP_MS


@pytest.mark.parametrize(("seconds", "text"), [(None, "-"), (4.25, "4.2 s"), (42, "42 s"), (600, "10.0 min"),
                                               (7200, "2.0 h"), (3 * 86400, "3.0 d")])
def test_fmt_duration(seconds, text):
    assert fmt_duration(seconds) == text
