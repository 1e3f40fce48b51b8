"""The safe-restart DAG managing a user's DStream jar on Spark 3.5 with the agent (issue 25 item 4).

The same application as on Spark 4.2 (tests/dstream/test_users_dstream_agent.py), built with
``spark-streaming-kafka-0-10_2.12:3.5.1``. The registry names neither the integration (the agent
is the default for ``kind: dstream``) nor the Spark version: the product asks the worker's
``spark-submit --version`` (Spark 3.5.1's, first on PATH) and ships the agent built for 3.5 /
Scala 2.12. Real Airflow (``dag.test()``), the real broker, records produced throughout:

1. first start through the product's submit;
2. ``streaming_safe_restart`` in ``auto``, unchanged: validate the group → the stop marker (the agent
   stops the StreamingContext gracefully; the driver ends by itself) → backup of the group's offsets →
   the replay announced from the agent's report (exact) → submit → the health gate on the group's commits;
3. the records Spark wrote twice are exactly the announced replay; after a last stop the output holds
   every acknowledged record, 0 missing, nothing unexpected.
"""

from __future__ import annotations

import logging
import os
import time

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers, start_stop
from devstack import spark_runtimes, topics
from tests.airflow.conftest import TIMINGS, airflow_home  # noqa: F401 - Airflow's session fixture
from tests.airflow.test_operators import SPARK_LOCAL_CONN, kafka_conn
from tests.dstream import users_dstream as ud
from tests.support.agent_harness import ContinuousProducer
from tests.support.dag_runs import run_safe_restart, safe_restart_dag
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.dstream, pytest.mark.userjobs, pytest.mark.spark35, pytest.mark.airflow,
              pytest.mark.integration]

log = logging.getLogger("test")
TIMEOUT = 240


def test_the_safe_restart_dag_restarts_a_users_dstream_jar_on_spark_35(
    broker, airflow_home, tmp_path, monkeypatch  # noqa: F811 - the fixture imported above
):
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    rt = spark_runtimes.runtime("3.5")
    bs = broker.bootstrap_servers
    topic = f"payments35-{os.getpid()}"
    topics.create_topic(bs, topic, ud.PARTITIONS)
    staged = ud.stage(tmp_path, "3.5", bootstrap=bs, topic=topic, spark_version=None)
    monkeypatch.setenv("PATH", os.pathsep.join([str(rt.python.parent), os.environ.get("PATH", "")]))
    monkeypatch.setenv("SPARK_HOME", str(rt.home))
    monkeypatch.setenv("AKS_DATA_DIR", str(staged.data))
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(staged.registry))
    monkeypatch.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(bs))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    spec = staged.spec()
    producer = ContinuousProducer(bs, topic, ud.PARTITIONS, rate=100).start()
    try:
        first = start_stop.submit_job(spec, kafka_config={"bootstrap.servers": bs}, target=spark_target(spec),
                                      by=start_stop.Submitter(actor="test", holder="test/first"), log=log)
        assert "aks-agent-spark35_2.12.jar" in first["command"]   # the version asked of spark-submit: 3.5

        def batches() -> bool:
            assert drivers.local_alive(LifecycleRecord.load(spec.checkpoint).driver), "the first driver died"
            ds = ud.dstream(ud.report(spec))
            return (ds.get("batches_completed") or 0) >= 3 and (ds.get("last_completed_batch") or {}).get("records")
        wait_until(batches, timeout=TIMEOUT, interval=0.5, what="3 completed batches")
        first_app = ud.report(spec)["application_id"]
        t_dag = time.monotonic()

        r = run_safe_restart(safe_restart_dag(), ud.JOB, "auto", "3.5: a user's DStream jar, restart")
        TIMINGS["users' DStream jar on 3.5: safe restart"] = r.seconds
        assert r.state == "success", (r.states, r.xcom("finish", "failure"))
        stop = r.xcom("stop")
        processed = ud.check_stop_witness(stop)   # the first driver's report, as the stop step kept it
        after, backup = r.xcom("submit", "verdict"), r.xcom("stop", "backup")
        announced = after["records_to_replay"]
        assert after["replay_exact"] and after["duplicates_expected"] == 0 and announced == backup["records_to_replay"]
        committed = {(t, p): o for t, p, o in backup["group_offsets"]}
        assert announced == sum(processed[k] - committed[k] for k in processed) > 0, (processed, committed)
        sub = r.xcom("submit")
        assert "aks-agent-spark35_2.12.jar" in sub["command"] and f"--class {spec.main_class}" in sub["command"]
        gate = r.xcom("health_gate")
        assert gate["state"] == "healthy" and gate["committed_past_restart"] > 0, gate

        time.sleep(2)
        produced = producer.stop()
        acked = {(p.topic, p.partition, p.offset) for p in produced}
        ud.wait_group_caught_up(bs, spec, produced, TIMEOUT)
        stop2 = start_stop.stop_job(spec, target=lambda: spark_target(spec), actor="test", log=log)
        last = ud.report(spec)
        assert last["spark_version"] == rt.version and last["application_id"] != first_app
        ud.check_graceful_stop(stop2, last, staged.output)
        # the restarted driver's first batch started where the backup says the group stood
        assert {(tp.topic, tp.partition): o for tp, o in ud.ranges_end(
            ud.dstream(last)["first_batch"], "from").items()} == committed

        out = ud.written(staged.output)
        missing, unexpected = acked - set(out), set(out) - acked
        rewritten = sum(n - 1 for n in out.values())
        assert not missing and not unexpected, (len(missing), len(unexpected))
        assert rewritten == announced, (rewritten, announced)
        print(f"\n[spark 3.5, DAG] produced {len(acked)}, missing 0, re-written {rewritten} = announced {announced}; "
              f"stop: marker->exit {stop['waited_s']} s (agent {stop['job_reported']['duration_ms']} ms); DAG run "
              f"{r.seconds:.0f} s; first start to last stop {time.monotonic() - t_dag:.0f} s")
    finally:
        if not producer._stop.is_set():
            producer.stop()
        rec = LifecycleRecord.load(spec.checkpoint)
        if rec is not None and rec.driver is not None:
            drivers.kill_local(rec.driver, grace_s=5)
