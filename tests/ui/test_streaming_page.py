"""Issue 13 acceptance for the UI page: the Streaming jobs page in a real browser, behind Airflow's real login.

One real setup, shared by the checks (module fixture): the broker, one registry job started by the
real ``SubmitStreamingJobOperator`` (``dag.test()``; the reference job under spark-submit, recorded in
the lifecycle record) and left with a stable lag (a 1 h trigger after a first batch capped by
``maxOffsetsPerTrigger``; nothing is produced after the start), one ``aks audit`` run (the verdict
column and a history point), one ``airflow api-server`` with SimpleAuthManager (the dev setup), and
headless Chromium (Debian's ``chromium``) driven over the DevTools protocol (tests/support/browser.py).

What is asserted: an anonymous browser is sent to Airflow's login page and the app refuses
anonymous HTTP; after signing in through that login page the job's row shows the numbers that
``aks lag --json`` prints for the same job right after (records equal; seconds equal after adding the
time between the two looks: it is the age of the first unread record), the same status, the driver
the submit recorded, the audit's verdict; the job page has the history chart; the restart link opens
the trigger form for that job, and submitting it (dry run) creates a run of the safe-restart DAG through
Airflow's REST API with the user's session; an unknown job is a one-line 404; the Kafka connection's
password is nowhere in the pages. A DStream job of the registry (its position committed to its
consumer group with a real consumer, as ``commitAsync`` leaves it) has a row with its group's lag,
equal to ``aks lag --json`` for it. Screenshots are kept under ``test-artifacts/ui/`` (path printed).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from devstack import topics
from devstack.airflow_services import AirflowServices, sync_dags_folder
from devstack.produce import produce
from tests.airflow.conftest import REPO
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, new_dag, run_inline, write_registry
from tests.support.browser import Browser
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.ui, pytest.mark.airflow, pytest.mark.integration]

JOB = "ui-orders"
PARTS = 3
SECRET = f"ui-s3cr3t-{uuid.uuid4().hex}"
ARTIFACTS = Path(os.environ.get("AKS_TEST_ARTIFACTS", REPO / "test-artifacts")) / "ui"
AKS = Path(sys.executable).with_name("aks")


DSTREAM_JOB = "ui-dstream"
DSTREAM_GROUP = f"ui-dstream-{uuid.uuid4().hex[:8]}"


def _commit_group(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    """What a DStream job's ``commitAsync`` leaves in Kafka: the group's committed offsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": DSTREAM_GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


class Stack:
    def __init__(self, registry: Path, data: Path, services: AirflowServices) -> None:
        self.registry, self.data, self.services = registry, data, services
        self.checkpoint = data / "checkpoints" / JOB
        self.url = services.url

    def aks(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(AKS), *args, "--registry", str(self.registry)], capture_output=True, text=True,
                              timeout=180, cwd=REPO)

    def lag_json(self, job: str = JOB) -> dict:
        run = self.aks("lag", "--job", job, "--json")
        assert run.returncode == 0, run.stderr[-2000:]
        return json.loads(run.stdout)


@pytest.fixture(scope="module")
def stack(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-ui")
    data = base / "data"
    data.mkdir()
    topic = f"ui-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTS)
    produce(broker.bootstrap_servers, topic, 90, partitions=PARTS)
    registry = write_registry(base / "streaming_jobs.yaml", [
        {"name": JOB, "topics": [topic], "max_offsets_per_trigger": 30, "stall_after_s": 3600,
         "application_args": ["--trigger", "processing:3600s"]},
        {"name": DSTREAM_JOB, "kind": "dstream", "group": DSTREAM_GROUP, "topics": [topic], "stall_after_s": 3600}])
    _commit_group(broker.bootstrap_servers, topic, {0: 10, 1: 20, 2: 30})   # a DStream job's position
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers, **{
        "sasl.username": "svc-streaming", "sasl.password": SECRET}))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    checkpoint = data / "checkpoints" / JOB
    services = AirflowServices(airflow_home, base)
    driver_pid = None
    try:
        from airflow_kafka_spark.operators.streaming import SubmitStreamingJobOperator

        with new_dag() as dag:
            SubmitStreamingJobOperator(task_id="submit", job=JOB)
        assert run_inline(dag).states == {"submit": "success"}
        driver_pid = int(LifecycleRecord.load(str(checkpoint)).driver.id)
        wait_until(lambda: read_checkpoint(str(checkpoint)).latest_committed is not None, timeout=300, interval=1,
                   what="the job's first committed batch")
        stack = Stack(registry, data, services)
        audit = stack.aks("audit", "--job", JOB)
        assert audit.returncode in (0, 3), audit.stderr[-2000:]
        sync_dags_folder("streaming_safe_restart")     # the restart form triggers it through the REST API
        seconds = services.start_api_server()
        print(f"\n[ui] api-server up in {seconds:.1f}s")
        yield stack
    finally:
        services.stop()
        if driver_pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver_pid, signal.SIGKILL)
        mp.undo()


def _row(b: Browser, job: str = JOB) -> dict:
    return b.js(f"""(() => {{
      const tr = document.querySelector('tr[data-job="{job}"]');
      const f = (n) => tr.querySelector('[data-field="' + n + '"]');
      return {{observed_at: Number(tr.dataset.observedAt),
               records: f('lag-records').dataset.value, records_text: f('lag-records').innerText,
               seconds: f('lag-seconds').dataset.value, status: f('status').innerText,
               driver: f('driver').innerText, verdict: f('verdict').innerText,
               restart_href: f('restart-link').href, headroom: f('headroom').innerText,
               html: document.documentElement.outerHTML}};
    }})()""")


def test_anonymous_visitors_are_sent_to_login_and_refused(stack):
    r = httpx.get(f"{stack.url}/streaming-jobs/", headers={"Accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/auth/login"), (r.status_code, r.headers)
    for path in ("/streaming-jobs/", f"/streaming-jobs/jobs/{JOB}", "/streaming-jobs/metrics"):
        r = httpx.get(f"{stack.url}{path}")
        assert r.status_code == 401 and JOB not in r.text, (path, r.status_code, r.text[:300])
    r = httpx.get(f"{stack.url}/streaming-jobs/", headers={"Authorization": "Bearer not-a-token"})
    assert r.status_code == 403, r.text[:300]
    with Browser() as b:
        b.goto(f"{stack.url}/streaming-jobs/")
        b.wait_for("location.pathname.startsWith('/auth/login') && !!document.querySelector('input[name=password]')",
                   what="Airflow's login page")
        assert "_token" not in b.cookies()
        assert not b.js(f"!!document.querySelector('tr[data-job=\"{JOB}\"]')")


def test_signed_in_page_shows_the_job_with_the_numbers_of_aks_lag(stack):
    passwords = json.loads((stack.services.home / "simple_auth_manager_passwords.json.generated").read_text())
    user, password = next(iter(passwords.items()))
    with Browser() as b:
        b.goto(f"{stack.url}/streaming-jobs/")
        b.wait_for("!!document.querySelector('input[name=password]')", what="the login form")
        b.type_into("input[name=username]", user)
        b.type_into("input[name=password]", password)
        b.click("button[type=submit]")
        b.wait_for(f"location.pathname === '/streaming-jobs/' && !!document.querySelector('tr[data-job=\"{JOB}\"]')",
                   what="the streaming jobs page after the login")
        row = _row(b)
        cli = stack.lag_json()
        assert "_token" in b.cookies()
        shot = b.screenshot(ARTIFACTS / "streaming-jobs.png")
        print(f"\n[ui] screenshot {shot}")
        # the same numbers as `aks lag --json`, looked at right after
        assert int(row["records"]) == cli["lag_records_effective"] > 0, (row, cli["lag_records_effective"])
        assert row["records_text"] == f"{cli['lag_records_effective']:,}"
        gap_s = (cli["observed_at_ms"] - row["observed_at"]) / 1000
        assert 0 <= gap_s < 180   # a sanity bound: the two looks are seconds apart (more on a loaded machine)
        assert abs(cli["lag_seconds"] - float(row["seconds"]) - gap_s) < 1.5, (row["seconds"], cli["lag_seconds"],
                                                                              gap_s)
        assert row["status"] == cli["status"], (row["status"], cli["status"], cli["reason"])
        record = LifecycleRecord.load(str(stack.checkpoint))
        assert f"local-pid {record.driver.id}" in row["driver"] and "reference_job.py" in row["driver"]
        latest = json.loads((stack.data / "audit" / "latest.json").read_text())   # what `aks audit` wrote
        assert row["verdict"].split()[0] == latest["jobs"][0]["checkpoint"]["verdict"], row["verdict"]
        assert SECRET not in row["html"] and "sasl.password" not in row["html"]
        print(f"[ui] page: {row['records']} records, {float(row['seconds']):.1f} s, {row['status']}; "
              f"aks lag: {cli['lag_records_effective']} records, {cli['lag_seconds']:.1f} s, {cli['status']} "
              f"({gap_s:.2f} s later)")

        # the DStream job: its row is its consumer group's position (no checkpoint), as `aks lag` says
        ds, ds_cli = _row(b, DSTREAM_JOB), stack.lag_json(DSTREAM_JOB)
        assert int(ds["records"]) == ds_cli["lag_records_effective"] == 90 - (10 + 20 + 30), (ds, ds_cli)
        assert ds["status"] == ds_cli["status"], (ds["status"], ds_cli["status"], ds_cli["reason"])
        assert "no driver recorded" in ds["driver"], ds["driver"]
        assert ds["restart_href"].endswith(f"/jobs/{DSTREAM_JOB}/restart"), ds["restart_href"]

        # the job page: the history chart (the audit's point + the live one) and the partitions
        b.goto(f"{stack.url}/streaming-jobs/jobs/{JOB}")
        b.wait_for("!!document.querySelector('figure[data-chart=\"lag_records\"] svg')", what="the history chart")
        assert b.js("Number(document.querySelector('figure[data-chart=\"lag_records\"]').dataset.points)") >= 2
        assert b.js("document.querySelectorAll('tr[data-partition]').length") == PARTS
        print(f"[ui] screenshot {b.screenshot(ARTIFACTS / 'streaming-job.png')}")

        # the restart link opens the trigger form for this job; a dry run goes through Airflow's REST API
        b.goto(row["restart_href"])
        b.wait_for("!!document.querySelector('form#restart')", what="the safe-restart form")
        assert b.js("document.querySelector('input[name=job]').value") == JOB
        b.type_into("input[name=reason]", "ui test (dry run)")
        b.click("button[type=submit]")
        text = b.wait_for("(() => { const t = document.getElementById('result').innerText; "
                          "return t.startsWith('started') || t.startsWith('refused') ? t : ''; })()",
                          what="the trigger's answer")
        assert text.startswith("started run"), text

        # inside Airflow's own UI: the nav entry's route shows the page in an iframe (same origin, same session)
        b.goto(f"{stack.url}/plugin/streaming-jobs")
        b.wait_for(f"(() => {{ const f = document.querySelector('iframe'); return !!f && !!f.contentDocument && "
                   f"!!f.contentDocument.querySelector('tr[data-job=\"{JOB}\"]'); }})()",
                   what="the page in Airflow's iframe", timeout=90)
        assert b.js("document.querySelector('iframe').getAttribute('src')").endswith("/streaming-jobs/")
        print(f"[ui] screenshot {b.screenshot(ARTIFACTS / 'airflow-ui-streaming-jobs.png')}")

        # an unknown job: one line, 404
        r = httpx.get(f"{stack.url}/streaming-jobs/jobs/no-such-job", cookies={"_token": b.cookies()["_token"]})
        assert r.status_code == 404 and r.text.count("\n") == 1 and "unknown job 'no-such-job'" in r.text, r.text
    client = stack.services.client()
    run = client.get("/api/v2/dags/streaming_safe_restart/dagRuns").json()["dag_runs"][-1]
    assert run["conf"]["job"] == JOB and run["conf"]["dry_run"] is True, run["conf"]
    plugin = next(p for p in client.get("/api/v2/plugins").json()["plugins"] if p["name"] == "airflow_kafka_spark")
    assert [v["url_route"] for v in plugin["external_views"]] == ["streaming-jobs"]


def test_metrics_endpoint_needs_a_token_and_serves_the_job(stack):
    """The plugin's /metrics: Prometheus text of the metrics module for the registry job (a bearer token)."""
    r = stack.services.client().get("/streaming-jobs/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.text[:500]
    lines = {ln.split('group="', 1)[1].split('"', 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in r.text.splitlines()
             if ln.startswith("kafka_consumergroup_group_sum_lag{")}
    assert set(lines) == {JOB, DSTREAM_GROUP}, r.text[:2000]   # a DStream job is labelled with its real group
    assert lines[JOB] == stack.lag_json()["lag_records"]
    assert lines[DSTREAM_GROUP] == stack.lag_json(DSTREAM_JOB)["lag_records"] == 90 - (10 + 20 + 30)
    assert SECRET not in r.text
