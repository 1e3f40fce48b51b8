"""A local driver (``local[*]``, client mode): start it detached, and wait until Spark runs and until its first batch.

Why a module of its own: these waits belong to the submit of a driver on this host, while
:mod:`~airflow_kafka_spark.runtime.drivers` knows every kind of driver once it runs (alive, kill, stop).
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from pathlib import Path

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.checkpoint.formats import split_log_names
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.runtime.drivers import local_alive, tail_lines


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


#: What a local driver's log says once Spark itself runs (SparkContext's first INFO line, before any
#: job code can change the log level): past it, a failure is the application's, for the health gate.
SPARK_STARTED = b"Running Spark version"


def wait_started_local(driver: DriverInfo, log_path: str | Path, *, timeout_s: float = 30.0,
                       poll_s: float = 0.2) -> bool:
    """Wait until a just-started local driver has started Spark; a driver that exits first fails the submit.

    Why: a job that dies before Spark starts (a wrong ``main_class``, arguments its own parser refuses,
    a missing jar) is a failed submit, and saying so with the driver's last lines beats a health gate
    that reports "driver exited" minutes later. Returns True when Spark started, False on timeout (a
    job with its own quiet logging: the gate judges it then); raises :class:`UserError` when it exited.
    """
    deadline = time.monotonic() + timeout_s
    log = Path(log_path)
    while True:
        try:
            if SPARK_STARTED in log.read_bytes():
                return True
        except OSError:
            pass
        if not local_alive(driver):
            text = log.read_text(errors="replace") if log.exists() else ""
            raise UserError(f"the driver (pid {driver.id}) exited before Spark started; its log ({log}) ends:\n"
                            f"{tail_lines(text, 15)}{_packages_hint(text)}")
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


#: spark-submit's ``--packages`` resolution (Ivy) that could not fetch a jar: ``group#artifact;version!file.jar``.
_IVY_DOWNLOAD_FAILED = re.compile(r"download failed: ([\w.\-]+)#([\w.\-]+);([\w.\-]+)!")


def _packages_hint(log_text: str) -> str:
    """The fix when Spark's ``--packages`` resolution failed to download a jar, else nothing.

    Why: Ivy also looks in the local Maven repository, and a ``~/.m2`` entry that holds a pom but no jar (left
    by a Maven build that needed only the pom) fails every resolution of that artifact with this line, on a
    machine whose network is fine; the driver's log does not say so.
    """
    found = _IVY_DOWNLOAD_FAILED.search(log_text)
    if found is None:
        return ""
    group, artifact, version = found.groups()
    return (f"\nfix: Spark could not fetch {group}:{artifact}:{version} for spark.jars.packages. If "
            f"~/.m2/repository/{group.replace('.', '/')}/{artifact}/{version} holds a pom without its jar, fetch "
            f"the jar (mvn dependency:get -Dartifact={group}:{artifact}:{version}) or remove that folder; or set "
            "[kafka_spark] connector_jars to the connector's jar paths")


def wait_first_commit_local(driver: DriverInfo, checkpoint: str, after: int | None, *, timeout_s: float,
                            poll_s: float = 0.25) -> int | None:
    """Wait until a just-started local driver's query committed a batch after ``after`` (None: any batch,
    a new checkpoint); that batch's id, or None when the driver exited or ``timeout_s`` passed.

    Why: a local driver runs on the host of the Airflow worker that started it. Whatever Airflow starts
    next on that host (the safe restart's health gate: a task process, its first look, its deferral)
    shares the cores with the driver's JVM while it starts and runs its first batch; on a 2-core worker
    that slowed the driver by 0.6-0.9 s (docs/benchmarks.md, round 13). A poll here is one listing of
    ``commits/``. Never raises for the driver's sake: whether it is healthy is the health gate's call.
    """
    loc = open_location(checkpoint)
    commits = loc.child("commits")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            names = [n.rstrip("/").rsplit("/", 1)[-1] for n in commits.fs.ls(commits.path, detail=False)]
        except OSError:   # no commits/ yet, or the store did not answer this time: ask again until the deadline
            names = []
        newer = [b for b in split_log_names(names).batches if after is None or b > after]
        if newer:
            return min(newer)
        if not local_alive(driver) or time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


__all__ = ["SPARK_STARTED", "start_local", "wait_first_commit_local", "wait_started_local"]
