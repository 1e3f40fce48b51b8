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
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

from airflow_kafka_spark import agent
from airflow_kafka_spark._util.fs import Location, read_bytes
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import connector, detach, submit
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


def command(spec: JobSpec, copy: Location, scratch: Location, *, kafka_config: Mapping[str, Any],
            target: SparkTarget) -> tuple[list[str], dict[str, str]]:
    """The probe's spark-submit line for an agent job: the job's own submit, its arguments with the copy,
    the agent's probe confs; the driver in client mode on this host (its report and log are the evidence)."""
    probe_spec = dataclasses.replace(spec, checkpoint=copy.url, output=scratch.child("output").url,
                                     stop_marker=scratch.child("STOP").url, deploy_mode="client")
    facts = LaunchFacts(bootstrap_servers=bootstrap_servers_of(kafka_config))
    args = own_arguments(probe_spec, facts)
    conn_jars = connector.local_connector(probe_spec, target.master, os.environ)
    binary = submit.resolve_binary([target.spark_binary], os.environ)[0]
    version = spec.spark_version or submit.spark_version(binary)
    conf = agent.probe_conf(copy.url, scratch.url, spec.checkpoint, scratch.child(REPORT_NAME).url, version,
                            spec.spark_conf)
    kwargs = submit.hook_kwargs(probe_spec, args=args, jars=conn_jars.jars, mode=detach.DETACH_LOCAL,
                                name=f"aks-probe-{spec.name}", packages=conn_jars.packages,
                                extra_conf={**spec.spark_conf, **conf})
    cmd = submit.resolve_binary(target.build_command(kwargs, spec.application), os.environ)
    return cmd, submit.driver_env(cmd, target.master)


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
