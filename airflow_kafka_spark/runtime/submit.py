"""Submit a registered streaming job detached, and keep track of which application version runs.

Why this module exists apart from the Airflow operator: *what* is submitted (the job's flags, the
connector jars, the detach settings, which driver id to parse from which output) and *what the
product remembers about it* (the application version that ran last, and the last one that passed
the health gate) are product rules. They must be the same whether the operator, the DAG's
rollback or a test submits, and they must be testable without Airflow. The operator only adds
what needs Airflow: the Spark provider's ``SparkSubmitHook`` turns the ``spark`` connection
(master, ``deploy-mode``, ``spark-binary``, queue, namespace, keytab...) plus the keyword
arguments built here into the command line, so a connection that works for the Spark provider's
own operator works here unchanged. This module imports nothing from Airflow.

Detached, never attached. A Structured Streaming driver runs for weeks; the Spark provider's
``SparkSubmitOperator`` would hold a worker slot for all of that time and has orphaned or
duplicated drivers on worker restarts. So:

* ``local[*]`` masters and *client* deploy mode on any master: the spark-submit process *is* the
  driver; it is started in its own session (:func:`airflow_kafka_spark.runtime.drivers.start_local`) so it
  outlives the task, and its pid is recorded.
* YARN cluster mode: ``spark.yarn.submit.waitAppCompletion=false``; spark-submit returns once the
  application is accepted, and the ``application_<ts>_<n>`` id is parsed from its output.
* Kubernetes cluster mode: ``spark.kubernetes.submission.waitAppCompletion=false``; the
  ``<namespace>:<driver pod>`` submission id is parsed.
* Standalone cluster mode: ``spark.standalone.submit.waitAppCompletion=false`` (Spark's default,
  set anyway); the ``driver-<timestamp>-<n>`` id is parsed.

Each cluster submit carries a tag of its own (``spark.yarn.tags``; the driver pod label
``aks-tag`` on Kubernetes) so the cluster manager can name the driver it started even when
spark-submit's output is lost or it timed out. Status, final state, log and kill of a cluster
driver go through the cluster manager's REST API (:func:`airflow_kafka_spark.runtime.drivers.control`),
from any host, with no ``yarn``/``spark-submit`` binary: the address is resolved here at submit
time (:mod:`airflow_kafka_spark.runtime.clusters`) and recorded with the submit. YARN is exercised
end to end against a real minicluster (tests/cluster); Kubernetes and standalone only by the
requests they send (tests/unit/test_runtime_clusters.py): there is no such cluster here.

What the product remembers about each submit (the application version that ran, the last one
that passed the health gate) is :mod:`airflow_kafka_spark.runtime.app_versions`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from airflow_kafka_spark import settings
from airflow_kafka_spark._util.fs import open_location, remove_file, write_atomic
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import is_secret_key, scrub
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime import dstream

DETACH_LOCAL = "local-process"
DETACH_YARN = "yarn-cluster"
DETACH_K8S = "k8s-cluster"
DETACH_STANDALONE = "standalone-cluster"

DRIVER_KIND = {DETACH_LOCAL: "local-pid", DETACH_YARN: "yarn", DETACH_K8S: "k8s",
               DETACH_STANDALONE: "standalone"}
WAIT_APP_COMPLETION_CONF = {
    DETACH_YARN: "spark.yarn.submit.waitAppCompletion",
    DETACH_K8S: "spark.kubernetes.submission.waitAppCompletion",
    DETACH_STANDALONE: "spark.standalone.submit.waitAppCompletion",
}
# Kafka connection keys forwarded to the job as ``--kafka-option kafka.<key>=<value>``: the ones
# the Java client names the same way and that are never secret. Credentials are never put on a
# command line (``ps`` shows it to every user of the host and Spark logs it); a job that needs
# SASL credentials gets them from the cluster (a JAAS file shipped with spark.files and
# ``-Djava.security.auth.login.config`` in spark_conf).
FORWARDED_KAFKA_KEYS = ("security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm",
                        "client.dns.lookup")
# Environment variables a driver must not inherit from the Airflow worker: connection URIs and
# variables carry secrets, and Airflow's own settings mean nothing to Spark.
_ENV_DROP_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__", "_AIRFLOW")

K8S_TAG_LABEL = "aks-tag"   # airflow_kafka_spark.runtime.k8s.TAG_LABEL
# Where the Kafka connector jars for a local master come from when the job's spark_conf names none:
# comma-separated paths (the dev stack and the test suite set it from devstack.jars), else Maven.
CONNECTOR_JARS_ENV = settings.BY_NAME["connector_jars"].env   # AIRFLOW__KAFKA_SPARK__CONNECTOR_JARS
CONNECTOR_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13"

_YARN_APP = re.compile(r"\b(application_\d+_\d+)\b")
_K8S_SUBMISSION = re.compile(r"submission ID\s+([A-Za-z0-9.-]+:[A-Za-z0-9.-]+-driver)\b")
_K8S_POD = re.compile(r"pod name:\s*([A-Za-z0-9.-]+-driver)\b")
_K8S_NAMESPACE = re.compile(r"namespace:\s*([A-Za-z0-9.-]+)")
_STANDALONE_DRIVER = re.compile(r"\b(driver-\d{14}-\d{4,})\b")


@dataclass(frozen=True)
class SparkTarget:
    """The job's Spark connection as plain values; the Airflow layer resolves it (``airflow_glue.spark``).

    ``build_command(hook_kwargs, application)`` turns :func:`hook_kwargs` into the spark-submit argv
    the way the connection says (binary, queue, namespace, keytab...).
    """

    master: str
    deploy_mode: str | None
    spark_binary: str
    build_command: Callable[[Mapping[str, Any], str], list[str]]
    conn_extra: Mapping[str, Any] = field(default_factory=dict)   # e.g. yarn-rm-webapp, namespace


# --------------------------------------------------------------------------------------------------
# deciding how to detach
# --------------------------------------------------------------------------------------------------

def detach_mode(master: str, deploy_mode: str | None) -> str:
    """How a driver on ``master`` with ``deploy_mode`` runs without holding the caller.

    Client mode (the default) means the spark-submit process is the driver wherever the master
    is, so it is detached as a local process. Cluster mode needs a cluster manager that can run
    the driver; ``local`` has none, and Mesos is not supported (removed from Spark 4).
    """
    m = (master or "").strip().lower()
    if deploy_mode not in (None, "", "client", "cluster"):
        raise UserError(f"deploy mode {deploy_mode!r} is not client or cluster; fix deploy_mode in the job registry "
                        "or the Spark connection's deploy-mode extra")
    if deploy_mode != "cluster":
        return DETACH_LOCAL
    if m.startswith("local"):
        raise UserError(f"cluster deploy mode needs a cluster manager, but the master is {master!r}; use client "
                        "mode (deploy_mode: client) or point the Spark connection at YARN, Kubernetes or a "
                        "standalone master")
    if m.startswith("yarn"):
        return DETACH_YARN
    if m.startswith("k8s://"):
        return DETACH_K8S
    if m.startswith("spark://"):
        return DETACH_STANDALONE
    raise UserError(f"master {master!r} is not supported in cluster deploy mode (YARN, k8s:// and spark:// are); "
                    "fix the Spark connection's host")


# --------------------------------------------------------------------------------------------------
# building the submit
# --------------------------------------------------------------------------------------------------

def kafka_job_options(kafka_config: Mapping[str, Any]) -> list[str]:
    """``kafka.<key>=<value>`` options for the job, from the non-secret keys of the connection."""
    out = []
    for key in FORWARDED_KAFKA_KEYS:
        value = kafka_config.get(key)
        if value in (None, "") or is_secret_key(key):
            continue
        if key == "security.protocol" and str(value).upper() == "PLAINTEXT":
            continue
        out.append(f"kafka.{key}={value}")
    return out


def job_arguments(spec: JobSpec, *, bootstrap_servers: str, starting_offsets_file: str | None = None,
                  kafka_options: Sequence[str] = ()) -> list[str]:
    """The reference job's flags derived from the registry (``MANAGED_FLAGS``), then its own args.

    ``--starting-offsets-file`` replaces ``--starting-offsets`` when a reset left offsets for the
    next start; the job reads them only when its checkpoint is new (Spark ignores
    startingOffsets otherwise), which is exactly the state a reset leaves.
    """
    if not bootstrap_servers:
        raise UserError(f"job {spec.name}: the Kafka connection {spec.kafka_conn_id!r} has no bootstrap.servers")
    if spec.kind is JobKind.DSTREAM:    # another contract: the position is the consumer group
        return dstream.job_arguments(spec, bootstrap_servers=bootstrap_servers, kafka_options=kafka_options)
    args = ["--topics", ",".join(spec.topics), "--bootstrap-servers", bootstrap_servers,
            "--checkpoint", spec.checkpoint]
    if spec.output:
        args += ["--output", spec.output]
    args += ["--sink", spec.sink, "--stop-marker", spec.stop_marker,
             "--fail-on-data-loss", "true" if spec.fail_on_data_loss else "false"]
    if starting_offsets_file:
        args += ["--starting-offsets-file", starting_offsets_file]
    else:
        args += ["--starting-offsets", spec.starting_offsets_default]
    if spec.max_offsets_per_trigger:
        args += ["--max-offsets-per-trigger", str(spec.max_offsets_per_trigger)]
    for option in kafka_options:
        args += ["--kafka-option", option]
    return [*args, *spec.application_args]


def needs_local_connector_jars(spec: JobSpec, master: str) -> bool:
    """The Kafka connector is not part of Spark. On a ``local`` master :func:`local_connector` adds it;
    a cluster job names it in spark_conf (``spark.jars``/``spark.jars.packages``) or has it installed."""
    declared = any(k in spec.spark_conf for k in ("spark.jars", "spark.jars.packages"))
    return master.strip().lower().startswith("local") and not declared


@dataclass(frozen=True)
class ConnectorJars:
    """How a local driver gets the Kafka connector: jar paths, or a Maven coordinate for spark.jars.packages."""

    jars: tuple[str, ...] = ()
    packages: str | None = None


def local_connector(spec: JobSpec, master: str, env: Mapping[str, str]) -> ConnectorJars:
    """The connector for a ``local`` master whose spark_conf names none (else nothing to add).

    ``[kafka_spark] connector_jars`` (comma-separated paths) when set, else the connector matching the
    installed pyspark from Maven (``spark.jars.packages``; needs network access at driver start).
    """
    if not needs_local_connector_jars(spec, master):
        return ConnectorJars()
    setting = settings.value("connector_jars", None if env is os.environ else env) or ""
    listed = tuple(j.strip() for j in setting.split(",") if j.strip())
    if listed:
        return ConnectorJars(jars=listed)
    try:
        version = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        raise UserError(f"job {spec.name}: a local master needs the Kafka connector; set spark.jars or "
                        "spark.jars.packages in its spark_conf, or [kafka_spark] connector_jars to the jar "
                        "paths") from None
    return ConnectorJars(packages=f"{CONNECTOR_PACKAGE}:{version}")


def submit_tag(spec: JobSpec) -> str:
    """A tag unique to one submit (lower case, as YARN stores tags): the cluster can name the driver it started."""
    return f"aks-{spec.name.lower()}-{uuid.uuid4().hex[:12]}"


def hook_kwargs(spec: JobSpec, *, args: Sequence[str], jars: Sequence[str] = (), mode: str | None = None,
                name: str | None = None, packages: str | None = None, tag: str | None = None) -> dict[str, Any]:
    """Keyword arguments for the Spark provider's ``SparkSubmitHook`` (besides ``conn_id``: the job's
    ``spark_conn_id``).

    The UI is disabled on local drivers: every job on a worker would otherwise race for port 4040
    (and answer on all interfaces).
    """
    conf = dict(spec.spark_conf)
    if mode in WAIT_APP_COMPLETION_CONF:
        key = WAIT_APP_COMPLETION_CONF[mode]
        if str(conf.get(key, "false")).lower() != "false":
            raise UserError(f"job {spec.name}: spark_conf sets {key}={conf[key]}, which keeps spark-submit attached "
                            "for the life of the job; remove it")
        conf[key] = "false"
    if mode == DETACH_LOCAL:
        conf.setdefault("spark.ui.enabled", "false")
    if tag and mode == DETACH_YARN:
        conf["spark.yarn.tags"] = ",".join(t for t in (conf.get("spark.yarn.tags", ""), tag) if t)
    elif tag and mode == DETACH_K8S:
        conf[f"spark.kubernetes.driver.label.{K8S_TAG_LABEL}"] = tag
    if packages:
        conf.setdefault("spark.jars.packages", packages)
    kwargs: dict[str, Any] = {"conf": conf, "name": name or f"aks-{spec.name}",
                              "application_args": list(args)}
    if jars:
        kwargs["jars"] = ",".join(str(j) for j in jars)
    if spec.deploy_mode:
        kwargs["deploy_mode"] = spec.deploy_mode
    return kwargs


def resolve_binary(command: list[str], env: Mapping[str, str]) -> list[str]:
    """The command with its first word made absolute when it is only found beside this interpreter.

    The Spark provider runs ``spark-submit`` by name. Workers started from a virtualenv without
    its ``bin`` on PATH would fail to find the ``spark-submit`` that pyspark installs there.
    """
    if not command:
        raise UserError("empty spark-submit command")
    first = command[0]
    if os.sep in first or shutil.which(first, path=env.get("PATH")):
        return list(command)
    beside = Path(sys.executable).parent / first
    if beside.exists():
        return [str(beside), *command[1:]]
    raise UserError(f"{first} is not on PATH ({env.get('PATH', '')[:200]}); install Spark on the worker or set the "
                    "Spark connection's spark-binary extra")


def driver_env(command: Sequence[str], master: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a local driver: the worker's, minus Airflow's secrets and settings.

    With the ``spark-submit`` of the pyspark wheel (beside this interpreter) the driver's Python
    is this interpreter, which has pyspark, and a stray ``SPARK_HOME`` would point that
    spark-submit at another Spark; a cluster's spark-submit keeps its own environment.
    """
    env = {k: v for k, v in (base if base is not None else os.environ).items()
           if not k.startswith(_ENV_DROP_PREFIXES)}
    if Path(command[0]).parent == Path(sys.executable).parent:
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.pop("SPARK_HOME", None)
    if master.strip().lower().startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def local_log_path(spec: JobSpec, stamp: str | None = None) -> str:
    """Where a local driver's output goes: ``<checkpoint>.logs/driver-<stamp>.log`` beside the checkpoint
    (under the registry's allowed roots), or a temp folder when the checkpoint is remote."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"
    ck = spec.checkpoint
    if ck.startswith("file://"):
        ck = ck[len("file://"):]
    if "://" in ck:
        base = Path(os.environ.get("TMPDIR", "/tmp")) / "airflow-kafka-spark" / spec.name
    else:
        base = Path(ck.rstrip("/") + ".logs")
    return str(base / f"driver-{stamp}.log")


def starting_offsets_path(spec: JobSpec) -> str:
    """The file the next start reads ``--starting-offsets-file`` from, beside the checkpoint.

    Beside the checkpoint on its file system (HDFS, S3...): the reference job reads it through Spark
    (Hadoop's FileSystem), so a cluster-mode driver on any node finds it.
    """
    ck = spec.checkpoint
    if ck.startswith("file://"):
        ck = ck[len("file://"):]
    return ck.rstrip("/") + ".starting-offsets.json"


def write_starting_offsets(path: str, offsets_json: str) -> None:
    """Write the offsets a reset left for the next start, whole or not at all, on any file system."""
    write_atomic(open_location(path, what="starting offsets file"), (offsets_json + "\n").encode())


def remove_starting_offsets(path: str) -> None:
    """The new query planned a batch from them: the file has done its job."""
    with contextlib.suppress(OSError, UserError):
        remove_file(open_location(path, what="starting offsets file"))


# --------------------------------------------------------------------------------------------------
# cluster-mode submit (status and kill: runtime.drivers.control through the cluster manager's REST API)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClusterSubmit:
    driver: DriverInfo
    output_tail: str


def parse_driver_id(mode: str, output: str) -> str | None:
    """The driver's id in spark-submit's output for ``mode`` (None if it is not there)."""
    if mode == DETACH_YARN:
        m = _YARN_APP.search(output)
        return m.group(1) if m else None
    if mode == DETACH_K8S:
        m = _K8S_SUBMISSION.search(output)
        if m:
            return m.group(1)
        pod, ns = _K8S_POD.search(output), _K8S_NAMESPACE.search(output)
        if pod:
            return f"{ns.group(1) if ns else 'default'}:{pod.group(1)}"
        return None
    if mode == DETACH_STANDALONE:
        m = _STANDALONE_DRIVER.search(output)
        return m.group(1) if m else None
    raise UserError(f"no driver id to parse for detach mode {mode}")


def submit_cluster(command: list[str], mode: str, *, env: Mapping[str, str] | None = None,
                   kafka_config: Mapping[str, Any] | None = None, timeout_s: float = 600.0,
                   find: Callable[[], str | None] | None = None) -> ClusterSubmit:
    """Run a cluster-mode spark-submit that returns once the application is accepted.

    ``waitAppCompletion=false`` must be in the command (see :func:`hook_kwargs`), so this returns in
    seconds or minutes. The driver id comes from spark-submit's output, else from ``find`` (the
    cluster manager asked for the submit's tag, see :func:`submit_tag`), which also answers whether a
    spark-submit that timed out or failed did start a driver after all.
    """
    def found() -> str | None:
        if find is None:
            return None
        with contextlib.suppress(UserError):
            return find()
        return None

    def accepted(driver_id: str, tail: str) -> ClusterSubmit:
        return ClusterSubmit(DriverInfo(kind=DRIVER_KIND[mode], id=driver_id, host=None,
                                        started_at=int(time.time() * 1000)), tail)

    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=dict(env) if env is not None else None, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        late = found()
        if late:
            return accepted(late, f"spark-submit timed out after {timeout_s:.0f}s but the cluster has {late}")
        raise UserError(f"spark-submit did not return within {timeout_s:.0f}s although waitAppCompletion=false and "
                        "the cluster shows no application with this submit's tag yet: check the cluster before "
                        "submitting again") from None
    except OSError as exc:
        raise UserError(f"cannot run {command[0]}: {exc.strerror}") from None
    output = scrub(proc.stdout + proc.stderr, kafka_config)
    tail = "\n".join(output.strip().splitlines()[-20:])
    driver_id = parse_driver_id(mode, output) or found()
    if proc.returncode != 0 or driver_id is None:
        raise UserError(f"spark-submit ({mode}) exited {proc.returncode} without a driver id; last output: "
                        f"{tail[-1500:]}")
    return accepted(driver_id, tail)


def log_tail(path: str | None, *, lines: int = 15, kafka_config: Mapping[str, Any] | None = None) -> str:
    """The end of a local driver log (secrets scrubbed), for failure messages."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return scrub("\n".join(kept), kafka_config)
