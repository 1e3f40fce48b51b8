"""The reference job in YARN cluster deploy mode, watched and stopped through the RM REST API only.

spark-submit returns as soon as YARN accepted the application (waitAppCompletion=false); from
then on everything goes through :mod:`airflow_kafka_spark.runtime.yarn` (no ``yarn`` binary, no
JVM): find the app by its tag, wait for the first committed batch in the checkpoint (on HDFS or on
S3 through S3A), read the driver's log from its NodeManager, kill it. The S3 test's application is
submitted as the module starts and warms up beside the HDFS test's (fixture ``s3_app``).
"""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

import pytest

from airflow_kafka_spark.runtime.yarn import AppState, FinalStatus
from devstack.produce import produce
from devstack.topics import create_topic

pytestmark = pytest.mark.cluster

RECORDS = 40


def wait_for(what: str, check: Callable[[], object], timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def job_args(broker, topic: str, checkpoint: str, output: str, *extra: str) -> list[str]:
    return ["--topics", topic, "--bootstrap-servers", broker.bootstrap_servers, "--checkpoint", checkpoint,
            "--output", output, "--trigger", "processing:2s", *extra]


def sink_rows(fs, root: str) -> int:
    """Records in the idempotent sink (JSON lines under query=<id>/batch=<n>/)."""
    fs.invalidate_cache()
    return sum(len(fs.cat(p).splitlines()) for p in fs.glob(f"{root.rstrip('/')}/**/part-*.json"))


def first_batch_or_failure(rm, app_id: str, committed: Callable[[], bool]) -> bool:
    app = rm.app(app_id)
    assert app.alive, f"the job ended before its first batch: {app.summary()}"
    return committed()


ON_OTHER_HOST = """
import json, socket, sys
from airflow_kafka_spark.runtime.yarn import ResourceManager
rm = ResourceManager([sys.argv[1]])
before = rm.app(sys.argv[2]).state.value
after = rm.kill(sys.argv[2]).state.value
print(json.dumps({"host": socket.gethostname(), "before": before, "after": after}))
"""


def watch_and_kill_from_another_host(rm_url: str, app_id: str) -> dict:
    """What a triggerer/worker on another machine does: status and kill over REST, nothing local.

    The other host is this machine with another hostname (a UTS namespace, ``unshare --uts``).
    """
    proc = subprocess.run(
        ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', "airflow-triggerer-2",
         sys.executable, "-c", ON_OTHER_HOST, rm_url, app_id], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 and "unshare" in proc.stderr and "ermission" in proc.stderr:
        pytest.skip(f"no UTS namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stop_through_rm(rm, app_id: str) -> None:
    rm.kill(app_id)
    app = wait_for("the app to be KILLED", lambda: (a := rm.app(app_id)).state.terminal and a, 120)
    assert app.state is AppState.KILLED and app.final_status is FinalStatus.KILLED and not app.alive


def test_reference_job_in_cluster_mode_checkpoints_on_hdfs(broker, topic_name, hadoop, webhdfs, yarn_submit, rm,
                                                           unique_tag):
    create_topic(broker.bootstrap_servers, topic_name, partitions=2)
    produce(broker.bootstrap_servers, topic_name, RECORDS, partitions=2)
    ckpt, out = f"/ckpt/{topic_name}", f"/out/{topic_name}"
    name = f"ref-{topic_name}"
    t0 = time.monotonic()
    app_id = yarn_submit.submit(job_args(broker, topic_name, hadoop.default_fs + ckpt, hadoop.default_fs + out),
                                name=name, tags=[unique_tag])
    submitted = time.monotonic() - t0
    try:
        # The driver's identity is the application id; any host finds it again by tag and name.
        assert [a.id for a in rm.find(tag=unique_tag, name=name)] == [app_id]
        wait_for("commits/0 on HDFS", lambda: first_batch_or_failure(
            rm, app_id, lambda: webhdfs.exists(f"{ckpt}/commits/0")), 420, 2)
        first_batch = time.monotonic() - t0
        print(f"\n[cluster] YARN cluster mode, checkpoint on HDFS: spark-submit returned after {submitted:.1f}s, "
              f"first batch committed {first_batch:.1f}s after submit")
        app = rm.app(app_id)
        assert app.state is AppState.RUNNING and app.am_container_id
        assert sink_rows(webhdfs, out) == RECORDS
        stdout = rm.driver_log_tail(app, file="stdout")
        assert 'REFERENCE_JOB_STATUS {"event": "started"' in stdout
        seen = watch_and_kill_from_another_host(hadoop.rm_url, app_id)
        assert seen["host"] == "airflow-triggerer-2" != socket.gethostname()
        assert seen["before"] == "RUNNING" and seen["after"] in ("RUNNING", "KILLED")
        wait_for("the kill from the other host to land", lambda: rm.app(app_id).state is AppState.KILLED, 120)
    finally:
        stop_through_rm(rm, app_id)


def test_broken_build_fails_and_its_driver_log_says_why(broker, topic_name, hadoop, yarn_submit, rm, unique_tag):
    ckpt = f"{hadoop.default_fs}/ckpt/{topic_name}"
    app_id = yarn_submit.submit(job_args(broker, topic_name, ckpt, f"{hadoop.default_fs}/out/{topic_name}",
                                         "--fail-at-start"), name=f"ref-broken-{topic_name}", tags=[unique_tag])
    app = wait_for("the broken build to end", lambda: (a := rm.app(app_id)).state.terminal and a, 300, 2)
    assert app.state is AppState.FAILED and app.final_status is FinalStatus.FAILED and not app.alive
    assert "\n" not in app.summary() and app.summary().startswith(f"{app_id} FAILED/FAILED")
    # Spark's PythonRunner pipes the Python driver's stdout *and* stderr into the AM's stdout;
    # the AM's stderr carries Spark's own log (the exit status).
    assert "--fail-at-start given, exiting 1" in rm.driver_log_tail(app, file="stdout")
    assert "User application exited with status 1" in rm.driver_log_tail(app, file="stderr")


@pytest.fixture(scope="module", autouse=True)
def s3_app(broker, s3, yarn_submit_s3a, rm):
    """The S3 test's application, submitted as the module starts: it warms up to its first batch while the
    HDFS test runs (the two fit the NodeManager's 4 GB side by side), so the module waits for one YARN start
    instead of two. Killed at the end of the module whatever happened."""
    topic = f"ref-s3-{uuid.uuid4().hex[:10]}"
    tag = f"aks-test-{uuid.uuid4().hex[:10]}"

    def submit() -> tuple[str, float]:
        create_topic(broker.bootstrap_servers, topic, partitions=2)
        produce(broker.bootstrap_servers, topic, RECORDS, partitions=2)
        t0 = time.monotonic()
        app_id = yarn_submit_s3a.submit(
            job_args(broker, topic, s3.s3a_url(f"ckpt/{topic}"), s3.s3a_url(f"out/{topic}")),
            name=f"ref-s3-{topic}", tags=[tag])
        return app_id, t0

    pool = concurrent.futures.ThreadPoolExecutor(1)
    submitted = pool.submit(submit)
    pool.shutdown(wait=False)
    try:
        yield topic, submitted
    finally:
        app_id = None
        if submitted.exception(timeout=600) is None:
            app_id = submitted.result()[0]
        for app in rm.find(tag=tag):
            if app.alive:
                rm.kill(app.id)
        if app_id is not None and rm.app(app_id).alive:
            stop_through_rm(rm, app_id)


def test_reference_job_in_cluster_mode_checkpoints_on_s3(s3, rm, s3_app):
    topic_name, submitted = s3_app
    app_id, t0 = submitted.result(timeout=600)
    fs = s3.filesystem()

    def committed() -> bool:
        fs.invalidate_cache()
        return fs.exists(s3.url(f"ckpt/{topic_name}/commits/0"))

    try:
        wait_for("commits/0 on S3", lambda: first_batch_or_failure(rm, app_id, committed), 420, 2)
        print(f"\n[cluster] YARN cluster mode, checkpoint on S3 (S3A): first batch committed "
              f"{time.monotonic() - t0:.1f}s after submit (submitted as the module started)")
        offsets = fs.cat(s3.url(f"ckpt/{topic_name}/offsets/0")).decode()
        assert offsets.startswith("v1\n") and topic_name in offsets
        assert sink_rows(fs, s3.url(f"out/{topic_name}")) == RECORDS
    finally:
        stop_through_rm(rm, app_id)
