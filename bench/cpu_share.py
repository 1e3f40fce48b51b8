"""Whose CPU a downtime window spent: Airflow's processes against the machine's (issue 28's benches).

Why: on the devstack the YARN "cluster" (ResourceManager, NodeManager, the driver's and executors'
JVMs, HDFS, Kafka) runs on the same 2 cores as Airflow, which it never does in production. A DAG
row's driver starts while Airflow's scheduler, the submit task's end and the health gate's task
process run; a bare row's starts beside an idle scheduler. This sampler tells the two apart: every
0.25 s it reads ``/proc`` (utime + stime of every process run as the ``airflow`` command or forked by it, each
process's own counter kept after it exits, and the machine's busy ticks from ``/proc/stat``), and
:func:`during` answers how many CPU seconds Airflow took between two wall times and how busy the
machine was. Linux only; without ``/proc`` it answers nothing.

The same samples also split every process's CPU by what it is (:data:`GROUPS`, first match of its
command line): Airflow, the Spark application (spark-submit, the AM with the driver, executors and
their Python workers), the Hadoop daemons, the Kafka broker, and the rest (this bench, the OS), so a
slower driver start can be put on whoever took the cores.

Airflow's processes are found by either form of their command line: ``…/bin/airflow scheduler`` as
started, and the title Airflow gives its forks with setproctitle (``airflow worker -- <task instance>``,
``airflow api_server -- …``, ``airflow serve-logs``), which no longer holds ``bin/airflow``. Before
session 29 only the first form counted: every task process and the api-server fell in "the rest".
Airflow's share is also split by role (:func:`airflow_role`: scheduler, triggerer, dag-processor,
api-server, task, serve-logs, other).
"""

from __future__ import annotations

import bisect
import os
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_INTERVAL_S = 0.25
#: group -> command-line substrings; the first group with a match takes the process.
GROUPS: tuple[tuple[str, tuple[bytes, ...]], ...] = (
    ("airflow", (b"bin/airflow\x00",)),
    ("spark", (b"org.apache.spark", b"pyspark", b"/usercache/", b"reference_job")),
    ("hadoop", (b"MiniCluster", b"org.apache.hadoop")),
    ("kafka", (b"kafka.Kafka", b"kafka_", b"KafkaRaftServer")),
)


def is_airflow(cmd: bytes) -> bool:
    """The ``airflow`` command as started, or one of its forks under the title Airflow set for it."""
    return b"bin/airflow\x00" in cmd or cmd.startswith(b"airflow ")


#: the first word after ``airflow`` -> the role it is counted under (``airflow worker --`` is a task's
#: supervisor and its runner, or an idle LocalExecutor worker; ``dag-processor`` also runs in the scheduler
#: when no separate one is started).
_ROLES = {b"scheduler": "scheduler", b"triggerer": "triggerer", b"dag-processor": "dag-processor",
          b"dag_processor": "dag-processor", b"api-server": "api-server", b"api_server": "api-server",
          b"worker": "task", b"serve-logs": "serve-logs", b"serve_logs": "serve-logs"}


def airflow_role(cmd: bytes) -> str:
    words = cmd.replace(b"\x00", b" ").split()
    for i, w in enumerate(words):
        if w == b"airflow" or w.endswith(b"/bin/airflow"):
            nxt = words[i + 1] if i + 1 < len(words) else b""
            return _ROLES.get(nxt.rstrip(b":"), "other")
    return "other"


def group_of(cmd: bytes) -> str:
    if is_airflow(cmd):
        return "airflow"
    return next((name for name, keys in GROUPS if any(k in cmd for k in keys)), "other")


def _cumulative(before: dict[int, tuple[int, int, str]], now: dict[int, tuple[int, int, str]],
                done: dict[str, int]) -> dict[str, float]:
    """CPU seconds per label so far: ``done`` (updated here with the processes of ``before`` gone from ``now``:
    same pid, another start time, or none) plus every live process's own counter."""
    for pid, (start, ticks, label) in before.items():
        if now.get(pid, (None,))[0] != start:
            done[label] = done.get(label, 0) + ticks
    total = dict(done)
    for _, ticks, label in now.values():
        total[label] = total.get(label, 0) + ticks
    return {label: t / _TICK for label, t in total.items()}


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(name="cpu-share", daemon=True)
        self.walls: list[float] = []
        self.busy: list[float] = []       # cumulative busy CPU seconds of the machine
        self.groups: list[dict[str, float]] = []   # cumulative CPU seconds per group (GROUPS)
        self._all: dict[int, tuple[int, int, str]] = {}   # pid -> (start, ticks, group), every process
        self._group_done: dict[str, int] = {}
        self.roles: list[dict[str, float]] = []    # cumulative CPU seconds per Airflow role (airflow_role)
        self._role_of: dict[int, tuple[int, int, str]] = {}   # pid -> (start, ticks, role), Airflow's
        self._role_done: dict[str, int] = {}

    def run(self) -> None:
        while True:
            self._sample()
            time.sleep(_INTERVAL_S)

    def _sample(self) -> None:
        every: dict[int, tuple[int, int, str]] = {}
        roles: dict[int, tuple[int, int, str]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    cmd = fh.read()
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
            except OSError:
                continue
            start, ticks = int(fields[19]), int(fields[11]) + int(fields[12])   # starttime, utime + stime
            every[int(name)] = (start, ticks, group_of(cmd))
            if is_airflow(cmd):   # the airflow command and what it forks, not the Spark job
                roles[int(name)] = (start, ticks, airflow_role(cmd))
        self.groups.append(_cumulative(self._all, every, self._group_done))
        self._all = every
        self.roles.append(_cumulative(self._role_of, roles, self._role_done))
        self._role_of = roles
        with open("/proc/stat") as fh:
            cpu = [int(x) for x in fh.readline().split()[1:]]
        self.walls.append(time.time())
        self.busy.append((sum(cpu) - cpu[3] - (cpu[4] if len(cpu) > 4 else 0)) / _TICK)   # all but idle, iowait

    def at(self, series: list[float], wall: float) -> float:
        i = min(max(bisect.bisect_left(self.walls, wall), 0), len(self.walls) - 1)
        return series[i]


_SAMPLER: _Sampler | None = None


def start() -> None:
    """Start sampling (once per process); a no-op where ``/proc`` is missing."""
    global _SAMPLER
    if _SAMPLER is None and os.path.exists("/proc/stat"):
        _SAMPLER = _Sampler()
        _SAMPLER.start()


def during(t0: float, t1: float, what: str) -> dict:
    """``<what>_airflow_cpu_s`` (Airflow's CPU seconds from ``t0`` to ``t1``) and ``<what>_machine_busy``
    (the machine's busy CPU seconds over the same span, per core-second), or ``{}`` when not sampling."""
    s = _SAMPLER
    if s is None or len(s.walls) < 2 or t1 <= t0 or s.walls[0] > t0:
        return {}
    cores = os.cpu_count() or 1
    g0, g1 = s.at(s.groups, t0), s.at(s.groups, t1)
    r0, r1 = s.at(s.roles, t0), s.at(s.roles, t1)
    return {f"{what}_airflow_cpu_s": round(sum(r1.values()) - sum(r0.values()), 2),   # every role's
            f"{what}_machine_busy": round((s.at(s.busy, t1) - s.at(s.busy, t0)) / ((t1 - t0) * cores), 2),
            f"{what}_cpu_by_group_s": {g: round(g1.get(g, 0.0) - g0.get(g, 0.0), 2) for g in sorted(g1)},
            f"{what}_airflow_cpu_by_role_s": {r: round(r1.get(r, 0.0) - r0.get(r, 0.0), 2) for r in sorted(r1)}}
