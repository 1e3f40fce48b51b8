"""The safe-restart DAG managing a user's Java JAR on Spark 3.5 (Scala 2.12), unchanged.

The same user application as on YARN (tests/cluster/test_users_jobs_yarn.py),
``com.example.orders.OrdersStream`` built for Spark 3.5: its own ``main``, its ``.properties``
file as its one argument, no ``Main-Class``, ``startingOffsets`` hard-coded to ``earliest``. The
worker's ``spark-submit`` is Spark 3.5.1's (first on PATH), and the registry does not say which
Spark it is: the product asks that ``spark-submit --version`` and ships the agent built for 3.5 /
Scala 2.12. Local master, real Airflow (``dag.test()``), the real broker, records produced throughout:

1. first start (``auto``);
2. ``keep``: the agent stops the query between two batches, the same query resumes;
3. v2 (a new stateful operator, ``compatibility_version`` bumped) through ``auto`` → reset
   ``preserve``: Spark 3.5 starts the new query where v1 committed although the job asks for
   ``earliest``.

Then the sink is compared record by record with what Kafka acknowledged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from devstack import oracle, spark_runtimes, topics, user_jobs
from tests.airflow.conftest import TIMINGS
from tests.airflow.test_safe_restart_dag import PARTITIONS, Feed
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, write_registry
from tests.support.dag_runs import RunResult, run_safe_restart, safe_restart_dag, wait_committed_everything
from tests.support.processes import driver_groups

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.userjobs, pytest.mark.spark35]

JOB = "javaorders35"


def test_a_users_jar_on_spark_35_is_kept_and_reset_preserve_through_the_dag(broker, airflow_home, tmp_path):
    rt = spark_runtimes.runtime("3.5")
    data = tmp_path / "data"
    apps = data / "apps"
    apps.mkdir(parents=True)
    for variant in ("v1", "v2"):
        shutil.copy(user_jobs.build("3.5", variant), apps / f"orders-stream-{variant}.jar")
    topic = f"javaorders35-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    checkpoint, sink = data / "checkpoints" / JOB, data / "sinks" / JOB
    props = user_jobs.write_properties(apps / "orders.properties", bootstrap=broker.bootstrap_servers, topic=topic,
                                       checkpoint=checkpoint, output=sink, trigger_seconds=1)
    registry = tmp_path / "streaming_jobs.yaml"

    def register(variant: str, compat: str) -> None:
        write_registry(registry, [{
            "name": JOB, "topics": [topic], "sink": "idempotent", "compatibility_version": compat,
            "application": str(apps / f"orders-stream-{variant}.jar"), "main_class": user_jobs.MAIN_CLASS,
            "application_args": [str(props)], "integration": "agent", "stop_timeout_s": 90,
            "spark_conf": {"spark.jars": ",".join(str(j) for j in rt.kafka_jars()),
                           "spark.sql.shuffle.partitions": "2", "spark.driver.memory": "640m"}}],
            integration="agent")

    register("v1", "1")
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", os.pathsep.join([str(rt.python.parent), os.environ.get("PATH", "")]))
    mp.setenv("SPARK_HOME", str(rt.home))
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    feed = Feed(broker.bootstrap_servers, topic)
    try:
        dag = safe_restart_dag()

        def run(mode: str, what: str) -> RunResult:
            r = run_safe_restart(dag, JOB, mode, f"3.5: {what}")
            TIMINGS[f"users' jar on 3.5: {what}"] = r.seconds
            return r

        feed.add(200)
        with feed:
            r = run("auto", "first start")
            assert r.state == "success", (r.states, r.xcom("finish", "failure"))
            command = r.xcom("submit")["command"]
            assert "aks-agent-spark35_2.12.jar" in command        # the version asked of spark-submit: 3.5
            assert f"--class {user_jobs.MAIN_CLASS}" in command

            query = read_checkpoint(str(checkpoint)).query_id
            r = run("keep", "keep")
            assert r.state == "success", (r.states, r.xcom("finish", "failure"))
            stop = r.xcom("stop")
            assert (stop["outcome"], stop["graceful"], stop["last_planned"]) == (
                "STOPPED", True, stop["last_committed"]), stop
            assert read_checkpoint(str(checkpoint)).query_id == query
            report = json.loads((data / "checkpoints" / f"{JOB}.agent.json").read_text())   # the restarted driver's
            assert report["spark_version"] == rt.version, report

            register("v2", "2")
            r = run("auto", "v2: reset preserve")
            assert r.state == "success", (r.states, r.xcom("finish", "failure"))
            assert r.xcom("stop")["outcome"] == "STOPPED"
            reset = r.xcom("submit", "reset")
            old = read_checkpoint(reset["aside_location"])
            planned = {str(tp.partition): o for tp, o in old.latest_committed.kafka_offsets.items()}
            new = read_checkpoint(str(checkpoint))
            assert {str(tp.partition): o for tp, o in new.initial_offsets.get("0", {}).items()} == planned
            feed.add(100)

        wait_committed_everything(str(checkpoint), broker.bootstrap_servers, topic, PARTITIONS, timeout=240,
                                  interval=1.0)
        cmp = oracle.compare(feed.produced, oracle.read_sink(sink, "json"))
        assert cmp.exact, cmp.summary()
    finally:
        rec = LifecycleRecord.load(str(checkpoint))
        if rec is not None and rec.driver is not None:
            drivers.kill_local(rec.driver, grace_s=5)
        for pid in driver_groups(str(props)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        mp.undo()
