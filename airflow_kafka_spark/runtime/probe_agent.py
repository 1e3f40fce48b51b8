"""The compatibility probe of a user's unchanged application (``integration: agent``), through the JVM agent.

Why not the ``--aks-probe`` contract: a user's job takes no product flag, and one that ignored it
would write its real sink. The agent gives the same run by configuration alone (docs/probe.md):
its session extension swaps every streaming query's sink for Spark's ``noop`` sink and the job's
checkpoint for the staged copy, its listener halts the driver before the first batch of any query
whose sink is still the user's, its checkpoint file manager refuses writes outside the probe's
scratch folder, and the stop marker (created before the submit) lets exactly the copy's pending
batch run. The application's own arguments get the copy as ``{checkpoint}`` and the scratch
folder's ``output``/``stop_marker``; an application that reads its checkpoint from its own config
file is redirected by the agent instead.

The answer comes from the agent's report (``<scratch>/probe.agent.json``), not from lines the
application prints: which sinks were replaced, which query ran on the copy, whether its batch was
committed or how it failed. Without that evidence the answer is ``unknown``.

Where the driver runs: where the job's does. A YARN cluster-mode job is probed in cluster mode on
its cluster (:func:`run_on_yarn`), because its application may depend on what only the
ApplicationMaster's container has: a ``--files`` file read by a relative path (the Java test
application's ``.properties``), an ``hdfs://`` application jar, the cluster's Python. The report
and the stop marker are in the scratch folder beside the checkpoint (on HDFS), so the driver reaches
them from its container and the product reads the report through its own file-system layer; the
probe's application is tagged with its own tag (never the checkpoint's), has one attempt (a halted
driver must not be retried) and is killed on timeout. Any other job is probed in client mode on the
worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from airflow_kafka_spark import agent
from airflow_kafka_spark._util.fs import Location, read_bytes
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of, scrub
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import clusters, connector, detach, drivers, submit, yarn
from airflow_kafka_spark.runtime.integrations import LaunchFacts, own_arguments
from airflow_kafka_spark.runtime.submit import SparkTarget

REPORT_NAME = "probe.agent.json"
# Spark's classes for the cases the agent itself refuses (Probe.java): never about the checkpoint.
CHECKPOINT_REFUSED = "AKS_PROBE_CHECKPOINT_REFUSED"
WRITE_REFUSED = "AKS_PROBE_WRITE_REFUSED"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the agent's evidence says: ``ok`` the batch ran; else the failure text (or why there is no evidence)."""

    evidence: bool
    ok: bool
    text: str


def on_yarn_cluster(target: SparkTarget) -> bool:
    """Whether the job's driver runs in YARN's cluster mode (then so does its probe's)."""
    return (target.deploy_mode or "") == "cluster" and target.master.strip().lower().startswith("yarn")


def command(spec: JobSpec, copy: Location, scratch: Location, *, kafka_config: Mapping[str, Any],
            target: SparkTarget, tag: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The probe's spark-submit line for an agent job: the job's own submit, its arguments with the copy,
    the agent's probe confs. The driver runs in YARN's cluster mode for a YARN cluster-mode job (tagged
    ``tag``, one attempt, spark-submit detached: :func:`run_on_yarn`), else in client mode on this host."""
    cluster = on_yarn_cluster(target)
    probe_spec = dataclasses.replace(spec, checkpoint=copy.url, output=scratch.child("output").url,
                                     stop_marker=scratch.child("STOP").url,
                                     deploy_mode="cluster" if cluster else "client")
    facts = LaunchFacts(bootstrap_servers=bootstrap_servers_of(kafka_config))
    args = own_arguments(probe_spec, facts)
    conn_jars = connector.local_connector(probe_spec, target.master, os.environ)
    binary = submit.resolve_binary([target.spark_binary], os.environ)[0]
    version = spec.spark_version or submit.spark_version(binary)
    conf = agent.probe_conf(copy.url, scratch.url, spec.checkpoint, scratch.child(REPORT_NAME).url, version,
                            spec.spark_conf)
    if cluster:
        conf["spark.yarn.maxAppAttempts"] = "1"
    kwargs = submit.hook_kwargs(probe_spec, args=args, jars=conn_jars.jars,
                                mode=detach.DETACH_YARN if cluster else detach.DETACH_LOCAL,
                                name=f"aks-probe-{spec.name}", packages=conn_jars.packages,
                                extra_conf={**spec.spark_conf, **conf}, tag=tag if cluster else None)
    cmd = submit.resolve_binary(target.build_command(kwargs, spec.application), os.environ)
    return cmd, submit.driver_env(cmd, target.master)


def run_on_yarn(command: list[str], env: Mapping[str, str], spec: JobSpec, target: SparkTarget, *, tag: str,
                timeout_s: float, log_path: str, kafka_config: Mapping[str, Any]) -> int | None:
    """Submit the probe to YARN (cluster mode), wait for its application to end: 0 when it SUCCEEDED,
    1 otherwise, None on timeout. The application is killed if it is still alive when this returns
    (timeout, an error while waiting). ``log_path`` gets spark-submit's output, the application's
    diagnostics and what the NodeManager still has of the driver's log (the evidence is the report)."""
    endpoint = clusters.resolve_endpoint(DriverKind.YARN.value, master=target.master, spark_conf=spec.spark_conf,
                                         conn_extra=target.conn_extra)
    rm = yarn.ResourceManager(list(endpoint.urls), user=endpoint.user)
    deadline = time.monotonic() + timeout_s
    app_id: str | None = None
    parts: list[str] = []
    try:
        sub = detach.submit_cluster(command, detach.DETACH_YARN, env=env, kafka_config=kafka_config,
                                    timeout_s=timeout_s, find=lambda: drivers.find_by_tag(endpoint, tag))
        app_id = sub.driver.id
        parts.append(sub.output_tail)
        app = rm.app(app_id)
        while app.alive:
            if time.monotonic() > deadline:
                return None
            time.sleep(1.0)
            app = rm.app(app_id)
        _wait_containers_gone(rm, app)
        for name in ("stdout", "stderr"):
            with contextlib.suppress(yarn.YarnError):
                parts.append(drivers._strip_nm_framing(rm.driver_log_tail(app, file=name, max_bytes=32768)))
        parts += [app.diagnostics, f"YARN: {app.summary()}"]   # last: the plan's log tail ends with it
        return 0 if app.succeeded else 1
    finally:
        if app_id is None:
            with contextlib.suppress(UserError):
                app_id = drivers.find_by_tag(endpoint, tag)
        if app_id is not None:
            with contextlib.suppress(yarn.YarnError):
                if rm.app(app_id).alive:
                    _wait_containers_gone(rm, rm.kill(app_id))
        with open(log_path, "w") as fh:
            fh.write(scrub("\n".join(parts), kafka_config))


def _wait_containers_gone(rm: yarn.ResourceManager, app: yarn.YarnApp, limit_s: float = 30.0) -> None:
    """Until the NodeManager that ran the driver has finished the application there (or ``limit_s``).

    Why: the ResourceManager calls an application ended (or KILLED) before its containers are gone,
    and a driver's shutdown still writes the agent's report: read too early it may be stale, and a
    scratch folder removed too early is written again (a leftover beside the checkpoint, seen after
    a timeout kill). Only the driver's node is asked (executors elsewhere write into the copy only).
    """
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with contextlib.suppress(yarn.YarnError):
            app = rm.app(app.id)
        if app.alive or _runs_on_node(rm, app):
            time.sleep(1.0)
            continue
        return


def _runs_on_node(rm: yarn.ResourceManager, app: yarn.YarnApp) -> bool:
    if not app.am_host_http_address:
        return False
    scheme = "https" if rm.urls[0].startswith("https") else "http"
    try:
        _, body = rm._open(f"{scheme}://{app.am_host_http_address}/ws/v1/node/apps/{app.id}")
        return (json.loads(body).get("app") or {}).get("state") != "FINISHED"
    except (OSError, ValueError):   # 404 once the node forgot it; an unreachable node: nothing to wait for
        return False


def read_report(scratch: Location) -> dict | None:
    body = None
    with contextlib.suppress(OSError, ValueError):
        body = read_bytes(scratch.child(REPORT_NAME), limit=8 * 1024 * 1024)
    if not body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _norm(path: str | None) -> str:
    p = (path or "").rstrip("/")
    for prefix in ("file://", "file:"):
        if p.startswith(prefix):
            return "/" + p[len(prefix):].lstrip("/")
    return p


def judge(returncode: int | None, report: dict | None, copy_url: str, batch: int) -> Verdict:
    """What the agent's report proves about the run on the copy (pure).

    Evidence needs all of: a report in probe mode; no query halted for an unreplaced sink and no
    write refused (a skipped ``mkdirs`` of a file sink's metadata folder is harmless: nothing is
    written into it); the agent's rule rewrote a query onto the copy, and every query that
    started ran with the ``noop`` sink. Then: the copy's query committed batch ``batch`` (``ok``),
    or it failed, and its exception is the text to classify.
    """
    if report is None or not isinstance(report.get("probe"), dict):
        return Verdict(False, False, "the agent wrote no probe report (was its jar loaded? docs/probe.md)")
    section = report["probe"]
    refused = [r for r in section.get("refused") or [] if r.get("what") != "mkdirs"]
    if returncode == agent.PROBE_HALT_CODE or any(r.get("what") == "sink_not_replaced" for r in refused):
        names = ", ".join(str(r.get("query")) for r in refused if r.get("what") == "sink_not_replaced")
        return Verdict(False, False, f"the agent could not replace the sink of query {names or '?'}: it halted the "
                       "driver before the first batch")
    if refused:
        first = refused[0]
        return Verdict(False, False, f"the agent refused to {first.get('what')} {first.get('path')} (outside the "
                       "probe's folder)")
    copy = _norm(copy_url)
    rewritten = [q for q in section.get("rewritten") or [] if _norm(q.get("checkpoint_used")) == copy]
    if not rewritten:
        return Verdict(False, False, "no query of the application was moved onto the copy of the checkpoint "
                       "(does it use the registry's checkpoint?)")
    queries = report.get("queries") or []
    if any(q.get("probe_sink_replaced") is not True for q in queries):
        return Verdict(False, False, "a query started without proof that its sink was replaced")
    mine = [q for q in queries if _norm(q.get("checkpoint")) == copy]
    if not mine:
        return Verdict(True, False, "the query was refused before it started")
    last = mine[-1]
    if last.get("exception"):
        return Verdict(True, False, str(last["exception"]))
    committed = (last.get("at_end") or (last.get("stop") or {})).get("last_committed_batch")
    if isinstance(committed, int) and committed >= batch:
        return Verdict(True, True, f"batch {batch} committed on the copy")
    return Verdict(False, False, f"the query ended without committing batch {batch} (status {last.get('status')})")
