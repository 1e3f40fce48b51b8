"""A driver on a Spark standalone master (cluster deploy mode) through its REST submission server.

Why: ``spark-submit --status/--kill`` start a JVM per call; the master's REST server (port
``spark.master.rest.port``, 6066, enabled with ``spark.master.rest.enabled=true``) answers the same
questions over HTTP: ``GET /v1/submissions/status/<id>`` and ``POST /v1/submissions/kill/<id>``.

Not exercised against a real standalone master in this repository: the tests check the requests
(tests/unit/test_runtime_clusters.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_kafka_spark.runtime import rest

ALIVE_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN"})


@dataclass(frozen=True)
class StandaloneDriver:
    id: str
    state: str
    message: str = ""

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    def summary(self) -> str:
        return f"{self.id} {self.state}" + (f": {self.message}" if self.message else "")


@dataclass(frozen=True)
class StandaloneMaster:
    """The REST submission server(s); with several masters (ZooKeeper HA) the first that answers."""

    urls: Sequence[str]
    timeout: float = 10.0

    def _call(self, method: str, path: str) -> dict:
        errors = []
        for url in self.urls:
            try:
                return rest.call(method, url.rstrip("/") + path, timeout=self.timeout)
            except rest.RestError as exc:
                errors.append(str(exc))
        raise rest.RestError("; ".join(errors) or "no standalone master URL")

    def status(self, driver_id: str) -> StandaloneDriver:
        doc = self._call("GET", f"/v1/submissions/status/{driver_id}")
        message = str(doc.get("message") or "").strip().splitlines()
        state = str(doc.get("driverState") or "UNKNOWN").upper()
        if doc.get("success") is False and state == "UNKNOWN":
            state = "NOT_FOUND"   # the master does not know it: never submitted, or forgotten after a restart
        return StandaloneDriver(driver_id, state, message[0][:300] if message else "")

    def kill(self, driver_id: str) -> None:
        self._call("POST", f"/v1/submissions/kill/{driver_id}")
