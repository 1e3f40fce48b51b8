"""The safe path for a DStream job through a recompile, with the real job and records produced throughout
(docs/scenarios.md, DStream jobs; the unsafe deploy — the new build on the old DStream checkpoint — is run too):
plan (group + DStream checkpoint) → graceful stop → plan again (the trail is final now: the announced
replay) → back up group offsets and checkpoint → move the checkpoint aside → the new build starts from
the group → health gate on the group's progress → the sink compared record by record; then the
rollback puts both the group's offsets and the checkpoint back.
"""

from __future__ import annotations

import threading

import pytest

from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.ops.dstream_backup import backup_dstream, rollback_dstream
from airflow_kafka_spark.registry.model import JobKind, JobSpec, Sink
from airflow_kafka_spark.runtime.dstream import (
    group_progress,
    move_checkpoint_aside,
    plan_dstream_restart,
    processed_end_from_log,
)
from airflow_kafka_spark.verdict.dstream import dstream_checkpoint_verdict, jar_digest, read_state, record_build
from devstack import topics
from devstack.produce import produce
from tests.dstream.conftest import Sink as JobSink
from tests.dstream.conftest import run_for, wait_started
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.dstream, pytest.mark.integration]


class Producing(threading.Thread):
    """Produces 10 records every 0.1 s until stopped; keeps what Kafka acknowledged."""

    def __init__(self, bs: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bs, self.topic, self.done, self.acked = bs, topic, threading.Event(), []

    def run(self) -> None:
        n = 0
        while not self.done.is_set():
            self.acked += produce(self.bs, self.topic, 10, partitions=2, start_id=n)
            n += 10
            self.done.wait(0.1)

    def stop(self) -> set[tuple[str, int, int]]:
        self.done.set()
        self.join(60)
        return {(r.topic, r.partition, r.offset) for r in self.acked}


def test_recompile_through_the_safe_path(broker, dstream_v1, dstream_v2, topic_name, tmp_path):
    bs, group = broker.bootstrap_servers, f"g-{topic_name}"
    ck = tmp_path / "dstream-checkpoint"
    spec = JobSpec(
        name="clicks",
        application=str(dstream_v2.jar),
        topics=(topic_name,),
        checkpoint=str(tmp_path / "ck"),
        backup_root=str(tmp_path / "backups"),
        stop_marker=str(tmp_path / "stop-marker"),
        sink=Sink.APPEND,
        kind=JobKind.DSTREAM,
        group=group,
        dstream_checkpoint=str(ck),
    )
    topics.create_topic(bs, topic_name, partitions=2)
    producer = Producing(bs, topic_name)
    producer.start()
    old = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v1")
    old.start()
    wait_started(old)
    record_build(str(ck), str(dstream_v1.jar))  # the submit of v1 records its build beside the checkpoint
    old.wait_processed(300)
    view = KafkaView({"bootstrap.servers": bs})
    try:
        before = plan_dstream_restart(spec, str(dstream_v2.jar), kafka=view)
        assert not before.blocked and before.move_checkpoint_aside
        assert before.checkpoint_verdict is not None and before.checkpoint_verdict.codes == {
            "DSTREAM_CHECKPOINT_OTHER_BUILD"
        }

        assert old.stop("stop requested at 2026-11-24T02:00:00Z") == 0, old.tail()  # the product's marker text
        # the trail is final only now: Kafka alone bounds it; the old driver's log (KafkaRDD lines) makes it exact
        bound = plan_dstream_restart(spec, str(dstream_v2.jar), kafka=view)
        ranges = processed_end_from_log(old.log.read_text(errors="replace"))
        plan = plan_dstream_restart(spec, str(dstream_v2.jar), kafka=view, processed_end=ranges)

        # what the unsafe deploy (the new build on the old checkpoint) does, as the verdict said
        assert dstream_checkpoint_verdict(str(ck), str(dstream_v1.jar)).severity == "PASS"
        unsafe = dstream_checkpoint_verdict(str(ck), str(dstream_v2.jar))
        assert unsafe.severity == "BLOCK" and unsafe.codes == {"DSTREAM_CHECKPOINT_OTHER_BUILD"}
        broken = run_for(dstream_v2, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v2x")
        assert broken.start().wait_exit() != 0
        log = broken.log.read_text(errors="replace")
        assert "Failed to read checkpoint from directory" in log, broken.tail()
        assert "java.io.InvalidClassException: aks.dstream.BatchOutput; local class incompatible" in log
        assert not broken.statuses(), "the recompiled job must not have started a single batch"
        backup = backup_dstream(spec, kafka=view)
        aside = move_checkpoint_aside(spec)
        assert aside and not ck.exists() and backup.checkpoint_copy

        # what the old job processed vs what it committed: the replay the plan must have announced
        processed_end: dict[TopicPartition, int] = {}
        for b in old.batches():
            for r in b["ranges"]:
                tp = TopicPartition(r["topic"], r["partition"])
                processed_end[tp] = max(processed_end.get(tp, 0), r["until"])
        reread = sum(end - backup.group_offsets[tp] for tp, end in processed_end.items())
        assert reread > 0 and bound.records_to_replay >= reread and not bound.replay_exact
        assert plan.replay_exact and plan.records_to_replay == reread == plan.duplicates_expected

        new = run_for(dstream_v2, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v2")
        new.start()
        wait_started(new)
        record_build(str(ck), str(dstream_v2.jar))
        wait_until(
            lambda: group_progress(spec, backup.group_offsets, kafka=view) > 0,
            timeout=240,
            interval=0.5,
            what="the health gate: the group's commits move on under the new build",
        )
        truth = producer.stop()
        sink = JobSink(tmp_path / "sink")
        wait_until(lambda: sink.idempotent() >= truth, timeout=240, interval=0.5, what="the new build to catch up")
        assert new.stop("graceful") == 0, new.tail()

        assert sink.idempotent() == truth and set(sink.appended()) == truth  # record by record: none lost
        assert sink.duplicates() == reread  # exactly the processed-but-uncommitted batch, nothing else
        print(
            f"safe path: produced {len(truth)}, announced {plan.records_to_replay} (Kafka alone: at most "
            f"{bound.records_to_replay}), duplicated {reread}"
        )

        # the rollback: both the group's offsets and the DStream checkpoint come back
        rollback_dstream(spec, backup, kafka=view)
        assert view.group_offsets(group, [topic_name]) == backup.group_offsets
        restored = sorted(p.name for p in ck.glob("checkpoint-*"))
        moved = tmp_path / aside.rsplit("/", 1)[-1]
        assert restored and restored == sorted(p.name for p in moved.glob("checkpoint-*"))
        assert read_state(str(ck)).recorded_build == backup.recorded_build == jar_digest(str(dstream_v1.jar))
    finally:
        producer.done.set()
        view.close()
