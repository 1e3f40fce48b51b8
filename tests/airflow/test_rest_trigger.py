"""Triggering ``streaming_safe_restart`` through Airflow's REST API, as the UI's trigger form does.

A real ``airflow api-server`` runs in a subprocess on a free 127.0.0.1 port against this session's
SQLite DB, with the default SimpleAuthManager: a token from ``POST /auth/token`` (the admin
password the server generates), then ``POST /api/v2/dags/{dag_id}/dagRuns``. The DAG's typed
Params are the validation: a UI-style conf is accepted (the run is created, and stays queued: no
scheduler runs in this module and new DAGs start paused; test_scheduled_run.py runs such a run to
the end with the scheduler and the triggerer), while an unknown job, a path-like job name or a
malformed backup id is refused with HTTP 400 before any run exists.
"""

from __future__ import annotations

import httpx
import pytest

from devstack.airflow_services import AirflowServices, sync_dags_folder
from tests.airflow.conftest import TIMINGS
from tests.support.airflow_env import write_registry

pytestmark = pytest.mark.airflow

DAG_ID = "streaming_safe_restart"


def ui_conf(**overrides: object) -> dict[str, object]:
    """Every field of the trigger form, the way the UI sends them (unset optional fields as null)."""
    return {"job": "orders", "mode": "auto", "backup_id": None, "datetime": None, "dry_run": False,
            "accept_data_loss": False, "reason": "deploy 2026-01-31", **overrides}


@pytest.fixture(scope="module")
def api(airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-rest")
    registry = write_registry(base / "streaming_jobs.yaml",
                              [{"name": "orders", "topics": ["orders"]}, {"name": "payments", "topics": ["payments"]}])
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(base / "data"))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    sync_dags_folder(DAG_ID)

    services = AirflowServices(airflow_home, base)
    try:
        TIMINGS["api-server start"] = services.start_api_server()
        client = services.client()
        yield client
        client.close()
    finally:
        services.stop()
        mp.undo()


def _runs(client: httpx.Client) -> list[dict]:
    r = client.get(f"/api/v2/dags/{DAG_ID}/dagRuns", params={"limit": 100})
    assert r.status_code == 200, r.text
    return r.json()["dag_runs"]


def test_the_trigger_form_is_typed_from_the_registry(api):
    r = api.get(f"/api/v2/dags/{DAG_ID}/details")
    assert r.status_code == 200, r.text
    details = r.json()
    assert details["max_active_runs"] == 1
    params = details["params"]
    assert params["job"]["schema"]["enum"] == ["orders", "payments"]
    assert params["mode"]["value"] == "auto"
    assert params["mode"]["schema"]["enum"] == ["auto", "keep", "reset-preserve", "reset-earliest", "reset-latest",
                                                "reset-to-datetime", "restore"]
    assert params["dry_run"]["schema"]["type"] == "boolean"
    assert params["backup_id"]["schema"]["type"] == ["null", "string"]


def test_a_ui_style_conf_is_accepted_and_bad_job_names_are_refused(api):
    before = {r["dag_run_id"] for r in _runs(api)}
    ok = api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": ui_conf()})
    assert ok.status_code == 200, ok.text
    run = ok.json()
    assert run["state"] == "queued" and run["conf"]["job"] == "orders" and run["triggered_by"] == "rest_api"

    refused = {
        "unknown job": ui_conf(job="nope"),
        "path-like job": ui_conf(job="../x"),
        "absolute path as job": ui_conf(job="/etc/passwd"),
        "unknown mode": ui_conf(mode="nuke"),
        "malformed backup id": ui_conf(mode="restore", backup_id="../../backups/other"),
        "job missing": {k: v for k, v in ui_conf().items() if k != "job"},
    }
    for what, conf in refused.items():
        r = api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        assert r.status_code in (400, 422), (what, r.status_code, r.text)
        if what.endswith("job"):
            assert "job" in r.text, (what, r.text)
    # Extra, unknown body fields are refused by the API model itself.
    r = api.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": ui_conf(),
                                                          "execution_date": None})
    assert r.status_code == 422, r.text

    after = {r["dag_run_id"] for r in _runs(api)}
    assert after - before == {run["dag_run_id"]}          # exactly the accepted run was created
    assert api.delete(f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}").status_code == 204
