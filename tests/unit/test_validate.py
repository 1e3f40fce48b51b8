"""The validate flow (I/O shell around the verdict) with a fake KafkaView and real checkpoint files.

What is tested here is the plumbing the pure verdict cannot see: which topics are asked for, which
partitions get a record-timestamp probe and within what budget, when the lifecycle record is
written (never after a BLOCK), and which situations are a user error rather than a finding.
"""

from __future__ import annotations

import time

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.verdict_states import broker

T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)


class FakeView:
    """Answers like KafkaView: a fixed BrokerState, record probes, group offsets; records calls."""

    def __init__(self, state, *, probes=None, group=None, probe_delay: float = 0.0):
        self.state = state
        self.probes = probes or {}
        self.group = group or {}
        self.probe_delay = probe_delay
        self.asked_topics: list[str] = []
        self.reference = None
        self.probed: list[tuple[TopicPartition, int]] = []

    def broker_state(self, topics, *, reference=None):
        self.asked_topics = list(topics)
        self.reference = reference
        return self.state

    def last_record_before(self, tp, offset):
        time.sleep(self.probe_delay)
        self.probed.append((tp, offset))
        return self.probes.get(tp)

    def last_records_before(self, offsets, *, deadline=None, bounds=None):
        """KafkaView's batched call: partitions not reached by ``deadline`` are left out."""
        out = {}
        for tp, offset in offsets.items():
            if deadline is not None and time.monotonic() >= deadline:
                break
            out[tp] = self.last_record_before(tp, offset)
        return out

    def group_offsets(self, group_id, topics=None):
        return dict(self.group)

    def close(self):
        pass


def ck(tmp_path, **kw):
    """Checkpoint committed at 20 per partition, batches stamped now (records older than that)."""
    return write_checkpoint(tmp_path / "ck", batches=2, sources=({"orders": 2},), records_per_batch=10,
                            start_timestamp_ms=int(time.time() * 1000), **kw)


def aligned():
    return broker({("orders", 0): (0, 30), ("orders", 1): (0, 30)}, cluster_id="C1", topic_ids={"orders": "ID1"})


def test_pass_records_the_identity_and_later_runs_need_no_probes(tmp_path):
    c = ck(tmp_path)
    view = FakeView(aligned(), probes={T0: (19, 1), T1: (19, 1)})
    v = validate(checkpoint_location=c.location, view=view, options=DeployOptions())
    assert v.severity == "PASS"
    assert view.asked_topics == ["orders"] and view.reference == {T0: 20, T1: 20}
    assert sorted(view.probed) == [(T0, 20), (T1, 20)]
    rec = LifecycleRecord.load(c.location)
    assert rec.kafka_cluster_id == "C1" and rec.topics["orders"].topic_id == "ID1"
    assert rec.job_name == "ck" and rec.history[-1]["event"] == "kafka_identity_recorded"
    again = FakeView(aligned())
    assert validate(checkpoint_location=c.location, view=again).severity == "PASS"
    assert again.probed == []
    assert len(LifecycleRecord.load(c.location).history) == 1   # unchanged identity: no new event


def test_block_is_never_recorded_as_the_baseline(tmp_path):
    c = ck(tmp_path)
    validate(checkpoint_location=c.location, view=FakeView(aligned()))
    reset = broker({("orders", 0): (0, 30), ("orders", 1): (0, 30)}, cluster_id="C1", topic_ids={"orders": "ID2"})
    v = validate(checkpoint_location=c.location, view=FakeView(reset))
    assert v.severity == "BLOCK" and "TOPIC_RESET" in v.codes
    assert LifecycleRecord.load(c.location).topics["orders"].topic_id == "ID1"


def test_no_record_flag_and_explicit_location(tmp_path):
    c = ck(tmp_path)
    validate(checkpoint_location=c.location, view=FakeView(aligned()), record_identity=False)
    assert LifecycleRecord.load(c.location) is None
    elsewhere = str(tmp_path / "records" / "orders.lifecycle.json")
    validate(checkpoint_location=c.location, view=FakeView(aligned()), lifecycle_location=elsewhere,
             job_name="orders-job")
    assert LifecycleRecord.load(elsewhere).job_name == "orders-job"


def test_probe_budget_leaves_partitions_unverified(tmp_path):
    c = ck(tmp_path)
    view = FakeView(aligned(), probes={T0: (19, 1), T1: (19, 1)}, probe_delay=0.05)
    v = validate(checkpoint_location=c.location, view=view, probe_budget_s=0.01, record_identity=False)
    assert len(view.probed) == 1
    f = v.by_code("IDENTITY_UNVERIFIED")[0]
    assert f.numbers["partitions"] == 1 and "orders-1" in f.message and v.severity == "PASS"


def test_unreadable_probe_is_reported_as_unverified(tmp_path):
    c = ck(tmp_path)
    v = validate(checkpoint_location=c.location, view=FakeView(aligned(), probes={T0: None, T1: (19, None)}),
                 record_identity=False)
    assert v.by_code("IDENTITY_UNVERIFIED")[0].numbers["partitions"] == 2


def test_newer_record_below_the_checkpoint_blocks(tmp_path):
    c = ck(tmp_path)
    future = int(time.time() * 1000) + 3_600_000
    v = validate(checkpoint_location=c.location, view=FakeView(aligned(), probes={T0: (19, future)}))
    [reset] = v.by_code("TOPIC_RESET")
    assert reset.tp == T0 and reset.inferred and v.exit_code == 3
    assert LifecycleRecord.load(c.location) is None


def test_failure_to_write_the_record_does_not_change_the_verdict(tmp_path, monkeypatch):
    def refuse(self, **kw):
        raise UserError("cannot write lifecycle record: read-only file system")

    monkeypatch.setattr(LifecycleRecord, "save", refuse)
    v = validate(checkpoint_location=ck(tmp_path).location, view=FakeView(aligned()))
    assert v.severity == "PASS" and "read-only" in v.by_code("RECORD_NOT_WRITTEN")[0].message


def test_missing_checkpoint_is_a_user_error_unless_a_new_query_is_expected(tmp_path):
    where = str(tmp_path / "nope")
    with pytest.raises(UserError, match="does not exist"):
        validate(checkpoint_location=where, view=FakeView(aligned()))
    v = validate(checkpoint_location=where, view=FakeView(aligned()),
                 options=DeployOptions(topics=("orders",), expect_new_checkpoint=True))
    assert v.severity == "PASS" and v.by_code("NO_CHECKPOINT")[0].numbers["records_skipped"] == 60
    assert LifecycleRecord.load(where) is None   # nothing recorded for a checkpoint that does not exist


def test_missing_checkpoint_after_a_reset_uses_the_carried_over_offsets(tmp_path):
    where = str(tmp_path / "nope")
    rec = LifecycleRecord.create("orders", where)
    rec.set_next_starting_offsets('{"orders":{"0":5,"1":10}}')
    rec.save()
    view = FakeView(aligned())
    v = validate(checkpoint_location=where, view=view)
    assert view.asked_topics == ["orders"]
    assert v.by_code("NO_CHECKPOINT")[0].numbers["records_to_read"] == 25 + 20


def test_source_arguments():
    with pytest.raises(UserError, match="exactly one"):
        validate(view=FakeView(aligned()))
    with pytest.raises(UserError, match="exactly one"):
        validate(checkpoint_location="/x", group_id="g", view=FakeView(aligned()))
    with pytest.raises(UserError, match="Kafka"):
        validate(checkpoint_location="/x")


def test_group_flow():
    view = FakeView(aligned(), group={T0: 25, T1: 30})
    v = validate(group_id="g1", view=view, options=DeployOptions(topics=("orders",)))
    assert v.source == "group" and v.subject == "g1" and view.reference == {T0: 25, T1: 30}
    assert v.by_code("GROUP_COMMIT_TRAILS_ONE_BATCH")[0].numbers["backlog"] == 5
