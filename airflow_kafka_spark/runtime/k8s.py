"""A Spark driver pod on Kubernetes through the API server: phase, delete, log; stdlib HTTP and a bearer token.

Why not ``kubectl`` or the kubernetes client: the triggerer and the workers reach the API server
with their service account's token and nothing else installed. Spark labels its driver pod
``spark-role=driver``; the submit adds ``spark.kubernetes.driver.label.aks-tag=<tag>`` so the pod of
one submit can be found even when spark-submit's output is lost.

Not exercised against a real cluster in this repository (there is no Kubernetes here): the tests
check the requests this module sends (tests/unit/test_runtime_clusters.py).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.runtime import rest

TAG_LABEL, CHECKPOINT_LABEL = "aks-tag", "aks-checkpoint"
ALIVE_PHASES = frozenset({"Pending", "Running", "Unknown"})


@dataclass(frozen=True)
class DriverPod:
    name: str
    namespace: str
    phase: str
    reason: str = ""

    @property
    def alive(self) -> bool:
        return self.phase in ALIVE_PHASES

    def summary(self) -> str:
        return f"pod {self.namespace}/{self.name} {self.phase}" + (f": {self.reason}" if self.reason else "")


def split_driver_id(driver_id: str, default_namespace: str) -> tuple[str, str]:
    """``<namespace>:<pod>`` (what spark-submit prints as the submission id) or a bare pod name."""
    ns, _, pod = driver_id.rpartition(":")
    return (ns or default_namespace), pod


@dataclass(frozen=True)
class KubernetesApi:
    """The API server at ``url`` with a bearer ``token`` (or ``token_file``, read per call: tokens rotate)."""

    url: str
    namespace: str = "default"
    token: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    timeout: float = 10.0

    def _headers(self) -> dict[str, str]:
        token = self.token
        if token is None and self.token_file:
            try:
                token = Path(self.token_file).read_text().strip()
            except OSError as exc:
                raise UserError(f"cannot read the Kubernetes token {self.token_file} ({exc.strerror}); mount the "
                                "service account token or set [kafka_spark] k8s_token_file") from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _call(self, method: str, path: str, *, query: dict[str, str] | None = None, raw: bool = False) -> Any:
        url = self.url.rstrip("/") + path + (("?" + urllib.parse.urlencode(query)) if query else "")
        return rest.call(method, url, headers=self._headers(), timeout=self.timeout, ca_file=self.ca_file, raw=raw)

    def pod(self, driver_id: str) -> DriverPod:
        ns, name = split_driver_id(driver_id, self.namespace)
        doc = self._call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        status = doc.get("status") or {}
        return DriverPod(name=name, namespace=ns, phase=str(status.get("phase") or "Unknown"),
                         reason=str(status.get("reason") or status.get("message") or ""))

    def find_driver(self, tag: str, *, label: str = TAG_LABEL, alive_only: bool = False) -> list[str]:
        """``<namespace>:<pod>`` of the driver pods whose ``label`` is ``tag``, newest first."""
        doc = self._call("GET", f"/api/v1/namespaces/{self.namespace}/pods",
                         query={"labelSelector": f"spark-role=driver,{label}={tag}"})
        items = sorted(doc.get("items") or [], key=lambda p: (p.get("metadata") or {}).get("creationTimestamp", ""),
                       reverse=True)
        if alive_only:
            items = [p for p in items if str((p.get("status") or {}).get("phase") or "Unknown") in ALIVE_PHASES]
        return [f"{self.namespace}:{p['metadata']['name']}" for p in items]

    def delete(self, driver_id: str) -> None:
        ns, name = split_driver_id(driver_id, self.namespace)
        try:
            self._call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        except rest.RestError as exc:
            if exc.status != 404:   # already gone is what a kill wants
                raise

    def log_tail(self, driver_id: str, *, lines: int = 40) -> str:
        ns, name = split_driver_id(driver_id, self.namespace)
        return self._call("GET", f"/api/v1/namespaces/{ns}/pods/{name}/log", query={"tailLines": str(lines)},
                          raw=True)
