"""Session fixtures for the distributed stack: HDFS + YARN (minicluster) and an S3 store (S3Proxy).

Each is started once per pytest session, and only when a test asks for it (session-scoped
fixtures are created lazily), so a run without ``cluster`` tests never starts a JVM for them.
Data and logs stay in pytest's temporary directories after the run (the last three are kept).
"""

from __future__ import annotations

import os
import uuid

import pytest

from devstack.hadoop import HadoopCluster
from devstack.s3 import S3Store, s3a_jars
from devstack.spark_yarn import YarnSubmit, prepare


def pytest_collection_finish(session) -> None:
    """Start the shared SparkSession with hadoop-aws when a selected test has Spark write ``s3a://``.

    A JVM's classpath is fixed when it starts and a session started earlier in the run (e.g. by an
    Airflow test) is reused, so the choice is made here, after selection and before any test runs.
    """
    if any("spark_s3a" in getattr(item, "fixturenames", ()) for item in session.items):
        from tests.support.spark_session import S3A_ENV

        os.environ[S3A_ENV] = "1"


@pytest.fixture(scope="session")
def hadoop(tmp_path_factory) -> HadoopCluster:
    cluster = HadoopCluster(data_dir=tmp_path_factory.mktemp("hadoop"))
    cluster.start()
    print(f"\n[cluster] HDFS + YARN up in {cluster.start_seconds:.1f}s (logs in {cluster.data_dir})")
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory) -> S3Store:
    store = S3Store(data_dir=tmp_path_factory.mktemp("s3"))
    store.start()
    print(f"\n[cluster] S3 store up in {store.start_seconds:.1f}s at {store.endpoint}")
    yield store
    store.stop()


@pytest.fixture(scope="session")
def webhdfs(hadoop):
    import fsspec

    return fsspec.filesystem("webhdfs", skip_instance_cache=True, **hadoop.fsspec_options())


@pytest.fixture(scope="session")
def yarn_submit(hadoop) -> YarnSubmit:
    """Spark's jars, the python archives and the connector on HDFS (uploaded once)."""
    return prepare(hadoop)


@pytest.fixture(scope="session")
def yarn_submit_s3a(hadoop, s3) -> YarnSubmit:
    return prepare(hadoop, s3a_jars=s3a_jars(), extra_conf=s3.spark_conf())


@pytest.fixture(scope="session")
def rm(hadoop):
    from airflow_kafka_spark.runtime.yarn import ResourceManager

    return ResourceManager([hadoop.rm_url], timeout=10)


@pytest.fixture
def unique_tag() -> str:
    return f"aks-test-{uuid.uuid4().hex[:10]}"
