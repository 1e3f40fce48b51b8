"""Exact start with no code change, on Spark 3.5.1 and 4.2.0: a fresh checkpoint holding only the
``sources/0/0`` our writer made (airflow_kafka_spark/checkpoint/initial_offsets.py) starts the query
there, whatever ``startingOffsets`` the application passes; and the edge cases Spark decides itself.

Each case produces records, writes ``sources/0/0`` into an empty checkpoint folder, runs the reference
query once (availableNow) and counts what the sink got against what was produced at or after our
offsets. The numbers each case saw are printed (``EXACT_START {...}``) for docs/exact-start.md.
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark.checkpoint.formats import parse_initial_offsets_file
from airflow_kafka_spark.checkpoint.initial_offsets import initial_offsets_bytes, write_initial_offsets
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import spark_runtimes, topics
from tests.support.scenario import Job, short

pytestmark = [pytest.mark.integration, pytest.mark.spark35]   # the 4.x side shares the 3.5 fixtures

LINES = ["3.5", "default"]


def _runner(j, line):
    return j.run if line == "3.5" else (lambda **kw: Job.run(j, **kw))


def _rows(j) -> set[tuple[str, int, int]]:
    return {(r["topic"], int(r["partition"]), int(r["offset"])) for r in j.sink_rows()}


def _expected(j, start: dict[TopicPartition, int], *, topic: str | None = None) -> set[tuple[str, int, int]]:
    return {(p.topic, p.partition, p.offset) for p in j.produced
            if (topic is None or p.topic == topic) and p.offset >= start.get(TopicPartition(p.topic, p.partition), 0)}


def _report(case: str, version: str, **numbers) -> None:
    print("EXACT_START " + json.dumps({"case": case, "spark": version, **numbers}))


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("app_starting", ["earliest", "latest"])
def test_our_sources_file_wins_over_starting_offsets(job35, line, app_starting):
    j = job35(3)
    version = spark_runtimes.runtime(line).version
    j.produce(60)                                           # 20 per partition, offsets 0..19
    t = j.topics[0]
    start = {TopicPartition(t, 0): 4, TopicPartition(t, 1): 17, TopicPartition(t, 2): 0}
    write_initial_offsets(str(j.checkpoint), "0", start)
    ours = (j.checkpoint / "sources" / "0" / "0").read_bytes()

    res = _runner(j, line)(starting_offsets=app_starting)
    assert res.ok, short(res.error, 2000)
    want, got = _expected(j, start), _rows(j)
    _report(f"startingOffsets={app_starting}", version, expected=len(want), got=len(got),
            missing=len(want - got), unexpected=len(got - want))
    assert got == want, f"expected {len(want)} records from our offsets, the sink got {len(got)}"
    assert (j.checkpoint / "sources" / "0" / "0").read_bytes() == ours, "Spark rewrote our file"
    state = read_checkpoint(str(j.checkpoint), read_history=True)
    assert state.initial_offsets == {"0": start}
    assert state.offset_batch_ids[0] == 0


@pytest.mark.parametrize("line", LINES)
def test_our_bytes_equal_what_spark_writes(job35, line):
    j = job35(3)
    version = spark_runtimes.runtime(line).version
    j.produce(30)
    t = j.topics[0]
    start = {TopicPartition(t, 0): 3, TopicPartition(t, 1): 5, TopicPartition(t, 2): 0}
    res = _runner(j, line)(starting_offsets=json.dumps({t: {str(tp.partition): o for tp, o in start.items()}}))
    assert res.ok, short(res.error, 2000)
    spark_bytes = (j.checkpoint / "sources" / "0" / "0").read_bytes()
    ours = initial_offsets_bytes(start)
    _report("bytes", version, spark=spark_bytes.decode("latin-1"), ours=ours.decode("latin-1"))
    assert spark_bytes[:4] == ours[:4] == b"\x00v1\n"
    assert parse_initial_offsets_file(spark_bytes) == parse_initial_offsets_file(ours) == start
    if version.startswith("4"):   # Scala 2.13 writes partitions in order; 3.5 (2.12) in its HashMap's order
        assert spark_bytes == ours


@pytest.mark.parametrize("line", LINES)
def test_a_topic_our_file_lacks_starts_at_earliest(job35, broker, line):
    j = job35(2)
    version = spark_runtimes.runtime(line).version
    a = j.topics[0]
    b = f"{a}-added"
    topics.create_topic(broker.bootstrap_servers, b, 2)
    j.produce(20)
    j.produce(10, topic=b, partitions=2)
    start = {TopicPartition(a, 0): 6, TopicPartition(a, 1): 6}
    write_initial_offsets(str(j.checkpoint), "0", start)
    res = _runner(j, line)(topics=[a, b], starting_offsets="latest")
    assert res.ok, short(res.error, 2000)
    got = _rows(j)
    want_a, want_b = _expected(j, start, topic=a), _expected(j, {}, topic=b)
    _report("added topic", version, expected_a=len(want_a), expected_b_all=len(want_b),
            got_a=len({r for r in got if r[0] == a}), got_b=len({r for r in got if r[0] == b}))
    assert got == want_a | want_b, "the added topic did not start at its earliest offset"


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_offsets_below_the_log_start(job35, broker, line, fail_on_data_loss):
    j = job35(1)
    version = spark_runtimes.runtime(line).version
    t = j.topics[0]
    j.produce(20)
    topics.delete_records(broker.bootstrap_servers, t, {0: 8})      # retention: the log now starts at 8
    start = {TopicPartition(t, 0): 3}
    write_initial_offsets(str(j.checkpoint), "0", start)
    res = _runner(j, line)(starting_offsets="earliest", fail_on_data_loss=fail_on_data_loss)
    got = _rows(j)
    _report(f"below log start, failOnDataLoss={fail_on_data_loss}", version, ok=res.ok, got=len(got),
            first=min((r[2] for r in got), default=None), error=short(res.error, 300) if res.error else None)
    if fail_on_data_loss == "true":
        assert not res.ok and not got, "Spark read past a gap with failOnDataLoss=true"
    else:
        assert res.ok, short(res.error, 2000)
        assert got == _expected(j, {TopicPartition(t, 0): 8}), "expected the 12 records from the log start"


@pytest.mark.parametrize("line", LINES)
def test_offsets_above_the_log_end(job35, line):
    j = job35(1)
    version = spark_runtimes.runtime(line).version
    t = j.topics[0]
    j.produce(10)
    write_initial_offsets(str(j.checkpoint), "0", {TopicPartition(t, 0): 50})
    res = _runner(j, line)(starting_offsets="earliest")
    got = _rows(j)
    state = read_checkpoint(str(j.checkpoint), read_history=True)
    _report("above log end", version, ok=res.ok, got=len(got), batches=state.offset_batch_ids,
            error=short(res.error, 300) if res.error else None)
    assert not got, "Spark read records although it was told to start beyond the log end"
