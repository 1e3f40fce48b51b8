"""The compatibility probe: does Spark accept a new application on this job's checkpoint?

Why a shadow start and not a rule table: only Spark knows which changes it refuses (a new stateful
operator, a changed state key or value schema, another number of sources...), and its rules move
between releases. So the new application is started, through the same spark-submit path as the
real one, on a **staged copy** of the checkpoint with its sink swapped for Spark's ``noop`` sink
(``--aks-probe``, the application contract in docs/probe.md), runs one batch and exits. Nothing
of the real checkpoint is written (it is only read) and the real sink is never opened: the job's
``--output`` and stop marker point into the probe's scratch folder, and the driver takes no lease.

Which batch: exactly the one a real restart would run first. A checkpoint with a pending batch
(``offsets/N`` without ``commits/N``) replays it. A checkpoint whose last batch ``C`` is committed
gets, in the copy only, ``offsets/C+1`` = ``offsets/C``: a planned batch with an empty range. Spark
must run it (a pending batch is never skipped), so it plans the stateful operators, checks their
schemas against the state schema files and the operator metadata, and loads state version
``C+1`` in every partition — with no new data in Kafka and without reading any record. (A real
restart with no new data runs *no* batch and succeeds, then fails on the first record.)

When no shadow start is needed: a checkpoint without any batch is a new query to Spark, so any
application is compatible. Spark 4's state metadata (``state/<op>/_metadata``) says which stateful
operators the checkpoint holds; it is reported with the answer, but it cannot say what the *new*
application plans, so it never replaces the shadow start.

The answer is typed (:class:`ProbeResult`); a timeout, a refused submit or an error Spark does not
attribute to the checkpoint is ``unknown``, never ``compatible``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_kafka_spark._util.fs import Location, list_files, open_location, os_reason, read_bytes
from airflow_kafka_spark._util.trees import remove_tree
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of, scrub
from airflow_kafka_spark.ops.backup.selection import log_ids, select_files
from airflow_kafka_spark.registry.model import Integration, JobSpec
from airflow_kafka_spark.runtime import connector, detach, probe_agent, submit
from airflow_kafka_spark.runtime.submit import SparkTarget

PROBE_FLAG = "--aks-probe"
PROBE_CONF = "spark.aks.probe"
PROBE_PREFIX = "AKS_PROBE "        # the lines the application prints (jobs/reference_job.py)
SOURCE_COUNT_CHANGED = "SOURCE_COUNT_CHANGED"   # Spark raises a bare assertion for it, no error class
# Spark 3.5 has no class for "a stateful operator the checkpoint has no state for" (4.x:
# STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY): its first batch fails reading a delta file.
STATE_MISSING = "STATE_DIRECTORY_MISSING"
_MISSING_DELTA = re.compile(r"Error reading delta file \S*?/state/(\d+)/\d+/\d+\.delta\b.*?does not exist")
_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)*)\]")
_SOURCE_COUNT = re.compile(r"There are \[(\d+)\] sources in the checkpoint offsets and now there are \[(\d+)\]")
# Error classes meaning "this application cannot run on this checkpoint" (Spark 3.5 to 4.x).
_BREAKING_PREFIXES = ("STATE_STORE_", "STREAMING_STATEFUL_OPERATOR_", "CANNOT_LOAD_STATE_STORE",
                      "STATEFUL_PROCESSOR_", "STREAMING_STATE_")
# Spark <= 3.5: plain exceptions without a class (a changed state schema; a replaced stateful operator
# reading the old operator's rows: "The streaming query failed by state format invalidation").
_LEGACY_BREAKING = ("StateSchemaNotCompatible", "InvalidUnsafeRowException")
_WRAPPERS = ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR")


class ProbeAnswer(StrEnum):
    COMPATIBLE = "compatible"
    BREAKING = "breaking"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found; ``reason`` is one line for the plan and the audit entry."""

    answer: ProbeAnswer
    reason: str
    method: str                                  # "shadow-start" | "checkpoint" (no start was needed)
    error_class: str | None = None
    batch: int | None = None                     # the batch the shadow start ran
    empty_batch: bool = False                    # the copy got an empty offsets/C+1 (no pending batch)
    seconds: float = 0.0
    operators: tuple[str, ...] = ()              # stateful operators the checkpoint holds ("0:dedupe")
    log_tail: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["answer"] = str(self.answer)
        out["operators"] = list(self.operators)
        return out


@dataclass(frozen=True)
class StagedCopy:
    """The probe's copy of the checkpoint: where, which batch Spark will run, whether it is an empty one."""

    location: Location
    batch: int
    empty_batch: bool
    operators: tuple[str, ...]
    state_dirs: frozenset[str] = frozenset()     # ids of the operators with a state/<id>/ folder


def stage_checkpoint(checkpoint: str, dest: str, *, storage_options: dict | None = None) -> StagedCopy | None:
    """Copy the checkpoint's last consistent version to ``dest`` and leave one batch pending there.

    ``None`` when the checkpoint has no batch (Spark starts a new query: nothing to check). The
    selection is the backup's (``ops.backup.selection``): up to the last commit, state files of
    the versions a restart loads, no temp files, so a copy taken while the job runs is consistent.
    """
    ck = open_location(checkpoint, storage_options, what="checkpoint")
    listing = list_files(ck)
    offsets, commits = log_ids(listing)
    if not offsets:
        return None
    committed = max(commits) if commits else None
    planned = max(offsets)
    sel = select_files(listing, committed, planned, keep_pending=True)
    out = open_location(dest, storage_options, what="probe copy")
    for rel in sel.files:
        _copy(ck.child(rel), out.child(rel))
    pending = sel.log_bound if sel.log_bound is not None and sel.log_bound != committed else None
    if pending is not None:
        return StagedCopy(out, pending, False, _operators(ck, listing), _state_dirs(sel.files))
    assert committed is not None   # offsets exist, none pending: the last one is committed
    body = read_bytes(ck.child(f"offsets/{committed}"), limit=16 * 1024 * 1024)
    if body is None:
        raise UserError(f"cannot read offsets/{committed} of {ck.url}")
    _write(out.child(f"offsets/{committed + 1}"), body)
    return StagedCopy(out, committed + 1, True, _operators(ck, listing), _state_dirs(sel.files))


def _state_dirs(files) -> frozenset[str]:
    return frozenset(rel.split("/")[1] for rel in files if rel.startswith("state/") and rel.count("/") >= 2)


def _copy(src: Location, dst: Location) -> None:
    try:
        if src.local and dst.local:
            os.makedirs(os.path.dirname(dst.path), exist_ok=True)
            with open(src.path, "rb") as fin, open(dst.path, "wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
        elif src.fs is dst.fs:
            dst.fs.makedirs(dst.fs._parent(dst.path), exist_ok=True)
            dst.fs.cp_file(src.path, dst.path)
        else:
            _write(dst, src.fs.cat_file(src.path))
    except OSError as exc:
        raise UserError(f"cannot copy {src.url} to the probe's copy {dst.url}: {os_reason(exc)}") from None


def _write(dst: Location, body: bytes) -> None:
    if dst.local:
        os.makedirs(os.path.dirname(dst.path), exist_ok=True)
        with open(dst.path, "wb") as fh:
            fh.write(body)
    else:
        dst.fs.pipe_file(dst.path, body)


def _operators(ck: Location, listing: Mapping[str, dict]) -> tuple[str, ...]:
    """``<id>:<name>`` of the stateful operators in Spark 4's operator metadata (v1 and v2 files)."""
    found: dict[str, str] = {}
    for rel in sorted(listing):
        parts = rel.split("/")
        if parts[0] != "state" or len(parts) < 4 or parts[2] != "_metadata":
            continue
        if parts[3:] != ["metadata"] and not (len(parts) == 5 and parts[3] == "v2"):
            continue
        body = read_bytes(ck.child(rel), limit=1024 * 1024) or b""
        with contextlib.suppress(ValueError, IndexError, AttributeError):
            info = json.loads(body.decode().split("\n", 1)[1])["operatorInfo"]
            found[str(info["operatorId"])] = str(info["operatorName"])
    return tuple(f"{k}:{v}" for k, v in sorted(found.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0))


def classify(returncode: int | None, output: str, *, timeout_s: float,
             state_dirs: frozenset[str] | None = None) -> tuple[ProbeAnswer, str, str | None]:
    """(answer, reason, error class) from the driver's exit code and output (pure)."""
    if returncode is None:
        return ProbeAnswer.UNKNOWN, f"the probe did not finish within {timeout_s:.0f}s", None
    lines = [ln[len(PROBE_PREFIX):] for ln in output.splitlines() if ln.startswith(PROBE_PREFIX)]
    events = []
    for ln in lines:
        with contextlib.suppress(ValueError):
            events.append(json.loads(ln))
    acknowledged = any(e.get("event") == "sink" and e.get("sink") == "noop" for e in events)
    result = next((e for e in reversed(events) if e.get("event") == "result"), None)
    if "unrecognized arguments" in output and PROBE_FLAG in output:
        return ProbeAnswer.UNKNOWN, f"the application does not know {PROBE_FLAG} (docs/probe.md)", None
    if not acknowledged:
        return (ProbeAnswer.UNKNOWN, f"the application exited {returncode} without acknowledging {PROBE_FLAG} "
                "(no AKS_PROBE sink line; docs/probe.md)", None)
    if returncode == 0 and result is not None and result.get("ok"):
        return ProbeAnswer.COMPATIBLE, "Spark ran the batch on the copy of the checkpoint", None
    return _failure(((result or {}).get("error") or "") + "\n" + output, returncode, state_dirs)


def classify_agent(returncode: int | None, verdict: probe_agent.Verdict, output: str, *, timeout_s: float,
                   state_dirs: frozenset[str] | None = None) -> tuple[ProbeAnswer, str, str | None]:
    """(answer, reason, error class) of an agent probe: the agent's evidence first, then Spark's error (pure)."""
    if returncode is None:
        return ProbeAnswer.UNKNOWN, f"the probe did not finish within {timeout_s:.0f}s", None
    if not verdict.evidence:
        return ProbeAnswer.UNKNOWN, verdict.text, None
    if verdict.ok:
        return ProbeAnswer.COMPATIBLE, f"Spark ran the batch on the copy of the checkpoint ({verdict.text})", None
    return _failure(verdict.text + "\n" + output, returncode, state_dirs)


def _failure(text: str, returncode: int, state_dirs: frozenset[str] | None) -> tuple[ProbeAnswer, str, str | None]:
    """``state_dirs``: the operators the copy has state for; a 3.5 missing delta file of an operator
    *without* a state folder is a new stateful operator (breaking), of one with a folder a damaged copy."""
    refusal = checkpoint_refusal(text)
    missing = _MISSING_DELTA.search(text)
    if not refusal and missing and state_dirs is not None and missing.group(1) not in state_dirs:
        return (ProbeAnswer.BREAKING, f"the application has stateful operator {missing.group(1)}, which the checkpoint "
                "has no state for (Spark 3.5: a missing delta file)", STATE_MISSING)
    m = _SOURCE_COUNT.search(text)
    if refusal == SOURCE_COUNT_CHANGED and m:
        return (ProbeAnswer.BREAKING, f"the checkpoint has {m.group(1)} source(s), the application reads "
                f"{m.group(2)}", SOURCE_COUNT_CHANGED)
    if refusal:
        return ProbeAnswer.BREAKING, f"Spark refused the checkpoint: {refusal}: {_message_of(text, refusal)}", refusal
    first = _first_error_class(text)
    if first:
        return (ProbeAnswer.UNKNOWN, f"the application failed with {first}, which is not about the checkpoint: "
                f"{_message_of(text, first)}", first)
    return ProbeAnswer.UNKNOWN, f"the application exited {returncode} without a Spark error class", None


def checkpoint_refusal(text: str) -> str | None:
    """The error in a driver's output that means "this application cannot run on this checkpoint", or None.

    The first Spark error class (wrappers such as STREAM_FAILED skipped) when it is about state or
    stateful operators; Spark 3.5's class-less state exceptions; the changed-number-of-sources
    assertion as ``SOURCE_COUNT_CHANGED``. Shared by the probe and the tests that watch Spark refuse.
    """
    if _SOURCE_COUNT.search(text):
        return SOURCE_COUNT_CHANGED
    first = _first_error_class(text)
    if first and (first.startswith(_BREAKING_PREFIXES) or first in _LEGACY_BREAKING):
        return first
    return None


def _first_error_class(text: str) -> str | None:
    classes = [c for c in _ERROR_CLASS.findall(text) if c not in _WRAPPERS]
    return classes[0] if classes else next((c for c in _LEGACY_BREAKING if c in text), None)


def _message_of(text: str, error_class: str | None) -> str:
    if not error_class:
        return ""
    i = text.find(error_class)
    tail = text[i + len(error_class):].lstrip("] ")
    return " ".join(tail.split("\n", 1)[0].split())[:300]


def probe_application(spec: JobSpec, *, kafka_config: Mapping[str, Any], target: SparkTarget,
                      scratch_dir: str | None = None, timeout_s: float | None = None,
                      storage_options: dict | None = None, keep: bool = False) -> ProbeResult:
    """Start ``spec``'s application on a staged copy of its checkpoint and say whether Spark accepts it.

    ``scratch_dir``: where the copy, the probe's output folder and its log go (a fresh temp folder
    by default for a local checkpoint, ``<checkpoint>.probe-<id>`` beside a remote one so that the
    cluster can read it). It is removed afterwards unless ``keep``. The driver runs in client mode
    on this host (its output is the evidence), except an agent job's in YARN cluster mode, probed
    in cluster mode on its cluster (``probe_agent.run_on_yarn``: the report is the evidence); with the
    job's master, spark_conf and connector, named ``aks-probe-<job>``.
    """
    timeout = float(timeout_s if timeout_s is not None else spec.probe_timeout_s)
    t0 = time.monotonic()
    remote = "://" in spec.checkpoint and not spec.checkpoint.startswith("file:")
    if scratch_dir is None:
        scratch_dir = (spec.checkpoint.rstrip("/") + f".probe-{uuid.uuid4().hex[:12]}" if remote
                       else tempfile.mkdtemp(prefix=f"aks-probe-{spec.name}-"))
    scratch = open_location(scratch_dir, storage_options, what="probe scratch folder")
    logs = tempfile.mkdtemp(prefix=f"aks-probe-{spec.name}-log-")
    try:
        staged = stage_checkpoint(spec.checkpoint, scratch.child("checkpoint").url, storage_options=storage_options)
        if staged is None:
            return ProbeResult(ProbeAnswer.COMPATIBLE, "the checkpoint has no batch: Spark starts a new query, "
                               "any application is accepted", method="checkpoint", seconds=time.monotonic() - t0)
        by_agent = spec.integration is Integration.AGENT
        on_yarn = by_agent and probe_agent.on_yarn_cluster(target)
        tag = f"aks-probe-{spec.name.lower()}-{uuid.uuid4().hex[:12]}"
        if by_agent:
            command, env = probe_agent.command(spec, staged.location, scratch, kafka_config=kafka_config,
                                               target=target, tag=tag)
            _write(scratch.child("STOP"), b"")   # the agent runs the pending batch, then stops the query
        else:
            command, env = probe_command(spec, staged, scratch, kafka_config=kafka_config, target=target)
        log_path = os.path.join(logs, "driver.log")
        if on_yarn:
            returncode = probe_agent.run_on_yarn(command, env, spec, target, tag=tag, timeout_s=timeout,
                                                 log_path=log_path, kafka_config=kafka_config)
        else:
            returncode = _run(command, env, log_path, timeout)
        with open(log_path, errors="replace") as fh:
            output = scrub(fh.read(), kafka_config)
        if by_agent:
            verdict = probe_agent.judge(returncode, probe_agent.read_report(scratch), staged.location.url,
                                        staged.batch)
            answer, reason, error_class = classify_agent(returncode, verdict, output, timeout_s=timeout,
                                                         state_dirs=staged.state_dirs)
        else:
            answer, reason, error_class = classify(returncode, output, timeout_s=timeout, state_dirs=staged.state_dirs)
        tail = "\n".join(ln for ln in output.splitlines()[-15:] if ln.strip())
        return ProbeResult(answer, reason, method="shadow-start", error_class=error_class, batch=staged.batch,
                           empty_batch=staged.empty_batch, seconds=round(time.monotonic() - t0, 1),
                           operators=staged.operators, log_tail=tail[-3000:])
    except UserError as exc:
        return ProbeResult(ProbeAnswer.UNKNOWN, f"the probe could not run: {exc}", method="shadow-start",
                           seconds=round(time.monotonic() - t0, 1))
    finally:
        if not keep:
            with contextlib.suppress(UserError, OSError):
                remove_tree(scratch)
            with contextlib.suppress(OSError):
                for name in os.listdir(logs):
                    os.unlink(os.path.join(logs, name))
                os.rmdir(logs)


def probe_command(spec: JobSpec, staged: StagedCopy, scratch: Location, *, kafka_config: Mapping[str, Any],
                  target: SparkTarget) -> tuple[list[str], dict[str, str]]:
    """The probe's spark-submit line: the job's own submit with the copy, scratch output and ``--aks-probe``."""
    probe_spec = dataclasses.replace(
        spec, checkpoint=staged.location.url, output=scratch.child("output").url,
        stop_marker=scratch.child("STOP").url, deploy_mode="client",
        spark_conf={**spec.spark_conf, PROBE_CONF: "true"})
    args = submit.job_arguments(probe_spec, bootstrap_servers=bootstrap_servers_of(kafka_config),
                                kafka_options=submit.kafka_job_options(kafka_config))
    conn_jars = connector.local_connector(probe_spec, target.master, os.environ)
    kwargs = submit.hook_kwargs(probe_spec, args=[*args, PROBE_FLAG], jars=conn_jars.jars, mode=detach.DETACH_LOCAL,
                                name=f"aks-probe-{spec.name}", packages=conn_jars.packages)
    command = submit.resolve_binary(target.build_command(kwargs, spec.application), os.environ)
    return command, submit.driver_env(command, target.master)


def _run(command: list[str], env: Mapping[str, str], log_path: str, timeout_s: float) -> int | None:
    """Run the probe's driver in its own session; kill the whole session on timeout (None)."""
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=dict(env), start_new_session=True)
        except OSError as exc:
            raise UserError(f"cannot run {command[0]}: {exc.strerror}") from None
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None
