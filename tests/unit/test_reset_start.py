"""Which ``sources/<id>/0`` a reset writes (airflow_kafka_spark/ops/reset_start.py), the plan's notes,
and the verdict on the folder it leaves (airflow_kafka_spark/verdict/sources_only.py)."""

from __future__ import annotations

from dataclasses import replace

from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.ops.reset_plan import ResetRequest, build_reset_plan
from airflow_kafka_spark.ops.reset_start import SOURCE_FILES, files_from_payload, source_starts
from airflow_kafka_spark.verdict.evaluate import evaluate
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support.verdict_states import broker, checkpoint, record, tps

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def two_sources():
    """Source 0 reads a, source 1 reads b (as Spark numbers a.union(b))."""
    cp = checkpoint({("a", 0): 10, ("a", 1): 20})
    two = replace(cp.latest_committed, sources={"0": tps({("a", 0): 10, ("a", 1): 20}), "1": tps({("b", 0): 5})},
                  raw_sources={"0": "{}", "1": "{}"})
    return replace(cp, latest_committed=two, latest_planned=two,
                   initial_offsets={"0": tps({("a", 0): 0, ("a", 1): 0}), "1": tps({("b", 0): 0})})


def test_each_source_gets_its_own_topics():
    files, why = source_starts(two_sources(), {A0: 10, A1: 20, B0: 5})
    assert (files, why) == ({"0": {A0: 10, A1: 20}, "1": {B0: 5}}, "")


def test_a_topic_no_source_read_goes_to_the_only_source_and_is_unknown_with_two():
    one = checkpoint({("a", 0): 10})
    assert source_starts(one, {A0: 10, B0: 0}) == ({"0": {A0: 10, B0: 0}}, "")
    files, why = source_starts(two_sources(), {A0: 10, TopicPartition("c", 0): 0})
    assert files == {} and "2 Kafka sources and none of them read c" in why


def test_a_named_source_keeps_its_folder_name():
    """Spark 4.2 named sources: sources/<name>/ while the v1 offsets log numbers the source 0."""
    cp = replace(checkpoint({("a", 0): 10}), initial_offsets={"orders_src": tps({("a", 0): 0})})
    assert source_starts(cp, {A0: 10}) == ({"orders_src": {A0: 10}}, "")


def test_the_plan_carries_the_files_and_says_where_spark_starts():
    cp = checkpoint({("a", 0): 100, ("a", 1): 200})
    plan = build_reset_plan(cp, broker({("a", 0): (0, 150), ("a", 1): (0, 260)}), None, ResetRequest(mode="preserve"))
    assert files_from_payload(plan.details[SOURCE_FILES]) == {"0": {A0: 100, A1: 200}}
    start = next(f for f in plan.findings if f.code == "EXACT_START")
    assert start.severity == "INFO"
    assert 'Spark will start at {"a":{"0":100,"1":200}}, whatever startingOffsets the application sets' in start.message
    note = next(f for f in plan.findings if f.code == "BATCH_IDS_RESTART")
    assert "batch=<id>" in note.message and "txnVersion" in note.message
    assert "EXACT_START" in plan.render()


def test_unknown_owner_is_a_warning_and_no_file():
    cp = two_sources()
    plan = build_reset_plan(cp, broker({("a", 0): (0, 50), ("a", 1): (0, 50), ("b", 0): (0, 50), ("c", 0): (0, 9)}),
                            None, ResetRequest(mode="earliest", topics=("a", "c")))
    assert plan.details[SOURCE_FILES] == {}
    assert next(f for f in plan.findings if f.code == "EXACT_START_UNAVAILABLE").severity == "WARN"


def test_verdict_on_the_folder_a_reset_leaves():
    cp = checkpoint(initial={("a", 0): 40, ("a", 1): 40})
    br = broker({("a", 0): (0, 100), ("a", 1): (0, 100)})
    rec = record(next_starting_offsets='{"a":{"0":40,"1":40}}')
    v = evaluate(cp, br, rec, DeployOptions(topics=("a",), starting_offsets="earliest", expect_new_checkpoint=True))
    codes = {f.code: f for f in v.findings}
    assert "NEW_QUERY_START" in codes and v.severity != "BLOCK", v.to_dict()
    assert "whatever startingOffsets the application sets" in codes["NEW_QUERY_START"].message
    assert "written by the reset" in codes["NEW_QUERY_START"].message
    assert "STARTING_OFFSETS_IGNORED" not in codes and "CHECKPOINT_NOT_EMPTY" not in codes
    assert parse_offsets_json(codes["NEW_QUERY_START"].numbers["starting_offsets"]) == {A0: 40, A1: 40}


def test_verdict_when_the_folder_holds_other_offsets_than_the_reset_planned():
    cp = checkpoint(initial={("a", 0): 0, ("a", 1): 0})
    br = broker({("a", 0): (0, 100), ("a", 1): (0, 100)})
    v = evaluate(cp, br, record(next_starting_offsets='{"a":{"0":40,"1":40}}'), DeployOptions(topics=("a",)))
    codes = {f.code for f in v.findings}
    assert {"NEW_QUERY_START", "STARTING_OFFSETS_IGNORED"} <= codes



def test_a_source_whose_topics_left_the_plan_gets_no_file_and_the_plan_says_so():
    plan = build_reset_plan(two_sources(), broker({("a", 0): (0, 50), ("a", 1): (0, 50), ("b", 0): (0, 50)}), None,
                            ResetRequest(mode="preserve", topics=("a",)))
    assert files_from_payload(plan.details[SOURCE_FILES]) == {"0": {A0: 10, A1: 20}}
    start = next(f for f in plan.findings if f.code == "EXACT_START")
    assert "source(s) 1 read none of the planned topics" in start.message
