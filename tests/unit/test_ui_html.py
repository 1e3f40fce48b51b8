"""The streaming-jobs page's HTML (pure rendering; the real page is tested in a browser in tests/ui)."""

from __future__ import annotations

from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.ui import html
from airflow_kafka_spark.ui.jobs import HistoryPoint, JobView, SafeRestart
from airflow_kafka_spark.watch.observation import Alert

SPEC = JobSpec(name="orders", application="/apps/orders_job.py", topics=("orders",), checkpoint="/data/ck/orders",
               backup_root="/data/backups", stop_marker="/data/ck/orders.stop")


def test_a_job_that_cannot_be_observed_is_an_error_row_with_its_reason_escaped():
    view = JobView(spec=SPEC, observation=None, error="broker <b>down</b>", alerts=[Alert("AUDIT_ERROR", "x <y>")],
                   driver=None, last_restart=None, verdict=None)
    page = html.jobs_page([view], base="/streaming-jobs", generated_at_ms=0, registry_path="/r.yaml")
    assert 'data-job="orders"' in page and ">ERROR<" in page
    assert "<b>down</b>" not in page and "broker &lt;b&gt;down&lt;/b&gt;" in page
    assert 'href="/streaming-jobs/jobs/orders/restart"' in page and "no audit yet" in page


def test_the_newest_safe_restart_entry_is_the_one_shown():
    history = [{"id": "a1", "at_ms": 1, "event": "safe_restart", "actor": "ann", "details": {"outcome": "FAILED"}},
               {"id": "b2", "at_ms": 2, "event": "lease_released", "actor": "x", "details": {}},
               {"id": "c3", "at_ms": 3, "event": "safe_restart", "actor": "bob",
                "details": {"outcome": "SUCCESS", "mode": "keep", "verdict_after": {"verdict": "PASS"}}}]
    newest = SafeRestart.newest(history)
    assert (newest.entry_id, newest.actor, newest.outcome, newest.mode, newest.verdict_after) == (
        "c3", "bob", "SUCCESS", "keep", "PASS")
    assert SafeRestart.newest(history[1:2]) is None


def test_chart_draws_known_points_and_says_how_many_had_no_value():
    points = [HistoryPoint(at_ms=1_000 * i, status="OK", lag_records=v, lag_seconds=None, headroom_s=None,
                           headroom_infinite=True) for i, v in enumerate([10, None, 30])]
    svg = html.svg_chart(points, "lag_records", "Lag (records)", seconds=False)
    assert 'data-points="2"' in svg and svg.count("<circle") == 2 and "1 point(s) without a value" in svg
    assert "no values yet" in html.svg_chart(points, "headroom_s", "Headroom", seconds=True)


def test_restart_form_posts_the_job_to_the_safe_restart_dag():
    form = html.restart_form("orders", base="/streaming-jobs")
    assert 'data-job="orders"' in form and 'data-api="/api/v2/dags/streaming_safe_restart/dagRuns"' in form
    assert 'name="job" value="orders" readonly' in form and "reset-preserve" in form
