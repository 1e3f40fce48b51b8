"""The users'-style applications themselves (tests/support/user_jobs), as other tests will reuse them:
v1 runs and stops under the agent; v2 (a stateful operator added) runs on a fresh checkpoint and
cannot resume v1's - the checkpoint-breaking change a safe restart must catch. Kept small: each case
is a few real ``spark-submit`` starts on a local[2] master. (The Java job's v2-cannot-resume-v1 is
Spark's answer in tests/agent/test_probe_user_jobs.py, v1 -> v2 on 3.5, and its v2 runs through the
DAG in tests/airflow/test_users_jobs_dag35.py; its own test here was cut for the CI budget.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kafka_spark import agent
from devstack import agent_build, user_jobs
from devstack.produce import produce
from devstack.spark_runtimes import SparkRuntime, runtime
from devstack.topics import create_topic
from tests.support import agent_harness as h
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.userjobs]

START_TIMEOUT = 150
FAIL_TIMEOUT = 90  # v2 on v1: a start and one failing batch


@pytest.fixture(scope="module", autouse=True)
def _agent_jars() -> None:
    agent_build.build_all()


def _run_until_commit_then_stop(rt: SparkRuntime, launch, ck: Path, log: Path) -> None:
    marker = Path(f"{ck}.stop")
    marker.unlink(missing_ok=True)
    conf = agent.agent_conf(str(marker), str(ck), agent.report_path(str(ck)), rt.version, {})
    driver = launch(log, conf)
    try:
        wait_until(lambda: driver.proc.poll() is not None or h.newest(ck, "commits") >= 0,
                   timeout=START_TIMEOUT, interval=0.3, what="a first commit")
        assert driver.proc.poll() is None, driver.text()[-3000:]
        marker.touch()
        assert driver.wait(60) == 0, driver.text()[-3000:]
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    offsets, commits = h.boundary(ck)
    assert offsets == commits >= 0


def _v2_cannot_resume_v1(launch, ck: Path, log: Path, more) -> str:
    """v2 on v1's checkpoint, with new records to read: its first batch needs a state store v1 never wrote."""
    more()
    driver = launch(log, {})
    try:
        rc = driver.wait(FAIL_TIMEOUT)
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    assert rc not in (None, 0), "v2 must fail on v1's checkpoint"
    return driver.text()


def test_pyspark_orders_stream_v2_spark4(broker, tmp_path, topic_name):
    rt = runtime("default")
    create_topic(broker.bootstrap_servers, topic_name, 3)
    produce(broker.bootstrap_servers, topic_name, 300, partitions=3)

    def launcher(script: Path, ck: Path):
        args = ["--brokers", broker.bootstrap_servers, "--topic", topic_name, "--checkpoint", str(ck),
                "--out", str(tmp_path / f"out-{script.stem}")]
        return lambda log, conf: h.submit(rt, script, args, log, conf=conf)

    ck = tmp_path / "ck"
    _run_until_commit_then_stop(rt, launcher(h.PY_JOB, ck), ck, tmp_path / "v1.log")
    text = _v2_cannot_resume_v1(launcher(h.PY_JOB_V2, ck), ck, tmp_path / "v2-on-v1.log",
                                lambda: produce(broker.bootstrap_servers, topic_name, 30, partitions=3))
    assert "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY" in text, "4.x refuses at the start"
    ck2 = tmp_path / "ck2"
    _run_until_commit_then_stop(rt, launcher(h.PY_JOB_V2, ck2), ck2, tmp_path / "v2.log")
    assert (ck2 / "state").is_dir(), "v2 keeps a state store"


@pytest.mark.spark35
def test_stale_marker_and_the_users_own_file_manager_spark35(broker, tmp_path, topic_name):
    """Two things the product's wiring relies on, on the Java application (Spark 3.5, the fast start):

    * the user's own ``checkpointFileManagerClass`` keeps working: ``agent_conf`` moves it to the
      agent's delegate key, and a stop still ends on a boundary;
    * a marker that exists before the submit stops the run before it plans any batch (the product
      must remove it before submitting), and the application still ends by itself.
    """
    rt = runtime("3.5")
    create_topic(broker.bootstrap_servers, topic_name, 3)
    produce(broker.bootstrap_servers, topic_name, 300, partitions=3)
    jar = user_jobs.build("3.5", "v1")
    ck, marker = tmp_path / "ck", tmp_path / "stop.marker"
    props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=broker.bootstrap_servers,
                                       topic=topic_name, checkpoint=ck, output=tmp_path / "out")
    users = {"spark.sql.streaming.checkpointFileManagerClass":
             "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"}
    conf = {**users, **agent.agent_conf(str(marker), str(ck), agent.report_path(str(ck)), rt.version, users)}
    assert conf[agent.DELEGATE_FILE_MANAGER] == users["spark.sql.streaming.checkpointFileManagerClass"]

    def launch(log: Path) -> h.Driver:
        return h.submit(rt, jar, [str(props)], log, conf=conf, main_class=user_jobs.MAIN_CLASS)

    driver = launch(tmp_path / "run.log")
    try:
        wait_until(lambda: driver.proc.poll() is not None or h.newest(ck, "commits") >= 0,
                   timeout=START_TIMEOUT, interval=0.3, what="a first commit")
        marker.touch()
        assert driver.wait(60) == 0, driver.text()[-3000:]
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    first = h.boundary(ck)
    doc = h.read_report(Path(agent.report_path(str(ck))))
    assert first[0] == first[1] >= 0 and doc["stop"]["stopped_on_boundary"] is True, (first, doc["stop"])
    assert doc["file_manager_delegate"] == users["spark.sql.streaming.checkpointFileManagerClass"]

    produce(broker.bootstrap_servers, topic_name, 30, partitions=3)  # work the stale-marker run must not start
    driver = launch(tmp_path / "stale.log")  # the marker is still there
    try:
        rc = driver.wait(START_TIMEOUT)
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    assert rc == 0, driver.text()[-3000:]
    assert h.boundary(ck) == first, "no batch was planned"
    doc = h.read_report(Path(agent.report_path(str(ck))))
    assert doc["stop"]["stopped_on_boundary"] is True, doc["stop"]
    print(f"\n[agent] stale marker: {[q['stop']['how'] for q in doc['queries'] if q.get('stop')]}")


@pytest.mark.spark35
def test_the_report_never_claims_a_boundary_the_files_do_not_show_spark35(broker, tmp_path, topic_name):
    """A stop that gives up waiting (``stopTimeoutMs`` of 1 ms) while a batch runs cuts it; the report
    must say so. Whatever the timing gives, the report's claim has to equal what the files show."""
    rt = runtime("3.5")
    create_topic(broker.bootstrap_servers, topic_name, 3)
    producer = h.ContinuousProducer(broker.bootstrap_servers, topic_name, 3, rate=300).start()
    jar = user_jobs.build("3.5", "v1")
    ck, marker = tmp_path / "ck", tmp_path / "stop.marker"
    props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=broker.bootstrap_servers,
                                       topic=topic_name, checkpoint=ck, output=tmp_path / "out")
    conf = {**agent.agent_conf(str(marker), str(ck), agent.report_path(str(ck)), rt.version, {}),
            agent.STOP_TIMEOUT_MS: "1", agent.POLL_MS: "20"}
    driver = h.submit(rt, jar, [str(props)], tmp_path / "run.log", conf=conf, main_class=user_jobs.MAIN_CLASS)
    try:
        wait_until(lambda: driver.proc.poll() is not None or h.newest(ck, "commits") >= 1,
                   timeout=START_TIMEOUT, interval=0.2, what="two committed batches")
        wait_until(lambda: h.newest(ck, "offsets") > h.newest(ck, "commits"), timeout=30, interval=0.01,
                   what="a batch in flight")
        marker.touch()
        rc = driver.wait(60)
    finally:
        producer.stop()
        if driver.proc.poll() is None:
            driver.kill()
    offsets, commits = h.boundary(ck)
    doc = h.read_report(Path(agent.report_path(str(ck))))
    [q] = [q for q in doc["queries"] if q.get("stop")]
    print(f"\n[agent] gave up waiting: exit {rc}, offsets/{offsets} commits/{commits}, how {q['stop']['how']}, "
          f"report says stopped_on_boundary={doc['stop']['stopped_on_boundary']}")
    assert doc["stop"]["stopped_on_boundary"] is (offsets == commits)
    assert q["stop"]["cut_batch"] == (offsets if offsets != commits else None)
