"""Issue 2 acceptance: the real local stack — broker, spark-submit with the connector, reference job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import jars, oracle, spark, spark_runtimes, topics
from devstack.produce import produce
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

N, M, PARTS = 900, 450, 3


_PROBE = """
import importlib.metadata as md, json, os, pyspark
dists = {}
for d in ("pyspark", "pyspark-client"):
    try:
        dists[d] = md.version(d)
    except md.PackageNotFoundError:
        pass
print(json.dumps({"python_files": pyspark.__version__, "home": os.path.dirname(pyspark.__file__), "dists": dists}))
"""


@pytest.mark.parametrize("name", ["default", pytest.param("3.5", marks=pytest.mark.spark35)])
def test_pyspark_python_files_match_the_jars(name):
    """Per runtime: pyspark's Python files (and pyspark-client's, which the Spark provider pulls in and
    which installs into the same package) = its JVM jars = spark-submit's version = the connector."""
    rt = spark_runtimes.runtime(name)
    probe = json.loads(subprocess.run([str(rt.python), "-c", _PROBE], capture_output=True, text=True,
                                      env=rt.env(), check=True, timeout=120).stdout)
    assert Path(probe["home"]) == rt.home
    assert probe["python_files"] == rt.version
    assert set(probe["dists"].values()) == {rt.version}, probe["dists"]
    assert spark.spark_submit_version(rt) == rt.version
    assert (rt.home / "jars" / f"spark-core_{rt.scala}-{rt.version}.jar").is_file()
    names = {j.name for j in rt.kafka_jars()}
    assert {f"spark-sql-kafka-0-10_{rt.scala}-{rt.version}.jar",
            f"spark-token-provider-kafka-0-10_{rt.scala}-{rt.version}.jar"} <= names, names
    assert not any(n.startswith(("spark-core", "scala-library", "hadoop-client")) for n in names), names


def test_second_fetch_does_not_call_maven(monkeypatch):
    """The jar cache is stamped: with mvn and java off PATH, a second fetch still succeeds."""
    jars.kafka_classpath()
    monkeypatch.setenv("PATH", "/nonexistent")
    assert jars.kafka_classpath().jars
    assert jars.spark_kafka_jars()


class _Run:
    """One topic, one checkpoint, shared by the first-run and the restart tests (in that order)."""

    def __init__(self, root: Path, bootstrap: str, topic: str) -> None:
        self.root, self.bootstrap, self.topic = root, bootstrap, topic
        self.checkpoint, self.output = root / "checkpoint", root / "out"
        self.produced: list = []

    def run_until_caught_up(self) -> dict:
        marker = self.root / "STOP"
        marker.unlink(missing_ok=True)
        args = ["--topics", self.topic, "--bootstrap-servers", self.bootstrap, "--checkpoint", str(self.checkpoint),
                "--output", str(self.output), "--sink", "idempotent", "--trigger", "processing:1s",
                "--max-offsets-per-trigger", "300", "--stop-marker", str(marker)]
        log = self.root / "job.log"
        proc = spark.start_job(args, log)
        ends = {TopicPartition(self.topic, p): o for p, o in end_offsets(self.bootstrap, self.topic, PARTS).items()}

        def caught_up():
            if proc.poll() is not None:
                raise AssertionError(f"job exited early ({proc.returncode}):\n{log.read_text()[-3000:]}")
            st = read_checkpoint(str(self.checkpoint))
            return st.latest_committed is not None and st.latest_committed.kafka_offsets == ends

        wait_until(caught_up, timeout=240, interval=1, what="the job to commit the topic's end offsets")
        marker.touch()
        assert proc.wait(120) == 0, log.read_text()[-3000:]
        statuses = spark.parse_statuses(log.read_text())
        assert statuses[-1]["event"] == "stopped" and statuses[-1]["graceful"] is True
        return statuses[-1]


@pytest.fixture(scope="module")
def job_run(broker, tmp_path_factory):
    topic = "stack-orders"
    topics.create_topic(broker.bootstrap_servers, topic, PARTS)
    return _Run(tmp_path_factory.mktemp("stack"), broker.bootstrap_servers, topic)


def test_first_run_sink_is_exact_and_checkpoint_matches_kafka(job_run):
    job_run.produced += produce(job_run.bootstrap, job_run.topic, N, partitions=PARTS)
    stopped = job_run.run_until_caught_up()

    cmp = oracle.compare(job_run.produced, oracle.read_sink(job_run.output, "idempotent"))
    assert cmp.exact, cmp.summary()
    assert cmp.consumed_rows == N

    st = read_checkpoint(str(job_run.checkpoint))
    ends = end_offsets(job_run.bootstrap, job_run.topic, PARTS)
    assert st.latest_planned.kafka_offsets == {TopicPartition(job_run.topic, p): o for p, o in ends.items()}
    assert st.offset_batch_ids[-1] == st.commit_batch_ids[-1] == stopped["last_committed"]
    assert st.commit_batch_ids[-1] >= 1, "at least two batches ran (maxOffsetsPerTrigger=300 for 900 records)"


def test_restart_on_same_checkpoint_adds_exactly_the_new_records(job_run):
    if not job_run.produced:
        pytest.skip("needs the first-run test")
    before = read_checkpoint(str(job_run.checkpoint)).commit_batch_ids[-1]
    job_run.produced += produce(job_run.bootstrap, job_run.topic, M, partitions=PARTS, start_id=N)
    job_run.run_until_caught_up()

    cmp = oracle.compare(job_run.produced, oracle.read_sink(job_run.output, "idempotent"))
    assert cmp.exact, cmp.summary()
    assert cmp.consumed_rows == N + M
    assert read_checkpoint(str(job_run.checkpoint)).commit_batch_ids[-1] > before


def test_missing_java_is_one_clear_line(monkeypatch, tmp_path):
    """Without the jar cache and without java, the stack says so in one line with the fix."""
    monkeypatch.setenv("AKS_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    from airflow_kafka_spark.errors import UserError

    with pytest.raises(UserError) as err:
        jars.kafka_classpath()
    assert "java not found" in str(err.value) and "\n" not in str(err.value)
    assert shutil.which("java", path=os.environ["PATH"]) is None
