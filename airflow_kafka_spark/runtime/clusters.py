"""Where a cluster-mode driver's cluster manager answers, and its DriverControl from any host.

Why: a cluster-mode driver (YARN, Kubernetes, a standalone master) outlives the task that submitted
it, and the stop, the health gate (often in the triggerer, on another host) and the rollback must
reach it from wherever they run, without a ``yarn``/``spark-submit``/``kubectl`` binary or a JVM.
Each cluster manager has a REST API for exactly that: the ResourceManager
(:mod:`~airflow_kafka_spark.runtime.yarn`), the Kubernetes API server
(:mod:`~airflow_kafka_spark.runtime.k8s`) and the standalone master's submission server
(:mod:`~airflow_kafka_spark.runtime.standalone`).

The address is resolved **once, at submit time**, on the host that runs spark-submit (which has the
cluster's configuration anyway), and recorded with the submit in the lifecycle record as a
:class:`ClusterEndpoint` (plain JSON, no secret). Later steps on other hosts read it from there.

YARN ResourceManager web address, first found wins (most specific first):

1. the job's registry entry: ``spark_conf: {spark.hadoop.yarn.resourcemanager.webapp.address: host:port}``
   (comma-separated for RM HA), the key Hadoop itself reads;
2. the Spark connection's extra ``yarn-rm-webapp`` (``http://rm1:8088,http://rm2:8088``);
3. ``$HADOOP_CONF_DIR`` (or ``$YARN_CONF_DIR``) ``/yarn-site.xml``: ``yarn.resourcemanager.webapp.address``
   (``...address.<rm-id>`` for every id of ``yarn.resourcemanager.ha.rm-ids``; the ``https.address`` keys
   when ``yarn.http.policy`` is ``HTTPS_ONLY``; ``yarn.resourcemanager.hostname``:8088 last).
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow_kafka_spark import settings
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind

RM_WEBAPP_CONF = "spark.hadoop.yarn.resourcemanager.webapp.address"
RM_WEBAPP_EXTRA = "yarn-rm-webapp"
K8S_TOKEN_FILE_ENV = settings.BY_NAME["k8s_token_file"].env   # AIRFLOW__KAFKA_SPARK__K8S_TOKEN_FILE
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
STANDALONE_REST_EXTRA = "rest-url"
DEFAULT_STANDALONE_REST_PORT = 6066


@dataclass(frozen=True)
class ClusterEndpoint:
    """How to reach one driver's cluster manager over HTTP; JSON-able, so a trigger can carry it.

    ``token_file`` (Kubernetes) names a file the reader opens on its own host: the token itself is
    never recorded nor put in a trigger's kwargs (Airflow stores those in its database).
    """

    kind: str                       # a DriverKind value
    urls: tuple[str, ...]
    namespace: str | None = None    # Kubernetes
    token_file: str | None = None   # Kubernetes bearer token
    ca_file: str | None = None      # Kubernetes API server CA
    user: str | None = None         # YARN simple auth (user.name)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "urls": list(self.urls)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClusterEndpoint:
        try:
            return cls(kind=str(DriverKind(data["kind"])), urls=tuple(str(u) for u in data["urls"]),
                       namespace=data.get("namespace"), token_file=data.get("token_file"),
                       ca_file=data.get("ca_file"), user=data.get("user"))
        except (KeyError, ValueError, TypeError) as exc:
            raise UserError(f"the recorded cluster endpoint is unreadable ({exc}): {dict(data)!r}; submit the job "
                            "again so it is recorded anew") from None


def _http(address: str, *, https: bool = False) -> str:
    address = address.strip().rstrip("/")
    if address.startswith(("http://", "https://")):
        return address
    return ("https://" if https else "http://") + address


def read_site(path: Path) -> dict[str, str]:
    """``<property><name>/<value>`` pairs of a Hadoop ``*-site.xml``; unreadable is a one-line error."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise UserError(f"cannot read {path}: {exc}; fix the file or name the ResourceManager in the job's "
                        f"spark_conf ({RM_WEBAPP_CONF})") from None
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            out[name.strip()] = value.strip()
    return out


def rm_urls_from_site(site: Mapping[str, str]) -> list[str]:
    """The RM web address(es) a ``yarn-site.xml`` names (every RM with HA on)."""
    https = site.get("yarn.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
    key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
    default_port = 8090 if https else 8088
    ids = [i.strip() for i in site.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    if site.get("yarn.resourcemanager.ha.enabled", "false").lower() == "true" and ids:
        urls = []
        for rm_id in ids:
            addr = site.get(f"{key}.{rm_id}") or (
                f"{site[f'yarn.resourcemanager.hostname.{rm_id}']}:{default_port}"
                if f"yarn.resourcemanager.hostname.{rm_id}" in site else None)
            if addr:
                urls.append(_http(addr, https=https))
        return urls
    if site.get(key):
        return [_http(site[key], https=https)]
    if site.get("yarn.resourcemanager.hostname"):
        return [_http(f"{site['yarn.resourcemanager.hostname']}:{default_port}", https=https)]
    return []


def yarn_endpoint(*, spark_conf: Mapping[str, str], conn_extra: Mapping[str, Any],
                  env: Mapping[str, str]) -> ClusterEndpoint:
    """The ResourceManager(s) of a YARN job: registry entry, then connection extra, then yarn-site.xml."""
    if spark_conf.get(RM_WEBAPP_CONF):
        urls = [_http(u) for u in str(spark_conf[RM_WEBAPP_CONF]).split(",") if u.strip()]
    elif conn_extra.get(RM_WEBAPP_EXTRA):
        urls = [_http(u) for u in str(conn_extra[RM_WEBAPP_EXTRA]).split(",") if u.strip()]
    else:
        urls = []
        for var in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
            site = Path(env.get(var, "")) / "yarn-site.xml"
            if env.get(var) and site.is_file():
                urls = rm_urls_from_site(read_site(site))
                break
    if not urls:
        raise UserError(f"the YARN ResourceManager's web address is unknown: set {RM_WEBAPP_CONF} in the job's "
                        f"spark_conf, the Spark connection's {RM_WEBAPP_EXTRA} extra, or HADOOP_CONF_DIR to a folder "
                        "with yarn-site.xml on the submitting worker")
    return ClusterEndpoint(kind=DriverKind.YARN.value, urls=tuple(urls), user=env.get("HADOOP_USER_NAME") or None)


def k8s_endpoint(master: str, *, spark_conf: Mapping[str, str], conn_extra: Mapping[str, Any],
                 env: Mapping[str, str]) -> ClusterEndpoint:
    """The API server of a ``k8s://`` master; the namespace as Spark picks it; the token from a file."""
    api = master.strip()[len("k8s://"):] if master.strip().lower().startswith("k8s://") else master.strip()
    namespace = spark_conf.get("spark.kubernetes.namespace") or conn_extra.get("namespace") or "default"
    token_file = settings.value("k8s_token_file", None if env is os.environ else env) or f"{SERVICE_ACCOUNT}/token"
    ca = f"{SERVICE_ACCOUNT}/ca.crt"
    return ClusterEndpoint(kind=DriverKind.K8S.value, urls=(_http(api, https=True),), namespace=str(namespace),
                           token_file=token_file, ca_file=ca if Path(ca).is_file() else None)


def standalone_endpoint(master: str, *, spark_conf: Mapping[str, str],
                        conn_extra: Mapping[str, Any]) -> ClusterEndpoint:
    """The REST submission server(s) of a ``spark://`` master (port ``spark.master.rest.port``, 6066)."""
    if conn_extra.get(STANDALONE_REST_EXTRA):
        urls = [_http(u) for u in str(conn_extra[STANDALONE_REST_EXTRA]).split(",") if u.strip()]
    else:
        port = spark_conf.get("spark.master.rest.port", str(DEFAULT_STANDALONE_REST_PORT))
        hosts = master.strip()[len("spark://"):].split(",")
        urls = [_http(f"{h.rsplit(':', 1)[0]}:{port}") for h in hosts if h.strip()]
    return ClusterEndpoint(kind=DriverKind.STANDALONE.value, urls=tuple(urls))


def resolve_endpoint(kind: str, *, master: str, spark_conf: Mapping[str, str], conn_extra: Mapping[str, Any],
                     env: Mapping[str, str] | None = None) -> ClusterEndpoint:
    """The endpoint of a driver of ``kind`` submitted to ``master`` (see the module doc for YARN's order)."""
    env = os.environ if env is None else env
    k = DriverKind(kind)
    if k is DriverKind.YARN:
        return yarn_endpoint(spark_conf=spark_conf, conn_extra=conn_extra, env=env)
    if k is DriverKind.K8S:
        return k8s_endpoint(master, spark_conf=spark_conf, conn_extra=conn_extra, env=env)
    if k is DriverKind.STANDALONE:
        return standalone_endpoint(master, spark_conf=spark_conf, conn_extra=conn_extra)
    raise UserError(f"a {kind} driver has no cluster endpoint")
