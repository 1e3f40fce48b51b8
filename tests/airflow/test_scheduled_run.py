"""A safe restart triggered through the REST API and run by Airflow's own components, to the end.

``dag.test()`` (test_safe_restart_dag.py) runs every task in the test process and runs deferred
triggers inline. Here nothing is inline: ``airflow api-server``, ``airflow scheduler``
(LocalExecutor: each task in its own process, talking to the API server's execution API) and
``airflow triggerer`` run as separate processes on this session's SQLite DB. The run is created
by ``POST /api/v2/dags/streaming_safe_restart/dagRuns`` with the conf the UI's trigger form sends;
the health gate starts in the real triggerer (``start_from_trigger``: no worker runs it before its
verdict); the reference job is really started by spark-submit.

Checked: the run succeeds; the health gate started and waited in the triggerer (its log and its
XCom say so); one driver runs and commits batches; the sink holds exactly what Kafka
acknowledged; the audit entry names the REST user who triggered the run and the reason from the form.
A second run (``keep``) on the now quiet topic passes its gate as *idle* instead of timing out and
rolling back a good deploy. A dry run's gate reads the plan's ``dry_run`` XCom from the triggerer and
starts nothing.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from devstack import oracle, topics
from devstack.airflow_services import AirflowServices, sync_dags_folder
from tests.airflow.conftest import AIRFLOW_HOME, TIMINGS
from tests.airflow.test_safe_restart_dag import PARTITIONS, Feed
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, write_registry
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAG_ID = "streaming_safe_restart"
JOB = "live"
IDLE_PASS_S = 30     # above the ~15-25 s a spark-submit needs to start or to fail at start here


@pytest.fixture(scope="module")
def cluster(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-scheduled")
    data = base / "data"
    topic = f"live-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    registry = write_registry(base / "streaming_jobs.yaml", [
        {"name": JOB, "topics": [topic], "sink": "idempotent", "max_offsets_per_trigger": 200,
         "application_args": ["--trigger", "processing:1s", "--shuffle-partitions", "2"],
         "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"},
         # min_batches 5: the submit task returns after the first commit (first_batch_wait_s), so a gate of one
         # batch would pass at its first look; five make it judge what the new driver did
         "health_gate": {"idle_pass_s": IDLE_PASS_S, "min_batches": 5}}])
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    mp.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    sync_dags_folder(DAG_ID)     # with this registry's job list in the form

    services = AirflowServices(airflow_home, base)
    checkpoint = data / "checkpoints" / JOB
    try:
        TIMINGS["scheduled: api-server start"] = services.start_api_server()
        services.start("scheduler")
        services.start("triggerer")
        client = services.client()
        yield services, client, checkpoint, Feed(broker.bootstrap_servers, topic), data / "sinks" / JOB
        client.close()
    finally:
        # the job's driver is stopped while the Airflow components stop, not after them
        rec = LifecycleRecord.load(str(checkpoint))
        killer = None
        if rec is not None and rec.driver is not None:
            killer = threading.Thread(target=drivers.kill_local, args=(rec.driver,), kwargs={"grace_s": 5})
            killer.start()
        services.stop()
        if killer is not None:
            killer.join()
        mp.undo()


def _trigger(services: AirflowServices, client, conf: dict) -> tuple[str, str, dict[str, dict]]:
    """POST the run as the UI does, wait for it; (run id, state, task instances by task id)."""
    r = client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    state = services.wait_for_run(client, DAG_ID, run_id, timeout=420, poll=2)
    tis = {t["task_id"]: t for t in client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances",
                                              params={"limit": 100}).json()["task_instances"]}
    return run_id, state, tis


def _ui_conf(mode: str, reason: str, *, dry_run: bool = False) -> dict:
    return {"job": JOB, "mode": mode, "backup_id": None, "datetime": None, "dry_run": dry_run,
            "accept_data_loss": False, "reason": reason}


def _xcom(client, run_id: str, task_id: str, key: str = "return_value") -> Any:
    r = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                   params={"deserialize": True, "stringify": False})
    assert r.status_code == 200, r.text
    return r.json()["value"]


def _caught_up(checkpoint: Path, feed: Feed) -> bool:
    st = read_checkpoint(str(checkpoint))
    ends = end_offsets(feed.bootstrap, feed.topic, PARTITIONS)
    return st.latest_committed is not None and {
        tp.partition: o for tp, o in st.latest_committed.kafka_offsets.items()} == ends


def _audit(checkpoint: Path) -> dict:
    rec = LifecycleRecord.load(str(checkpoint))
    assert rec is not None
    return [e for e in rec.history if e["event"] == "safe_restart"][-1]


def test_a_run_triggered_through_the_rest_api_runs_to_the_end_in_scheduler_and_triggerer(cluster):
    services, client, checkpoint, feed, sink = cluster
    r = client.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})
    assert r.status_code == 200, r.text
    conf = _ui_conf("auto", "first deploy from the REST API")
    feed.add(200)
    started = time.perf_counter()
    with feed:
        run_id, state, tis = _trigger(services, client, conf)
    TIMINGS["scheduled: REST-triggered safe restart (first start)"] = time.perf_counter() - started
    states = {k: v["state"] for k, v in tis.items()}
    assert state == "success", (states, services.tail("scheduler"))
    assert states["submit"] == states["health_gate"] == states["finish"] == "success", states
    assert states["rollback"] == "skipped" and not {"reset", "restore"} & set(states), states

    # The health gate started in the triggerer (every try does: the scheduler defers it there).
    gate = tis["health_gate"]
    entries = []
    for n in range(1, gate["try_number"] + 1):
        log = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/health_gate/logs/{n}",
                         params={"full_content": True})
        if log.status_code == 404 and n < gate["try_number"]:
            continue   # a try failed by the race below: the API no longer finds it; its files are read below
        assert log.status_code == 200, log.text
        entries += [e for e in log.json()["content"] if isinstance(e, dict)]
    # Airflow 3.3.2 could fail a deferred try whose trigger fired before the scheduler took in the worker's
    # exit (apache/airflow#66374, open upstream as #67287 and #72716). Started from the triggerer, a try has
    # no worker before its trigger; should a try still fail around its resume, the API answers 404 for it
    # ("TaskInstance not found") and its trigger's lines stay in the try's trigger log file.
    tries = AIRFLOW_HOME / "logs" / f"dag_id={DAG_ID}" / f"run_id={run_id}" / "task_id=health_gate"
    for f in sorted(tries.glob("attempt=*.log.trigger.*.log")):
        entries += [json.loads(line) for line in f.read_text().splitlines() if line.startswith("{")]
    # The triggerer routes a trigger's log lines into the deferred task's log: lines whose logger is the
    # start trigger's class prove the gate started in the triggerer process (start_from_trigger), with no
    # worker before its verdict; its XCom says where the first look was taken.
    started_there = [e["event"] for e in entries if str(e.get("logger", "")).endswith("StreamingHealthStartTrigger")]
    assert any("first look in the triggerer" in m for m in started_there), entries[-30:]
    assert _xcom(client, run_id, "health_gate")["first_look"] == "triggerer"

    rec = LifecycleRecord.load(str(checkpoint))
    assert rec is not None and rec.driver is not None and drivers.local_alive(rec.driver)
    entry = _audit(checkpoint)
    assert entry["actor"] == client.user                         # the REST user, not a system name
    details = entry["details"]
    assert (details["outcome"], details["mode"], details["action"]) == ("SUCCESS", "auto", "keep")
    assert details["reason"] == conf["reason"] and details["run"] == f"{DAG_ID}/{run_id}"

    wait_until(lambda: _caught_up(checkpoint, feed), timeout=180, interval=1.0,
               what="the job to commit every produced record")
    cmp = oracle.compare(feed.produced, oracle.read_sink(sink, "idempotent"))
    assert cmp.exact, cmp.summary()


def test_a_keep_restart_on_a_quiet_topic_passes_the_gate_as_idle(cluster):
    services, client, checkpoint, feed, sink = cluster
    before = LifecycleRecord.load(str(checkpoint)).driver
    started = time.perf_counter()
    _, state, tis = _trigger(services, client, _ui_conf("keep", "restart with no traffic"))
    TIMINGS["scheduled: keep on a quiet topic (idle gate)"] = time.perf_counter() - started
    assert state == "success", ({k: v["state"] for k, v in tis.items()}, services.tail("scheduler"))
    details = _audit(checkpoint)["details"]
    assert details["outcome"] == "SUCCESS" and details["stop"]["outcome"] == "STOPPED"
    health = details["health"]
    assert health["idle"] is True and health["new_batches"] == 0 and health["lag_records"] == 0, health
    assert "not proven" in health["reason"]
    # idle: it waited in the triggerer the whole idle window (the driver lived IDLE_PASS_S), no worker held
    assert health["first_look"] == "triggerer"
    now = LifecycleRecord.load(str(checkpoint)).driver
    assert now.id != before.id and drivers.local_alive(now) and not drivers.local_alive(before)
    # ... and the restarted job still works: new records arrive, get committed, the sink stays exact.
    feed.add(100)
    wait_until(lambda: _caught_up(checkpoint, feed), timeout=180, interval=1.0, what="the restarted job to catch up")
    cmp = oracle.compare(feed.produced, oracle.read_sink(sink, "idempotent"))
    assert cmp.exact, cmp.summary()


def test_a_dry_run_gate_started_in_the_triggerer_reads_the_plans_flag_and_starts_nothing(cluster):
    """The gate's ``dry_run`` is the plan task's XCom: started from the triggerer, the trigger pulls it there."""
    services, client, checkpoint, _, _ = cluster
    before = LifecycleRecord.load(str(checkpoint))
    run_id, state, tis = _trigger(services, client, _ui_conf("keep", "dry run from the form", dry_run=True))
    assert state == "success", ({k: v["state"] for k, v in tis.items()}, services.tail("scheduler"))
    gate = _xcom(client, run_id, "health_gate")
    assert gate["dry_run"] is True and gate["state"].startswith("skipped (dry run"), gate
    assert _xcom(client, run_id, "finish")["outcome"] == "DRY_RUN"
    after = LifecycleRecord.load(str(checkpoint))
    assert after.driver.id == before.driver.id and drivers.local_alive(after.driver)
    assert len(after.history) == len(before.history)
