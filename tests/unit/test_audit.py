"""The audit without a broker: per-job findings, the history file, growth, the report files and the chart.

The real DAG run over a real broker and Spark checkpoints is tests/airflow/test_audit_dag.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.watch.audit.chart import render_chart
from airflow_kafka_spark.watch.audit.history import HISTORY_FILE, AuditHistory, with_growth
from airflow_kafka_spark.watch.audit.job import AuditChecks, JobAudit, audit_job, scan_checkpoint
from airflow_kafka_spark.watch.audit.render import render_markdown
from airflow_kafka_spark.watch.audit.report import write_report
from tests.support.checkpoint_factory import START_TIMESTAMP_MS, write_checkpoint
from tests.unit.test_watch import FakeView, tp

PNG = b"\x89PNG\r\n\x1a\n"


def _audit(job: str, *, status: str = "OK", alerts: list[str] = (), lag: int = 0, seconds: float = 0.0,
           headroom: float | None = 86400.0, at_ms: int = START_TIMESTAMP_MS, ck_bytes: int = 1000,
           ck_files: int = 10, min_headroom: float | None = 3600.0) -> JobAudit:
    obs = {"status": status, "reason": f"{status}: test", "lag_records": lag, "lag_records_effective": lag,
           "lag_seconds": seconds, "headroom_s": headroom, "headroom_infinite": headroom is None,
           "lost_records": 0, "observed_at_ms": at_ms, "subject": f"/ck/{job}", "last_committed_batch": 3,
           "last_batch_age_s": 1.0, "catch_up": {"seconds": 2.0, "never": False},
           "sample": {"at_ms": at_ms, "latest": {"t": {"0": 10 + lag}}, "position": {"t": {"0": 10}}},
           "lag": {"partitions": [{"topic": "t", "partition": 0, "position": 10, "log_start": 0,
                                   "log_end": 10 + lag, "records": lag, "seconds": seconds,
                                   "method": "record-timestamp" if lag else None}]},
           "headroom": {"partitions": [{"topic": "t", "partition": 0, "seconds": headroom,
                                        "infinite": headroom is None, "limited_by": "time"}]}}
    return JobAudit(job=job, audited_at_ms=at_ms, thresholds={"min_headroom_s": min_headroom},
                    observation=obs, checkpoint={"bytes": ck_bytes, "files": ck_files, "stale_tmp_files": [],
                                                 "verdict": "PASS", "headline": "verdict: PASS"},
                    backup={"count": 1, "latest_age_s": 7200.0},
                    alerts=[{"code": c, "message": f"{c} message"} for c in alerts])


# --------------------------------------------------------------------------------------------------
# one job, with a scripted broker
# --------------------------------------------------------------------------------------------------


def _registry(tmp_path: Path, jobs: str) -> object:
    app = tmp_path / "app.py"
    app.write_text("")
    reg = tmp_path / "reg.yaml"
    reg.write_text(f"""
version: 1
allowed_roots: [{tmp_path}]
defaults:
  application: {app}
  backup_root: {tmp_path}/backups
  checkpoint: {tmp_path}/ck/{{name}}
jobs:
{jobs}
""")
    return load_registry(reg)


def test_audit_job_alerts_for_a_stalled_job_near_retention(tmp_path):
    write_checkpoint(tmp_path / "ck" / "orders", batches=5, sources=({"orders": 2},), records_per_batch=10)
    reg = _registry(tmp_path, "  - {name: orders, topics: [orders], stall_after_s: 10, min_headroom_s: 3600}")
    now = START_TIMESTAMP_MS + 120_000
    view = FakeView(latest={tp(0): 60, tp(1): 50}, record_ts={tp(0): START_TIMESTAMP_MS + 5_000}, now_ms=now,
                    retention_ms=1_800_000)
    audit = audit_job(reg.get("orders"), view=view, checks=AuditChecks(verdict=False), now_ms=now)
    assert audit.status == "STALLED" and audit.failed
    assert [a["code"] for a in audit.alerts] == ["STALLED", "HEADROOM_LOW"]
    assert audit.lag_records == 10 and audit.checkpoint["files"] > 0
    assert any("no backup" in w for w in audit.warnings)
    assert JobAudit.from_dict(json.loads(json.dumps(audit.to_dict()))).to_dict() == audit.to_dict()


def test_a_job_that_cannot_be_observed_fails_the_audit(tmp_path):
    reg = _registry(tmp_path, "  - {name: ghost, topics: [ghost]}")
    audit = audit_job(reg.get("ghost"), view=FakeView(latest={}), checks=AuditChecks(verdict=False))
    assert audit.status == "ERROR" and [a["code"] for a in audit.alerts] == ["AUDIT_ERROR"]
    assert "does not exist" in audit.error


def test_scan_checkpoint_reports_only_old_temp_files(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2)
    old = ck.write("offsets/.2.1234.tmp", b"half")
    fresh = ck.write("commits/.2.5678.tmp", b"x")
    now_s = time.time()
    os.utime(old, (now_s - 7200, now_s - 7200))
    os.utime(fresh, (now_s - 5, now_s - 5))
    scan = scan_checkpoint(ck.location, now_ms=int(now_s * 1000))
    assert [t["path"] for t in scan["stale_tmp_files"]] == ["offsets/.2.1234.tmp"]
    assert scan["stale_tmp_files"][0]["age_s"] == pytest.approx(7200, abs=5)
    assert scan["files"] == len([p for p in Path(ck.location).rglob("*") if p.is_file()])
    assert scan["bytes"] == sum(p.stat().st_size for p in Path(ck.location).rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------------
# history, growth, report files
# --------------------------------------------------------------------------------------------------


def test_history_keeps_samples_and_growth_is_against_the_previous_run():
    h = AuditHistory()
    h.append(1_000, [_audit("a", at_ms=1_000, ck_bytes=1000, ck_files=10)])
    h.append(2_000, [_audit("a", at_ms=2_000, ck_bytes=1500, ck_files=12), _audit("b", at_ms=2_000)])
    assert [s.at_ms for s in h.samples_for("a")] == [1_000, 2_000]
    assert h.previous("b")["checkpoint_bytes"] == 1000
    grown = with_growth(_audit("a", ck_bytes=1400, ck_files=11), h.previous("a"))
    assert (grown.checkpoint["bytes_growth"], grown.checkpoint["files_growth"]) == (-100, -1)
    h.append(3_000, [], keep=2)
    assert [r["at_ms"] for r in h.runs] == [2_000, 3_000]


def test_write_report_files_latest_history_and_pruning(tmp_path):
    out = str(tmp_path / "audit")
    for i in range(4):
        t = START_TIMESTAMP_MS + i * 3_600_000
        audits = [_audit("orders", at_ms=t, lag=10 * i, ck_bytes=1000 + 100 * i),
                  _audit("clicks", at_ms=t, status="STALLED", alerts=["STALLED"], lag=500 * i, seconds=60.0 * i),
                  _audit("profiles", at_ms=t, status="IDLE", headroom=None)]
        rep = write_report(audits, out, now_ms=t, keep_runs=3)
    assert rep.failed == {"clicks": [{"code": "STALLED", "message": "STALLED message"}]}
    files = sorted(p.name for p in (tmp_path / "audit").iterdir())
    assert HISTORY_FILE in files and {"latest.json", "latest.md", "latest.png"} <= set(files)
    assert len([f for f in files if f.startswith("audit-2") and f.endswith(".json")]) == 3   # pruned to 3 runs
    doc = json.loads((tmp_path / "audit" / "latest.json").read_text())
    assert doc["summary"]["failed_jobs"] == {"clicks": ["STALLED"]}
    assert [j["job"] for j in doc["jobs"]] == ["clicks", "orders", "profiles"]
    assert doc["jobs"][1]["checkpoint"]["bytes_growth"] == 100
    hist = json.loads((tmp_path / "audit" / HISTORY_FILE).read_text())
    assert len(hist["runs"]) == 3 and hist["runs"][-1]["jobs"]["clicks"]["alerts"] == ["STALLED"]
    md = (tmp_path / "audit" / "latest.md").read_text()
    assert "**1 of 3 jobs need attention:** `clicks` (STALLED)" in md
    assert "![lag and retention headroom per job over the last runs](latest.png)" in md
    assert "1.3 KiB (+100 B)" in md
    assert (tmp_path / "audit" / "latest.png").read_bytes().startswith(PNG)
    assert Path(rep.paths["png"]).read_bytes() == (tmp_path / "audit" / "latest.png").read_bytes()


def test_write_report_on_an_fsspec_url():
    import fsspec

    out = f"memory://aks-audit-{time.time_ns()}"
    rep = write_report([_audit("orders")], out, now_ms=START_TIMESTAMP_MS)
    fs = fsspec.filesystem("memory")
    assert fs.cat_file(rep.paths["json"].removeprefix("memory://"))
    assert AuditHistory.load(out).previous("orders")["status"] == "OK"


def test_damaged_history_restarts_trends_instead_of_failing(tmp_path):
    (tmp_path / HISTORY_FILE).write_text("{not json")
    assert AuditHistory.load(str(tmp_path)).runs == []


def test_markdown_lists_alerts_warnings_and_partitions():
    a = _audit("near", alerts=["HEADROOM_LOW"], lag=20, seconds=3300.0, headroom=300.0, min_headroom=1800.0)
    a.warnings.append("pre-deploy check: verdict: WARN")
    md = render_markdown([a, _audit("fine")], START_TIMESTAMP_MS, chart_name="x.png")
    assert "| `near` | **FAIL** | OK | 20 | 55.0 min | 5.0 min | 30.0 min |" in md
    assert "- `near` **HEADROOM_LOW**: HEADROOM_LOW message" in md
    assert "- `near`: pre-deploy check: verdict: WARN" in md
    assert "| t-0 | 10 | 0 | 30 | 20 | 55.0 min | record-timestamp | 5.0 min | time |" in md


@pytest.mark.parametrize("runs", [0, 1, 30])
def test_chart_renders_for_any_history_length(runs):
    h = AuditHistory()
    for i in range(runs):
        t = START_TIMESTAMP_MS + i * 3_600_000
        h.append(t, [_audit(f"job{j}", at_ms=t, lag=i * j, seconds=float(i), status="WARN" if j == 2 else "OK",
                            headroom=None if j == 3 else 7200.0 - 100 * i) for j in range(15)])
    png = render_chart(h.runs)
    assert png.startswith(PNG) and len(png) > 10_000
