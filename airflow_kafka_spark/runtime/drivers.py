"""Start a streaming driver detached, know whether it is alive, and stop it on a batch boundary.

A Structured Streaming job runs for weeks; nothing in Airflow should hold a worker slot for it.
So the driver is started detached (a local process in its own session for ``local[*]`` and client
mode; cluster deploy mode with ``waitAppCompletion=false`` elsewhere, through the Spark provider),
and what identifies it is written to the lifecycle record. Two guards keep a second driver off the
same checkpoint (S16): the record's *lease*, taken for the critical section of a submit so that two
concurrent submits cannot both pass, and the *liveness* of the recorded driver, checked by every
submit, so a retry after the lease expired still refuses while the first driver runs.

Every driver kind sits behind one interface: a
:class:`~airflow_kafka_spark.lifecycle.events.DriverKind` names it (the value is what the lifecycle
record stores), :func:`control` gives its ``(is_alive, kill, describe, log_tail)`` as a
:class:`DriverControl`: a local process by pid on the host that started it (any other host gets
:class:`WrongHost` at once), a cluster driver through its cluster manager's REST API from any host
(:mod:`~airflow_kafka_spark.runtime.yarn`, :mod:`~airflow_kafka_spark.runtime.k8s`,
:mod:`~airflow_kafka_spark.runtime.standalone`; no ``yarn``/``spark-submit`` binary, no JVM).

Stopping writes the job's stop marker and waits for the driver to exit on its own; only after the
timeout does it fall back to a kill, and then it reports ``STOPPED_MID_BATCH`` with the batch that
Spark will replay (``offsets/N`` without ``commits/N``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airflow_kafka_spark._util.fs import open_location, remove_file
from airflow_kafka_spark._util.proc import pid_alive
from airflow_kafka_spark._util.text import iso_seconds
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.runtime import k8s, standalone, yarn
from airflow_kafka_spark.runtime.clusters import ClusterEndpoint
from airflow_kafka_spark.runtime.rest import RestError

LOCAL = DriverKind.LOCAL
#: How often a wait asks whether a local driver still runs (a ``/proc`` read; see :class:`DriverControl`).
LOCAL_POLL_S = 0.2


@dataclass(frozen=True)
class DriverControl:
    """How to ask whether a recorded driver is alive, kill it, say how it ended and show its log, whatever ran it.

    ``poll_s``: how often a wait for the driver's exit asks. The stop's wait is downtime: a local
    driver's exit is a read of ``/proc`` and is asked five times a second, a cluster driver's a call
    to its cluster manager's REST API, once a second.
    """

    is_alive: Callable[[], bool]
    kill: Callable[[], None]
    describe: Callable[[], str] = lambda: ""
    log_tail: Callable[[], str] = lambda: ""
    poll_s: float = 1.0


class WrongHost(UserError):
    """A client/local-mode driver checked from another host: no waiting can change that, so fail at once."""


def control(driver: DriverInfo, *, endpoint: ClusterEndpoint | Mapping[str, Any] | None = None) -> DriverControl:
    """The :class:`DriverControl` of ``driver``: by pid when local, through the cluster manager's REST API otherwise.

    ``endpoint`` (recorded at submit time, see :mod:`airflow_kafka_spark.runtime.clusters`) is needed
    for a cluster driver. An unreachable cluster manager counts as *alive*: a doubt never lets a
    second driver start on the same checkpoint.
    """
    kind = DriverKind(driver.kind)
    if kind is DriverKind.LOCAL:
        return DriverControl(lambda: local_alive(driver), lambda: kill_local(driver),
                             lambda: f"local process {driver.id} on {driver.host or 'this host'}", poll_s=LOCAL_POLL_S)
    if endpoint is None:
        raise UserError(f"driver {driver.id} ({kind}) is on a cluster but no cluster endpoint was recorded with it; "
                        "submit the job again through the operator so it is recorded")
    ep = endpoint if isinstance(endpoint, ClusterEndpoint) else ClusterEndpoint.from_dict(endpoint)
    if kind is DriverKind.YARN:
        return _yarn_control(driver.id, ep)
    if kind is DriverKind.K8S:
        return _k8s_control(driver.id, ep)
    return _standalone_control(driver.id, ep)


def find_by_tag(endpoint: ClusterEndpoint, tag: str) -> str | None:
    """The driver a submit tagged ``tag`` started (newest first), if the cluster manager can tell."""
    found = tagged_drivers(endpoint, tag)
    return found[0] if found else None


def tagged_drivers(endpoint: ClusterEndpoint, tag: str, *, checkpoint: bool = False,
                   alive_only: bool = False) -> list[str] | None:
    """Drivers carrying ``tag`` (the submit's, or with ``checkpoint`` the checkpoint's), newest first.

    None when the cluster manager cannot list drivers by tag (a standalone master: spark-submit's
    output names the driver, and nothing else can).
    """
    if endpoint.kind == DriverKind.YARN:
        states = [s for s in yarn.AppState if not s.terminal] if alive_only else ()
        apps = yarn.ResourceManager(list(endpoint.urls), user=endpoint.user).find(tag=tag, states=states)
        return [a.id for a in apps if a.alive or not alive_only]
    if endpoint.kind == DriverKind.K8S:
        return k8s.KubernetesApi(endpoint.urls[0], namespace=endpoint.namespace or "default",
                                 token_file=endpoint.token_file, ca_file=endpoint.ca_file).find_driver(
            tag, label=k8s.CHECKPOINT_LABEL if checkpoint else k8s.TAG_LABEL, alive_only=alive_only)
    return None


def tail_lines(text: str, lines: int = 25) -> str:
    return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])


_NM_FRAMING = ("Container: ", "LogAggregationType:", "LogType:", "LogLastModifiedTime:", "LogLength:", "LogContents:",
               "End of LogType:", "=====", "*****")


def _strip_nm_framing(text: str) -> str:
    """The log itself, without the headers a NodeManager puts around a (locally aggregated) log file."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith(_NM_FRAMING))


def _yarn_control(app_id: str, ep: ClusterEndpoint) -> DriverControl:
    rm = yarn.ResourceManager(list(ep.urls), user=ep.user)

    def alive() -> bool:
        try:
            return rm.app(app_id).alive
        except yarn.ApplicationNotFound:
            return False
        except yarn.YarnError:
            return True

    def kill() -> None:
        with contextlib.suppress(yarn.ApplicationNotFound):
            rm.kill(app_id)

    def log_tail() -> str:
        """The AM container's stdout: in cluster mode the Python driver's stdout *and* stderr land there."""
        try:
            app = rm.app(app_id)
            text = tail_lines(_strip_nm_framing(rm.driver_log_tail(app, file="stdout", max_bytes=16384)))
            return f"YARN {app.summary()}" + (f"\n{text}" if text else "")
        except yarn.YarnError as exc:
            return f"(driver log of {app_id} not readable: {exc})"

    return DriverControl(alive, kill, lambda: rm.app(app_id).summary(), log_tail)


def _k8s_control(driver_id: str, ep: ClusterEndpoint) -> DriverControl:
    api = k8s.KubernetesApi(ep.urls[0], namespace=ep.namespace or "default", token_file=ep.token_file,
                            ca_file=ep.ca_file)

    def alive() -> bool:
        try:
            return api.pod(driver_id).alive
        except RestError as exc:
            return exc.status != 404

    def log_tail() -> str:
        try:
            return tail_lines(api.log_tail(driver_id))
        except RestError as exc:
            return f"(driver log of {driver_id} not readable: {exc})"

    return DriverControl(alive, lambda: api.delete(driver_id), lambda: api.pod(driver_id).summary(), log_tail)


def _standalone_control(driver_id: str, ep: ClusterEndpoint) -> DriverControl:
    master = standalone.StandaloneMaster(list(ep.urls))

    def alive() -> bool:
        try:
            return master.status(driver_id).alive
        except RestError:
            return True

    return DriverControl(alive, lambda: master.kill(driver_id), lambda: master.status(driver_id).summary())


#: Set in a local driver's environment: the checkpoint it runs on and the task that started it. A submit
#: killed between the fork and the record's save leaves a driver no record names; these find it.
CHECKPOINT_ENV, SUBMITTER_ENV = "AKS_DRIVER_CHECKPOINT", "AKS_DRIVER_SUBMITTER"


def local_unrecorded(checkpoint: str) -> dict[int, str]:
    """Live local drivers started for ``checkpoint``, by their environment: process group -> submitter.

    Linux only (``/proc``); elsewhere nothing is found.
    """
    needle = f"{CHECKPOINT_ENV}={checkpoint}".encode()
    prefix = f"{SUBMITTER_ENV}=".encode()
    found: dict[int, str] = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            env = Path(entry.path, "environ").read_bytes().split(b"\0")
            if needle in env:
                found[os.getpgid(int(entry.name))] = next(
                    (e[len(prefix):].decode(errors="replace") for e in env if e.startswith(prefix)), "")
        except (OSError, ProcessLookupError):
            continue
    return found


def local_alive(driver: DriverInfo) -> bool:
    """True while the recorded local driver process exists (and is not a zombie or a reused pid)."""
    if driver.kind != DriverKind.LOCAL:
        raise UserError(f"driver kind {driver.kind} is not a local process")
    if driver.host and driver.host != socket.gethostname():
        raise WrongHost(f"driver pid {driver.id} was started in client/local mode on host {driver.host} and cannot be "
                        f"seen from {socket.gethostname()}: use cluster deploy mode (YARN, Kubernetes, standalone) so "
                        "any host can reach it, or run the Airflow worker and triggerer on the submitting host")
    pid = int(driver.id)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child, so it does not linger as a zombie
    if not pid_alive(pid):
        return False
    if Path(f"/proc/{pid}/stat").exists():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        # empty while the process is inside exec(): not evidence of a reused pid
        if cmdline.strip() and b"spark" not in cmdline.lower() and b"python" not in cmdline.lower():
            return False  # the pid was reused by something else
    return True


def kill_local(driver: DriverInfo, *, grace_s: float = 10.0) -> None:
    """SIGTERM the driver's process group, SIGKILL it after ``grace_s``."""
    pid = int(driver.id)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not local_alive(driver):
                return
            time.sleep(0.2)


@dataclass(frozen=True)
class StopResult:
    # STOPPED | STOPPED_MID_BATCH | KILLED (between batches) | NOT_RUNNING (a DStream job's: runtime/kinds.py)
    outcome: str
    graceful: bool                # exited on its own after the marker
    killed: bool
    waited_s: float
    last_planned: int | None
    last_committed: int | None
    replay_batch: int | None      # the batch Spark re-runs on the next start, if any
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


#: The job kind's judgement of a stop (``runtime/kinds.py``): takes the outcome Spark's checkpoint files
#: give and returns the stop's outcome (a DStream job's checkpoint holds no offset log to judge by).
StopJudge = Callable[[StopResult], StopResult]


def stop(checkpoint: str, marker: str, *, is_alive: Callable[[], bool], kill: Callable[[], None],
         timeout_s: float, poll_s: float = 1.0, storage_options: dict | None = None,
         progress: Callable[[str], None] | None = None, judge: StopJudge | None = None) -> StopResult:
    """Ask the job to stop on a batch boundary through its marker; kill only after ``timeout_s``.

    ``judge`` decides the outcome once the driver is gone (default: the checkpoint's files alone).
    """
    t0 = time.monotonic()
    loc = open_location(marker, storage_options, what="stop marker")
    decide = judge or (lambda files_say: files_say)
    if not is_alive():
        remove_file(loc)  # a stop killed while it waited left it: the next driver would stop after one batch
        return decide(_result(checkpoint, storage_options, graceful=True, killed=False, t0=t0, running=False))
    loc.fs.pipe_file(loc.path, f"stop requested at {iso_seconds()}\n".encode())
    killed = False
    try:
        deadline = t0 + timeout_s
        next_note = t0
        while is_alive():
            now = time.monotonic()
            if now >= deadline:
                if progress:
                    progress(f"driver still running after {timeout_s:.0f}s: killing it")
                kill()
                killed = True
                break
            if progress and now >= next_note:
                progress(f"waiting for the job to finish its batch and exit ({now - t0:.0f}s/{timeout_s:.0f}s)")
                next_note = now + 10
            time.sleep(poll_s)
    finally:
        remove_file(loc)
    return decide(_result(checkpoint, storage_options, graceful=not killed, killed=killed, t0=t0, running=True))


def _result(checkpoint: str, storage_options: dict | None, *, graceful: bool, killed: bool, t0: float,
            running: bool) -> StopResult:
    st = read_checkpoint(checkpoint, storage_options=storage_options)
    planned = st.latest_planned.batch_id if st.latest_planned else None
    committed = st.latest_committed.batch_id if st.latest_committed else None
    pending = st.pending_batch
    waited = time.monotonic() - t0
    how = f"killed after {waited:.0f}s (it did not stop by itself)" if killed else f"exited after {waited:.0f}s"
    if pending is not None:
        outcome = "STOPPED_MID_BATCH" if running else "NOT_RUNNING"
        msg = (f"batch {pending.batch_id} was planned (offsets/{pending.batch_id}) but not committed: Spark will "
               f"replay exactly its recorded range on the next start")
        if running:
            msg = f"{how}; {msg}"
    elif not running:
        outcome, msg = "NOT_RUNNING", "no driver was running; the checkpoint ends on a batch boundary"
    elif killed:
        # A kill between batches leaves a checkpoint that ends on a boundary, but nobody stopped on it: say both.
        outcome = "KILLED"
        msg = (f"{how}; the checkpoint ends on a batch boundary (last batch {committed} committed), so nothing "
               "will replay")
    else:
        outcome = "STOPPED"
        msg = f"stopped on a batch boundary (last batch {committed} committed) after {waited:.0f}s"
    return StopResult(outcome, graceful and running, killed, round(waited, 1), planned, committed,
                      pending.batch_id if pending else None, msg)
