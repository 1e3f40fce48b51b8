"""The task page's extra links, as Airflow 3 stores them: the XCom ``_link_<class>`` the worker
pushes when the task ends (``dag.test()`` of real operators and of the audit DAG, the real broker).

* validate: the docs anchor of the worst finding code, which exists in docs/findings.md;
* submit (dry run, local master): no application link (a local driver runs without UI);
* the audit DAG's report task: the Markdown report it wrote;
* the Spark application URL for YARN and standalone drivers from the recorded driver and endpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.airflow.conftest import REPO
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, new_dag, run_inline, write_registry
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = [pytest.mark.airflow, pytest.mark.integration]


@pytest.fixture(scope="module")
def jobs(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-links")
    topic = f"links-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 200, partitions=2)
    registry = write_registry(base / "streaming_jobs.yaml", [{"name": "gone", "topics": [topic]}])
    ck = base / "data" / "checkpoints" / "gone"
    write_checkpoint(ck, batches=3, sources=({topic: 2},), records_per_batch=10,
                     start_timestamp_ms=int(time.time() * 1000) - 60_000)            # committed 30 per partition
    topics.delete_records(broker.bootstrap_servers, topic, {0: 60, 1: 60})           # unread records deleted
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW__KAFKA_SPARK__DATA_DIR", str(base / "data"))
    mp.setenv("AIRFLOW__KAFKA_SPARK__JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW__KAFKA_SPARK__AUDIT_DIR", str(base / "data" / "audit"))
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    yield base
    mp.undo()


def test_validate_links_the_docs_anchor_of_its_worst_finding(jobs):
    from airflow_kafka_spark.operators.checkpoint import ValidateCheckpointOperator
    from airflow_kafka_spark.operators.links import DOCS_URL

    with new_dag() as dag:
        ValidateCheckpointOperator(task_id="validate", job="gone")
    r = run_inline(dag)
    assert r.states == {"validate": "failed"}                      # BLOCK: the link is there all the same
    url = r.xcom("validate", "_link_FindingDocsLink")
    assert url == f"{DOCS_URL}/findings.md#offset_below_log_start", url
    anchor = url.split("#")[1]
    assert f'<a id="{anchor}"></a>' in (REPO / "docs" / "findings.md").read_text()
    second = r.xcom("validate", "_link_SecondFindingDocsLink")
    assert second == "" or second.split("#")[1] != anchor          # distinct codes, worst first


def test_submit_of_a_local_driver_has_no_application_link(jobs):
    from airflow_kafka_spark.operators.streaming import SubmitStreamingJobOperator

    with new_dag() as dag:
        SubmitStreamingJobOperator(task_id="submit", job="gone", dry_run=True)
    r = run_inline(dag)
    assert r.states == {"submit": "success"}
    assert r.xcom("submit", "_link_SparkApplicationLink") == ""


def test_the_audit_report_task_links_its_markdown_report(jobs):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    dr = bag.get_dag("streaming_audit").test()
    from tests.support.dag_runs import collect

    r = collect("streaming_audit", dr.run_id, dr.state, 0)
    assert r.states["report"] == "success", r.states
    url = r.xcom("report", "_link_AuditReportLink")
    assert url.startswith("file:///") and url.endswith(".md"), url
    assert Path(url.removeprefix("file://")).read_text().startswith("#")


def test_application_urls_of_cluster_drivers():
    from airflow_kafka_spark.operators.links import application_url

    yarn = {"kind": "yarn", "urls": ["http://rm1:8088/", "http://rm2:8088"]}
    assert application_url({"kind": "yarn", "id": "application_1_0002"}, yarn) == \
        "http://rm1:8088/cluster/app/application_1_0002"
    standalone = {"kind": "standalone", "urls": ["http://master:6066"]}
    assert application_url({"kind": "standalone", "id": "driver-2026-0001"}, standalone) == \
        "http://master:6066/v1/submissions/status/driver-2026-0001"
    assert application_url({"kind": "local", "id": "4242"}, None) == ""
    assert application_url({"kind": "k8s", "id": "pod"}, {"kind": "k8s", "urls": ["https://api:6443"]}) == ""
