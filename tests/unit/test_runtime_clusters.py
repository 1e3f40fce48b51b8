"""Cluster-manager REST requests (Kubernetes, standalone) and where the YARN RM address comes from.

No Kubernetes cluster or standalone master can run here: these tests check the exact requests the
product sends (method, path, query, bearer token) against a local HTTP server that records them and
answers as the API documents, and how the answers are read. YARN runs for real in tests/cluster.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.runtime import clusters, drivers
from airflow_kafka_spark.runtime.clusters import ClusterEndpoint


class Recorder:
    """A real HTTP server on 127.0.0.1 answering canned JSON per (method, path) and recording every request."""

    def __init__(self, routes: dict[tuple[str, str], tuple[int, object]]) -> None:
        self.routes = routes
        self.seen: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                outer.seen.append({"method": self.command, "path": path, "query": query,
                                   "auth": self.headers.get("Authorization"),
                                   "body": self.rfile.read(length).decode() if length else ""})
                status, body = outer.routes.get((self.command, path), (404, {"message": "not found"}))
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    made: list[Recorder] = []

    def make(routes):
        made.append(Recorder(routes))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_kubernetes_driver_status_kill_log_and_tag_lookup_send_the_documented_requests(server, tmp_path):
    pod = "/api/v1/namespaces/streaming/pods/orders-3f9a-driver"
    api = server({("GET", pod): (200, {"status": {"phase": "Running"}}),
                  ("DELETE", pod): (200, {"kind": "Pod"}),
                  ("GET", pod + "/log"): (200, "line 1\n\nTraceback (most recent call last):\nValueError: boom\n"),
                  ("GET", "/api/v1/namespaces/streaming/pods"): (200, {"items": [
                      {"metadata": {"name": "old-driver", "creationTimestamp": "2026-01-01T00:00:00Z"},
                       "status": {"phase": "Running"}},
                      {"metadata": {"name": "new-driver", "creationTimestamp": "2026-02-01T00:00:00Z"},
                       "status": {"phase": "Failed"}}]})})
    token = tmp_path / "token"
    token.write_text("s3cr3t-token\n")
    ep = clusters.k8s_endpoint(f"k8s://{api.url}", spark_conf={"spark.kubernetes.namespace": "streaming"},
                               conn_extra={}, env={clusters.K8S_TOKEN_FILE_ENV: str(token)})
    assert ep.to_dict()["token_file"] == str(token) and "s3cr3t" not in json.dumps(ep.to_dict())
    ctl = drivers.control(DriverInfo(kind=DriverKind.K8S.value, id="streaming:orders-3f9a-driver"),
                          endpoint=ep.to_dict())
    assert ctl.is_alive()
    assert "ValueError: boom" in ctl.log_tail()
    ctl.kill()
    assert drivers.find_by_tag(ep, "aks-orders-1") == "streaming:new-driver"
    assert [(r["method"], r["path"]) for r in api.seen] == [
        ("GET", pod), ("GET", pod + "/log"), ("DELETE", pod), ("GET", "/api/v1/namespaces/streaming/pods")]
    assert all(r["auth"] == "Bearer s3cr3t-token" for r in api.seen)
    assert api.seen[1]["query"] == "tailLines=40"
    assert api.seen[3]["query"] == "labelSelector=spark-role%3Ddriver%2Caks-tag%3Daks-orders-1"
    # a submit asks for the live drivers on its checkpoint (a killed submit's orphan): the checkpoint label, live phases
    assert drivers.tagged_drivers(ep, "aks-ck-1", checkpoint=True, alive_only=True) == ["streaming:old-driver"]
    assert api.seen[4]["query"] == "labelSelector=spark-role%3Ddriver%2Caks-checkpoint%3Daks-ck-1"

    api.routes[("GET", pod)] = (200, {"status": {"phase": "Failed", "reason": "Error"}})
    assert not ctl.is_alive() and ctl.describe() == "pod streaming/orders-3f9a-driver Failed: Error"
    del api.routes[("GET", pod)]          # a deleted pod (404) has ended
    assert not ctl.is_alive()
    api.routes[("GET", pod)] = (503, {"message": "etcd down"})
    assert ctl.is_alive(), "an API server that cannot answer must count as alive (never two drivers)"


def test_standalone_driver_status_and_kill_through_the_rest_submission_server(server):
    drv = "driver-20260131120000-0007"
    master = server({("GET", f"/v1/submissions/status/{drv}"): (200, {
                         "action": "SubmissionStatusResponse", "driverState": "RUNNING", "success": True}),
                     ("POST", f"/v1/submissions/kill/{drv}"): (200, {"action": "KillSubmissionResponse",
                                                                     "success": True})})
    host, port = master.url.removeprefix("http://").split(":")
    ep = clusters.standalone_endpoint(f"spark://{host}:7077", spark_conf={"spark.master.rest.port": port},
                                      conn_extra={})
    assert ep.urls == (master.url,)
    ctl = drivers.control(DriverInfo(kind=DriverKind.STANDALONE.value, id=drv), endpoint=ep)
    assert ctl.is_alive()
    ctl.kill()
    assert [(r["method"], r["path"]) for r in master.seen] == [
        ("GET", f"/v1/submissions/status/{drv}"), ("POST", f"/v1/submissions/kill/{drv}")]
    master.routes[("GET", f"/v1/submissions/status/{drv}")] = (200, {"driverState": "FAILED", "success": True,
                                                                     "message": "Exception in thread main\n..."})
    assert not ctl.is_alive() and ctl.describe() == f"{drv} FAILED: Exception in thread main"
    assert drivers.find_by_tag(ep, "x") is None
    assert drivers.tagged_drivers(ep, "x", checkpoint=True, alive_only=True) is None   # a master cannot list by tag


def test_rm_address_order_registry_then_connection_then_yarn_site(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "yarn-site.xml").write_text(
        "<configuration>"
        "<property><name>yarn.resourcemanager.ha.enabled</name><value>true</value></property>"
        "<property><name>yarn.resourcemanager.ha.rm-ids</name><value>rm1,rm2</value></property>"
        "<property><name>yarn.resourcemanager.webapp.address.rm1</name><value>rm1.example:8088</value></property>"
        "<property><name>yarn.resourcemanager.hostname.rm2</name><value>rm2.example</value></property>"
        "</configuration>")
    env = {"HADOOP_CONF_DIR": str(conf), "HADOOP_USER_NAME": "etl"}
    site = clusters.yarn_endpoint(spark_conf={}, conn_extra={}, env=env)
    assert site.urls == ("http://rm1.example:8088", "http://rm2.example:8088") and site.user == "etl"
    conn = clusters.yarn_endpoint(spark_conf={}, conn_extra={"yarn-rm-webapp": "https://rm.conn:8090"}, env=env)
    assert conn.urls == ("https://rm.conn:8090",)
    job = clusters.yarn_endpoint(spark_conf={clusters.RM_WEBAPP_CONF: "rm.job:8088"},
                                 conn_extra={"yarn-rm-webapp": "https://rm.conn:8090"}, env=env)
    assert job.urls == ("http://rm.job:8088",)
    assert ClusterEndpoint.from_dict(job.to_dict()) == job
    with pytest.raises(UserError, match=r"ResourceManager's web address is unknown.*HADOOP_CONF_DIR"):
        clusters.yarn_endpoint(spark_conf={}, conn_extra={}, env={})
    with pytest.raises(UserError, match="recorded cluster endpoint is unreadable"):
        ClusterEndpoint.from_dict({"kind": "mesos", "urls": []})


def test_a_local_driver_seen_from_another_host_fails_at_once_naming_the_fix():
    info = DriverInfo(kind=DriverKind.LOCAL.value, id="1", host=socket.gethostname() + "-elsewhere")
    with pytest.raises(drivers.WrongHost, match=r"use cluster deploy mode.*or run the Airflow worker and triggerer "
                                                r"on the submitting host"):
        drivers.control(info).is_alive()


def test_a_cluster_submit_that_cannot_ask_the_resource_manager_stops_in_one_line_before_submitting(tmp_path):
    """The checks before a cluster submit need the manager's answer ("does a driver run on this checkpoint?"); a
    ResourceManager that does not answer is asked again for a while, then the submit stops with one line, having
    started nothing. Nothing listens on the address (a real refused connection, no stub)."""
    import logging

    from airflow_kafka_spark.registry.model import JobSpec
    from airflow_kafka_spark.runtime import detach, unrecorded
    from devstack.broker import free_port

    spec = JobSpec(name="orders", application="/apps/job.py", topics=("orders",),
                   checkpoint=str(tmp_path / "ck"), backup_root=str(tmp_path / "bk"),
                   stop_marker=str(tmp_path / "ck.stop"), spark_conn_id="spark_yarn", deploy_mode="cluster")
    ep = ClusterEndpoint(kind=DriverKind.YARN.value, urls=(f"http://127.0.0.1:{free_port()}",))
    search = unrecorded.ClusterSearch(spec, endpoint=ep, mode=detach.DETACH_YARN, holder="dag/run_1/submit",
                                      log=logging.getLogger("test"), ask_wait_s=1.0, poll_s=0.1)
    with pytest.raises(UserError) as info:
        search.adopt_before_submit()
    msg = str(info.value)
    assert "cannot ask the cluster manager whether a driver runs on checkpoint" in msg and "retry" in msg
    assert "\n" not in msg and "Traceback" not in msg
    assert not (tmp_path / "ck").exists()
