"""Start, await and stop the dev stack's JVM daemons (Kafka broker, S3Proxy, Hadoop minicluster).

Why one module: every daemon is started the same way — its own session (so one signal reaches the
JVM and anything it forks), stdout appended to a file kept after a failure, its pid written next to
it — awaited by polling a probe while checking that it has not died, and stopped with SIGTERM to the
group and SIGKILL after a grace period. Getting that right once keeps no stray JVM behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from airflow_kafka_spark.errors import UserError


def spawn(cmd: list[str], *, stdout: Path, pid_file: Path, cwd: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    """``cmd`` in a new session, stdout+stderr appended to ``stdout``, its pid written to ``pid_file``."""
    out = open(stdout, "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    pid_file.write_text(str(proc.pid))
    return proc


def stop_group(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM ``proc``'s process group; SIGKILL it if it is still there after ``timeout`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def wait_ready(probe: Callable[[], str | None], *, deadline: float, interval: float,
               exited: Iterable[tuple[subprocess.Popen, Callable[[int], str]]]) -> str | None:
    """Call ``probe`` until it returns None (ready: None) or ``deadline`` passes (the last reason).

    ``probe`` returns why the daemon is not ready yet (a string) or None. Before every try each
    ``(process, message)`` pair is checked: a process that exited raises ``UserError(message(rc))``.
    """
    watched = list(exited)
    last = "no answer yet"
    while time.monotonic() < deadline:
        for proc, message in watched:
            if proc.poll() is not None:
                raise UserError(message(proc.returncode))
        why = probe()
        if why is None:
            return None
        last = why
        time.sleep(interval)
    return last


def serve(service: Any, banner: Callable[[], str], running: Callable[[], bool]) -> int:
    """``python -m devstack.<x>``: start, print ``banner()``, run until Ctrl-C/SIGTERM, stop (exit 2 on error)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill <pid>` stops the JVMs too
    try:
        service.start()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(banner())
    try:
        while running():
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0
