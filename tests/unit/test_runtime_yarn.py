"""The ResourceManager REST client: parsing of real RM/NM answers and the HTTP transport logic.

The JSON and log files under data/yarn_rm/ were captured from the dev minicluster (Hadoop 3.4.1,
the unshaded RM, which answers exactly like a production RM) while it ran the reference job in
YARN cluster mode. The transport tests replay them from a stdlib HTTP server: HA order, standby
redirects, the kill request, timeouts and the one-line errors are pure client logic.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_kafka_spark.runtime.yarn import (
    ApplicationNotFound,
    AppState,
    FinalStatus,
    ResourceManager,
    YarnApp,
    YarnError,
    check_app_id,
    parse_apps,
)

DATA = Path(__file__).parent / "data" / "yarn_rm"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def app_json(name: str) -> dict:
    return load(name)["app"]


# -- parsing ---------------------------------------------------------------------------------
def test_running_app_is_alive_with_its_driver_container():
    app = YarnApp.from_json(app_json("app_running_committed.json"))
    assert app.state is AppState.RUNNING and app.final_status is FinalStatus.UNDEFINED
    assert app.alive and not app.succeeded
    assert app.name == "ref-orders"
    assert set(app.tags) == {"aks-build-1", "aks-dag-safe_restart"}
    assert app.am_container_id and app.am_container_id.startswith("container_") and app.id[12:] in app.am_container_id
    assert app.am_host_http_address.count(":") == 1


def test_failed_app_summary_is_one_line_with_the_cause():
    app = YarnApp.from_json(app_json("app_failed.json"))
    assert app.state is AppState.FAILED and app.final_status is FinalStatus.FAILED and not app.alive
    line = app.summary()
    assert "\n" not in line and line.startswith(f"{app.id} FAILED/FAILED: ")
    assert "exit" in app.diagnostics.lower()


def test_killed_and_accepted_apps():
    killed = YarnApp.from_json(app_json("app_killed.json"))
    assert killed.state is AppState.KILLED and killed.final_status is FinalStatus.KILLED and not killed.alive
    accepted = YarnApp.from_json(app_json("app_accepted.json"))
    assert accepted.state in (AppState.ACCEPTED, AppState.SUBMITTED, AppState.NEW_SAVING) and accepted.alive


def test_app_lists_empty_single_and_many():
    many = parse_apps(load("apps_all.json"))
    assert {a.name for a in many} == {"ref-orders", "ref-broken"}
    assert [a.name for a in parse_apps(load("apps_by_tag.json"))] == ["ref-orders"]
    assert parse_apps({"apps": None}) == []
    lone = load("apps_by_tag.json")["apps"]["app"][0]
    assert [a.id for a in parse_apps({"apps": {"app": lone}})] == [lone["id"]]


def test_unknown_state_and_bad_id_are_one_line_errors():
    bad = dict(app_json("app_running.json"), state="EXPLODED")
    with pytest.raises(YarnError, match="unexpected application record") as e:
        YarnApp.from_json(bad)
    assert "\n" not in str(e.value)
    with pytest.raises(YarnError, match="not a YARN application id"):
        check_app_id("12345")
    assert check_app_id("application_1795474406369_0002") == "application_1795474406369_0002"


# -- transport against a replaying server ----------------------------------------------------
class Replay:
    """A tiny HTTP server answering from captured files; records every request."""

    def __init__(self, routes: dict[tuple[str, str], tuple[int, bytes]], *, delay: float = 0.0):
        self.routes, self.calls, self.delay = routes, [], delay
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                path = self.path.split("?")[0]
                length = int(self.headers.get("Content-Length") or 0)
                outer.calls.append((method, self.path, self.rfile.read(length) if length else b"",
                                    dict(self.headers)))
                if outer.delay:
                    threading.Event().wait(outer.delay)
                status, body = outer.routes.get((method, path), (404, b'{"RemoteException":{"message":"nope"}}'))
                self.send_response(status)
                if status in (307,):
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._serve("GET")

            def do_PUT(self):
                self._serve("PUT")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


RUNNING = app_json("app_running_committed.json")
APP = RUNNING["id"]


@pytest.fixture
def rm():
    replay = Replay({
        ("GET", f"/ws/v1/cluster/apps/{APP}"): (200, json.dumps({"app": RUNNING}).encode()),
        ("GET", "/ws/v1/cluster/apps"): (200, (DATA / "apps_all.json").read_bytes()),
        ("PUT", f"/ws/v1/cluster/apps/{APP}/state"): (202, (DATA / "kill_response.json").read_bytes()),
        ("GET", "/ws/v1/cluster/apps/application_1_0001"): (404, (DATA / "app_unknown_404.json").read_bytes()),
        ("GET", "/ws/v1/cluster/info"): (200, (DATA / "cluster_info.json").read_bytes()),
    })
    yield replay
    replay.close()


def test_ha_skips_a_dead_rm_and_sticks_to_the_one_that_answered(rm):
    client = ResourceManager([closed_port_url(), rm.url], timeout=2)
    assert client.app(APP).state is AppState.RUNNING
    assert client.cluster_state() == "STARTED"
    assert client._active == 1 and len(rm.calls) == 2


def test_standby_redirect_is_skipped():
    standby = Replay({("GET", f"/ws/v1/cluster/apps/{APP}"): (307, b"")})
    active = Replay({("GET", f"/ws/v1/cluster/apps/{APP}"): (200, json.dumps({"app": RUNNING}).encode())})
    try:
        assert ResourceManager([standby.url, active.url]).app(APP).id == APP
        assert len(standby.calls) == 1 and len(active.calls) == 1
    finally:
        standby.close()
        active.close()


def test_no_rm_answers_is_one_line_naming_each():
    a, b = closed_port_url(), closed_port_url()
    with pytest.raises(YarnError, match="no ResourceManager answered") as e:
        ResourceManager(f"{a},{b}", timeout=1).app(APP)
    assert a in str(e.value) and b in str(e.value) and "\n" not in str(e.value)


def test_timeout_is_reported_not_hung():
    slow = Replay({("GET", f"/ws/v1/cluster/apps/{APP}"): (200, b"{}")}, delay=3)
    try:
        with pytest.raises(YarnError, match=r"timeout 0\.5s"):
            ResourceManager([slow.url], timeout=0.5).app(APP)
    finally:
        slow.close()


def test_unknown_app_is_application_not_found(rm):
    with pytest.raises(ApplicationNotFound, match="application_1_0001 not found"):
        ResourceManager([rm.url]).app("application_1_0001")


def test_kill_puts_killed_state_once_and_skips_ended_apps(rm):
    client = ResourceManager([rm.url], user="etl")
    client.kill(APP)
    puts = [c for c in rm.calls if c[0] == "PUT"]
    assert len(puts) == 1 and json.loads(puts[0][2]) == {"state": "KILLED"}
    assert "user.name=etl" in puts[0][1]
    rm.routes[("GET", f"/ws/v1/cluster/apps/{APP}")] = (200, (DATA / "app_killed.json").read_bytes())
    client.kill(APP)
    assert len([c for c in rm.calls if c[0] == "PUT"]) == 1


def test_find_by_tag_and_name_lowercases_the_tag(rm):
    client = ResourceManager([rm.url])
    found = client.find(tag="AKS-Build-1", name="ref-orders", states=[AppState.RUNNING])
    assert [a.name for a in found] == ["ref-orders"]
    query = rm.calls[-1][1]
    assert "applicationTags=aks-build-1" in query and "states=RUNNING" in query
    assert client.find(tag="aks-build-1", name="other") == []


def test_authenticate_hook_sees_every_request(rm):
    seen = []

    def negotiate(req):
        seen.append(req.full_url)
        req.add_header("Authorization", "Negotiate dG9rZW4=")

    ResourceManager([rm.url], authenticate=negotiate).app(APP)
    assert len(seen) == 1 and rm.calls[-1][3].get("Authorization") == "Negotiate dG9rZW4="


def test_html_instead_of_json_names_the_likely_mistake():
    html = Replay({("GET", f"/ws/v1/cluster/apps/{APP}"): (200, b"<html><body>Sorry</body></html>")})
    try:
        with pytest.raises(YarnError, match="not JSON"):
            ResourceManager([html.url]).app(APP)
    finally:
        html.close()


def test_driver_log_tail_reads_the_am_container_from_its_nodemanager():
    nm = Replay({})
    app = YarnApp.from_json(dict(RUNNING, amHostHttpAddress=nm.url.removeprefix("http://")))
    nm.routes[("GET", f"/ws/v1/node/containerlogs/{app.am_container_id}/stderr")] = (
        200, (DATA / "nm_container_stderr.txt").read_bytes())
    try:
        text = ResourceManager([nm.url]).driver_log_tail(app, max_bytes=4096)
        assert "LogType:stderr" in text and app.am_container_id in text
        assert "size=-4096" in nm.calls[-1][1]
        with pytest.raises(YarnError, match="has no stdout"):
            ResourceManager([nm.url]).driver_log_tail(app, file="stdout")
    finally:
        nm.close()


def test_bad_addresses_fail_at_construction():
    with pytest.raises(YarnError, match="http"):
        ResourceManager(["rm1:8088"])
