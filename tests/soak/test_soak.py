"""Soak: a seeded random sequence of faults over the reference job, then the sink checked record by record.

Everything is real: a broker of its own (stopped and started on the same port and data), Airflow's
api-server + scheduler (LocalExecutor) + triggerer on SQLite running a copy of the safe-restart DAG
with retries (the product DAG retries only its health gate: a retry elsewhere is the operator's
decision), spark-submit of the reference job (idempotent sink) on ``local[2]``, and a producer that never stops.

Events: safe restart ``keep``; ``auto`` after a checkpoint-breaking change (compatibility_version
bump: reset ``preserve``); ``restore`` of a backup an earlier run took (same application); SIGKILL of
the driver's process group while a batch is planned and not committed; broker stop/start; and,
inside the DAG runs, SIGKILL of the task runner of chosen operators (Airflow retries it) and of the
triggerer while the health gate is deferred (a new triggerer picks the trigger up), and of the
scheduler's process group while a chosen operator executes (its LocalExecutor workers die with it, as
in a pod kill; a new scheduler finds the orphaned task by its missed heartbeats, and Airflow retries
it): once in the first run after the first deploy, then (a long run) in one run in ten; and a broker stop/start
while the health gate is deferred (the gate must wait it out, not fail): one run in four. Both are
drawn from a generator of their own, so that the other events of a seed replay as before.

At the end: 0 records missing; duplicates only as many as the reset/restore plans announced; never
two drivers on the checkpoint (sampled every second); every backup verifies. The seed is printed;
``AKS_SOAK_SEED`` replays a run, ``AKS_SOAK_EVENTS`` sets its length (default 30),
``AKS_SOAK_MAX_S`` stops starting events after that many seconds (the figures say how many ran),
``AKS_SOAK_REPORT`` writes the figures as JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.runtime import drivers
from devstack import topics
from devstack.airflow_services import AirflowServices
from devstack.broker import LocalBroker
from tests.soak.feeder import Feeder
from tests.soak.figures import Figures, announced, finish
from tests.soak.harness import DriverCounter, TaskKiller
from tests.soak.stage import DAG_ID, JOB, MODE_OPS, PARTITIONS, RATE, airflow_env, knobs, soak_dag, start_airflow
from tests.support.airflow_env import write_registry
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(3600), pytest.mark.soak, pytest.mark.airflow, pytest.mark.integration]

class Soak:
    def __init__(
        self,
        base: Path,
        broker: LocalBroker,
        services: AirflowServices,
        registry: Path,
        topic: str,
        rng: random.Random,
        figures: Figures,
        data: str | None = None,
    ) -> None:
        self.base, self.broker, self.services, self.registry = base, broker, services, registry
        self.topic, self.rng, self.fig = topic, rng, figures
        self.data = data or str(base / "data")  # a local folder, or a store URL (hdfs://...)
        self.checkpoint = f"{self.data}/checkpoints/{JOB}"
        self.compat = 1
        self.client = services.client()
        self.era_backups: list[str] = []  # backups taken since the last checkpoint-breaking change
        self.killed_ops: set[str] = set()
        self.backups_taken = 0
        self.triggerer_killed = False
        # Scheduler kills draw from their own generator, so the other events of a seed replay as before.
        # (seeded from the main generator's state, which reading does not advance)
        self.scheduler_rng = random.Random(f"scheduler {rng.getstate()[1][:8]}")
        self.scheduler_killed = False
        self.job_down = True
        self.max_s = float("inf")  # AKS_SOAK_MAX_S: stop starting events after that many seconds

    def job_entry(self) -> dict:
        """The soak job's registry entry (a cluster soak adds its cluster settings)."""
        return {
            "name": JOB,
            "topics": [self.topic],
            "sink": "idempotent",
            "max_offsets_per_trigger": 200,
            "compatibility_version": str(self.compat),
            "application_args": ["--trigger", "processing:1s", "--shuffle-partitions", "2"],
            "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "640m"},
            "health_gate": {"min_batches": 2, "timeout_s": 600, "idle_pass_s": 60},
        }

    def write_registry(self) -> None:
        write_registry(self.registry, [self.job_entry()])

    # -- DAG runs ------------------------------------------------------------------------------
    def dag_run(self, mode: str, **conf) -> None:
        ops = MODE_OPS[mode]
        fresh = [o for o in ops if o not in self.killed_ops]
        k = len(ops) if self.fig.events_target >= 100 else max(1, len(ops) // 2)  # a long run kills in every step
        targets = set(fresh[:k]) | {o for o in ops if self.rng.random() < 0.25}
        targets = set(self.rng.sample(sorted(targets), min(len(targets), k)))
        kill_trig = not self.triggerer_killed or self.rng.random() < 0.4
        # the scheduler: once in the first run after the first deploy, then (a long run) in one run in ten
        again = self.fig.events_target >= 100 and self.scheduler_rng.random() < 0.1
        kill_sched = self.fig.dag_runs >= 1 and (not self.scheduler_killed or again)
        sched_at = self.scheduler_rng.choice(ops) if kill_sched else None
        # the broker stopped and started while the gate waits (the gate must wait it out): one run in four
        bounce_at_gate = self.fig.dag_runs >= 1 and self.scheduler_rng.random() < 0.25
        body = {
            "job": JOB,
            "mode": mode,
            "backup_id": None,
            "datetime": None,
            "dry_run": False,
            "accept_data_loss": False,
            "reason": f"soak {mode}",
            **conf,
        }
        r = self.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": body})
        assert r.status_code == 200, r.text
        run_id = r.json()["dag_run_id"]
        killer = TaskKiller(
            self.services.client,
            self.services.home / "logs",
            DAG_ID,
            run_id,
            targets,
            self.rng,
            max_delay_s=0.5,
            kill_triggerer=kill_trig,
            triggerer_pid=lambda: self.services.procs["triggerer"][0].pid,
            restart_triggerer=lambda: self.services.start("triggerer"),
            kill_scheduler_at=sched_at,
            scheduler_delay_s=self.scheduler_rng.uniform(0, 2.0),
            scheduler_pid=lambda: self.services.procs["scheduler"][0].pid,
            restart_scheduler=lambda: self.services.start("scheduler"),
            bounce_broker=self.bounce_during_gate if bounce_at_gate else None,
        ).start()
        started = time.monotonic()
        try:
            state = self.wait(run_id, timeout=900)
        finally:
            killer.stop()
        tis = {
            t["task_id"]: t
            for t in self.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", limit=100).json()[
                "task_instances"
            ]
        }
        states = {k: v["state"] for k, v in tis.items()}
        self.fig.dag_runs += 1
        self.fig.note(f"safe restart {mode}", f"{state} in {time.monotonic() - started:.0f}s {conf or ''}")
        for kill in killer.kills:
            kind = {"triggerer": "triggerer kill", "scheduler": "scheduler kill", "broker": "broker at the gate"}
            self.fig.note(kind.get(kill.what, "task kill"), str(kill))
            self.killed_ops.add(kill.what)
            self.triggerer_killed |= kill.what == "triggerer"
            self.scheduler_killed |= kill.what == "scheduler"
        self.fig.missed_kills += [f"{run_id}:{m}" for m in killer.missed]
        audit = self.audit()
        rollback = audit.get("rollback") or {}
        if state != "success":
            # The one failure a loaded machine may cause: a driver too slow to commit in the gate's time. The
            # rollback must then restore this run's backup and resubmit the previous application (and its
            # replay is announced); any other failure fails the soak.
            gate_timeout = rollback.get("failed_steps") == ["health_gate"] and "timed out" in json.dumps(audit)
            assert gate_timeout and audit.get("outcome") == "ROLLED_BACK" and rollback.get("resubmitted"), (
                f"{mode} run {run_id}: {state} {states}\naudit: {json.dumps(audit)[:4000]}"
            )
            self.fig.rollbacks += 1
            self.fig.note(
                "rolled back",
                f"the health gate timed out; backup {rollback.get('restored_backup_id')} "
                "restored, previous application resubmitted",
            )
            self.fig.announced += int((rollback.get("restore") or {}).get("records_to_replay") or 0)
            self.era_backups = []  # the checkpoint is this run's backup again: restore only what a later keep takes
            self.job_down = False
            return
        backup = self.xcom(run_id, "stop", "backup")
        reset = self.xcom(run_id, "submit", "reset")
        if mode == "auto" and reset:
            self.era_backups = []
            self.fig.announced += announced(reset)
        if mode == "restore":
            self.fig.announced += int(self.xcom(run_id, "submit", "restore").get("records_to_replay") or 0)
        if backup and backup.get("backup_id"):
            self.era_backups.append(backup["backup_id"])
            self.backups_taken += 1
        self.job_down = False

    def get(self, path: str, **params) -> httpx.Response:
        """GET through the REST API, asked again when a busy api-server answers late."""
        for attempt in range(5):
            try:
                return self.client.get(path, params=params)
            except httpx.HTTPError:
                if attempt == 4:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    def audit(self) -> dict:
        """The last safe-restart audit entry: outcome, failed steps and the reason."""
        rec = LifecycleRecord.load(str(self.checkpoint))
        entries = [e for e in (rec.history if rec else []) if e["event"] == "safe_restart"]
        return entries[-1]["details"] if entries else {}

    def wait(self, run_id: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name in ("api-server", "scheduler"):
                proc = self.services.procs[name][0]
                assert proc.poll() is None, f"{name} died:\n{self.services.tail(name)}"
            state = self.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}").json()["state"]
            if state in ("success", "failed"):
                return state
            time.sleep(2)
        pytest.fail(f"run {run_id} did not end in {timeout:.0f}s:\n{self.services.tail('scheduler')}")

    def xcom(self, run_id: str, task: str, key: str = "return_value") -> dict:
        r = self.get(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task}/xcomEntries/{key}",
            deserialize=True,
            stringify=False,
        )
        if r.status_code != 200:
            return {}
        value = r.json().get("value")
        return json.loads(value) if isinstance(value, str) else (value or {})

    # -- cheap events --------------------------------------------------------------------------
    def driver_alive(self) -> bool:
        rec = LifecycleRecord.load(str(self.checkpoint))
        return rec is not None and rec.driver is not None and drivers.local_alive(rec.driver)

    def wait_mid_batch(self, timeout: float = 15) -> bool:
        """Wait (up to ``timeout``) until a batch is planned and not committed; whether one was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if read_checkpoint(str(self.checkpoint)).pending_batch is not None:
                return True
            time.sleep(0.05)
        return False

    def driver_kill(self) -> None:
        """SIGKILL the driver's process group while a batch is planned and not committed (or after 15 s)."""
        rec = LifecycleRecord.load(str(self.checkpoint))
        assert rec is not None and rec.driver is not None
        if not drivers.local_alive(rec.driver):  # it ended on its own (a broker restart it gave up on)
            self.job_down = True
            return
        mid = self.wait_mid_batch()
        pid = int(rec.driver.id)
        os.killpg(pid, signal.SIGKILL)
        wait_until(lambda: not drivers.local_alive(rec.driver), timeout=30, what="the killed driver to go")
        self.fig.note("driver kill", f"SIGKILL pid {pid} {'mid-batch' if mid else 'between batches'}")
        self.job_down = True

    def _stop_start_broker(self, down: float) -> None:
        self.broker.stop()
        time.sleep(down)
        self.broker.start(timeout=120)

    def bounce_during_gate(self) -> str:
        """The broker stopped for 1-6 s while the health gate is deferred (from the killer's thread)."""
        started, down = time.monotonic(), self.scheduler_rng.uniform(1, 6)
        self._stop_start_broker(down)
        return f"down {down:.1f}s, back in {time.monotonic() - started:.0f}s"

    def broker_bounce(self) -> None:
        started = time.monotonic()
        down = self.rng.uniform(1, 6)
        self._stop_start_broker(down)
        time.sleep(5)
        if self.job_down:
            after = "the job was down"
        elif self.driver_alive():
            after = "driver alive"
        else:
            self.job_down, after = True, "the driver gave up (its query failed)"
        self.fig.note("broker stop/start", f"down {down:.1f}s, back in {time.monotonic() - started:.0f}s; {after}")

    # -- the sequence --------------------------------------------------------------------------
    NEEDS_JOB = ("driver_kill",)  # events that need a running driver

    def options(self) -> dict[str, int]:
        """The weights of the events that may come next."""
        options = {"broker_bounce": 4, "keep": 1, "auto": 1}
        if not self.job_down:
            options["driver_kill"] = 4
        else:
            options["keep"] = 3  # the job is down: a safe restart brings it back
        if self.era_backups:
            options["restore"] = 1
        return options

    def next_kind(self, forced: list[str]) -> str:
        while forced:
            kind = forced.pop(0)
            if kind == "restore" and not self.era_backups:
                forced.append("restore")
                return "keep"
            if kind in self.NEEDS_JOB and self.job_down:
                forced.insert(0, kind)
                return "keep"
            return kind
        options = self.options()
        kinds = sorted(options)
        return self.rng.choices(kinds, weights=[options[k] for k in kinds])[0]

    def run_event(self, kind: str) -> None:
        if kind == "driver_kill":
            self.driver_kill()
        elif kind == "broker_bounce":
            self.broker_bounce()
        elif kind == "auto":
            self.compat += 1
            self.write_registry()
            self.dag_run("auto")
        elif kind == "restore":
            # Only a backup the job still has: the registry keeps the newest 5 (restores and resets take their own
            # too), so an early backup of this era may have been pruned (seed 71941 picked one).
            kept = {m.backup_id for m in list_backups(f"{self.data}/backups", JOB).backups}
            choices = [b for b in self.era_backups if b in kept]
            if not choices:
                self.era_backups = []
                self.dag_run("keep")
                return
            # accept_data_loss is the pre-approval (no HITL pause); the sink comparison still proves nothing was lost
            self.dag_run("restore", backup_id=self.rng.choice(choices), accept_data_loss=True)
        else:
            self.dag_run("keep")


def run_sequence(soak: Soak, forced: list[str], target: int, max_s: float, started: float) -> None:
    """The first deploy, then ``forced`` (every kind once) and seeded events until ``target`` or ``max_s``."""
    assert soak.client.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False}).status_code == 200
    soak.dag_run("keep")  # the first deploy
    while (len(soak.fig.events) < target or forced) and time.monotonic() - started < max_s:
        soak.run_event(soak.next_kind(forced))
    if soak.job_down or not soak.driver_alive():
        soak.dag_run("keep")


def test_soak(airflow_home, connector_jars):
    seed, target, max_s = knobs(30)
    print(f"\nsoak seed {seed} (replay: AKS_SOAK_SEED={seed} AKS_SOAK_EVENTS={target})", flush=True)
    rng = random.Random(seed)
    fig = Figures(seed=seed, events_target=target)
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix=f"aks-soak-{seed}-"))  # kept after a failure, for its logs
    broker = LocalBroker(data_dir=base / "kafka").start()
    topic = f"soak-{seed}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    dags = base / "dags"
    soak_dag(dags)
    registry = base / "streaming_jobs.yaml"
    env = airflow_env(base, dags, registry, broker.bootstrap_servers, str(base / "data"))
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    services = AirflowServices(airflow_home, base, env)
    feeder = counter = None
    soak = None
    passed = False
    try:
        start_airflow(dags, services)
        soak = Soak(base, broker, services, registry, topic, rng, fig)
        soak.max_s = max_s
        soak.write_registry()
        feeder = Feeder(broker.bootstrap_servers, topic, PARTITIONS, RATE).start()
        counter = DriverCounter(f"--checkpoint {soak.checkpoint} ").start()
        # every kind at least once; the restore first (it needs a backup a keep took) so the auto can follow
        forced = ["auto", "driver_kill", "broker_bounce"]
        rng.shuffle(forced)
        forced.insert(0, "restore")
        run_sequence(soak, forced, target, max_s, started)
        finish(soak, feeder, counter, lambda: base / "data" / "sinks" / JOB, started)
        passed = True
    finally:
        if counter is not None:
            counter.stop()
        if feeder is not None and not feeder._stop.is_set():
            feeder._stop.set()
        services.stop()
        if soak is not None:  # every driver on the checkpoint, recorded or not
            for group in DriverCounter(f"--checkpoint {soak.checkpoint} ").drivers():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
        broker.stop()
        mp.undo()
        if passed:
            shutil.rmtree(base, ignore_errors=True)
