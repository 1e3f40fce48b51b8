"""Issue 6 acceptance: the ``streaming_audit`` DAG under ``dag.test()`` over a registry of three real jobs.

Real broker, real Spark checkpoints (the reference query, ``availableNow``, in the warm in-process
session), real Airflow (SQLite metadata DB, the DAG file from ``dags/``, a ``kafka`` connection):

* ``healthy`` — caught up a moment ago: OK;
* ``stalled`` — records arrived after its last batch and nothing picked them up for longer than its
  registry ``stall_after_s`` (3 s): STALLED;
* ``near-retention`` — progressing, but the oldest record it has not read is 55 min old on a topic
  that keeps 1 h: ~5 min of headroom against ``min_headroom_s`` 30 min.

The run must write the report (JSON, Markdown, PNG, history) and fail exactly ``check_stalled`` and
``check_near-retention``; their failure callbacks append to ``alerts.jsonl``. A second run shows the
history at work (two points per job in the chart, growth against the previous report).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.airflow.conftest import REPO, TIMINGS
from tests.support import spark_session

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

PNG = b"\x89PNG\r\n\x1a\n"
MINUTE_MS = 60_000


def _registry(root: Path, topic: dict[str, str]) -> Path:
    reg = root / "streaming_jobs.yaml"
    reg.write_text(f"""
version: 1
allowed_roots: ["{root}", "${{AKS_PACKAGE_DIR}}/jobs"]
defaults:
  application: ${{AKS_PACKAGE_DIR}}/jobs/reference_job.py
  integration: reference   # the bundled job: its command-line contract
  checkpoint: {root}/checkpoints/{{name}}
  output: {root}/sinks/{{name}}
  backup_root: {root}/backups
  kafka_conn_id: kafka_default
jobs:
  - name: healthy
    topics: [{topic['healthy']}]
    stall_after_s: 600
    min_headroom_s: 1800
  - name: stalled
    topics: [{topic['stalled']}]
    stall_after_s: 3
  - name: near-retention
    topics: [{topic['near-retention']}]
    stall_after_s: 600
    min_headroom_s: 1800
""")
    return reg


def _states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def test_audit_dag_fails_for_exactly_the_two_bad_jobs(airflow_home, broker, topic_name, tmp_path, monkeypatch,
                                                       kafka_connection):
    bootstrap = broker.bootstrap_servers
    root = tmp_path / "data"
    root.mkdir()
    topic = {job: f"{topic_name}-{job}" for job in ("healthy", "stalled", "near-retention")}
    topics.create_topic(bootstrap, topic["healthy"], 2)
    topics.create_topic(bootstrap, topic["stalled"], 2)
    topics.create_topic(bootstrap, topic["near-retention"], 2, {"retention.ms": str(60 * MINUTE_MS)})
    now = int(time.time() * 1000)
    produce(bootstrap, topic["healthy"], 20, partitions=2)
    produce(bootstrap, topic["stalled"], 20, partitions=2)
    produce(bootstrap, topic["near-retention"], 20, partitions=2, timestamp_ms=now - 58 * MINUTE_MS)

    started = time.perf_counter()
    for job, t in topic.items():
        run = spark_session.run_available_now(bootstrap, t, root / "checkpoints" / job, root / "sinks" / job)
        assert run.ok, run.error
    TIMINGS["3 reference jobs (warm SparkSession)"] = time.perf_counter() - started

    # After the jobs ran: new records nobody reads (stalled), and old ones close to retention.
    produce(bootstrap, topic["stalled"], 10, partitions=2, start_id=20)
    produce(bootstrap, topic["near-retention"], 20, partitions=2, start_id=20,
            timestamp_ms=int(time.time() * 1000) - 55 * MINUTE_MS)
    time.sleep(4.0)            # > stall_after_s of "stalled", since its oldest unread record

    audit_dir = root / "audit"
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(_registry(root, topic)))
    monkeypatch.setenv("AKS_AUDIT_DIR", str(audit_dir))
    kafka_connection("kafka_default", {"bootstrap.servers": bootstrap})

    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import DagRunState

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("streaming_audit")
    assert {t.task_id for t in dag.tasks} == {
        "observe_healthy", "observe_stalled", "observe_near-retention", "report",
        "check_healthy", "check_stalled", "check_near-retention"}

    started = time.perf_counter()
    dr = dag.test()
    TIMINGS["streaming_audit dag.test() run 1"] = time.perf_counter() - started
    states = _states(dr)
    assert dr.state == DagRunState.FAILED, states
    assert states == {"observe_healthy": "success", "observe_stalled": "success",
                      "observe_near-retention": "success", "report": "success", "check_healthy": "success",
                      "check_stalled": "failed", "check_near-retention": "failed"}, states

    doc = json.loads((audit_dir / "latest.json").read_text())
    jobs = {j["job"]: j for j in doc["jobs"]}
    assert doc["summary"]["failed_jobs"] == {"stalled": ["STALLED"], "near-retention": ["HEADROOM_LOW"]}, doc["summary"]
    assert jobs["healthy"]["status"] in ("OK", "IDLE") and not jobs["healthy"]["alerts"]
    assert jobs["healthy"]["checkpoint"]["verdict"] == "PASS", jobs["healthy"]["checkpoint"]
    near = jobs["near-retention"]["observation"]
    assert near["lag_records_effective"] == 20
    assert 54 * 60 <= near["lag_seconds"] <= 56 * 60
    assert 4 * 60 <= near["headroom_s"] <= 6 * 60
    assert jobs["stalled"]["observation"]["lag_records_effective"] == 10
    md = (audit_dir / "latest.md").read_text()
    assert "**2 of 3 jobs need attention:**" in md and "`near-retention` (HEADROOM_LOW)" in md
    assert (audit_dir / "latest.png").read_bytes().startswith(PNG)
    alerts = [json.loads(line) for line in (audit_dir / "alerts.jsonl").read_text().splitlines()]
    assert sorted(a["job"] for a in alerts) == ["near-retention", "stalled"]   # the failure callbacks ran

    # A second run: history, growth against the previous report, two points per job in the chart.
    started = time.perf_counter()
    dr2 = dag.test()
    TIMINGS["streaming_audit dag.test() run 2"] = time.perf_counter() - started
    assert _states(dr2)["check_healthy"] == "success" and dr2.state == DagRunState.FAILED
    history = json.loads((audit_dir / "audit-history.json").read_text())
    assert len(history["runs"]) == 2
    doc2 = json.loads((audit_dir / "latest.json").read_text())
    assert all("bytes_growth" in j["checkpoint"] for j in doc2["jobs"])
    assert len(list(audit_dir.glob("audit-2*.png"))) == 2
    print(f"\naudit report: {audit_dir / 'latest.md'}\nchart: {audit_dir / 'latest.png'}")
