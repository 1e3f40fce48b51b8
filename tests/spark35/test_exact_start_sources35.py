"""Two Kafka sources in one query on Spark 3.5.1: ids in union order, and each starts at its own
``sources/<id>/0`` (the 4.2.0 side: tests/integration/test_exact_start_sources.py). The shared 3.5 worker
runs only the reference job (one source), so this query runs in its own short-lived 3.5 driver.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from airflow_kafka_spark.checkpoint.initial_offsets import read_initial_offsets, write_initial_offsets
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import spark_runtimes, topics
from devstack.produce import produce

pytestmark = [pytest.mark.integration, pytest.mark.spark35]

SCRIPT = r"""
import json, sys
from pyspark.sql import SparkSession
jars, bs, a, b, plain, ours = sys.argv[1:7]
spark = (SparkSession.builder.master("local[2]").config("spark.jars", jars).config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
def kafka(t, s):
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bs).option("subscribe", t)
            .option("startingOffsets", s).load().selectExpr("topic", "partition", "offset"))
def run(df, ck, table):
    q = (df.writeStream.format("memory").queryName(table).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    return [[r.topic, int(r.partition), int(r.offset)] for r in spark.sql("select * from " + table).collect()]
out = {"version": spark.version, "plain": len(run(kafka(a, "earliest").union(kafka(b, "earliest")), plain, "p")),
       "ours": run(kafka(a, "latest").union(kafka(b, "latest")), ours, "o")}
print("RESULT " + json.dumps(out), flush=True)
spark.stop()
"""


def test_two_kafka_sources_on_spark_351(broker, tmp_path, topic_name):
    rt = spark_runtimes.runtime("3.5")
    a, b = f"{topic_name}-a", f"{topic_name}-b"
    for t in (a, b):
        topics.create_topic(broker.bootstrap_servers, t, 1)
        produce(broker.bootstrap_servers, t, 10, partitions=1)
    plain, ours = tmp_path / "plain", tmp_path / "ours"
    write_initial_offsets(str(ours), "0", {TopicPartition(a, 0): 3})
    write_initial_offsets(str(ours), "1", {TopicPartition(b, 0): 8})
    jars = ",".join(str(j) for j in rt.kafka_jars())
    proc = subprocess.run([str(rt.python), "-c", SCRIPT, jars, broker.bootstrap_servers, a, b, str(plain), str(ours)],
                          capture_output=True, text=True, env=rt.env(), timeout=300, cwd=tmp_path)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = json.loads(line[len("RESULT "):])
    ids = {sid: sorted({tp.topic for tp in read_initial_offsets(str(plain), sid) or {}}) for sid in ("0", "1")}
    got = {tuple(r) for r in res["ours"]}
    want = {(a, 0, o) for o in range(3, 10)} | {(b, 0, o) for o in range(8, 10)}
    print("EXACT_START " + json.dumps({"case": "two sources", "spark": res["version"], "ids": ids,
                                       "expected": len(want), "got": len(got)}))
    assert res["version"] == "3.5.1" and res["plain"] == 20
    assert ids == {"0": [a], "1": [b]}
    assert got == want
