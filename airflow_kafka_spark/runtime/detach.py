"""How a streaming driver runs without holding the caller, and the cluster-mode submit that detaches.

Detached, never attached. A Structured Streaming driver runs for weeks; the Spark provider's
``SparkSubmitOperator`` would hold a worker slot for all of that time and has orphaned or
duplicated drivers on worker restarts. So:

* ``local[*]`` masters and *client* deploy mode on any master: the spark-submit process *is* the
  driver; it is started in its own session (:func:`airflow_kafka_spark.runtime.local_start.start_local`) so it
  outlives the task, and its pid is recorded.
* YARN cluster mode: ``spark.yarn.submit.waitAppCompletion=false``; spark-submit returns once the
  application is accepted, and the ``application_<ts>_<n>`` id is parsed from its output.
* Kubernetes cluster mode: ``spark.kubernetes.submission.waitAppCompletion=false``; the
  ``<namespace>:<driver pod>`` submission id is parsed.
* Standalone cluster mode: ``spark.standalone.submit.waitAppCompletion=false`` (Spark's default,
  set anyway); the ``driver-<timestamp>-<n>`` id is parsed.

Each cluster submit carries two tags (``spark.yarn.tags``; the driver pod labels ``aks-tag`` and
``aks-checkpoint`` on Kubernetes): one of the submitting task, so the cluster manager can name the
driver it started even when spark-submit's output is lost, it timed out or the task was killed
while it ran (:mod:`airflow_kafka_spark.runtime.unrecorded` adopts it); one of the checkpoint, so
any submit sees a driver on it that no record names. Status, final state, log and kill of a cluster
driver go through the cluster manager's REST API (:func:`airflow_kafka_spark.runtime.drivers.control`),
from any host, with no ``yarn``/``spark-submit`` binary: the address is resolved at submit
time (:mod:`airflow_kafka_spark.runtime.clusters`) and recorded with the submit. YARN is exercised
end to end against a real minicluster (tests/cluster); Kubernetes and standalone only by the
requests they send (tests/unit/test_runtime_clusters.py): there is no such cluster here.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import scrub
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.registry.model import JobSpec

DETACH_LOCAL = "local-process"
DETACH_YARN = "yarn-cluster"
DETACH_K8S = "k8s-cluster"
DETACH_STANDALONE = "standalone-cluster"

DRIVER_KIND = {DETACH_LOCAL: "local-pid", DETACH_YARN: "yarn", DETACH_K8S: "k8s", DETACH_STANDALONE: "standalone"}
WAIT_APP_COMPLETION_CONF = {
    DETACH_YARN: "spark.yarn.submit.waitAppCompletion",
    DETACH_K8S: "spark.kubernetes.submission.waitAppCompletion",
    DETACH_STANDALONE: "spark.standalone.submit.waitAppCompletion",
}

_YARN_APP = re.compile(r"\b(application_\d+_\d+)\b")
_K8S_SUBMISSION = re.compile(r"submission ID\s+([A-Za-z0-9.-]+:[A-Za-z0-9.-]+-driver)\b")
_K8S_POD = re.compile(r"pod name:\s*([A-Za-z0-9.-]+-driver)\b")
_K8S_NAMESPACE = re.compile(r"namespace:\s*([A-Za-z0-9.-]+)")
_STANDALONE_DRIVER = re.compile(r"\b(driver-\d{14}-\d{4,})\b")


#: A YARN NodeManager expands ``{{NAME}}`` in a container's command line (Hadoop's cross-platform parameter
#: expansion: ``{{`` becomes ``$`` and ``}}`` is deleted, on every argument), so a cluster-mode driver gets
#: an argument holding either changed: the offsets JSON ``{"t":{"0":5}}`` arrives as ``{"t":{"0":5``.
_YARN_EXPANDS = re.compile(r"\{\{|\}\}")
_YARN_ENV_REF = re.compile(r"\{\{[A-Za-z_][A-Za-z0-9_]*\}\}")   # asked for on purpose: left to YARN


def refuse_changed_arguments(mode: str, job: str, args: list[str]) -> None:
    """Refuse, before anything runs, an application argument the cluster would change on its way to the driver."""
    if mode != DETACH_YARN:
        return
    for arg in args:
        if _YARN_EXPANDS.search(_YARN_ENV_REF.sub("", arg)):
            shown = arg if len(arg) <= 80 else arg[:77] + "..."
            raise UserError(f"job {job}: the application argument {shown!r} holds '{{{{' or '}}}}', which "
                            "YARN deletes from a cluster-mode driver's command line (Hadoop's parameter expansion), "
                            "so the job would get it changed; write '} }' (JSON allows the space) or pass it in a "
                            "file the job reads")


def detach_mode(master: str, deploy_mode: str | None) -> str:
    """How a driver on ``master`` with ``deploy_mode`` runs without holding the caller.

    Client mode (the default) means the spark-submit process is the driver wherever the master
    is, so it is detached as a local process. Cluster mode needs a cluster manager that can run
    the driver; ``local`` has none, and Mesos is not supported (removed from Spark 4).
    """
    m = (master or "").strip().lower()
    if deploy_mode not in (None, "", "client", "cluster"):
        raise UserError(
            f"deploy mode {deploy_mode!r} is not client or cluster; fix deploy_mode in the job registry "
            "or the Spark connection's deploy-mode extra"
        )
    if deploy_mode != "cluster":
        return DETACH_LOCAL
    if m.startswith("local"):
        raise UserError(
            f"cluster deploy mode needs a cluster manager, but the master is {master!r}; use client "
            "mode (deploy_mode: client) or point the Spark connection at YARN, Kubernetes or a "
            "standalone master"
        )
    if m.startswith("yarn"):
        return DETACH_YARN
    if m.startswith("k8s://"):
        return DETACH_K8S
    if m.startswith("spark://"):
        return DETACH_STANDALONE
    raise UserError(
        f"master {master!r} is not supported in cluster deploy mode (YARN, k8s:// and spark:// are); "
        "fix the Spark connection's host"
    )


def submit_tag(spec: JobSpec, holder: str) -> str:
    """The tag of the submits one task makes for one checkpoint (lower case, as YARN stores tags).

    Derived from ``holder`` (``dag/run/task``) and the checkpoint, not random: a retry of a task
    killed while its spark-submit ran asks the cluster for this tag and adopts the driver that
    orphan started, instead of starting a second one on the same checkpoint. The checkpoint is in
    it so that the same DAG and job name in two deployments sharing a cluster never adopt each
    other's drivers.
    """
    return f"aks-{spec.name.lower()}-{_digest(holder + chr(0) + spec.checkpoint.rstrip('/'))[:12]}"


def checkpoint_tag(checkpoint: str) -> str:
    """The tag every cluster submit on ``checkpoint`` carries: any submitter can ask whether a driver runs on it."""
    return f"aks-ck-{_digest(checkpoint.rstrip('/'))[:16]}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cluster_driver(mode: str, driver_id: str) -> DriverInfo:
    """What the record keeps of a cluster driver: its kind and id (no host: any host reaches it through the manager)."""
    return DriverInfo(kind=DRIVER_KIND[mode], id=driver_id, host=None, started_at=int(time.time() * 1000))


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


def submit_cluster(
    command: list[str],
    mode: str,
    *,
    env: Mapping[str, str] | None = None,
    kafka_config: Mapping[str, Any] | None = None,
    timeout_s: float = 600.0,
    find: Callable[[], str | None] | None = None,
) -> ClusterSubmit:
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
        return ClusterSubmit(cluster_driver(mode, driver_id), tail)

    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        late = found()
        if late:
            return accepted(late, f"spark-submit timed out after {timeout_s:.0f}s but the cluster has {late}")
        raise UserError(
            f"spark-submit did not return within {timeout_s:.0f}s although waitAppCompletion=false and "
            "the cluster shows no application with this submit's tag yet: check the cluster before "
            "submitting again"
        ) from None
    except OSError as exc:
        raise UserError(f"cannot run {command[0]}: {exc.strerror}") from None
    output = scrub(proc.stdout + proc.stderr, kafka_config)
    tail = "\n".join(output.strip().splitlines()[-20:])
    driver_id = parse_driver_id(mode, output) or found()
    if proc.returncode != 0 or driver_id is None:
        raise UserError(
            f"spark-submit ({mode}) exited {proc.returncode} without a driver id; last output: {tail[-1500:]}"
        )
    return accepted(driver_id, tail)
