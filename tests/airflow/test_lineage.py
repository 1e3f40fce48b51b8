"""OpenLineage parent job in the spark-submit line, as ``SparkSubmitOperator`` injects it.

Real Airflow (``dag.test()``), the real openlineage provider and its config switches, and the
spark-submit argv built by the Spark provider's real ``SparkSubmitHook`` (a dry-run submit builds
it and starts nothing). The transport's API key must not reach the command line.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.airflow_env import (
    SPARK_LOCAL_CONN,
    assert_no_secret,
    kafka_conn,
    new_dag,
    run_inline,
    write_registry,
)

pytestmark = pytest.mark.airflow

API_KEY = f"ol-key-{uuid.uuid4().hex}"


def _clear_openlineage_caches() -> None:
    """The provider caches its config (functools.cache) and its listener: read them afresh."""
    from airflow.providers.openlineage import conf as ol_conf
    from airflow.providers.openlineage.plugins import listener

    for f in vars(ol_conf).values():
        if hasattr(f, "cache_clear"):
            f.cache_clear()
    listener._openlineage_listener = None


@pytest.fixture
def lineage_env(airflow_home, tmp_path, monkeypatch):
    registry = write_registry(tmp_path / "streaming_jobs.yaml", [{"name": "lineage", "topics": ["orders"]}])
    monkeypatch.setenv("AKS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(registry))
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn("127.0.0.1:9"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "aks-lineage-test")
    # No lineage events from this process's own listener (nothing listens): only the injection is tested.
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({
        "type": "http", "url": "http://127.0.0.1:9", "endpoint": "api/v1/lineage",
        "auth": {"type": "api_key", "apiKey": API_KEY}}))
    _clear_openlineage_caches()
    yield
    _clear_openlineage_caches()


def _submit_command() -> tuple[str, object, str]:
    from airflow_kafka_spark.operators.streaming import SubmitStreamingJobOperator

    with new_dag() as dag:
        SubmitStreamingJobOperator(task_id="submit", job="lineage", dry_run=True)
    r = run_inline(dag)
    assert r.states == {"submit": "success"}, r.xcom("submit", "failure")
    return r.xcom("submit")["command"], r, dag.dag_id


def test_parent_job_and_transport_are_injected_without_the_api_key(lineage_env, monkeypatch, capfd, caplog):
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO", "True")
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__SPARK_INJECT_TRANSPORT_INFO", "True")
    cmd, r, dag_id = _submit_command()
    for part in ("--conf spark.openlineage.parentJobNamespace=aks-lineage-test",
                 f"--conf spark.openlineage.parentJobName={dag_id}.submit",
                 "--conf spark.openlineage.rootParentJobNamespace=aks-lineage-test",
                 f"--conf spark.openlineage.rootParentJobName={dag_id}",
                 "--conf spark.openlineage.transport.type=http",
                 "--conf spark.openlineage.transport.url=http://127.0.0.1:9"):
        assert part in cmd, (part, cmd)
    run_id = cmd.split("spark.openlineage.parentRunId=")[1].split()[0]
    assert uuid.UUID(run_id).version == 7                      # the provider's task run id
    assert "auth" not in cmd.split("spark.openlineage.transport", 1)[1]
    out, err = capfd.readouterr()
    assert "not put on the spark-submit command line" in caplog.text
    assert_no_secret(r, out, err, caplog.text, secret=API_KEY)


def test_nothing_is_injected_unless_the_openlineage_config_asks(lineage_env):
    cmd, _, _ = _submit_command()
    assert "spark.openlineage" not in cmd and "--master local[2]" in cmd
