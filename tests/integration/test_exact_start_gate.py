"""The health gate's start check (airflow_kafka_spark/runtime/start_check.py) on real Spark 4.2.0 queries:
the reset planned a start (the lifecycle record's ``next_starting_offsets``); a query whose checkpoint
held the reset's ``sources/0/0`` passes, one whose application's ``startingOffsets=earliest`` won (no file)
or that found another ``sources/0/0`` fails with one line, so the DAG rolls back.
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark.checkpoint.initial_offsets import write_initial_offsets
from airflow_kafka_spark.kafka.offsets import TopicPartition, to_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime.health import FAILED, HEALTHY, HealthLook, check_health
from devstack import topics
from tests.support.scenario import Job, short

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("case", ["ours", "none", "other"])
def test_gate_fails_when_the_first_batch_did_not_start_at_the_reset_plan(broker, tmp_path, topic_name, case):
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    j = Job(broker, tmp_path, [topic_name], partitions=2)
    j.produce(40)                                            # 20 per partition
    plan = {TopicPartition(topic_name, 0): 5, TopicPartition(topic_name, 1): 12}
    record = LifecycleRecord.create("orders", str(j.checkpoint))
    record.set_next_starting_offsets(to_offsets_json(plan), actor="test")
    record.save()
    if case == "ours":
        write_initial_offsets(str(j.checkpoint), "0", plan)
    elif case == "other":
        write_initial_offsets(str(j.checkpoint), "0", {TopicPartition(topic_name, 0): 7,
                                                      TopicPartition(topic_name, 1): 3})
    res = j.run(starting_offsets="earliest")
    assert res.ok, short(res.error, 2000)

    probe = check_health(HealthLook(checkpoint=str(j.checkpoint), topics=[topic_name],
                                    kafka_config=lambda: {"bootstrap.servers": broker.bootstrap_servers},
                                    min_batches=1, baseline_batch=7, baseline_query_id="the-old-query",
                                    alive=lambda: True))
    rows = len(j.sink_rows())
    print("EXACT_START " + json.dumps({"case": f"gate {case}", "state": str(probe.state), "sink_rows": rows,
                                       "planned_rows": 15 + 8, "reason": probe.reason[:300]}))
    if case == "ours":
        assert rows == 23
        assert probe.state == HEALTHY, probe.reason
    else:
        assert rows == {"none": 40, "other": 13 + 17}[case]
        assert probe.state == FAILED
        assert probe.reason.startswith("the new query's first batch started at {"), probe.reason
        assert f"the reset planned {to_offsets_json(plan)}" in probe.reason


def test_gate_does_not_judge_before_the_first_batch_or_without_a_plan(broker, tmp_path, topic_name):
    topics.create_topic(broker.bootstrap_servers, topic_name, 1)
    j = Job(broker, tmp_path, [topic_name], partitions=1)
    j.produce(10)
    record = LifecycleRecord.create("orders", str(j.checkpoint))
    record.set_next_starting_offsets(to_offsets_json({TopicPartition(topic_name, 0): 4}), actor="test")
    record.save()
    write_initial_offsets(str(j.checkpoint), "0", {TopicPartition(topic_name, 0): 4})
    probe = check_health(HealthLook(checkpoint=str(j.checkpoint), topics=[topic_name],
                                    kafka_config=lambda: {"bootstrap.servers": broker.bootstrap_servers},
                                    min_batches=1, baseline_batch=None, baseline_query_id=None,
                                    alive=lambda: True))
    assert probe.state != FAILED, probe.reason      # sources/0/0 only: no batch planned yet
