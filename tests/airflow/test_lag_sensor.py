"""The lag sensor in real Airflow 3 (``dag.test()``, SQLite) against the real broker: poke mode and
deferrable mode (the trigger runs inline under ``dag.test()``), limits from the registry, the
fail-fast path, and the trigger's serialisation round trip.

Checkpoints are written byte for byte as Spark 4.0 writes them and advanced by a thread "as a
running query does", so the sensor sees the lag fall below the limit while it waits.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from devstack import topics
from devstack.produce import produce
from tests.support.airflow_env import (
    Env,
    add_batch,
    fake_checkpoint,
    kafka_conn,
    new_dag,
    run_inline,
    write_registry,
)

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.fixture(scope="module")
def env(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-lag-sensor")
    data = base / "data"
    data.mkdir()
    topic = f"lag-sensor-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 400, partitions=2)        # 200 per partition
    registry = write_registry(base / "streaming_jobs.yaml", [
        {"name": "poked", "topics": [topic], "max_lag_records": 20},
        {"name": "deferred", "topics": [topic], "max_lag_records": 20, "max_lag_seconds": 3600},
        {"name": "nolimit", "topics": [topic]},
        {"name": "stuck", "topics": [topic], "max_lag_records": 20, "stall_after_s": 1},
    ])
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    yield Env(data=data, registry=registry, bootstrap=broker.bootstrap_servers, topic=topic)
    mp.undo()


def _catch_up_later(env: Env, job: str, delay: float = 2.5) -> threading.Thread:
    """After ``delay`` s the job "commits" batch 3 up to offset 195 of 200: 10 records left."""
    def run() -> None:
        time.sleep(delay)
        add_batch(env.checkpoint(job), env.topic, 3, 195)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _sensor_dag(job: str, **kwargs):
    from airflow_kafka_spark.sensors.lag import StreamingLagSensor

    with new_dag() as dag:
        StreamingLagSensor(task_id="wait_lag", job=job, poke_interval=1, timeout=90, **kwargs)
    return dag


def test_poke_mode_waits_until_the_lag_is_under_the_registry_limit(env):
    fake_checkpoint(env, "poked", batches=3, rpb=5)         # C = 15 of 200: lag 370 records
    thread = _catch_up_later(env, "poked")
    started = time.monotonic()
    result = run_inline(_sensor_dag("poked", mode="poke"))
    thread.join()
    assert result.state == "success", result.states
    event = result.xcom("wait_lag")
    assert event["status"] == "success" and event["observation"]["lag_records_effective"] == 10
    assert time.monotonic() - started >= 2.5                 # it did wait for the catch-up


def test_deferrable_mode_polls_in_the_trigger(env):
    fake_checkpoint(env, "deferred", batches=3, rpb=5)
    thread = _catch_up_later(env, "deferred")
    result = run_inline(_sensor_dag("deferred", deferrable=True))
    thread.join()
    assert result.state == "success", result.states
    event = result.xcom("wait_lag")
    assert event["status"] == "success" and event["observation"]["lag_records_effective"] == 10
    assert event["observation"]["lag_seconds"] is not None     # the seconds limit was checked too


def test_a_job_without_limits_is_refused_and_a_stuck_job_fails_fast(env):
    fake_checkpoint(env, "nolimit")
    result = run_inline(_sensor_dag("nolimit"))
    assert result.state == "failed" and result.states == {"wait_lag": "failed"}

    fake_checkpoint(env, "stuck")                            # lag 370, last batch 1 s ago, stall_after 1 s
    time.sleep(1.5)
    started = time.monotonic()
    result = run_inline(_sensor_dag("stuck", fail_on_alert=True, deferrable=True))
    assert result.state == "failed"
    assert time.monotonic() - started < 60                    # not the 90 s timeout


def test_trigger_round_trip_and_first_event(env):
    from airflow_kafka_spark.triggers.lag import StreamingLagTrigger

    fake_checkpoint(env, "poked", batches=3, rpb=5)
    add_batch(env.checkpoint("poked"), env.topic, 3, 200)   # caught up
    trigger = StreamingLagTrigger(job="poked", checkpoint=str(env.checkpoint("poked")), topics=[env.topic],
                                  kafka_conn_id="kafka_default", max_lag_records=0, poll_interval=1)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_spark.triggers.lag.StreamingLagTrigger"
    rebuilt = StreamingLagTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert "bootstrap" not in repr(kwargs)                    # no Kafka settings, let alone secrets

    async def first():
        return await rebuilt.run().__anext__()

    event = asyncio.run(first())
    assert event.payload["status"] == "success", event.payload
    assert event.payload["observation"]["lag_records"] == 0
