"""The safe-restart DAG end to end on YARN (cluster deploy mode) and HDFS, with the triggerer on another host.

Real everything: the HDFS + YARN minicluster, the broker, ``airflow api-server`` + ``scheduler``
(LocalExecutor) + ``triggerer`` as separate processes, and spark-submit of the reference job to YARN
in cluster mode through the Spark provider's hook. The triggerer runs in its own UTS namespace
(``unshare --uts``) with another hostname than the scheduler's task processes that submit: the
deferred health gate reaches the YARN driver through the ResourceManager's REST API from there.
The checkpoint, the lifecycle record, the stop marker, the backups and the idempotent sink all live
on HDFS; records are produced the whole time.

Two runs, three YARN submits (each 50-170 s to a first batch on this machine):

1. ``auto``, first start (submit 1).
2. A broken, checkpoint-breaking build (``--stateful dedup --fail-at-start`` + compatibility bump):
   graceful stop through the HDFS marker, backup, reset ``preserve``, submit 2 fails at start (YARN
   FAILED); the health gate fails with the tail of the driver's AM log; the rollback restores this run's
   backup and resubmits the previous application (submit 3).

Then the sink (downloaded from HDFS) is compared record by record with what Kafka acknowledged:
0 missing, 0 duplicated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from devstack import oracle, topics
from devstack.airflow_services import AirflowServices, sync_dags_folder
from tests.airflow.conftest import TIMINGS, airflow_home  # noqa: F401  (the session's Airflow home fixture)
from tests.airflow.test_safe_restart_dag import PARTITIONS, Feed
from tests.support.airflow_env import kafka_conn, write_registry
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.integration]

DAG_ID = "streaming_safe_restart"
JOB = "yarnshop"
OTHER_HOST = "aks-triggerer-elsewhere"
V1_ARGS = ["--trigger", "processing:2s", "--shuffle-partitions", "2"]
V2_ARGS = [*V1_ARGS, "--stateful", "dedup"]
BROKEN_ARGS = [*V2_ARGS, "--fail-at-start"]
SPARK_YARN_CONN = json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}})


def _registry(path: Path, topic: str, job_conf: dict[str, str], *, compat: str, args: list[str]) -> None:
    write_registry(path, [
        {"name": JOB, "topics": [topic], "sink": "idempotent", "max_offsets_per_trigger": 500,
         "compatibility_version": compat, "application_args": args, "spark_conn_id": "spark_yarn",
         "deploy_mode": "cluster", "spark_conf": job_conf}],
        stop_timeout_s=240, health_gate={"min_batches": 2, "timeout_s": 480})


def _start_elsewhere(services: AirflowServices, component: str, hostname: str) -> None:
    """``airflow <component>`` in a new UTS namespace whose hostname is ``hostname`` (root only)."""
    log = services.logs / f"{component}.log"
    exe = Path(sys.executable).with_name("airflow")
    with open(log, "wb") as fh:
        services.procs[component] = (subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$0" {component}', str(exe)],
            stdout=fh, stderr=subprocess.STDOUT, env=services.env, start_new_session=True), log)


@pytest.fixture(scope="module")
def stack(broker, airflow_home, hadoop, yarn_submit, webhdfs, rm, tmp_path_factory):  # noqa: F811
    if os.geteuid() != 0:
        pytest.fail("the triggerer on another host needs a UTS namespace (unshare --uts): run as root")
    base = tmp_path_factory.mktemp("aks-yarn")
    data = f"{hadoop.default_fs}/aks-{os.getpid()}"
    topic = f"yarnshop-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    job_conf = {**yarn_submit.conf, "spark.jars": ",".join(yarn_submit.jars)}
    registry = base / "streaming_jobs.yaml"
    _registry(registry, topic, job_conf, compat="1", args=V1_ARGS)
    mp = pytest.MonkeyPatch()
    for key in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_ARCHIVES_PATH"):
        mp.setenv(key, yarn_submit.env[key])
    mp.setenv("AKS_DATA_DIR", data)
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "3")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_YARN", SPARK_YARN_CONN)
    mp.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    sync_dags_folder(DAG_ID)
    services = AirflowServices(airflow_home, base)
    checkpoint = f"{data}/checkpoints/{JOB}"
    try:
        TIMINGS["yarn: api-server start"] = services.start_api_server()
        services.start("scheduler")
        _start_elsewhere(services, "triggerer", OTHER_HOST)
        client = services.client()
        yield {"services": services, "client": client, "checkpoint": checkpoint, "registry": registry,
               "topic": topic, "job_conf": job_conf, "sink": f"{data}/sinks/{JOB}",
               "feed": Feed(broker.bootstrap_servers, topic), "base": base}
        client.close()
    finally:
        services.stop()
        for app in rm.find(name=f"aks-{JOB}"):
            if app.alive:
                rm.kill(app.id)
        mp.undo()


def _run(stack: dict, mode: str, what: str) -> tuple[str, str, dict[str, dict]]:
    services, client = stack["services"], stack["client"]
    conf = {"job": JOB, "mode": mode, "backup_id": None, "datetime": None, "dry_run": False,
            "accept_data_loss": False, "reason": f"yarn: {what}"}
    started = time.perf_counter()
    r = client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    state = services.wait_for_run(client, DAG_ID, run_id, timeout=1500, poll=5)
    TIMINGS[f"yarn: safe restart, {what}"] = time.perf_counter() - started
    print(f"\n[yarn] {what}: {state} in {time.perf_counter() - started:.0f}s")
    tis = {t["task_id"]: t for t in client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances",
                                              params={"limit": 100}).json()["task_instances"]}
    return run_id, state, tis


def _task_log(stack: dict, run_id: str, ti: dict, try_number: int | None = None) -> list[dict]:
    log = stack["client"].get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/"
                              f"{try_number or ti['try_number']}", params={"full_content": True})
    assert log.status_code == 200, log.text
    return [e for e in log.json()["content"] if isinstance(e, dict)]


def _gate_went_through_the_triggerer(stack: dict, run_id: str, ti: dict) -> None:
    """Some try of the gate waited in the triggerer (a retried gate may pass at its first look on the worker)."""
    entries = [e for n in range(1, ti["try_number"] + 1) for e in _task_log(stack, run_id, ti, n)]
    assert any(str(e.get("logger", "")).endswith("StreamingHealthTrigger") for e in entries), entries[-20:]


def _audit(checkpoint: str) -> dict:
    rec = LifecycleRecord.load(checkpoint)
    assert rec is not None
    return [e for e in rec.history if e["event"] == "safe_restart"][-1]["details"]


def test_safe_restart_on_yarn_and_hdfs_with_the_gate_in_a_triggerer_on_another_host(stack, rm, webhdfs, tmp_path):
    services, client, feed = stack["services"], stack["client"], stack["feed"]
    checkpoint = stack["checkpoint"]
    assert client.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    feed.add(300)
    with feed:
        # 1. first start
        run_id, state, tis = _run(stack, "auto", "first start (1 submit)")
        states = {k: v["state"] for k, v in tis.items()}
        assert state == "success", (states, services.tail("scheduler"), services.tail("triggerer"))
        jobs = client.get("/api/v2/jobs", params={"job_type": "TriggererJob"}).json()["jobs"]
        assert {j["hostname"] for j in jobs} == {OTHER_HOST}, jobs
        assert socket_hostname() != OTHER_HOST
        _gate_went_through_the_triggerer(stack, run_id, tis["health_gate"])
        rec = LifecycleRecord.load(checkpoint)
        assert rec is not None and rec.driver is not None and rec.driver.kind == "yarn"
        first_app = rm.app(rec.driver.id)
        assert first_app.alive and first_app.name == f"aks-{JOB}", first_app.summary()

        # 2. a broken build, checkpoint-breaking too (a stateful stage + a compatibility bump): the first driver
        # stops on its own through the HDFS marker, backup, reset preserve; the new driver dies at start, the gate
        # fails, the rollback restores the backup and resubmits the previous application. (A good reset preserve
        # on YARN is tests/cluster/test_users_jobs_yarn.py's second run; this run kept only what is its own.)
        _registry(stack["registry"], stack["topic"], stack["job_conf"], compat="2", args=BROKEN_ARGS)
        run_id, state, tis = _run(stack, "auto", "broken build rolled back (2 submits)")
        states = {k: v["state"] for k, v in tis.items()}
        assert state == "failed" and states["health_gate"] == "failed" and states["rollback"] == "success", states
        audit = _audit(checkpoint)
        assert audit["outcome"] == "ROLLED_BACK" and audit["stop"]["outcome"] == "STOPPED", audit
        ended = rm.app(first_app.id)
        assert ended.succeeded, f"the first driver should have stopped on its own (marker on HDFS): {ended.summary()}"
        gate_failure = audit["failures"].get("health_gate")
        assert gate_failure, (audit, _task_log(stack, run_id, tis["health_gate"]), services.tail("scheduler"))
        if tis["health_gate"]["try_number"] > 1:   # a try failed by Airflow, not by the gate (apache/airflow#72716)
            said = [line for line in services.tail("scheduler", 10**8).splitlines() if "state attribute is" in line]
            print(f"\n[yarn] the gate was retried (try {tis['health_gate']['try_number']}); the scheduler said:",
                  said[-3:] or "(no state mismatch)")
        if gate_failure.startswith("health gate failed without reporting why"):   # the finish step asked the driver
            gate_log = _task_log(stack, run_id, tis["health_gate"])[-15:]
            print("\n[yarn] the gate left no reason; its task log ends:", gate_log,
                  "\n[yarn] scheduler log ends:", services.tail("scheduler", 3000))
        assert "FAILED" in gate_failure and "--fail-at-start" in gate_failure, gate_failure  # the AM log tail
        assert audit["rollback"]["restored_backup_id"] and audit["rollback"]["resubmitted"], audit["rollback"]
        rec = LifecycleRecord.load(checkpoint)
        assert rec.driver is not None and rec.driver.id != first_app.id
        assert rm.app(rec.driver.id).alive
        feed.add(200)

    def caught_up() -> bool:
        from airflow_kafka_spark.checkpoint.reader import read_checkpoint

        st = read_checkpoint(checkpoint)
        ends = end_offsets(feed.bootstrap, feed.topic, PARTITIONS)
        return st.latest_committed is not None and {
            tp.partition: o for tp, o in st.latest_committed.kafka_offsets.items()} == ends

    wait_until(caught_up, timeout=300, interval=3.0, what="the rolled-back job to commit every produced record")
    local = tmp_path / "sink"
    sink_path = stack["sink"].split("://", 1)[1].split("/", 1)[1]
    webhdfs.get("/" + sink_path, str(local), recursive=True)
    cmp = oracle.compare(feed.produced, oracle.read_sink(local, "idempotent"))
    print(f"[yarn] sink: {cmp.summary()}")
    assert cmp.exact, cmp.summary()


def socket_hostname() -> str:
    import socket

    return socket.gethostname()
