"""The moving parts of the soak: a producer that never stops, a driver counter, and the killers.

* :class:`~tests.soak.feeder.Feeder` (its own module) keeps records flowing for the whole soak.
* :class:`DriverCounter` counts, every second, the spark-submit JVMs whose command line names the
  soak's checkpoint: the "never two drivers at once" witness, independent of the lifecycle record;
  :class:`AppCounter` is its YARN form (RUNNING applications of the job, from the RM's REST API).
* :class:`TaskKiller` watches one DAG run through the REST API and SIGKILLs the task runner process
  (``airflow worker -- <ti id>``, the LocalExecutor's child that runs the operator) of chosen tasks
  a seeded delay after it appears, once per task, and the triggerer while the health gate is deferred;
  Airflow's retry (or the restarted triggerer) must carry the run to the end.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.support.processes import driver_groups, processes


class DriverCounter:
    """Samples, every ``interval`` seconds, how many spark-submit drivers run on ``marker`` (the checkpoint)."""

    def __init__(self, marker: str, interval: float = 1.0) -> None:
        self.marker, self.interval = marker, interval
        self.samples = 0
        self.blind = 0
        self.max_seen = 0
        self.over_one: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-drivers")

    def drivers(self) -> dict[int, list[str]]:
        """Drivers on the marker, by process group (see :func:`tests.support.processes.driver_groups`)."""
        return driver_groups(self.marker)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            groups = self.drivers()
            if groups is None:  # the witness could not look (a restarting ResourceManager)
                self.blind += 1
                continue
            self.samples += 1
            self.max_seen = max(self.max_seen, len(groups))
            if len(groups) > 1:
                self.over_one.append((time.time(), groups))

    def start(self) -> DriverCounter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class AppCounter(DriverCounter):
    """Samples, every ``interval`` seconds, the YARN applications named ``name`` that the RM reports RUNNING.

    The YARN form of the witness: a cluster-mode driver is its application's ApplicationMaster, so two
    RUNNING applications of the job are two drivers on its checkpoint. A sample the RM cannot answer (it
    is restarting) is counted as blind, not as zero.
    """

    def __init__(self, rm, name: str, interval: float = 1.0) -> None:
        super().__init__(name, interval)
        self.rm = rm

    def drivers(self) -> dict[str, list[str]] | None:
        from airflow_kafka_spark.runtime.yarn import AppState, YarnError

        try:
            return {a.id: [a.summary()] for a in self.rm.find(name=self.marker, states=[AppState.RUNNING])}
        except (YarnError, OSError):
            return None


@dataclass
class Kill:
    """One SIGKILL the soak did, for the event log."""

    what: str  # task id, or "triggerer"
    try_number: int
    delay_s: float  # after the task's DAG file was parsed, or after the gate deferred
    pid: int
    where: str = "in execute"  # or "before execute" (templates, XCom pulls), "after execute", "deferred"

    def __str__(self) -> str:
        if self.what == "broker":   # not a kill: a stop/start of the broker
            return f"broker stop/start while the gate was deferred ({self.where})"
        return f"SIGKILL {self.what} (try {self.try_number}, pid {self.pid}, {self.delay_s:.2f}s in, {self.where})"


def where(log_text: str) -> str:
    """Where in the task a kill landed, from its log at that moment."""
    if "::group::Post Execute" in log_text:
        return "after execute"
    return "in execute" if '"::endgroup::"' in log_text else "before execute"


def task_log(logs: Path, dag_id: str, run_id: str, task_id: str, attempt: int) -> Path:
    """Airflow 3's default task log path under ``$AIRFLOW_HOME/logs``."""
    return logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}" / f"attempt={attempt}.log"


@dataclass
class TaskKiller:
    """SIGKILLs, once each, the task runner of ``targets`` in one DAG run; and the triggerer during the gate.

    A task is killed a seeded delay in ``[0, max_delay_s]`` after its log says the DAG file is parsed
    or (seeded choice) that "Pre Execute" ended, so the kill lands around the operator's ``execute``
    (the log at that moment says where: before, in or after it), not in Airflow's start-up.
    ``client_factory`` gives an authenticated REST client (used to see the health gate deferred);
    ``restart_triggerer`` starts a new triggerer after the kill.
    """

    client_factory: Callable[[], object]
    logs: Path
    dag_id: str
    run_id: str
    targets: set[str]
    rng: random.Random
    max_delay_s: float
    kill_triggerer: bool
    triggerer_pid: Callable[[], int]
    restart_triggerer: Callable[[], None]
    # SIGKILL the scheduler's process group (its LocalExecutor workers die with it, as in a pod kill) this
    # long after ``kill_scheduler_at``'s task starts executing, then start a new scheduler
    kill_scheduler_at: str | None = None
    scheduler_delay_s: float = 0.0
    scheduler_pid: Callable[[], int] | None = None
    restart_scheduler: Callable[[], None] | None = None
    # stop and start the broker once the health gate is deferred (returns what happened, for the log)
    bounce_broker: Callable[[], str] | None = None
    kills: list[Kill] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TaskKiller:
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-killer")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        done = {k.what for k in self.kills}
        wanted = self.targets | ({"triggerer"} if self.kill_triggerer else set()) | (
            {"scheduler"} if self.kill_scheduler_at else set()) | ({"broker"} if self.bounce_broker else set())
        self.missed = sorted(wanted - done)

    def _kill_task(self, task: str, started: float) -> None:
        log = task_log(self.logs, self.dag_id, self.run_id, task, 1)
        text = log.read_text(errors="replace")
        found = re.search(r'"ti_id":\s*"([0-9a-f-]+)"', text)
        runner = processes(f"airflow worker -- {found.group(1)}") if found else []
        if runner:
            with contextlib.suppress(ProcessLookupError):
                os.kill(runner[0][0], signal.SIGKILL)
                self.kills.append(Kill(task, 1, time.monotonic() - started, runner[0][0], where(text)))

    def _scheduler_killed(self, anchor: str, started: dict[str, float]) -> bool:
        """Kill the scheduler once ``anchor``'s task has executed for ``scheduler_delay_s``; whether it was."""
        if "scheduler" not in started:
            log = task_log(self.logs, self.dag_id, self.run_id, anchor, 1)
            if log.exists() and '"::endgroup::"' in log.read_text(errors="replace"):
                started["scheduler"] = time.monotonic()
            return False
        if time.monotonic() - started["scheduler"] < self.scheduler_delay_s:
            return False
        assert self.scheduler_pid is not None and self.restart_scheduler is not None
        pid = self.scheduler_pid()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.kills.append(Kill("scheduler", 1, time.monotonic() - started["scheduler"], pid, f"while {anchor} ran"))
        self.restart_scheduler()
        return True

    def _gate_deferred(self, client) -> bool:
        try:
            r = client.get(f"/api/v2/dags/{self.dag_id}/dagRuns/{self.run_id}/taskInstances/health_gate")
        except httpx.HTTPError:  # a busy api-server: ask again on the next round
            return False
        return r.status_code == 200 and r.json().get("state") == "deferred"

    def _run(self) -> None:
        client = self.client_factory()
        pending = set(self.targets)
        trig = self.kill_triggerer
        delays = {t: self.rng.uniform(0, self.max_delay_s) for t in sorted(pending | {"triggerer"})}
        # From the end of the DAG parse (lands mostly in Airflow's pre-execute: templates, XCom pulls) or from
        # the end of "Pre Execute" (lands in the operator's execute), half and half.
        anchors = {t: self.rng.choice(['"Worker startup parse complete"', '"::endgroup::"']) for t in sorted(pending)}
        started: dict[str, float] = {}
        last_rest = 0.0
        try:
            sched, bounce, last_gate_look = self.kill_scheduler_at, self.bounce_broker, 0.0
            while not self._stop.is_set() and (pending or trig or sched or bounce):
                if sched and self._scheduler_killed(sched, started):
                    sched = None
                if bounce and time.monotonic() - last_gate_look > 1.0:
                    last_gate_look = time.monotonic()
                    if self._gate_deferred(client):
                        self.kills.append(Kill("broker", 1, 0.0, 0, bounce()))
                        bounce = None
                for task in sorted(pending):
                    if task not in started:
                        log = task_log(self.logs, self.dag_id, self.run_id, task, 1)
                        if log.exists() and anchors[task] in log.read_text(errors="replace"):
                            started[task] = time.monotonic()
                    if task in started and time.monotonic() - started[task] >= delays[task]:
                        self._kill_task(task, started[task])
                        pending.discard(task)
                if trig and time.monotonic() - last_rest > 1.0:
                    last_rest = time.monotonic()
                    if "triggerer" in started or self._gate_deferred(client):
                        first = started.setdefault("triggerer", time.monotonic())
                        if time.monotonic() - first >= delays["triggerer"] * 2:
                            pid = self.triggerer_pid()
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(pid, signal.SIGKILL)
                            self.kills.append(Kill("triggerer", 1, time.monotonic() - first, pid, "deferred"))
                            self.restart_triggerer()
                            trig = False
                self._stop.wait(0.05)
        finally:
            client.close()
