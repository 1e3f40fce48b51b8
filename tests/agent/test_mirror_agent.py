"""The agent's shadow-group mirror, on users' unchanged applications: Kafka's lag tools see the checkpoint.

A real ``spark-submit`` of a users'-style application (tests/support/user_jobs: no listener of ours, no
line of code knowing this product) with the product's agent confs for a job that has ``mirror_group``,
against the session broker. The oracle on both sides is independent of the agent: the group's
committed offsets are read from Kafka (the product's ``KafkaView``), the position from Spark's files
(the product's checkpoint reader, ``latest_committed``). The agent's report and log only say why.
The Java application on Spark 3.5.1 is mirrored in tests/agent/test_agent_stop.py's stop cycles (the
group equals the checkpoint right after each driver is gone), which costs no spark-submit of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from airflow_kafka_spark import agent
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.kafka.view import KafkaView
from devstack import agent_build
from devstack.spark_runtimes import runtime
from devstack.topics import create_topic
from tests.support import agent_harness as h
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.userjobs]

START_TIMEOUT = 150  # a spark-submit start on 2 shared cores can take a minute
STOP_TIMEOUT = 60
REFUSED = "live member(s)"


@pytest.fixture(scope="module", autouse=True)
def _agent_jars() -> None:
    agent_build.build_all()  # a no-op when bin/setup built them for these sources


def committed(ck: Path) -> tuple[int, PartitionOffsets]:
    """(last committed batch, its end offsets): where the next run resumes, as Spark's files say."""
    state = read_checkpoint(str(ck))
    assert state.latest_committed is not None, f"no committed batch in {ck}"
    return state.latest_committed.batch_id, state.latest_committed.kafka_offsets


def produce(bs: str, topic: str, seconds: float, rate: float = 100) -> int:
    p = h.ContinuousProducer(bs, topic, 3, rate=rate).start()
    time.sleep(seconds)
    return len(p.stop())


def group_offsets(view: KafkaView, group: str) -> PartitionOffsets:
    return view.group_offsets(group)


def group_offsets_soon(view: KafkaView, group: str) -> PartitionOffsets | None:
    """The group's offsets, or None while a fresh broker still loads its group coordinator (a test
    run alone starts the broker just before; librdkafka then answers DescribeGroups with an error)."""
    try:
        return view.group_offsets(group)
    except UserError:
        return None


def caught_up(ck: Path, bs: str, *topics: str) -> bool:
    """The checkpoint's committed position is the log end of every partition of ``topics`` (the job is idle)."""
    try:
        _, pos = committed(ck)
    except AssertionError:
        return False
    ends = {(t, p): o for t in topics for p, o in end_offsets(bs, t, 3).items()}
    return {(tp.topic, tp.partition): o for tp, o in pos.items()} == ends


def mirror_conf(rt, ck: Path, marker: Path, report: Path, bs: str, group: str) -> dict[str, str]:
    conf = agent.agent_conf(str(marker), str(ck), str(report), rt.version, {}, mirror_group=group,
                            mirror_kafka={"bootstrap.servers": bs})
    conf[agent.MIRROR_MIN_INTERVAL_MS] = "200"
    return conf


def stop_and_compare(driver: h.Driver, marker: Path, ck: Path, view: KafkaView, group: str, bs: str,
                     *topics: str) -> tuple[int, PartitionOffsets]:
    """Stop through the marker while records keep arriving; right after the driver is gone (no waiting for
    the mirror), the group must hold the final checkpoint position."""
    loads = [h.ContinuousProducer(bs, t, 3, rate=100).start() for t in topics]
    try:
        time.sleep(2.5)
        marker.touch()
        rc = driver.wait(STOP_TIMEOUT)
    finally:
        for load in loads:
            load.stop()
    assert rc == 0, f"the driver exited {rc}:\n{driver.text()[-3000:]}"
    batch, position = committed(ck)
    assert h.boundary(ck) == (batch, batch), "the agent's stop ends on a batch boundary"
    assert group_offsets(view, group) == position
    return batch, position


def test_the_shadow_group_follows_the_checkpoint_refuses_a_live_group_and_flushes_on_stop_spark4(
        broker, tmp_path, topic_name):
    """PySpark ``orders_report.py`` on Spark 4.2, one driver through the three cases in order. The job runs two
    queries: ``orders`` (the job's checkpoint) reads two topics, ``totals`` (``<checkpoint>-totals``) the first:
    the group holds ``orders``' two sources merged, and ``totals`` is not mirrored."""
    rt, bs = runtime("default"), broker.bootstrap_servers
    group = f"aks-mirror-{topic_name}"
    topics = (topic_name, f"{topic_name}-b")
    for t in topics:
        create_topic(bs, t, 3)
    ck, out, marker = tmp_path / "ck", tmp_path / "out", tmp_path / "stop.marker"
    report = Path(agent.report_path(str(ck)))
    produced = sum(produce(bs, t, 1.0) for t in topics)
    # 1. someone consumes with the group: the agent must not move it, and the query must not suffer
    member = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "latest", "session.timeout.ms": 45000,
                       "max.poll.interval.ms": 600000})
    member.subscribe([topic_name])
    wait_until(lambda: member.poll(0.5) is None and bool(member.assignment()), timeout=60, interval=0,
               what="the live member to join the group")
    view = KafkaView({"bootstrap.servers": bs}, timeout=15)
    args = ["--brokers", bs, "--topic", topics[0], "--second-topic", topics[1], "--release", "two_sources",
            "--totals", "--checkpoint", str(ck), "--out", str(out)]
    driver = h.submit(rt, h.USER_JOBS / "orders_report.py", args, tmp_path / "driver.log",
                      conf=mirror_conf(rt, ck, marker, report, bs, group))
    try:
        wait_until(lambda: driver.proc.poll() is not None or caught_up(ck, bs, *topics), timeout=START_TIMEOUT,
                   interval=0.5, what="the job to read all it was given")
        wait_until(lambda: REFUSED in driver.text(), timeout=20, interval=0.5, what="the agent to refuse the group")
        more = produce(bs, topics[0], 1.0)
        wait_until(lambda: caught_up(ck, bs, *topics), timeout=60, interval=0.5, what="a batch after the refusal")
        assert driver.proc.poll() is None, f"the application ended:\n{driver.text()[-3000:]}"
        refused_at, _ = committed(ck)
        assert refused_at >= 1, "batches kept committing while the group was refused"
        assert group_offsets(view, group) == {}, "a group with a live member was moved"
        member.poll(0.1)
        member.close()   # the member leaves: the group is the mirror's now
        member = None

        # 2. after batches run, the group holds the checkpoint's committed position, both topics
        more += sum(produce(bs, t, 1.0) for t in topics)
        wait_until(lambda: caught_up(ck, bs, *topics), timeout=60, interval=0.5, what="the new records' batch")
        batch, position = committed(ck)
        wait_until(lambda: group_offsets_soon(view, group) == position, timeout=20, interval=0.5,
                   what=f"the group at batch {batch}'s end {position}")
        assert sum(position.values()) == produced + more
        assert {tp.topic for tp in position} == set(topics) and batch > refused_at

        # 3. a graceful stop under load: the final position reaches the group before the driver is gone
        final_batch, final = stop_and_compare(driver, marker, ck, view, group, bs, *topics)
    finally:
        if member is not None:
            member.close()
        if driver.proc.poll() is None:
            driver.kill()
        view.close()
    assert final_batch > batch and sum(final.values()) > sum(position.values())
    not_mirrored = [ln for ln in driver.text().splitlines() if "is not the job's checkpoint" in ln]
    assert len(not_mirrored) == 1 and "(totals, checkpoint file:" in not_mirrored[0], not_mirrored
    doc = h.read_report(report)
    m = doc["mirror"]
    assert m["group"] == group and m["refused"] >= 1 and m["errors"] == 0, m
    assert m["committed_batch"] == final_batch, m
    assert m["checkpoint"].endswith(str(ck)), m
    _, totals = committed(Path(f"{ck}-totals"))
    print(f"\n[mirror] spark {rt.version}: {m['commits']} commits, {m['refused']} refused while a member was live, "
          f"final batch {final_batch}, group == checkpoint {sum(final.values())} records over "
          f"{len(final)} partitions of 2 topics; the totals query ended at {sum(totals.values())} records "
          f"({'another' if totals != {tp: o for tp, o in final.items() if tp.topic == topics[0]} else 'the same'} "
          "position for the first topic)")
