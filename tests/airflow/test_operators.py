"""The provider's operators, health sensor and trigger in real Airflow 3 (SQLite, ``dag.test()``), against
the real broker and checkpoints written byte for byte as Spark 4.0 writes them.

No Spark is started here: what needs a running job (submit, stop, the whole safe restart) is in
``test_safe_restart_dag.py``. What is checked here is the Airflow contract of each piece (keyword-only
arguments, no I/O at construction, templated fields, XCom shapes, one-line failures, deferral and
trigger serialisation), the guards that cost no Spark start (ALREADY_RUNNING, BLOCK, override
audit), secrets staying out of XCom, rendered fields and logs, and the cluster-mode command lines that
cannot be run on this machine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import app_versions, connector, detach, submit
from devstack import topics
from devstack.produce import produce
from tests.support.airflow_env import (
    SECRET,
    SPARK_LOCAL_CONN,
    Env,
    add_batch,
    assert_no_secret,
    dead_pid,
    fake_checkpoint,
    kafka_conn,
    new_dag,
    record_fake_submit,
    run_inline,
    write_registry,
)
from tests.support.checkpoint_factory import commit_file, offsets_file
from tests.support.dag_runs import RunResult, collect  # noqa: F401
from tests.support.proxy import LateProxy
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


# --------------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-ops")
    data = base / "data"
    data.mkdir()
    topic = f"ops-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 400, partitions=2)
    registry = write_registry(base / "streaming_jobs.yaml", [
        {"name": "alpha", "topics": [topic]},
        {"name": "beta", "topics": [topic]},
        {"name": "gamma", "topics": [topic]},
        {"name": "delta", "topics": [topic]},
        {"name": "epsilon", "topics": [topic]},
    ])
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    # A SASL password in the Kafka connection (unused by the PLAINTEXT broker): it must never surface.
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers, **{
        "sasl.username": "svc-streaming", "sasl.password": SECRET}))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    yield Env(data=data, registry=registry, bootstrap=broker.bootstrap_servers, topic=topic)
    mp.undo()



# --------------------------------------------------------------------------------------------------
# construction: keyword-only, no I/O, templated fields
# --------------------------------------------------------------------------------------------------

def test_operators_are_keyword_only_and_read_nothing_when_built():
    from airflow_kafka_spark.operators.checkpoint import (
        BackupCheckpointOperator,
        ResetCheckpointOperator,
        RestoreCheckpointOperator,
        ValidateCheckpointOperator,
    )
    from airflow_kafka_spark.operators.streaming import StopStreamingJobOperator, SubmitStreamingJobOperator
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    # A registry path that does not exist and no connections: building must not touch either.
    kw = {"job": "{{ params.job }}", "registry_path": "/nonexistent/registry.yaml"}
    ops = [ValidateCheckpointOperator(task_id="v", **kw), BackupCheckpointOperator(task_id="b", **kw),
           RestoreCheckpointOperator(task_id="r", backup_id=None, **kw),
           ResetCheckpointOperator(task_id="x", mode="preserve", **kw),
           SubmitStreamingJobOperator(task_id="s", **kw), StopStreamingJobOperator(task_id="t", **kw),
           StreamingHealthSensor(task_id="h", **kw)]
    for op in ops:
        assert "job" in op.template_fields
        assert op.job == "{{ params.job }}"
    with pytest.raises(TypeError):
        ValidateCheckpointOperator("v", "orders")  # type: ignore[misc]
    with pytest.raises(TypeError):
        StreamingHealthSensor("h", "orders")  # type: ignore[misc]


def test_unknown_and_path_like_jobs_fail_with_one_registry_line(env):
    from airflow_kafka_spark.operators.checkpoint import ValidateCheckpointOperator

    with new_dag() as dag:
        ValidateCheckpointOperator(task_id="unknown", job="nope")
        ValidateCheckpointOperator(task_id="path_like", job="../x")
        ValidateCheckpointOperator(task_id="templated", job="{{ params.job }}")
    r = run_inline(dag, {"job": "/etc/passwd"})
    assert r.states == {"unknown": "failed", "path_like": "failed", "templated": "failed"}
    unknown = r.xcom("unknown", "failure")
    assert unknown.startswith("unknown job 'nope'; known jobs: alpha, beta, delta, epsilon, gamma"), unknown
    assert "\n" not in unknown
    assert r.xcom("path_like", "failure").startswith("invalid job name '../x'")
    assert r.xcom("templated", "failure").startswith("invalid job name '/etc/passwd'")
    assert r.rendered["templated"]["job"] == "/etc/passwd"   # the template was rendered, then refused


# --------------------------------------------------------------------------------------------------
# validate: verdict to XCom, BLOCK fails, override is recorded; secrets stay out
# --------------------------------------------------------------------------------------------------

def test_validate_pushes_verdict_blocks_and_records_an_override_without_leaking_secrets(env, broker, capfd):
    from airflow.sdk import Param

    from airflow_kafka_spark.operators.checkpoint import ValidateCheckpointOperator

    ck = fake_checkpoint(env, "alpha", batches=3, rpb=5)    # C = 15 per partition, log end 200
    with new_dag(params={"override": Param(False, type="boolean")}) as dag:
        ValidateCheckpointOperator(task_id="validate", job="alpha", override="{{ params.override }}",
                                   reason="checking {{ params.override }}")
    ok = run_inline(dag, {"override": False})
    assert ok.states == {"validate": "success"}
    verdict = ok.xcom("validate")
    assert verdict["verdict"] == "PASS" and verdict["job"] == "alpha"
    assert verdict["position"]["last_committed_batch"] == 2
    assert json.loads(verdict["position"]["offsets"]) == {env.topic: {"0": 15, "1": 15}}

    # Retention passes the checkpoint: records 15..29 of each partition are gone before being read.
    topics.delete_records(env.bootstrap, env.topic, {0: 30, 1: 30})
    try:
        blocked = run_inline(dag, {"override": False})
        assert blocked.states == {"validate": "failed"}
        assert "OFFSET_BELOW_LOG_START" in blocked.xcom("validate", "failure")
        assert blocked.xcom("validate", "verdict")["verdict"] == "BLOCK"

        overridden = run_inline(dag, {"override": True})
        assert overridden.states == {"validate": "success"}
        assert overridden.xcom("validate")["overridden"] is True
        events = [e for e in LifecycleRecord.load(str(ck)).history if e["event"] == "verdict_overridden"]
        assert len(events) == 1
        assert events[0]["details"]["codes"] == ["OFFSET_BELOW_LOG_START"]
        assert events[0]["details"]["reason"] == "checking True"
        assert "via" in events[0]["actor"] and dag.dag_id in events[0]["actor"]
    finally:
        produce(env.bootstrap, env.topic, 100, partitions=2)   # later tests need records above the cut
    out, err = capfd.readouterr()
    assert "OFFSET_BELOW_LOG_START" in out + err     # the task logs were captured ...
    for result in (ok, blocked, overridden):
        assert_no_secret(result, out, err)              # ... and the SASL password is in none of it
    assert SECRET not in Path(str(ck) + ".lifecycle.json").read_text()


# --------------------------------------------------------------------------------------------------
# backup, reset (dry run), restore, stop
# --------------------------------------------------------------------------------------------------

def test_backup_reset_dry_run_restore_and_stop_without_driver(env):
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint
    from airflow_kafka_spark.operators.checkpoint import (
        BackupCheckpointOperator,
        ResetCheckpointOperator,
        RestoreCheckpointOperator,
    )
    from airflow_kafka_spark.operators.streaming import StopStreamingJobOperator

    ck = fake_checkpoint(env, "beta", batches=3, rpb=20)    # C = 60 per partition, within the log
    LifecycleRecord.create("beta", str(ck)).save()
    with new_dag() as dag:
        stop = StopStreamingJobOperator(task_id="stop", job="beta")
        backup = BackupCheckpointOperator(task_id="backup", job="beta", reason="test backup")
        reset = ResetCheckpointOperator(task_id="reset", job="beta", mode="preserve", dry_run=True)
        skipped = ResetCheckpointOperator(task_id="no_reset", job="beta", mode=None)
        restore = RestoreCheckpointOperator(task_id="restore", job="beta",
                                            backup_id="{{ ti.xcom_pull(task_ids='backup')['backup_id'] }}",
                                            trigger_rule="none_failed")
        stop >> backup >> [reset, skipped] >> restore
    r = run_inline(dag)
    assert r.states["stop"] == "success" and r.xcom("stop")["outcome"] == "NOT_RUNNING"
    assert r.states["backup"] == "success"
    backup_id = r.xcom("backup")["backup_id"]
    assert backup_id and r.xcom("backup")["backup"]["last_committed_batch"] == 2
    assert r.states["reset"] == "success" and r.xcom("reset")["dry_run"] is True
    assert json.loads(r.xcom("reset")["starting_offsets"]) == {env.topic: {"0": 60, "1": 60}}
    assert r.states["no_reset"] == "skipped"
    assert read_checkpoint(str(ck)).latest_committed.batch_id == 2   # the dry run moved nothing
    assert r.states["restore"] == "success", r.xcom("restore", "failure")
    assert r.xcom("restore")["restored"] is True and r.xcom("restore")["backup_id"] == backup_id
    assert r.rendered["restore"]["backup_id"] == backup_id


def test_the_safe_restart_stop_task_backs_up_what_the_stop_left_and_nothing_before_a_first_start(env):
    """Its backup looks for batches only when the stop saw no commit: a first start has nothing to back up."""
    from airflow_kafka_spark.operators.restart_window import SafeRestartStopOperator

    def stop_task() -> tuple[dict, dict]:
        with new_dag() as dag:
            SafeRestartStopOperator(task_id="stop", job="epsilon", backup_reason="test")
        r = run_inline(dag)
        assert r.states["stop"] == "success", r.xcom("stop", "failure")
        return r.xcom("stop"), r.xcom("stop", "backup")

    stopped, backup = stop_task()   # no checkpoint yet, no driver
    assert stopped["outcome"] == "NOT_RUNNING" and stopped.get("last_committed") is None, stopped
    assert backup == {"job": "epsilon", "backup_id": None, "skipped": "no checkpoint yet"}
    fake_checkpoint(env, "epsilon", batches=3)
    stopped, backup = stop_task()
    assert stopped["last_committed"] == 2, stopped
    assert backup["backup_id"] and backup["backup"]["last_committed_batch"] == 2, backup


def test_the_reset_after_the_backup_task_adopts_its_backup_unless_fresh_backup(env):
    """The safe restart's ``backup`` then ``reset``: the reset adopts the task's verified backup of the
    unchanged checkpoint (ops/backup/adopt.py); ``fresh_backup`` makes it take its own."""
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint
    from airflow_kafka_spark.operators.checkpoint import BackupCheckpointOperator, ResetCheckpointOperator
    from airflow_kafka_spark.ops.commands import restore_checkpoint
    from airflow_kafka_spark.ops.options import SinkFacts

    ck = fake_checkpoint(env, "delta", batches=3, rpb=20)
    LifecycleRecord.create("delta", str(ck)).save()
    positions = read_checkpoint(str(ck)).latest_committed.kafka_offsets
    for fresh in (False, True):
        with new_dag() as dag:
            BackupCheckpointOperator(task_id="backup", job="delta") >> ResetCheckpointOperator(
                task_id="reset", job="delta", mode="preserve", fresh_backup=str(fresh).lower())
        r = run_inline(dag)
        assert r.states == {"backup": "success", "reset": "success"}, r.xcom("reset", "failure")
        taken, reset = r.xcom("backup")["backup_id"], r.xcom("reset")
        assert reset["fresh_backup"] is fresh and reset["backup_adopted"] is (not fresh)
        assert (reset["backup_id"] == taken) is (not fresh), reset["backup_note"]
        # the reset's backup, adopted or not, gives the position back (and the next round a checkpoint)
        restored = restore_checkpoint(str(ck), str(env.data / "backups"), reset["backup_id"],
                                      {"bootstrap.servers": env.bootstrap}, job="delta",
                                      sink=SinkFacts(idempotent=True))
        assert restored.restored and read_checkpoint(str(ck)).latest_committed.kafka_offsets == positions


# --------------------------------------------------------------------------------------------------
# submit: the guards that keep a second driver off a checkpoint, and the command line
# --------------------------------------------------------------------------------------------------

def test_submit_refuses_a_live_recorded_driver_and_a_held_lease(env):
    from airflow_kafka_spark.operators.streaming import SubmitStreamingJobOperator

    ck = fake_checkpoint(env, "gamma")
    record_fake_submit(env, "gamma", os.getpid())   # this process: alive
    with new_dag() as dag:
        SubmitStreamingJobOperator(task_id="submit", job="gamma")
    r = run_inline(dag)
    assert r.states == {"submit": "failed"}
    assert r.xcom("submit", "failure").startswith("ALREADY_RUNNING: job gamma already has a live driver (local-pid "
                                                  f"{os.getpid()}")
    record = LifecycleRecord.load(str(ck))
    assert record.lease is None                       # released even though the submit refused
    assert record.driver.id == str(os.getpid())       # and nothing was replaced

    # Another holder's live lease (a submit in progress elsewhere) also refuses, before any check.
    record.driver = None
    record.save()
    record.acquire_lease("other_dag/run_1/submit", 300, run_id="run_1")
    try:
        r2 = run_inline(dag)
        assert r2.states == {"submit": "failed"}
        assert r2.xcom("submit", "failure").startswith("ALREADY_RUNNING: job gamma (checkpoint ")
        assert "leased by other_dag/run_1/submit" in r2.xcom("submit", "failure")
    finally:
        LifecycleRecord.load(str(ck)).release_lease("other_dag/run_1/submit")


def test_a_retried_submit_adopts_the_live_driver_its_killed_first_try_recorded(env):
    """The soak's finding: a worker SIGKILLed after the submit recorded its driver made Airflow's retry fail with
    ALREADY_RUNNING (and the safe restart roll back a good deploy). The same task of the same run adopts it;
    any other submitter is still refused."""
    from airflow_kafka_spark.errors import BlockReason, OperationBlocked
    from airflow_kafka_spark.registry.loader import load_registry
    from airflow_kafka_spark.runtime import start_stop
    from airflow_kafka_spark.runtime.submit import SparkTarget

    ck = fake_checkpoint(env, "gamma")
    mine = "soak_dag/run_1/submit"
    record_fake_submit(env, "gamma", os.getpid(), holder=mine)   # this process: alive
    spec = load_registry(env.registry).get("gamma")
    target = SparkTarget(master="local[2]", deploy_mode=None, spark_binary="spark-submit",
                         build_command=lambda kwargs, app: ["spark-submit", app])
    kwargs = {"kafka_config": {"bootstrap.servers": env.bootstrap}, "target": target, "log": logging.getLogger("test")}

    def by(holder: str) -> start_stop.Submitter:
        return start_stop.Submitter(actor="test", holder=holder, run_id="run_1")
    out = start_stop.submit_job(spec, by=by(mine), **kwargs)
    assert out["adopted"] is True and out["driver"]["id"] == str(os.getpid())
    record = LifecycleRecord.load(str(ck))
    assert record.lease is None and record.driver.id == str(os.getpid())
    with pytest.raises(OperationBlocked, match="job gamma already has a live driver") as refused:
        start_stop.submit_job(spec, by=by("soak_dag/run_2/submit"), **kwargs)
    assert refused.value.reason is BlockReason.ALREADY_RUNNING and refused.value.exit_code == 3


def test_a_retried_submit_adopts_the_driver_its_killed_first_try_started_but_never_recorded(env):
    """The soak's second finding: a submit killed between spark-submit's fork and the record's save left a
    driver no record named, and the retry started a second one on the same checkpoint (Spark then failed with
    CONCURRENT_STREAM_LOG_UPDATE). The driver's environment names its checkpoint and submitter: the same task's
    retry adopts it, anyone else is refused."""
    from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
    from airflow_kafka_spark.registry.loader import load_registry
    from airflow_kafka_spark.runtime import drivers, start_stop
    from airflow_kafka_spark.runtime.submit import SparkTarget

    ck = fake_checkpoint(env, "beta")
    spec = load_registry(env.registry).get("beta")
    mine = "soak_dag/run_1/submit"

    def orphan(submitter: str) -> subprocess.Popen:   # what the killed first try left running
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                                env={**os.environ, drivers.CHECKPOINT_ENV: str(ck), drivers.SUBMITTER_ENV: submitter})

    target = SparkTarget(master="local[2]", deploy_mode=None, spark_binary="spark-submit",
                         build_command=lambda kwargs, app: ["/bin/false", app])   # a second start would fail
    kwargs = {"kafka_config": {"bootstrap.servers": env.bootstrap}, "target": target, "log": logging.getLogger("test")}

    def by(holder: str) -> start_stop.Submitter:
        return start_stop.Submitter(actor="test", holder=holder, run_id="run_1")
    first = orphan(mine)
    try:
        wait_until(lambda: drivers.local_unrecorded(str(ck)), timeout=10, what="the orphan's environment")
        out = start_stop.submit_job(spec, by=by(mine), **kwargs)
        assert out["driver"]["id"] == str(first.pid)
        assert LifecycleRecord.load(str(ck)).driver.id == str(first.pid)    # recorded now: stop and gate see it
    finally:
        first.kill()
        first.wait()
    # A stop killed while it waited leaves its marker: the next driver must not read it and stop after one batch.
    LifecycleRecord.load(str(ck)).save()
    Path(spec.stop_marker).write_text("stop requested by a killed stop task\n")
    assert start_stop.stop_job(spec, target=lambda: target, actor="test", log=logging.getLogger("test"),
                               timeout_s=5)["outcome"] == "NOT_RUNNING"
    assert not Path(spec.stop_marker).exists()
    Path(spec.stop_marker).write_text("stop requested by a killed stop task\n")
    with pytest.raises(UserError, match=r"submit failed: the driver .* exited before Spark started"):
        start_stop.submit_job(spec, by=by("soak_dag/run_3/submit"), **kwargs)   # starts /bin/false: a failed submit
    assert not Path(spec.stop_marker).exists()
    stray = orphan("other_dag/run_9/submit")
    try:
        wait_until(lambda: drivers.local_unrecorded(str(ck)), timeout=10, what="the stray's environment")
        with pytest.raises(OperationBlocked, match=f"job beta: process group {stray.pid} ") as refused:
            start_stop.submit_job(spec, by=by(mine), **kwargs)
        assert refused.value.reason is BlockReason.ALREADY_RUNNING
    finally:
        stray.kill()
        stray.wait()


def test_submit_dry_run_builds_the_command_with_the_spark_provider_hook(env):
    from airflow_kafka_spark.operators.streaming import SubmitStreamingJobOperator

    with new_dag() as dag:
        SubmitStreamingJobOperator(task_id="submit", job="delta", dry_run=True)
    r = run_inline(dag)
    assert r.states == {"submit": "success"}
    out = r.xcom("submit")
    assert out["dry_run"] is True and out["master"] == "local[2]" and out["detach"] == "local-process"
    cmd = out["command"]
    for part in ("--master local[2]", "--conf spark.ui.enabled=false", "--jars ", "spark-sql-kafka-0-10",
                 "--name aks-delta", "reference_job.py", f"--topics {env.topic}",
                 f"--bootstrap-servers {env.bootstrap}", f"--checkpoint {env.checkpoint('delta')}",
                 f"--stop-marker {env.checkpoint('delta')}.stop", "--starting-offsets earliest"):
        assert part in cmd, part
    assert "sasl" not in cmd and SECRET not in cmd
    assert_no_secret(r)


def test_cluster_modes_build_detached_commands_and_parse_driver_ids(monkeypatch):
    """No YARN or standalone cluster here: the command lines and the id parsing are what can be checked."""
    from airflow_kafka_spark.airflow_glue.spark import spark_hook
    from airflow_kafka_spark.registry.model import JobSpec

    spec = JobSpec(name="orders", application="/apps/job.py", topics=("orders",), checkpoint="hdfs://nn/ck/orders",
                   backup_root="hdfs://nn/backups", stop_marker="hdfs://nn/ck/orders.stop",
                   spark_conf={"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0"},
                   spark_conn_id="spark_yarn", deploy_mode="cluster")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps({"conn_type": "spark", "host": "yarn",
                                                              "extra": {"queue": "streaming"}}))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps({"conn_type": "spark", "host": "spark://m",
                                                                    "port": 7077}))
    for conn_id, master, mode, conf in (
            ("spark_yarn", "yarn", detach.DETACH_YARN, "spark.yarn.submit.waitAppCompletion=false"),
            ("spark_standalone", "spark://m:7077", detach.DETACH_STANDALONE,
             "spark.standalone.submit.waitAppCompletion=false")):
        s = dataclasses.replace(spec, spark_conn_id=conn_id)
        probe = spark_hook(s, deploy_mode="cluster")
        assert probe._connection["master"] == master
        assert detach.detach_mode(master, "cluster") == mode
        assert not connector.needs_local_connector_jars(s, master)
        args = submit.job_arguments(s, bootstrap_servers="b1:9092", kafka_options=["kafka.security.protocol=SSL"])
        cmd = spark_hook(s, **submit.hook_kwargs(s, args=args, mode=mode))._build_spark_submit_command(s.application)
        line = " ".join(cmd)
        assert f"--master {master}" in line and "--deploy-mode cluster" in line and f"--conf {conf}" in line
        assert "--kafka-option kafka.security.protocol=SSL" in line and "spark.ui.enabled" not in line
        assert ("--queue streaming" in line) == (mode == detach.DETACH_YARN)

    assert detach.detach_mode("local[*]", None) == detach.DETACH_LOCAL
    assert detach.detach_mode("yarn", "client") == detach.DETACH_LOCAL
    assert detach.detach_mode("k8s://https://api:6443", "cluster") == detach.DETACH_K8S
    with pytest.raises(Exception, match="needs a cluster manager"):
        detach.detach_mode("local[2]", "cluster")
    with pytest.raises(Exception, match="keeps spark-submit attached"):
        submit.hook_kwargs(dataclasses.replace(spec, spark_conf={"spark.yarn.submit.waitAppCompletion": "true"}),
                           args=[], mode=detach.DETACH_YARN)

    yarn_out = "INFO Client: Submitting application application_1718000000000_0042 to ResourceManager\n"
    k8s_out = ("Deployed Spark application orders with application ID spark-a1b2 and submission ID "
               "streaming:orders-3f9a-driver into Kubernetes\n")
    k8s_old = "pod name: orders-3f9a-driver\n\t namespace: streaming\n"
    standalone_out = "Driver successfully submitted as driver-20260131120000-0007\n"
    assert detach.parse_driver_id(detach.DETACH_YARN, yarn_out) == "application_1718000000000_0042"
    assert detach.parse_driver_id(detach.DETACH_K8S, k8s_out) == "streaming:orders-3f9a-driver"
    assert detach.parse_driver_id(detach.DETACH_K8S, k8s_old) == "streaming:orders-3f9a-driver"
    assert detach.parse_driver_id(detach.DETACH_STANDALONE, standalone_out) == "driver-20260131120000-0007"
    assert detach.parse_driver_id(detach.DETACH_YARN, "nothing") is None
    # Each cluster submit is tagged so the cluster manager can name its driver (status/kill: REST, no CLI): a tag of
    # the submitting task (a retry asks for what its killed first try started) and one of the checkpoint.
    tag, ck_tag = detach.submit_tag(spec, "dag/run_1/submit"), detach.checkpoint_tag(spec.checkpoint)
    assert tag == detach.submit_tag(spec, "dag/run_1/submit") != detach.submit_tag(spec, "dag/run_2/submit")
    assert tag != detach.submit_tag(dataclasses.replace(spec, checkpoint="hdfs://nn/ck/other"), "dag/run_1/submit")
    assert ck_tag == detach.checkpoint_tag(spec.checkpoint + "/") != detach.checkpoint_tag("hdfs://nn/ck/other")
    tagged = submit.hook_kwargs(dataclasses.replace(spec, spark_conf={"spark.yarn.tags": "team-a"}), args=[],
                                mode=detach.DETACH_YARN, tag=tag, checkpoint_tag=ck_tag)
    assert tagged["conf"]["spark.yarn.tags"] == f"team-a,{tag},{ck_tag}" and tag == tag.lower()
    k8s = submit.hook_kwargs(spec, args=[], mode=detach.DETACH_K8S, tag=tag, checkpoint_tag=ck_tag)
    assert k8s["conf"][f"spark.kubernetes.driver.label.{submit.K8S_TAG_LABEL}"] == tag
    assert k8s["conf"][f"spark.kubernetes.driver.label.{submit.K8S_CHECKPOINT_LABEL}"] == ck_tag


def test_kafka_options_for_the_job_never_carry_secrets():
    config = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
              "sasl.username": "svc", "sasl.password": SECRET, "sasl.jaas.config": f"password=\"{SECRET}\";"}
    opts = submit.kafka_job_options(config)
    assert opts == ["kafka.security.protocol=SASL_SSL", "kafka.sasl.mechanism=PLAIN"]
    assert submit.kafka_job_options({"bootstrap.servers": "b", "security.protocol": "PLAINTEXT"}) == []
    env = submit.driver_env(["spark-submit"], "yarn", base={"PATH": "/bin", "AIRFLOW_CONN_KAFKA_DEFAULT": SECRET,
                                                            "AIRFLOW__CORE__FERNET_KEY": "k", "HOME": "/h"})
    assert env == {"PATH": "/bin", "HOME": "/h"}


# --------------------------------------------------------------------------------------------------
# health gate: probe rules, trigger serialisation, deferrable and poke sensor in a DAG
# --------------------------------------------------------------------------------------------------

def test_health_probe_waits_passes_and_fails(env):
    from airflow_kafka_spark.runtime.health import FAILED, HEALTHY, WAITING, HealthLook, check_health

    ck = fake_checkpoint(env, "delta", batches=4, rpb=10)
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint

    qid = read_checkpoint(str(ck)).query_id

    def probe(**kw):
        args = {"checkpoint": str(ck), "topics": [env.topic], "min_batches": 2, "baseline_batch": 1,
                "kafka_config": lambda: {"bootstrap.servers": env.bootstrap}, "baseline_query_id": qid,
                "alive": lambda: True}
        return check_health(HealthLook(**{**args, **kw}))

    healthy = probe()
    assert healthy.state == HEALTHY and healthy.new_batches == 2 and healthy.last_committed == 3, healthy.reason
    assert healthy.samples and healthy.lag_records is not None
    assert probe(baseline_batch=2).state == WAITING                  # only batch 3 is new
    assert probe(baseline_batch=3, baseline_query_id="another-query").new_batches == 4   # a reset: all new
    dead = probe(alive=lambda: False, log_tail=lambda: "Traceback: boom")
    assert dead.state == FAILED and "driver exited" in dead.reason and "boom" in dead.reason


def test_health_probe_passes_a_quiet_caught_up_job_as_idle_only_after_the_idle_window(env):
    """Spark plans no batch on a quiet topic: once the driver has lived ``idle_pass_s`` with its position at
    the log end and no batch in flight, the gate passes as idle (and says the new code is unproven)."""
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint
    from airflow_kafka_spark.runtime.health import HEALTHY, WAITING, HealthLook, check_health
    from tests.support.kafka import end_offsets

    ck = fake_checkpoint(env, "idle-probe", batches=2, rpb=5)
    ends = end_offsets(env.bootstrap, env.topic, 2)
    qid = read_checkpoint(str(ck)).query_id
    now = int(time.time() * 1000)

    def probe(**kw):
        args = {"checkpoint": str(ck), "topics": [env.topic], "min_batches": 2, "baseline_batch": 1,
                "kafka_config": lambda: {"bootstrap.servers": env.bootstrap}, "baseline_query_id": qid,
                "alive": lambda: True, "idle_pass_s": 30.0, "submitted_at_ms": now - 60_000}
        return check_health(HealthLook(**{**args, **kw}))

    behind = probe()                         # committed 10 per partition, the topic holds far more
    assert behind.state == WAITING and not behind.idle
    assert behind.lag_records == sum(e - 10 for e in ends.values()), behind.reason
    line = json.dumps({env.topic: {"0": ends[0], "1": ends[1]}}, separators=(",", ":"))
    (ck / "offsets" / "2").write_bytes(offsets_file([line], batch_timestamp_ms=now))
    in_flight = probe(baseline_batch=0)      # batch 2 planned, not committed: never idle
    assert in_flight.state == WAITING and "in flight" in in_flight.reason
    (ck / "commits" / "2").write_bytes(commit_file())
    # caught up, 1 new batch of the 2 required: passes only once the driver has lived idle_pass_s
    assert probe(submitted_at_ms=now - 5_000).state == WAITING
    assert probe(idle_pass_s=None).state == WAITING
    idle = probe()
    assert idle.state == HEALTHY and idle.idle and idle.lag_records == 0 and idle.new_batches == 1, idle.reason
    assert "not proven" in idle.reason


def test_health_trigger_serializes_round_trip_and_reports_a_dead_driver(env):
    from airflow_kafka_spark.triggers.health import StreamingHealthTrigger

    ck = fake_checkpoint(env, "delta", batches=2)
    trigger = StreamingHealthTrigger(
        checkpoint=str(ck), topics=[env.topic], kafka_conn_id="kafka_default", min_batches=1, baseline_batch=1,
        baseline_query_id=None, driver={"kind": "local-pid", "id": str(dead_pid()), "host": socket.gethostname()},
        deadline_epoch_s=time.time() + 30, poll_interval_s=0.5)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kafka_spark.triggers.health.StreamingHealthTrigger"
    json.dumps(kwargs)                       # plain JSON: serde-able, and ...
    assert SECRET not in json.dumps(kwargs)  # ... no Kafka config in it
    again = StreamingHealthTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)

    async def first_event():
        return await again.run().__anext__()

    started = time.perf_counter()
    event = asyncio.run(first_event())
    assert event.payload["state"] == "failed" and "driver exited" in event.payload["reason"]
    # not at once: the worker has just looked (an event fired at once races Airflow, apache/airflow#72716)
    assert time.perf_counter() - started >= 0.5


def test_the_gate_started_in_the_triggerer_takes_its_first_look_there(env):
    """``start_from_trigger``: the scheduler's copy of the task (the DAG serialised and read back) carries the
    trigger's kwargs as plain values, a dry-run flag that is another task's XCom as a reference to it; the
    trigger built from them as the triggerer builds it reads the registry and the record at once and looks
    at the job one poll interval later (the new driver is starting): a dead driver fails at that look, an
    unknown job is refused with the registry's line at once, a dry run ends without a look. The real
    scheduler and triggerer run it in ``tests/airflow/test_scheduled_run.py``."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.serialization.decoders import smart_decode_trigger_kwargs
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_kafka_spark.sensors.health import StreamingHealthSensor
    from airflow_kafka_spark.triggers.health import StreamingHealthStartTrigger

    fake_checkpoint(env, "beta", batches=2)
    record_fake_submit(env, "beta", dead_pid())
    with new_dag() as dag:
        plan = EmptyOperator(task_id="plan")
        StreamingHealthSensor(task_id="gate", job="beta", dry_run=plan.output["dry_run"], deferrable=True,
                              start_from_trigger=True, poke_interval=1.5, gate_timeout_s=60)
    task = DagSerialization.from_dict(DagSerialization.to_dict(dag)).get_task("gate")
    args = task.start_trigger_args
    assert task.start_from_trigger and args.next_method == "execute_complete"
    assert args.trigger_cls == "airflow_kafka_spark.triggers.health.StreamingHealthStartTrigger"
    kwargs = smart_decode_trigger_kwargs(args.trigger_kwargs)
    assert (kwargs["job"], kwargs["dry_run"], kwargs["dry_run_task"], kwargs["dry_run_key"]) == (
        "beta", None, "plan", "dry_run")
    assert SECRET not in json.dumps(kwargs)

    def first_event(**change: Any) -> dict[str, Any]:
        # no task instance outside the triggerer: the dry-run flag is given, not pulled
        trigger = StreamingHealthStartTrigger(**{**kwargs, "dry_run_task": None, **change})
        assert trigger.serialize()[1] == {**kwargs, "dry_run_task": None, **change}

        async def first() -> Any:
            return await trigger.run().__anext__()

        return asyncio.run(first()).payload

    started = time.perf_counter()
    dead = first_event()
    assert dead["state"] == "failed" and "driver exited" in dead["reason"], dead
    assert dead["first_look"] == "triggerer"
    assert 1.5 <= time.perf_counter() - started < 10.0     # at the look one poll interval after the start
    started = time.perf_counter()
    refused = first_event(job="no-such-job")
    assert time.perf_counter() - started < 1.5
    assert refused["opening"] == "refused" and "no-such-job" in refused["message"], refused
    dry = first_event(dry_run="True")
    assert (dry["opening"], dry["job"]) == ("dry_run", "beta"), dry
    assert first_event(dry_run="maybe")["message"] == "dry_run must be true or false, got 'maybe'"


def test_a_gate_in_a_dag_with_a_param_without_default_starts_on_a_worker():
    """Airflow 3.3.2's triggerer builds a ``start_from_trigger`` task's template context from the serialized
    DAG (``process_params``, shown here as the triggerer calls it); a param with no default fails to resolve
    there even when the run's conf gives it, and the trigger runner process dies with every deferred task
    of the deployment. So the gate starts from the triggerer only in a DAG whose params all have a
    default; otherwise on a worker, with a warning naming the param. The safe-restart DAG's ``job`` has
    the default None, which its schema refuses (tests/airflow/test_rest_trigger.py: a conf without a job
    is still refused)."""
    from airflow.sdk import Param
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.exceptions import ParamValidationError
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    def gate_in(job: Param) -> tuple[Any, Any]:
        with new_dag(params={"job": job, "mode": Param("auto", type="string")}) as dag:
            gate = StreamingHealthSensor(task_id="gate", job="{{ params.job }}", deferrable=True,
                                         start_from_trigger=True)
        back = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        return gate, lambda: process_params(back, back.get_task("gate"), {"job": "orders"}, suppress_exception=False)

    with pytest.warns(UserWarning, match=r"param\(s\) job have no default"):
        gate, params = gate_in(Param(type="string", enum=["orders"]))
    assert not gate.start_from_trigger
    with pytest.raises(ParamValidationError, match="No value passed"):
        params()                                           # what kills Airflow 3.3.2's trigger runner
    gate, params = gate_in(Param(None, type="string", enum=["orders"]))
    assert gate.start_from_trigger
    assert params() == {"job": "orders", "mode": "auto"}


def test_health_sensor_defers_then_passes_promotes_and_consumes_starting_offsets(env):
    """The deferrable sensor (trigger run inline by dag.test) and the poke sensor, in real Airflow."""
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    ck = fake_checkpoint(env, "alpha", batches=3, rpb=5)
    record = record_fake_submit(env, "alpha", os.getpid(), committed_before=2)
    record.set_next_starting_offsets(json.dumps({env.topic: {"0": 0, "1": 0}}))
    record.save()
    with new_dag() as dag:
        deferred = StreamingHealthSensor(task_id="deferred", job="alpha", min_batches=1, deferrable=True,
                                         poke_interval=0.5, gate_timeout_s=60)
        poked = StreamingHealthSensor(task_id="poked", job="alpha", min_batches="{{ 1 }}", deferrable=False,
                                      poke_interval=0.5, gate_timeout_s=60, promote=False)
        deferred >> poked
    timer = threading.Timer(3.0, add_batch, args=(ck, env.topic, 3, 20))   # the "job" commits batch 3 later
    timer.start()
    try:
        r = run_inline(dag)
    finally:
        timer.cancel()
    assert r.states == {"deferred": "success", "poked": "success"}, r.xcoms
    gate = r.xcom("deferred")
    assert gate["state"] == "healthy" and gate["new_batches"] == 1 and gate["last_committed"] == 3
    assert gate["waited_s"] > 0          # it did wait in the trigger, not on the first probe
    assert gate["promoted"] is True and gate["compatibility_version"] == "7"
    assert gate["starting_offsets_consumed"] is not None
    rec = LifecycleRecord.load(str(ck))
    assert rec.next_starting_offsets is None
    assert app_versions.last_good_app(rec)["compatibility_version"] == "7" and rec.compatibility_version == "7"
    assert [e["event"] for e in rec.history].count("health_gate_passed") == 2


def test_a_broker_down_at_the_gates_first_probe_is_waited_for_not_a_failure(env, monkeypatch, caplog):
    """A broker restarted as the gate starts: the first probes fail to reach it, the gate waits and passes.

    Before, the sensor's own first probe raised "not reachable" and the task failed: the DAG then rolled
    back a healthy deploy. The trigger already waited; both now go through ``check_or_wait``. The broker
    stays away longer than one probe waits for it (10-20 s), so the first probe does fail.
    """
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    fake_checkpoint(env, "gamma", batches=3, rpb=5)
    record_fake_submit(env, "gamma", os.getpid(), committed_before=1)
    with LateProxy(env.bootstrap, delay_s=25.0) as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(f"127.0.0.1:{proxy.port}"))
        with new_dag() as dag:
            StreamingHealthSensor(task_id="gate", job="gamma", min_batches=1, deferrable=True,
                                  poke_interval=1.0, gate_timeout_s=60, promote=False)
        r = run_inline(dag)
    assert r.states == {"gate": "success"}, r.xcoms
    gate = r.xcom("gate")
    assert gate["state"] == "healthy" and gate["new_batches"] == 1, gate
    assert r.seconds >= 24, r.seconds   # it waited for the broker (one probe gives up after 10-20 s)


def test_health_sensor_fails_at_once_when_the_driver_is_gone(env):
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    fake_checkpoint(env, "beta", batches=2)
    record_fake_submit(env, "beta", dead_pid())
    with new_dag() as dag:
        StreamingHealthSensor(task_id="gate", job="beta", deferrable=True, poke_interval=0.5, gate_timeout_s=60)
    started = time.perf_counter()
    r = run_inline(dag)
    assert r.states == {"gate": "failed"}
    assert "health gate of job beta failed: the driver exited after 0 new committed batch(es)" in r.xcom(
        "gate", "failure")
    assert time.perf_counter() - started < 30
    (gate,) = [e for e in LifecycleRecord.load(str(env.checkpoint("beta"))).history
               if e["event"] == "health_gate_failed"]
    assert gate["details"]["state"] == "failed" and "driver exited" in gate["details"]["reason"]
    assert gate["actor"].endswith(f"/{r.run_id}/gate")


def test_a_gate_whose_record_cannot_be_written_still_fails_with_its_own_reason(env):
    """The failure XCom (what the audit and the rollback read) comes first; a broken record is only logged."""
    from airflow_kafka_spark.lifecycle.model import record_location
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    fake_checkpoint(env, "beta", batches=2)
    record_fake_submit(env, "beta", dead_pid())
    record = Path(record_location(str(env.checkpoint("beta"))))
    before = record.read_bytes()
    lock = record.parent / (record.name + ".lock")
    lock.mkdir()   # the lock cannot be taken: saving the record fails
    try:
        with new_dag() as dag:
            StreamingHealthSensor(task_id="gate", job="beta", deferrable=False, poke_interval=0.5, gate_timeout_s=60)
        r = run_inline(dag)
    finally:
        lock.rmdir()   # the env is shared by the module's tests
    assert r.states == {"gate": "failed"}
    failure = r.xcom("gate", "failure")
    assert failure.startswith("health gate of job beta failed: the driver exited"), failure
    assert record.read_bytes() == before


def test_the_audit_names_a_failed_gate_from_the_record_when_its_failure_xcom_never_arrived(env):
    """A worker killed after writing ``health_gate_failed``: the run's audit still says why (only this run's entry)."""
    from airflow_kafka_spark.airflow_glue.jobs import recorded_gate_failure
    from airflow_kafka_spark.lifecycle.events import LifecycleEvent
    from airflow_kafka_spark.registry.loader import load_registry

    fake_checkpoint(env, "beta", batches=2)
    rec = record_fake_submit(env, "beta", dead_pid())
    for run, reason in (("streaming_safe_restart/run-1", "driver exited: FAILED"), ("other_dag/run-12", "later")):
        rec.add_event(LifecycleEvent.HEALTH_GATE_FAILED, actor=f"alice via {run}/health_gate", state="failed",
                      reason=reason)
    rec.save()
    spec = load_registry(env.registry).get("beta")
    found = recorded_gate_failure(spec, "streaming_safe_restart/run-1")
    assert found == "health gate failed: driver exited: FAILED"
    assert recorded_gate_failure(spec, "streaming_safe_restart/run-2") is None


def test_the_audit_asks_the_driver_when_a_failed_gate_left_no_word_at_all(env, tmp_path):
    """A gate failed by Airflow before its code ran (no XCom, no record entry): the submitted driver's
    log tail says why; a driver that cannot be asked leaves the reason empty rather than failing the audit."""
    from airflow_kafka_spark.operators.safe_restart import _gate_failure_from_driver
    from airflow_kafka_spark.registry.loader import load_registry

    fake_checkpoint(env, "beta", batches=2)
    spec = load_registry(env.registry).get("beta")
    log = tmp_path / "driver.log"
    log.write_text("starting\nreference_job: --fail-at-start given, exiting 1\n")
    driver = {"kind": "local-pid", "id": str(dead_pid()), "host": socket.gethostname()}
    found = _gate_failure_from_driver(spec, {"driver": driver, "log_path": str(log)}, logging.getLogger("t"))
    assert found is not None and found.startswith("health gate failed without reporting why"), found
    assert "--fail-at-start" in found and driver["id"] in found, found
    assert _gate_failure_from_driver(spec, {"driver": {**driver, "kind": "no-such-kind"}},
                                     logging.getLogger("t")) is None
    assert _gate_failure_from_driver(spec, None, logging.getLogger("t")) is None


def test_a_gate_failed_before_its_code_ran_is_retried_and_looks_again(env):
    """Airflow failing the deferred gate around its resume (apache/airflow#72716) left no verdict: the retry
    judges the job, here healthy, and promotes it instead of letting the DAG roll back a good deploy."""
    from airflow.sdk.exceptions import AirflowException

    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    class FailedByAirflowFirst(StreamingHealthSensor):
        def execute(self, context: Any) -> Any:
            if context["ti"].try_number == 1:   # as the scheduler's "state mismatch" does: no gate code runs
                raise AirflowException("Executor reported that the task instance finished with state success, "
                                       "but the task instance's state attribute is running")
            return super().execute(context)

    ck = fake_checkpoint(env, "gamma", batches=3, rpb=5)
    record_fake_submit(env, "gamma", os.getpid(), committed_before=1)
    with new_dag() as dag:
        FailedByAirflowFirst(task_id="gate", job="gamma", min_batches=1, deferrable=True, poke_interval=0.5,
                             gate_timeout_s=60, retries=1, retry_delay=0)
    r = run_inline(dag)
    assert (r.states, r.tries) == ({"gate": "success"}, {"gate": 2}), r.xcoms
    gate = r.xcom("gate")
    assert gate["state"] == "healthy" and gate["promoted"] is True, gate
    history = LifecycleRecord.load(str(ck)).history
    assert not [e for e in history if e["event"] == "health_gate_failed" and f"/{r.run_id}/" in e["actor"]]


def test_a_retried_gate_repeats_the_verdict_an_earlier_try_recorded(env):
    """A gate's own failure is final (no retry); but a try that judged (``health_gate_failed`` for this run)
    and was then failed by Airflow (its heartbeat refused after a state mismatch) is retried: the retry
    must not judge again. It fails at once with the recorded reason and writes no second entry."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from airflow_kafka_spark.sensors.health import StreamingHealthSensor

    class FailedByAirflowAfterItJudged(StreamingHealthSensor):
        def execute(self, context: Any) -> Any:
            if context["ti"].try_number > 1:
                return super().execute(context)
            try:
                return super().execute(context)
            except AirflowFailException:   # judged and recorded; then the task was failed from outside
                raise AirflowException("Server returned error: the task instance is no longer running") from None

    ck = fake_checkpoint(env, "beta", batches=2)
    record_fake_submit(env, "beta", dead_pid())
    with new_dag() as dag:
        FailedByAirflowAfterItJudged(task_id="gate", job="beta", deferrable=True, poke_interval=0.5,
                                     gate_timeout_s=60, retries=1, retry_delay=0)
    r = run_inline(dag)
    assert (r.states, r.tries) == ({"gate": "failed"}, {"gate": 2}), r.xcoms
    failure = r.xcom("gate", "failure")
    assert failure.startswith("health gate of job beta failed in an earlier try of this run: health gate failed: "
                              "the driver exited after 0 new committed batch(es)"), failure
    entries = [e for e in LifecycleRecord.load(str(ck)).history
               if e["event"] == "health_gate_failed" and f"/{r.run_id}/" in e["actor"]]
    assert len(entries) == 1, entries


# --------------------------------------------------------------------------------------------------
# the safe-restart rules that need no run
# --------------------------------------------------------------------------------------------------

def test_safe_restart_modes_decide_the_action():
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.operators.safe_restart import decide, outcome_of

    assert decide("auto", registry_compat="1", recorded_compat=None)["action"] == "keep"
    assert decide("auto", registry_compat="1", recorded_compat="1")["action"] == "keep"
    bumped = decide("auto", registry_compat="2", recorded_compat="1")
    assert (bumped["action"], bumped["reset_mode"], bumped["tolerate_block"]) == ("reset", "preserve", True)
    assert decide("keep", registry_compat="2", recorded_compat="1")["action"] == "keep"
    assert decide("reset-latest", registry_compat="1", recorded_compat="1")["reset_mode"] == "latest"
    when = decide("reset-to-datetime", registry_compat="1", recorded_compat=None, when="2026-01-31T12:00:00Z")
    assert (when["reset_mode"], when["to_datetime"]) == ("to-datetime", "2026-01-31T12:00:00Z")
    restore = decide("restore", registry_compat="1", recorded_compat="1", backup_id="20260131T120000000Z-b4-aa")
    assert (restore["action"], restore["restore_backup_id"]) == ("restore", "20260131T120000000Z-b4-aa")
    for bad in (dict(mode="restore"), dict(mode="restore", backup_id="../../etc"),
                dict(mode="reset-to-datetime"), dict(mode="reset-to-datetime", when="yesterday"), dict(mode="nuke")):
        mode = bad.pop("mode")
        with pytest.raises(UserError):
            decide(mode, registry_compat="1", recorded_compat="1", **bad)

    plan = {"dry_run": False}
    ok = {"plan": "success", "validate_before": "success", "stop": "success", "health_gate": "success"}
    assert outcome_of(plan, ok) == "SUCCESS"
    assert outcome_of(None, {"plan": "failed"}) == "REFUSED"
    assert outcome_of(plan, {**ok, "validate_before": "failed"}) == "BLOCKED"
    assert outcome_of(plan, {**ok, "health_gate": "failed", "rollback": "success"}) == "ROLLED_BACK"
    assert outcome_of(plan, {**ok, "submit": "failed", "rollback": "failed"}) == "ROLLBACK_FAILED"
    assert outcome_of({"dry_run": True}, ok) == "DRY_RUN"


# --------------------------------------------------------------------------------------------------
# hostile or mistaken arguments: one line each, nothing changed
# --------------------------------------------------------------------------------------------------

def test_bad_arguments_fail_with_one_line_and_change_nothing(env):
    from airflow_kafka_spark.operators.checkpoint import ResetCheckpointOperator, RestoreCheckpointOperator
    from airflow_kafka_spark.sensors.health import StreamingHealthSensor
    from tests.airflow.test_safe_restart_dag import tree

    ck = fake_checkpoint(env, "gamma", batches=3, rpb=5)
    record_fake_submit(env, "gamma", os.getpid())
    before = {**tree(ck), **tree(env.data / "backups"), "record": (ck.parent / "gamma.lifecycle.json").read_text()}
    with new_dag() as dag:
        ResetCheckpointOperator(task_id="mode", job="gamma", mode="nuke")
        ResetCheckpointOperator(task_id="shift", job="gamma", mode="shift-by", shift_by="ten")
        ResetCheckpointOperator(task_id="offsets", job="gamma", mode="to-offsets", to_offsets="{not json")
        ResetCheckpointOperator(task_id="flag", job="gamma", mode="earliest", dry_run="maybe")
        ResetCheckpointOperator(task_id="when", job="gamma", mode="to-datetime", to_datetime="yesterday-ish")
        RestoreCheckpointOperator(task_id="backup_id", job="gamma", backup_id="../../etc/passwd")
        StreamingHealthSensor(task_id="batches", job="gamma", min_batches="many", poke_interval=0.5)
        StreamingHealthSensor(task_id="zero", job="gamma", min_batches="0", poke_interval=0.5)
    r = run_inline(dag)
    assert set(r.states.values()) == {"failed"}, r.states
    expected = {"mode": "reset mode 'nuke' is not one of", "shift": "shift_by must be a whole number",
                "offsets": "to_offsets is not JSON", "flag": "dry_run must be true or false",
                "when": "", "backup_id": "", "batches": "min_batches must be a whole number",
                "zero": "min_batches must be at least 1"}
    for task, start in expected.items():
        line = r.xcom(task, "failure")
        assert line and "\n" not in line and "Traceback" not in line, (task, line)
        assert line.startswith(start), (task, line)
    assert "yesterday-ish" in r.xcom("when", "failure") and "../../etc/passwd" in r.xcom("backup_id", "failure")
    after = {**tree(ck), **tree(env.data / "backups"), "record": (ck.parent / "gamma.lifecycle.json").read_text()}
    assert after == before


def test_a_retried_safe_restart_submit_reports_what_its_first_try_reset_from_the_record():
    """Airflow clears a task's XComs when it retries it: a ``submit`` whose first try reset the checkpoint and
    started the driver (then was killed) reports that reset from the lifecycle record's event by the same task,
    and no other task's."""
    from types import SimpleNamespace

    from airflow_kafka_spark.lifecycle.events import LifecycleEvent
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.operators.restart_window import RESET_KEY, RESTORE_KEY, SafeRestartSubmitOperator

    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(dag_id="streaming_safe_restart", run_id="run_1", task_id="submit",
                         xcom_push=lambda key, value: pushed.__setitem__(key, value))
    record = LifecycleRecord.create("shop", "/nowhere")
    record.add_event(LifecycleEvent.CHECKPOINT_RESET, actor="ann via streaming_safe_restart/run_0/submit",
                     operation_id="op-old", mode="latest")                              # another run's reset
    record.add_event(LifecycleEvent.CHECKPOINT_RESET, actor="ann via streaming_safe_restart/run_1/submit",
                     operation_id="op-1", mode="preserve", starting_offsets='{"t":{"0":5}}')
    op = SafeRestartSubmitOperator(task_id="submit", job="shop", mode="preserve")
    op._report_earlier_change(record, {"ti": ti})
    assert set(pushed) == {RESET_KEY} and RESTORE_KEY not in pushed
    assert pushed[RESET_KEY]["earlier_try"] is True and pushed[RESET_KEY]["operation_id"] == "op-1"
    assert pushed[RESET_KEY]["starting_offsets"] == '{"t":{"0":5}}'


def test_a_safe_restart_submit_given_both_a_reset_and_a_restore_refuses_in_one_line_and_changes_nothing(env):
    """The plan gives at most one; a DAG of one's own that wires both gets one line naming both, before any step."""
    from types import SimpleNamespace

    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.operators.restart_window import SafeRestartSubmitOperator

    ck = fake_checkpoint(env, "beta")
    before = sorted((p.relative_to(ck), p.read_bytes()) for p in ck.rglob("*") if p.is_file())
    pushed: list[str] = []
    ti = SimpleNamespace(xcom_push=lambda key, value: pushed.append(key))
    op = SafeRestartSubmitOperator(task_id="submit", job="beta", mode="preserve", backup_id="20260131T120000000Z-b4")
    with pytest.raises(UserError) as refused:
        op._change(SimpleNamespace(name="beta"), {"ti": ti})
    assert str(refused.value) == ("job beta: a run resets or restores, not both (mode 'preserve', backup "
                                  "'20260131T120000000Z-b4'); nothing was changed")
    assert "\n" not in str(refused.value) and pushed == []
    assert sorted((p.relative_to(ck), p.read_bytes()) for p in ck.rglob("*") if p.is_file()) == before
