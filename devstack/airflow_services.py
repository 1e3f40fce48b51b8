"""Real Airflow server processes for tests and benches: the API server, and the scheduler and triggerer behind it.

Each component is the venv's ``airflow`` CLI in its own process group on the caller's SQLite DB
(the environment tests/airflow/conftest.py or the bench set), with its output in a log file that a
failure shows. :class:`AirflowServices` starts what a caller asks for and always stops all of it.
A component that dies or never answers raises :class:`ServiceError` with the tail of its log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

from devstack.broker import free_port


def sync_dags_folder(dag_id: str) -> None:
    """Parse the dags folder and store the serialized DAGs, the DAG processor's job.

    The API server and the scheduler read DAGs from the DB. Set
    ``AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL=0`` first: every ``dag.test()`` earlier in
    the session stored the DAG parsed with *its* registry, and a serialized DAG younger than that
    interval (30 s) is not rewritten.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag()
    assert dag_id in bag.dags, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)


class ServiceError(RuntimeError):
    """An Airflow component exited, did not answer, or a run did not end in time (its log's tail included)."""


class AirflowServices:
    """``airflow api-server`` on a free port, plus optional ``scheduler`` / ``triggerer``.

    The scheduler (LocalExecutor) runs task processes that reach the API server's execution API,
    so the server URL and one JWT secret are set for every component.
    """

    def __init__(self, home: Path, logs: Path, env: dict[str, str] | None = None) -> None:
        self.home, self.logs = home, logs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **(env or {}),
                    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                    "AIRFLOW__API__BASE_URL": self.url,
                    "AIRFLOW__API_AUTH__JWT_SECRET": os.environ.get("AIRFLOW__API_AUTH__JWT_SECRET")
                    or uuid.uuid4().hex}
        # The log servers of the scheduler's workers and of the triggerer listen on fixed ports by default
        # (8793, 8794): free ones, so that two stacks (./bin/test's two shards) can run on one machine.
        for key in ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"):
            self.env.setdefault(key, str(free_port()))
        self.procs: dict[str, tuple[subprocess.Popen, Path]] = {}

    def start(self, component: str, *args: str) -> None:
        log = self.logs / f"{component}.log"
        exe = Path(sys.executable).with_name("airflow")
        with open(log, "wb") as fh:
            self.procs[component] = (subprocess.Popen([str(exe), component, *args], stdout=fh,
                                                      stderr=subprocess.STDOUT, env=self.env,
                                                      start_new_session=True), log)

    def start_api_server(self, timeout: float = 120) -> float:
        """Start the API server and wait for its health endpoint; returns the seconds it took."""
        started = time.perf_counter()
        self.start("api-server", "-H", "127.0.0.1", "-p", str(self.port), "-w", "1")
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                if httpx.get(f"{self.url}/api/v2/monitor/health", timeout=2).status_code == 200:
                    return time.perf_counter() - started
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServiceError(f"api-server did not answer in {timeout:.0f}s:\n{self.tail('api-server')}")
            time.sleep(0.5)

    def client(self) -> httpx.Client:
        """A client authenticated as the admin user SimpleAuthManager generated."""
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        user, password = next(iter(passwords.items()))
        token = httpx.post(f"{self.url}/auth/token", json={"username": user, "password": password},
                           timeout=10).json()["access_token"]
        client = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        client.user = user   # type: ignore[attr-defined]
        return client

    def check_alive(self) -> None:
        for name, (proc, _) in self.procs.items():
            if proc.poll() is not None:
                raise ServiceError(f"airflow {name} exited {proc.returncode}:\n{self.tail(name)}")

    def wait_for_run(self, client, dag_id: str, run_id: str, *, timeout: float, poll: float = 2) -> str:
        """Poll a DAG run through the REST API until it ends; its final state (components checked alive)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            state = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(poll)
        raise ServiceError(f"run {run_id} did not finish in {timeout:.0f}s:\n{self.tail('scheduler')}")

    def tail(self, component: str, chars: int = 4000) -> str:
        log = self.procs[component][1]
        return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"

    def stop(self) -> None:
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
