"""A user's own Java JAR on YARN (cluster deploy mode) and HDFS, managed by the safe-restart DAG, unchanged.

The application is ``com.example.orders.OrdersStream`` (tests/support/user_jobs/orders-java): its own
``main`` reading one positional argument, a ``.properties`` file shipped with ``--files`` (bootstrap
servers, topic, checkpoint and output are in it, on HDFS); no ``Main-Class`` in its manifest, so the
registry names ``main_class``; ``startingOffsets`` hard-coded to ``earliest``; an idempotent
``foreachBatch`` sink keyed by the Kafka position. The registry entry says nothing else about it; the
product adds the agent by Spark configuration (its jar uploaded by spark-submit like any ``--jars``).
The DAG runs through ``dag.test()`` in this process; spark-submit goes to the minicluster's YARN
through the Spark provider's hook; the gate and the stop reach the driver through the
ResourceManager's REST API and the stop marker on HDFS.

Two runs, two YARN submits, records produced throughout:

1. first start (``auto``);
2. v2 (a new stateful operator, ``compatibility_version`` bumped) through ``auto``: the agent stops
   the cluster driver between two batches (the YARN application ends SUCCEEDED by itself), a verified
   backup, reset ``preserve``, and the new query's first batch starts where v1 committed although
   the job asks Spark for ``earliest``.

Then the sink on HDFS is compared record by record with what Kafka acknowledged.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from devstack import oracle, topics, user_jobs
from tests.airflow.conftest import TIMINGS, airflow_home  # noqa: F401  (the session's Airflow home fixture)
from tests.airflow.test_safe_restart_dag import PARTITIONS, Feed
from tests.support.airflow_env import kafka_conn, write_registry
from tests.support.dag_runs import RunResult, run_safe_restart, safe_restart_dag, wait_committed_everything

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.integration, pytest.mark.userjobs]

JOB = "javaorders"
SPARK_YARN_CONN = json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})


def _hdfs_path(url: str) -> str:
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


def test_a_users_jar_on_yarn_is_started_stopped_between_batches_and_reset_preserve(
        broker, airflow_home, hadoop, yarn_submit, webhdfs, rm, tmp_path):  # noqa: F811
    data = f"{hadoop.default_fs}/aks-users-{os.getpid()}"
    topic = f"javaorders-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    checkpoint, sink = f"{data}/checkpoints/{JOB}", f"{data}/sinks/{JOB}"
    apps = f"{data}/apps"
    webhdfs.makedirs(_hdfs_path(apps), exist_ok=True)
    for variant in ("v1", "v2"):
        webhdfs.put(str(user_jobs.build("default", variant)), _hdfs_path(f"{apps}/orders-stream-{variant}.jar"))
    props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=broker.bootstrap_servers,
                                       topic=topic, checkpoint=checkpoint, output=sink, trigger_seconds=2)
    webhdfs.put(str(props), _hdfs_path(f"{apps}/orders.properties"))
    registry = tmp_path / "streaming_jobs.yaml"
    job_conf = {**yarn_submit.conf, "spark.jars": ",".join(yarn_submit.jars)}

    def register(variant: str, compat: str) -> None:
        write_registry(registry, [{
            "name": JOB, "topics": [topic], "sink": "idempotent", "compatibility_version": compat,
            "application": f"{apps}/orders-stream-{variant}.jar", "main_class": user_jobs.MAIN_CLASS,
            "application_args": ["orders.properties"], "files": [f"{apps}/orders.properties"],
            "integration": "agent", "spark_conn_id": "spark_yarn", "deploy_mode": "cluster",
            "spark_conf": job_conf}], integration="agent", stop_timeout_s=240,
            health_gate={"min_batches": 2, "timeout_s": 480})

    register("v1", "1")
    mp = pytest.MonkeyPatch()
    for key in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        mp.setenv(key, yarn_submit.env[key])
    mp.setenv("AKS_DATA_DIR", data)
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "3")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_YARN", SPARK_YARN_CONN)
    feed = Feed(broker.bootstrap_servers, topic)
    try:
        dag = safe_restart_dag()

        def run(mode: str, what: str) -> RunResult:
            r = run_safe_restart(dag, JOB, mode, f"yarn users: {what}")
            TIMINGS[f"yarn users' jar: {what}"] = r.seconds
            return r

        feed.add(300)
        with feed:
            r = run("auto", "first start")
            assert r.state == "success", (r.states, r.xcom("finish", "failure"))
            command = r.xcom("submit")["command"]
            assert f"--class {user_jobs.MAIN_CLASS}" in command and command.endswith("orders.properties")
            assert "--stop-marker" not in command and "spark.plugins=aks.agent.AgentPlugin" in command
            first = LifecycleRecord.load(checkpoint).driver
            assert first.kind == "yarn" and rm.app(first.id).alive

            register("v2", "2")
            r = run("auto", "v2: stop, reset preserve")
            assert r.state == "success", (r.states, r.xcom("finish", "failure"))
            stop = r.xcom("stop")
            assert (stop["outcome"], stop["graceful"], stop["killed"]) == ("STOPPED", True, False), stop
            assert stop["last_planned"] == stop["last_committed"]
            ended = rm.app(first.id)
            assert ended.succeeded, f"the agent should have ended the application by itself: {ended.summary()}"
            reset = r.xcom("submit", "reset")
            old = read_checkpoint(reset["aside_location"])
            planned = {str(tp.partition): o for tp, o in old.latest_committed.kafka_offsets.items()}
            new = read_checkpoint(checkpoint)
            started_at = {str(tp.partition): o for tp, o in new.initial_offsets.get("0", {}).items()}
            assert started_at == planned, (new.initial_offsets, planned)
            second = LifecycleRecord.load(checkpoint).driver
            assert second.id != first.id and rm.app(second.id).alive
            feed.add(200)

        wait_committed_everything(checkpoint, broker.bootstrap_servers, topic, PARTITIONS, timeout=300,
                                  interval=3.0)
        local = tmp_path / "sink"
        webhdfs.get(_hdfs_path(sink), str(local), recursive=True)
        cmp = oracle.compare(feed.produced, oracle.read_sink(local, "json"))
        print(f"\n[yarn users' jar] sink: {cmp.summary()}")
        assert cmp.exact, cmp.summary()
    finally:
        for app in rm.find(name=f"aks-{JOB}"):
            if app.alive:
                rm.kill(app.id)
        mp.undo()
