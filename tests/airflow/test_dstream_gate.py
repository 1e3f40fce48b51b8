"""The DStream health gate waits out a broker that is down as it starts (issues 12 and 16).

The same rule as the Structured Streaming gate (``runtime.health.check_or_wait``): a probe that cannot
reach Kafka is no verdict on the job, so a broker restarted during a deploy must not fail the gate
and roll back a healthy build. Real Airflow (``dag.test()``), the real broker behind a TCP proxy that
refuses connections for the first 25 s (as a restarting broker does), and the group's commits
advancing on the real broker as a running DStream job's ``commitAsync`` advances them. The driver is
this test's own process (alive): what is judged here is the gate's handling of the broker, not Spark.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.runtime import app_versions, detach
from airflow_kafka_spark.runtime import dstream as dstream_runtime
from devstack import topics
from devstack.produce import produce
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, new_dag, run_inline, write_registry
from tests.support.proxy import LateProxy

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PARTS = 2


def _commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[KTP(topic, p, offset) for p in range(PARTS)], asynchronous=False)
    finally:
        consumer.close()


def test_the_dstream_gate_waits_for_a_broker_that_is_down_as_it_starts(broker, airflow_home, tmp_path, monkeypatch):
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    bs = broker.bootstrap_servers
    topic = group = f"dgate-{os.getpid()}"
    topics.create_topic(bs, topic, PARTS)
    produce(bs, topic, 400, partitions=PARTS)
    _commit(bs, group, topic, 0)
    data = tmp_path / "data"
    data.mkdir()
    registry = write_registry(tmp_path / "jobs.yaml", [{"name": "eps", "kind": "dstream", "group": group,
                                                        "topics": [topic]}])
    monkeypatch.setenv("AKS_DATA_DIR", str(data))
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(registry))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    spec = load_registry(registry).get("eps")

    # What the submit records: the driver (this process, alive) and the group's offsets as the baseline.
    record = LifecycleRecord.load_or_create("eps", spec.checkpoint)
    app_versions.record_submit(record, app_versions.SubmittedApp(
        app={"application": spec.application, "application_args": [], "compatibility_version": "1"},
        driver=DriverInfo(kind="local-pid", id=str(os.getpid()), host=socket.gethostname(),
                          started_at=int(time.time() * 1000)),
        master="local[2]", deploy_mode=None, mode=detach.DETACH_LOCAL, committed_before=None, query_id_before=None,
        log_path=None, starting_offsets_file=None, actor="test", holder=None))
    with KafkaView({"bootstrap.servers": bs}) as view:
        baseline = dstream_runtime.record_submit(spec, record, kafka=view)
    record.save()
    assert baseline["offsets_unknown"] is None and baseline["group_offsets"] == [[topic, 0, 0], [topic, 1, 0]]

    # The job's commits: 2 records per partition a second (for ~100 s, past the proxy's 25 s), straight to
    # the broker, not through the proxy.
    stop = threading.Event()

    def commit_like_a_running_job() -> None:
        offset = 0
        while not stop.wait(1.0) and offset < 198:
            offset += 2
            _commit(bs, group, topic, offset)

    committer = threading.Thread(target=commit_like_a_running_job, daemon=True)
    committer.start()
    try:
        with LateProxy(bs, delay_s=25.0) as proxy:
            monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(f"127.0.0.1:{proxy.port}"))
            with new_dag() as dag:
                StreamingHealthSensor(task_id="gate", job="eps", min_batches=2, poke_interval=1.0,
                                      gate_timeout_s=120, promote=False)
            r = run_inline(dag)
            ended = time.monotonic()
    finally:
        stop.set()
        committer.join(10)
    assert r.states == {"gate": "success"}, r.xcoms
    gate = r.xcom("gate")
    assert gate["state"] == "healthy" and gate["committed_past_restart"] > 0, gate
    # The gate began while the broker still refused connections (ended - waited_s is no earlier than its start),
    # and waited for it: a fixed "waited >= 20 s" failed when the DAG run itself took 13 s to start under load.
    assert proxy.listening_at is not None and ended - gate["waited_s"] < proxy.listening_at, (gate, ended)
    assert gate["samples"] >= 2, gate      # looks only count once the broker answers
    history = LifecycleRecord.load(spec.checkpoint).history
    assert not [e for e in history if e["event"] == "health_gate_failed"]
