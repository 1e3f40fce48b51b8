"""Issue 13 acceptance, metrics through Airflow: the lag sensor and the health gate under ``dag.test()``
send their numbers through ``Stats`` to StatsD, received by a real UDP socket in this test.

Airflow is configured the way a deployment turns StatsD on (``AIRFLOW__METRICS__STATSD_ON`` and
host/port, the ``statsd`` package installed) and ``Stats`` initialised as a worker's task runner
does at start. The checkpoints are written byte for byte as Spark 4.0 writes them, over a real
topic on the real broker; the received gauges must equal what the core's ``observe_job`` says for
the same job (records exactly; the age of the oldest unread record within the seconds between
the two looks), and the two gate outcomes (one passed, one failed) arrive as counters. The hourly
``streaming_audit`` DAG sends the same gauges for every job it audits.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from devstack import topics
from devstack.produce import produce
from tests.support.airflow_env import (
    Env,
    add_batch,
    dead_pid,
    fake_checkpoint,
    kafka_conn,
    new_dag,
    record_fake_submit,
    run_inline,
    write_registry,
)

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


class UdpListener:
    """Every StatsD datagram sent to 127.0.0.1:<port>, as ``name -> [(value, type)]``."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535)
            except TimeoutError:
                continue
            self.lines += data.decode().splitlines()

    def stats(self) -> dict[str, list[tuple[float, str]]]:
        out: dict[str, list[tuple[float, str]]] = {}
        for line in list(self.lines):
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            out.setdefault(name, []).append((float(value), kind.split("|")[0]))
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture(scope="module")
def statsd(airflow_home):
    from airflow.sdk.observability import stats
    from airflow.sdk.observability.metrics import stats_utils

    listener = UdpListener()
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    mp.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    mp.setenv("AIRFLOW__METRICS__STATSD_PORT", str(listener.port))
    mp.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    # what the task runner's main() does on a worker before it runs a task
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)
    yield listener
    listener.close()
    mp.undo()
    stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=False)   # back to no StatsD


@pytest.fixture(scope="module")
def env(broker, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-statsd")
    data = base / "data"
    data.mkdir()
    topic = f"statsd-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 400, partitions=2)            # 200 per partition
    registry = write_registry(base / "streaming_jobs.yaml", [
        {"name": "gauged", "topics": [topic], "max_lag_records": 1000},
        {"name": "gated", "topics": [topic]},
        {"name": "dead", "topics": [topic]},
        {"name": "deferred", "topics": [topic], "max_lag_records": 20},
    ])
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    yield Env(data=data, registry=registry, bootstrap=broker.bootstrap_servers, topic=topic)
    mp.undo()


def test_lag_sensor_and_health_gate_reach_statsd_with_the_cores_numbers(env, statsd):
    from airflow_kafka_spark.registry.loader import load_registry
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor
    from airflow_kafka_spark.sensors.lag import StreamingLagSensor
    from airflow_kafka_spark.watch.observe import observe_job

    statsd.lines.clear()
    fake_checkpoint(env, "gauged", batches=3, rpb=5)        # C = 15 of 200 per partition: lag 185 + 185
    fake_checkpoint(env, "gated", batches=3, rpb=5)
    record_fake_submit(env, "gated", os.getpid(), committed_before=1)    # batch 2 is new: the gate passes
    fake_checkpoint(env, "dead", batches=2)
    record_fake_submit(env, "dead", dead_pid())                          # the driver is gone: the gate fails
    with new_dag() as dag:
        StreamingLagSensor(task_id="wait_lag", job="gauged", mode="poke", poke_interval=1, timeout=60)
        StreamingHealthSensor(task_id="gate_ok", job="gated", min_batches=1, deferrable=False, poke_interval=0.5,
                              gate_timeout_s=60, promote=False)
        StreamingHealthSensor(task_id="gate_dead", job="dead", deferrable=False, poke_interval=0.5,
                              gate_timeout_s=60)
    started = time.perf_counter()
    result = run_inline(dag)
    run_s = time.perf_counter() - started
    assert result.states == {"wait_lag": "success", "gate_ok": "success", "gate_dead": "failed"}, result.xcoms

    spec = load_registry(str(env.registry)).get("gauged")
    core = observe_job(spec, {"bootstrap.servers": env.bootstrap})
    time.sleep(0.5)                                          # the last datagrams are in flight
    got = statsd.stats()
    t = env.topic.replace(".", "__")
    print(f"\nmeasured: dag.test() {run_s:.1f} s, {len(statsd.lines)} datagrams; core lag {core.lag.records} "
          f"records, {core.lag.seconds} s; statsd lag {got.get('airflow.aks.lag.gauged')}")

    for p in core.lag.partitions:
        assert got[f"airflow.aks.partition_lag.gauged.{t}.{p.tp.partition}"] == [(p.records, "g")]
        assert got[f"airflow.aks.position.gauged.{t}.{p.tp.partition}"] == [(p.position, "g")]
        assert got[f"airflow.aks.partition_latest_offset.{t}.{p.tp.partition}"] == [(p.log_end, "g")]
    assert got["airflow.aks.lag.gauged"] == [(core.lag.records, "g")] and core.lag.records == 370
    assert got["airflow.aks.max_lag.gauged"] == [(185, "g")]
    assert got[f"airflow.aks.status.gauged.{core.status.status}"] == [(1, "g")]
    others = [s for s in ("OK", "IDLE", "UNKNOWN", "WARN", "STALLED", "STOPPED", "REWIND") if s != core.status.status]
    assert all(got[f"airflow.aks.status.gauged.{s}"] == [(0, "g")] for s in others)
    (seconds, kind), = got["airflow.aks.max_lag_seconds.gauged"]
    assert kind == "g" and 0 <= core.lag.seconds - seconds <= run_s + 5     # the same records, looked at later
    assert got["airflow.aks.gate.gated.health.passed"] == [(1, "c")]
    assert got["airflow.aks.gate.dead.health.failed"] == [(1, "c")]
    assert not any(name.startswith("airflow.aks.") and ".gated." in name and "gate" not in name for name in got)


def test_the_hourly_audit_sends_each_jobs_numbers(env, statsd):
    """The ``streaming_audit`` DAG from dags/: every ``observe_<job>`` task sends its observation's gauges."""
    from airflow.dag_processing.dagbag import DagBag

    from airflow_kafka_spark.registry.loader import load_registry
    from airflow_kafka_spark.watch.observe import observe_job
    from tests.airflow.conftest import REPO

    statsd.lines.clear()
    fake_checkpoint(env, "gauged", batches=3, rpb=5)
    fake_checkpoint(env, "gated", batches=4, rpb=10)          # C = 40: lag 160 + 160
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("streaming_audit")
    started = time.perf_counter()
    dag.test(run_conf={"check_verdict": False})
    run_s = time.perf_counter() - started
    time.sleep(0.5)
    got = statsd.stats()
    print(f"\nmeasured: streaming_audit dag.test() {run_s:.1f} s, {len(statsd.lines)} datagrams")
    registry = load_registry(str(env.registry))
    for job, lag in (("gauged", 370), ("gated", 320), ("dead", 380)):
        core = observe_job(registry.get(job), {"bootstrap.servers": env.bootstrap})
        assert got[f"airflow.aks.lag.{job}"] == [(core.lag.records, "g")] and core.lag.records == lag
        assert got[f"airflow.aks.status.{job}.{core.status.status}"] == [(1, "g")]


def test_the_deferrable_lag_trigger_sends_every_poll(env, statsd):
    """First poke on the worker (lag 370 > 20), then the trigger's polls until the "job" catches up to 10."""
    from airflow_kafka_spark.sensors.lag import StreamingLagSensor

    statsd.lines.clear()
    ck = fake_checkpoint(env, "deferred", batches=3, rpb=5)
    timer = threading.Timer(2.5, add_batch, args=(ck, env.topic, 3, 195))
    with new_dag() as dag:
        StreamingLagSensor(task_id="wait_lag", job="deferred", deferrable=True, poke_interval=1, timeout=90)
    timer.start()
    try:
        result = run_inline(dag)
    finally:
        timer.cancel()
    assert result.states == {"wait_lag": "success"}, result.xcoms
    time.sleep(0.5)
    values = [v for v, kind in statsd.stats()["airflow.aks.lag_readable.deferred"]]
    print(f"\nmeasured: readable lag sent by the poke then the trigger's polls: {values}")
    assert values[0] == 370 and values[-1] == 10 and len(values) >= 3     # the poke, then >= 2 trigger polls
