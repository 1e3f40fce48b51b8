"""User story 2 with the real DStream job: a recompiled application cannot start from its DStream checkpoint
(the graph is Java-serialized with the old classes). The product predicts it before the deploy from the
build recorded beside the checkpoint, and the safe path — move the checkpoint aside, start from the
group — loses nothing and re-reads exactly the announced records.
"""

from __future__ import annotations

import pytest

from airflow_kafka_spark.verdict.dstream import DSTREAM_CODES, dstream_checkpoint_verdict, record_build
from devstack import topics
from devstack.produce import produce
from tests.dstream.conftest import Sink, run_for, wait_started
from tests.dstream.test_commit_async import announced_replay, validate_group

pytestmark = [pytest.mark.dstream, pytest.mark.integration]


def test_recompiled_job_fails_on_the_old_checkpoint_and_the_verdict_said_so(
    broker, dstream_v1, dstream_v2, topic_name, tmp_path
):
    bs, group = broker.bootstrap_servers, f"g-{topic_name}"
    ck = tmp_path / "dstream-checkpoint"
    topics.create_topic(bs, topic_name, partitions=2)
    produced = produce(bs, topic_name, 150, partitions=2)
    first = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v1")
    first.start()
    wait_started(first)
    first.wait_processed(150)
    first.marker.write_text("after-data")
    produced += produce(bs, topic_name, 60, partitions=2, start_id=150)
    assert first.wait_exit() == 0, first.tail()
    record_build(str(ck), str(dstream_v1.jar))  # what the submit of v1 recorded (runtime/dstream does it)
    assert sorted(p.name for p in ck.glob("checkpoint-*"))  # Spark wrote its DStream checkpoint files

    # before the deploy: same build passes, the recompiled one is blocked — and allowed once moved aside
    same = dstream_checkpoint_verdict(str(ck), str(dstream_v1.jar))
    assert same.severity == "PASS", same.headline
    other = dstream_checkpoint_verdict(str(ck), str(dstream_v2.jar))
    [finding] = other.by_code("DSTREAM_CHECKPOINT_OTHER_BUILD")
    assert other.severity == "BLOCK" and finding.code in DSTREAM_CODES
    assert dstream_checkpoint_verdict(str(ck), str(dstream_v2.jar), moves_aside=True).severity != "BLOCK"

    # what Spark does with the recompiled classes on the old checkpoint
    broken = run_for(dstream_v2, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v2")
    assert broken.start().wait_exit() != 0
    log = broken.log.read_text(errors="replace")
    assert "Failed to read checkpoint from directory" in log, broken.tail()
    assert "java.io.InvalidClassException: aks.dstream.BatchOutput; local class incompatible" in log
    assert not broken.statuses(), "the recompiled job must not have started a single batch"

    # the safe path: checkpoint aside, start from the group; re-reads exactly what validate announced
    announced = announced_replay(validate_group(bs, group, topic_name))
    ck.rename(tmp_path / "dstream-checkpoint.aside")
    fresh = run_for(dstream_v2, tmp_path, bootstrap=bs, topic=topic_name, group=group, checkpoint=ck, name="v2b")
    fresh.start()
    wait_started(fresh)
    produced += produce(bs, topic_name, 40, partitions=2, start_id=210)
    fresh.wait_processed(announced + 40)
    assert fresh.stop("graceful") == 0, fresh.tail()
    sink = Sink(tmp_path / "sink")
    truth = {(r.topic, r.partition, r.offset) for r in produced}
    assert sink.idempotent() == truth and set(sink.appended()) == truth
    assert sink.duplicates() == announced - (210 - first.processed())
