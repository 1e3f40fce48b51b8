"""The Spark 3.5 runtime of the dev stack: the reference job runs there through its own spark-submit.

The 3.5 runtime is a separate venv (devstack/spark_runtimes.py); this test goes through the same
``devstack.spark.run_job`` the 4.x tests use, with ``runtime=``, and counts the sink against Kafka.
"""

from __future__ import annotations

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import oracle, spark, spark_runtimes, topics
from devstack.produce import produce
from tests.support.kafka import end_offsets

pytestmark = [pytest.mark.integration, pytest.mark.spark35]


def test_reference_job_runs_on_spark_35(broker, topic_name, tmp_path):
    rt = spark_runtimes.runtime("3.5")
    topics.create_topic(broker.bootstrap_servers, topic_name, 3)
    produced = produce(broker.bootstrap_servers, topic_name, 600, partitions=3)
    ckpt, out = tmp_path / "checkpoint", tmp_path / "out"
    run = spark.run_job(["--topics", topic_name, "--bootstrap-servers", broker.bootstrap_servers,
                         "--checkpoint", str(ckpt), "--output", str(out), "--sink", "idempotent",
                         "--trigger", "availableNow", "--max-offsets-per-trigger", "250"], runtime=rt)
    assert run.returncode == 0, run.log[-3000:]
    assert run.last_status["event"] == "finished"

    cmp = oracle.compare(produced, oracle.read_sink(out, "idempotent"))
    assert cmp.exact and cmp.consumed_rows == 600, cmp.summary()
    st = read_checkpoint(str(ckpt))
    ends = end_offsets(broker.bootstrap_servers, topic_name, 3)
    assert st.latest_committed.kafka_offsets == {TopicPartition(topic_name, p): o for p, o in ends.items()}
    assert st.commit_batch_ids[-1] == run.last_status["last_committed"] >= 2  # 600 records, 250 per trigger
