"""One long-lived local SparkSession with the real Kafka connector, for fast query restarts.

Restarting a query on a checkpoint inside a warm session takes a second or two, where a new
spark-submit takes ~15 s; scenario tests use this, while tests/integration/test_stack.py keeps the
spark-submit path itself covered. The query is the reference job's own ``build_query``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_spark.jobs import reference_job
from devstack import jars
from devstack.spark_worker import error_text

_SESSION = None

# Set (by tests/cluster/conftest.py, before any test runs) when the selected tests write s3a://
# checkpoints: the JVM's classpath is fixed when the session starts, so hadoop-aws and the AWS SDK
# must be on it from the first session of the run (a second SparkContext in one process is impossible).
S3A_ENV = "AKS_TEST_SPARK_S3A"


def session():
    global _SESSION
    if _SESSION is None:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.pop("SPARK_HOME", None)
        from pyspark.sql import SparkSession

        builder = (SparkSession.builder.master("local[2]").appName("aks-tests")
                   .config("spark.jars", ",".join(str(j) for j in jars.spark_kafka_jars()))
                   .config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.driver.memory", "1g"))
        if os.environ.get(S3A_ENV):
            from devstack.s3 import s3a_jars

            # On the driver's classpath, not spark.jars: local executors would copy the 530 MB bundle.
            builder = builder.config("spark.driver.extraClassPath", os.pathsep.join(str(j) for j in s3a_jars()))
        _SESSION = builder.getOrCreate()
        _SESSION.sparkContext.setLogLevel("ERROR")
    return _SESSION


def has_s3a() -> bool:
    """True if the running session can open ``s3a://`` (hadoop-aws on its classpath)."""
    jvm = session()._jvm
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass("s3a", session()._jsc.hadoopConfiguration())
    except Exception:  # py4j wraps the ClassNotFoundException / UnsupportedFileSystemException
        return False
    return True


def set_hadoop_conf(settings: dict[str, str]) -> None:
    """Set Hadoop client settings on the running session (``spark.hadoop.`` prefixes stripped).

    For file systems the local tests never touch (``fs.s3a.*``, HDFS client settings): new file
    system instances pick them up, and local paths are not affected.
    """
    conf = session()._jsc.hadoopConfiguration()
    for key, value in settings.items():
        conf.set(key.removeprefix("spark.hadoop."), value)


def stop() -> None:
    """Stop the shared session (end of the test session), quietly.

    Without this, py4j closes its sockets from ``__del__`` at interpreter exit, after pytest has
    closed the log stream, and prints a "Logging error" traceback into the CI output.
    """
    global _SESSION
    if _SESSION is not None:
        _SESSION.stop()
        _SESSION = None
    logging.getLogger("py4j").setLevel(logging.CRITICAL)


@dataclass
class RunResult:
    ok: bool
    error: str | None
    seconds: float


def run_available_now(bootstrap: str, topics: str, checkpoint: Path | str, output: Path, *, sink: str = "idempotent",
                      timeout: float = 120, **options) -> RunResult:
    """Run the reference query once with availableNow on ``checkpoint``; capture Spark's failure text."""
    argv = ["--topics", topics, "--bootstrap-servers", bootstrap, "--checkpoint", str(checkpoint),
            "--output", str(output), "--sink", sink, "--trigger", "availableNow"]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    args = reference_job.parse_args(argv)
    t0 = time.monotonic()
    try:
        query = reference_job.build_query(session(), args)
        finished = query.awaitTermination(timeout)
        if not finished:
            query.stop()
            return RunResult(False, f"timeout after {timeout}s", time.monotonic() - t0)
    except Exception as exc:  # Spark refused at start or failed in a batch; the text is the evidence
        return RunResult(False, error_text(exc), time.monotonic() - t0)
    exc = query.exception()
    return RunResult(exc is None, error_text(exc) if exc else None, time.monotonic() - t0)


def drain(query, timeout: float = 120) -> None:
    """Wait for an ``availableNow`` query to read everything and end; its failure fails the test."""
    try:
        query.awaitTermination(timeout)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
