"""The Spark 3.5 side of the format matrix: one long-lived 3.5 driver (devstack/spark_worker.py) per session.

A scenario job here is tests/support/scenario.Job whose query runs in that worker instead of the
in-process 4.x session; everything else (topics, produce, validate, the oracle) is the same code.
"""

from __future__ import annotations

import pytest

from devstack import spark_runtimes, topics
from devstack.spark_worker import SparkWorker, WorkerResult
from tests.support.scenario import Job


@pytest.fixture(scope="session")
def worker35(tmp_path_factory):
    with SparkWorker(spark_runtimes.runtime("3.5"), log_path=tmp_path_factory.mktemp("spark35") / "worker.log") as w:
        assert w.version == "3.5.1"
        yield w


class WorkerJob(Job):
    """A scenario job whose query runs on another runtime's worker."""

    worker: SparkWorker

    def run(self, *, topics: list[str] | None = None, **options) -> WorkerResult:
        argv = ["--topics", ",".join(topics or self.topics), "--bootstrap-servers", self.bootstrap,
                "--checkpoint", str(self.spark_checkpoint), "--output", str(self.output), "--sink", self.sink]
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        return self.worker.run(argv)


@pytest.fixture
def job35(broker, tmp_path, topic_name, worker35):
    def make(partitions: int = 3, *, sink: str = "idempotent", config: dict | None = None) -> WorkerJob:
        topics.create_topic(broker.bootstrap_servers, topic_name, partitions, config)
        j = WorkerJob(broker, tmp_path, [topic_name], sink, partitions)
        j.worker = worker35
        return j

    return make
