"""Test witnesses that look at this host's processes (``/proc``), independent of the lifecycle record."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"


def processes(containing: str) -> list[tuple[int, str]]:
    """(pid, command line, NULs as spaces) of every process whose command line contains ``containing``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if containing in cmd:
            found.append((int(entry.name), cmd))
    return found


def driver_groups(marker: str) -> dict[int, list[str]]:
    """Local spark-submit drivers whose command line contains ``marker``, by process group.

    Counted by group, not by pid: each driver is started in its own session, and one driver is
    several processes at times - the spark-submit script, spark-class and the launcher JVM while it
    starts, and a child the driver JVM forks (Hadoop's shell calls, Python workers), which shows the
    parent's command line until it execs (CI once counted such a child as a second driver).
    """
    groups: dict[int, list[str]] = {}
    for pid, cmd in processes(marker):
        if SPARK_SUBMIT not in cmd:
            continue
        with contextlib.suppress(ProcessLookupError):
            groups.setdefault(os.getpgid(pid), []).append(f"{pid}: {cmd[:200]}")
    return groups
