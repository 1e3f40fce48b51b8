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
record stores), :func:`control` gives its ``(is_alive, kill)`` as a :class:`DriverControl`: a local
process by pid on this host, a cluster driver through its cluster manager (a YARN driver can be
reached through :mod:`airflow_kafka_spark.runtime.yarn` the same way).

Stopping writes the job's stop marker and waits for the driver to exit on its own; only after the
timeout does it fall back to a kill, and then it reports ``STOPPED_MID_BATCH`` with the batch that
Spark will replay (``offsets/N`` without ``commits/N``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from airflow_kafka_spark._util.fs import open_location, remove_file
from airflow_kafka_spark._util.proc import pid_alive
from airflow_kafka_spark._util.text import iso_seconds
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.runtime import submit

LOCAL = DriverKind.LOCAL


@dataclass(frozen=True)
class DriverControl:
    """How to ask whether a recorded driver is alive and how to kill it, whatever ran it."""

    is_alive: Callable[[], bool]
    kill: Callable[[], None]


def control(driver: DriverInfo, *, master: str | None = None, spark_binary: str | None = None) -> DriverControl:
    """The :class:`DriverControl` of ``driver``: by pid for a local one, through the cluster manager otherwise.

    A cluster driver needs the master recorded at submit time and a spark binary; a status that
    cannot be read counts as alive (see :func:`airflow_kafka_spark.runtime.submit.cluster_alive`).
    """
    kind = DriverKind(driver.kind)
    if kind is DriverKind.LOCAL:
        return DriverControl(lambda: local_alive(driver), lambda: kill_local(driver))
    if not master or not spark_binary:
        raise UserError(f"driver {driver.id} ({kind}) is on a cluster: its master and spark binary are needed to "
                        "reach it; submit the job again through the operator so they are recorded")
    env = submit.driver_env([spark_binary], master)
    return DriverControl(lambda: submit.cluster_alive(driver, master=master, spark_binary=spark_binary, env=env),
                         lambda: submit.cluster_kill(driver, master=master, spark_binary=spark_binary, env=env))


def start_local(command: list[str], *, env: dict[str, str] | None = None, log_path: str | Path,
                cwd: str | None = None) -> DriverInfo:
    """Start ``command`` (a spark-submit line) in its own session, output appended to ``log_path``."""
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True, close_fds=True)
    return DriverInfo(kind=DriverKind.LOCAL.value, id=str(proc.pid), host=socket.gethostname(),
                      started_at=int(time.time() * 1000))


def local_alive(driver: DriverInfo) -> bool:
    """True while the recorded local driver process exists (and is not a zombie or a reused pid)."""
    if driver.kind != DriverKind.LOCAL:
        raise UserError(f"driver kind {driver.kind} is not a local process")
    if driver.host and driver.host != socket.gethostname():
        raise UserError(f"driver pid {driver.id} runs on host {driver.host}, not here ({socket.gethostname()}); "
                        "check it there, or use cluster deploy mode so any worker can see it")
    pid = int(driver.id)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own child, so it does not linger as a zombie
    if not pid_alive(pid):
        return False
    if Path(f"/proc/{pid}/stat").exists():
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"spark" not in cmdline.lower() and b"python" not in cmdline.lower():
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
    outcome: str                  # STOPPED | STOPPED_MID_BATCH | NOT_RUNNING
    graceful: bool                # exited on its own after the marker
    killed: bool
    waited_s: float
    last_planned: int | None
    last_committed: int | None
    replay_batch: int | None      # the batch Spark re-runs on the next start, if any
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def stop(checkpoint: str, marker: str, *, is_alive: Callable[[], bool], kill: Callable[[], None],
         timeout_s: float, poll_s: float = 1.0, storage_options: dict | None = None,
         progress: Callable[[str], None] | None = None) -> StopResult:
    """Ask the job to stop on a batch boundary through its marker; kill only after ``timeout_s``."""
    t0 = time.monotonic()
    if not is_alive():
        return _result(checkpoint, storage_options, graceful=True, killed=False, t0=t0, running=False)
    loc = open_location(marker, storage_options, what="stop marker")
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
    return _result(checkpoint, storage_options, graceful=not killed, killed=killed, t0=t0, running=True)


def _result(checkpoint: str, storage_options: dict | None, *, graceful: bool, killed: bool, t0: float,
            running: bool) -> StopResult:
    st = read_checkpoint(checkpoint, storage_options=storage_options)
    planned = st.latest_planned.batch_id if st.latest_planned else None
    committed = st.latest_committed.batch_id if st.latest_committed else None
    pending = st.pending_batch
    waited = time.monotonic() - t0
    if pending is not None:
        outcome = "STOPPED_MID_BATCH" if running else "NOT_RUNNING"
        msg = (f"batch {pending.batch_id} was planned (offsets/{pending.batch_id}) but not committed: Spark will "
               f"replay exactly its recorded range on the next start")
    elif not running:
        outcome, msg = "NOT_RUNNING", "no driver was running; the checkpoint ends on a batch boundary"
    else:
        outcome = "STOPPED"
        msg = f"stopped on a batch boundary (last batch {committed} committed) after {waited:.0f}s"
    return StopResult(outcome, graceful and running, killed, round(waited, 1), planned, committed,
                      pending.batch_id if pending else None, msg)
