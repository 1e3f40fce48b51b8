"""The group-based verdict against what the real DStream job then does, when Kafka changed under it:
a kill in the middle of a batch, retention past the committed offsets, partitions added, a topic
deleted and recreated. Three runs of the job on one group subscribed to two topics (CI time).
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KTP

from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from devstack import topics
from devstack.produce import produce
from tests.dstream.conftest import Sink, run_for, wait_started
from tests.dstream.test_commit_async import validate_group
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.dstream, pytest.mark.integration]


def committed(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        return {k.partition: k.offset for k in c.committed([KTP(topic, p) for p in range(partitions)], timeout=10)}
    finally:
        c.close()


def produce_to(bs: str, topic: str, partition: int, count: int, start_id: int) -> list[tuple[str, int, int]]:
    acked: list[tuple[str, int, int]] = []
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(start_id, start_id + count):
        p.produce(
            topic,
            json.dumps({"id": i}).encode(),
            partition=partition,
            on_delivery=lambda err, m: err is None and acked.append((m.topic(), m.partition(), m.offset())),
        )
    p.flush(30)
    assert len(acked) == count
    return acked


def findings(doc: dict, code: str) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == code]


def test_kill_retention_new_partitions_and_recreated_topic(broker, dstream_v1, topic_name, tmp_path):
    bs, group = broker.bootstrap_servers, f"g-{topic_name}"
    t1, t2 = topic_name, f"{topic_name}-b"
    topics.create_topic(bs, t1, partitions=2)
    topics.create_topic(bs, t2, partitions=1)
    truth = {(r.topic, r.partition, r.offset) for r in produce(bs, t1, 300, partitions=2)}
    truth |= {(r.topic, r.partition, r.offset) for r in produce(bs, t2, 50)}
    sink = Sink(tmp_path / "sink")

    # --- kill -9 while a batch is writing its output
    a = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=f"{t1},{t2}", group=group, name="a").start()
    wait_started(a)
    a.wait_processed(350)
    a.wait_batches(2)  # two more batches drain the queued commit: the group is at the log end
    truth |= {(r.topic, r.partition, r.offset) for r in produce(bs, t1, 4000, partitions=2, start_id=300)}
    wait_until(
        lambda: len(sink.idempotent()) > 600 or a.processed() > 350,
        timeout=240,
        interval=0.05,
        what="the big batch to start writing",
    )
    a.kill()
    written_in_killed_batch = len(sink.idempotent()) - 350
    assert a.processed() == 350 and 0 < written_in_killed_batch < 4000, "the kill must land inside the batch"
    appended_in_killed_batch = sum(sink.appended().values()) - 350  # flushed lines only: kill -9 drops buffers

    doc = validate_group(bs, group, f"{t1},{t2}")
    [trail] = findings(doc, "GROUP_COMMIT_TRAILS_ONE_BATCH")
    assert trail["numbers"]["records_to_replay"] == 4000  # the killed batch, all of it, nothing else

    b = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=f"{t1},{t2}", group=group, name="b").start()
    wait_started(b)
    b.wait_processed(4000)
    b.wait_batches(2)
    assert b.stop("graceful") == 0, b.tail()
    assert b.processed() == 4000  # the restart read exactly the announced range
    assert sink.duplicates() == appended_in_killed_batch  # the killed batch's partial output, written again
    assert sink.idempotent() == truth

    # --- while stopped: retention past the committed offset of t1-0, a new partition t1-2, t2 recreated
    c1 = committed(bs, group, t1, 2)
    truth |= set(produce_to(bs, t1, 0, 100, 10_000))
    topics.delete_records(bs, t1, {0: c1[0] + 60})  # 60 never-read records deleted
    lost = {(t1, 0, o) for o in range(c1[0], c1[0] + 60)}
    topics.add_partitions(bs, t1, 3)
    truth |= set(produce_to(bs, t1, 2, 30, 20_000))
    topics.delete_topic(bs, t2)
    topics.create_topic(bs, t2, partitions=1)
    recreated = set(produce_to(bs, t2, 0, 20, 30_000))  # offsets 0..19 again: they overwrite nothing old
    truth |= recreated

    doc = validate_group(bs, group, f"{t1},{t2}")
    [below] = findings(doc, "OFFSET_BELOW_LOG_START")
    assert doc["verdict"] == "BLOCK" and below["partition"] == 0 and below["numbers"]["records_lost"] == 60
    # Kafka drops a deleted topic's committed offsets: the recreated t2 is a partition without a commit,
    # read from earliest like the added t1-2 (INFO, its records counted as backlog)
    new = {(f["topic"], f["partition"]): f for f in findings(doc, "NEW_PARTITION")}
    assert set(new) == {(t1, 2), (t2, 0)} and all(f["severity"] == "INFO" for f in new.values())
    assert new[(t1, 2)]["numbers"]["backlog"] == 30 and new[(t2, 0)]["numbers"]["backlog"] == 20

    # what Spark does: the driver takes the committed offset as it is; the executor's consumer runs with
    # auto.offset.reset=none (KafkaUtils fixes it) and the batch fails — the BLOCK was right. Worse: the
    # failure reaches main, the shutdown hook stops gracefully (spark.streaming.stopGracefullyOnShutdown),
    # the batches generated meanwhile run empty from the failed batch's end and commitAsync it, so the
    # group moves past every record of the failed batch (t1-0's 40 left, t1-2's 30, t2's 20): all skipped.
    c = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=f"{t1},{t2}", group=group, name="c").start()
    wait_started(c)
    assert c.wait_exit() != 0
    assert f"OffsetOutOfRangeException: Fetch position FetchPosition{{offset={c1[0]}" in c.log.read_text()
    assert not [x for x in c.batches() if x["records"]], "no batch with records may have completed"
    after = validate_group(bs, group, f"{t1},{t2}")
    assert findings(after, "GROUP_COMMIT_TRAILS_ONE_BATCH")[0]["numbers"]["records_to_replay"] == 0
    assert after["verdict"] == "WARN" and not findings(after, "OFFSET_BELOW_LOG_START"), after["headline"]

    # the fix the verdict names, on the group as it was before the failed run: the log start for t1-0 (the
    # 60 are gone either way), the beginning for t1-2 and the recreated t2
    before_c = {
        TopicPartition(t1, 0): below["numbers"]["log_start"],
        TopicPartition(t1, 2): 0,
        TopicPartition(t2, 0): 0,
    }
    view = KafkaView({"bootstrap.servers": bs})
    try:
        view.commit_group_offsets(group, before_c)
    finally:
        view.close()
    d = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=f"{t1},{t2}", group=group, name="d").start()
    wait_started(d)
    d.wait_processed(40 + 30 + 20)
    d.wait_batches(2)
    assert d.stop("graceful") == 0, d.tail()
    assert d.processed() == 40 + 30 + 20
    got = sink.idempotent()
    assert truth - got == lost and got - truth == set()  # missing: exactly the records_lost the verdict named
