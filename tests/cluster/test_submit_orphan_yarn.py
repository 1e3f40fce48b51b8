"""A submit killed while its cluster-mode spark-submit runs: its retry adopts what it left, no one starts a second.

Found by the YARN soak in CI (twice, seed 1601): the ``submit`` task was SIGKILLed 0.5 s into its
spark-submit; the orphaned client still got its application accepted, nothing recorded it, and
Airflow's retry submitted a second application on the same checkpoint (two RUNNING; then Spark's
``CONCURRENT_STREAM_LOG_UPDATE`` and a rollback that could not back up a checkpoint still being written).

The second test covers what the checks before a submit cannot see: an orphaned client on another
host still submitting (a driver accepted while this submit runs), caught by the check after it.

Here the kill is deterministic: a child process runs the product's submit (the Spark provider's
hook, spark-submit to the real minicluster's YARN) and is SIGKILLed as soon as its spark-submit
client exists. The witness is the ResourceManager: every application ever submitted on the
checkpoint carries its tag, so a second submit cannot hide.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from airflow_kafka_spark.errors import BlockReason, OperationBlocked
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.runtime import detach, drivers, start_stop, submit
from devstack.topics import create_topic
from tests.cluster.test_safe_restart_yarn import SPARK_YARN_CONN
from tests.support.airflow_env import write_registry
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.airflow, pytest.mark.integration]

JOB = "orphanshop"
SUBMIT = """
import json, logging, sys
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.runtime import start_stop
logging.basicConfig(level=logging.INFO)
spec = load_registry(sys.argv[1]).get(sys.argv[2])
out = start_stop.submit_job(spec, kafka_config={"bootstrap.servers": sys.argv[3]}, target=spark_target(spec),
                            by=start_stop.Submitter(actor="test", holder=sys.argv[4], run_id="r",
                                                    lease_ttl_s=float(sys.argv[5])),
                            log=logging.getLogger("submit"))
print(json.dumps(out["driver"]))
"""


@pytest.fixture
def job(broker, topic_name, hadoop, yarn_submit, rm, tmp_path):
    create_topic(broker.bootstrap_servers, topic_name, partitions=2)
    registry = tmp_path / "streaming_jobs.yaml"
    job_conf = {**yarn_submit.conf, "spark.jars": ",".join(yarn_submit.jars)}
    write_registry(registry, [{"name": JOB, "topics": [topic_name], "sink": "idempotent",
                               "application_args": ["--trigger", "processing:2s", "--shuffle-partitions", "2"],
                               "spark_conn_id": "spark_yarn", "deploy_mode": "cluster", "spark_conf": job_conf}])
    mp = pytest.MonkeyPatch()
    for key in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_ARCHIVES_PATH"):
        mp.setenv(key, yarn_submit.env[key])
    mp.setenv("AKS_DATA_DIR", f"{hadoop.default_fs}/aks-orphan-{topic_name}")
    mp.setenv("AIRFLOW_CONN_SPARK_YARN", SPARK_YARN_CONN)
    spec = load_registry(registry).get(JOB)
    try:
        yield {"registry": registry, "spec": spec, "bootstrap": broker.bootstrap_servers}
    finally:
        left = [app.id for app in rm.find(tag=detach.checkpoint_tag(spec.checkpoint)) if app.alive]
        for app_id in left:
            rm.kill(app_id)
        wait_until(lambda: not any(rm.app(a).alive for a in left), timeout=120, what="the test's applications ended")
        mp.undo()


def submit_as(job: dict, holder: str) -> dict:
    """The submit task's body, as a retry of ``holder`` runs it."""
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    spec = job["spec"]
    return start_stop.submit_job(spec, kafka_config={"bootstrap.servers": job["bootstrap"]}, target=spark_target(spec),
                                 by=start_stop.Submitter(actor="test", holder=holder, run_id="r"),
                                 log=logging.getLogger("test"))


def killed_mid_spark_submit(job: dict, holder: str) -> None:
    """Run the submit as ``holder`` in a child and SIGKILL it once its spark-submit runs (the client is orphaned)."""
    ck = job["spec"].checkpoint
    child = subprocess.Popen([sys.executable, "-c", SUBMIT, str(job["registry"]), JOB, job["bootstrap"], holder, "1"],
                             start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: holder in drivers.local_unrecorded(ck).values() or child.poll() is not None, timeout=120,
                   interval=0.05, what="the submit's spark-submit client")
        assert child.poll() is None, child.stdout.read().decode()[-2000:]
        os.kill(child.pid, signal.SIGKILL)   # the task process only: its spark-submit child lives on
    finally:
        child.wait()
        child.stdout.close()
    assert holder in drivers.local_unrecorded(ck).values(), "the spark-submit client should outlive the killed task"


def alive_on_checkpoint(rm, spec) -> list[str]:
    return sorted(a.id for a in rm.find(tag=detach.checkpoint_tag(spec.checkpoint)) if a.alive)


def test_a_retry_adopts_the_application_its_killed_spark_submit_started_and_others_are_refused(job, rm):
    spec = job["spec"]
    first, second, stranger = "soak_dag/run_1/submit", "soak_dag/run_2/submit", "other_dag/run_9/submit"

    # 1. The retry of the killed task waits for its orphaned client, finds the application by its tag, adopts it.
    killed_mid_spark_submit(job, first)
    out = submit_as(job, first)
    orphan = [a.id for a in rm.find(tag=detach.submit_tag(spec, first))]
    assert len(orphan) == 1 and out["driver"]["id"] == orphan[0], (orphan, out["driver"])
    assert LifecycleRecord.load(spec.checkpoint).driver.id == orphan[0]
    assert alive_on_checkpoint(rm, spec) == orphan
    assert [a.id for a in rm.find(tag=detach.checkpoint_tag(spec.checkpoint))] == orphan, "a second application"
    rm.kill(orphan[0])
    wait_until(lambda: not rm.app(orphan[0]).alive, timeout=120, what=f"{orphan[0]} killed")

    # 2. Another submitter (another run; the killed task's lease has expired) never starts a second driver: refused
    #    while the orphaned client runs, and after it, because YARN has an application on the checkpoint that no
    #    record names.
    killed_mid_spark_submit(job, second)
    with pytest.raises(OperationBlocked) as refused:
        submit_as(job, stranger)
    assert refused.value.reason is BlockReason.ALREADY_RUNNING
    wait_until(lambda: not drivers.local_unrecorded(spec.checkpoint), timeout=300, what="the orphaned client to end")
    orphan2 = [a.id for a in rm.find(tag=detach.submit_tag(spec, second))]
    assert len(orphan2) == 1
    with pytest.raises(OperationBlocked, match=f"job {JOB}: {orphan2[0]} runs on checkpoint") as refused:
        submit_as(job, stranger)
    assert refused.value.reason is BlockReason.ALREADY_RUNNING
    assert LifecycleRecord.load(spec.checkpoint).driver.id == orphan[0]   # nothing changed

    # 3. The killed task's own retry adopts it.
    out = submit_as(job, second)
    assert out["driver"]["id"] == orphan2[0]
    assert alive_on_checkpoint(rm, spec) == orphan2
    assert len(rm.find(tag=detach.checkpoint_tag(spec.checkpoint))) == 2, "one application per killed submit"
    print(f"\n[yarn] orphaned submits adopted: {orphan[0]}, {orphan2[0]}; "
          f"{json.dumps([a.summary() for a in rm.find(tag=detach.checkpoint_tag(spec.checkpoint))])}")


def racing_target(spec, *, other_tag: str | None):
    """The job's Spark target, but spark-submit first runs a second submit of the same job, unmarked and silent.

    That is what an orphaned client on another host looks like from here: an application on the checkpoint
    accepted while this submit runs, after its checks before the submit. ``other_tag`` replaces this task's tag
    in the second submit (another task's orphan); None keeps it (this task's own, killed on another host).
    """
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    target = spark_target(spec)
    unset = ["-u", drivers.CHECKPOINT_ENV, "-u", drivers.SUBMITTER_ENV]

    def build(kwargs, application):
        cmd = submit.resolve_binary(target.build_command(kwargs, application), os.environ)   # as the product runs it
        own = detach.submit_tag(spec, HOLDER)
        other = [c.replace(own, other_tag) for c in cmd] if other_tag else list(cmd)
        n = len(other)
        # what submit.driver_env gives the wheel's spark-submit when it is the command (here bash is)
        py = shlex.quote(sys.executable)
        script = (f"export PYSPARK_PYTHON={py} PYSPARK_DRIVER_PYTHON={py}; unset SPARK_HOME; "
                  f'env {" ".join(unset)} "${{@:1:{n}}}" >/dev/null 2>&1; exec "${{@:{n + 1}}}"')
        return ["bash", "-c", script, "race", *other, *cmd]

    return dataclasses.replace(target, build_command=build)


HOLDER = "soak_dag/run_5/submit"


@pytest.mark.parametrize("whose", ["own", "other"])
def test_a_driver_that_appears_during_the_submit_is_caught_after_it(job, rm, whose):
    spec = job["spec"]
    other_tag = None if whose == "own" else "aks-someone-else-0000"
    target = racing_target(spec, other_tag=other_tag)
    kwargs = {"kafka_config": {"bootstrap.servers": job["bootstrap"]}, "target": target,
              "by": start_stop.Submitter(actor="test", holder=HOLDER, run_id="r"), "log": logging.getLogger("test")}
    ck_tag = detach.checkpoint_tag(spec.checkpoint)
    if other_tag is None:
        t = time.monotonic()
        out = start_stop.submit_job(spec, **kwargs)
        # the submit's own figure for its launch (two spark-submits here) lies inside its call
        assert 0 < out["launch_s"] <= time.monotonic() - t, out["launch_s"]
    else:
        with pytest.raises(OperationBlocked, match=f"job {JOB}: application_\\d+_\\d+ runs on checkpoint") as refused:
            start_stop.submit_job(spec, **kwargs)
        assert refused.value.reason is BlockReason.ALREADY_RUNNING
    apps = {a.id: a for a in rm.find(tag=ck_tag)}
    assert len(apps) == 2, [a.summary() for a in apps.values()]   # the racing one and this submit's
    wait_until(lambda: sum(rm.app(i).alive for i in apps) == 1, timeout=120, what="one of the two killed")
    alive = [i for i in apps if rm.app(i).alive]
    record = LifecycleRecord.load(spec.checkpoint)
    if other_tag is None:
        # the two carry this task's tag: the one it had not started itself (the older) is kept and recorded
        assert out["driver"]["id"] == alive[0] == record.driver.id
        assert alive[0] == rm.find(tag=detach.submit_tag(spec, HOLDER))[-1].id
    else:
        assert [a.id for a in rm.find(tag=other_tag)] == alive   # the other's survives; nothing is recorded
        assert record is None or record.driver is None
