"""``streaming_safe_restart`` end to end: real Airflow 3 on SQLite (``dag.test()`` on the DAG loaded
from the dags folder), the real broker, real ``spark-submit`` of the reference job, and the sink
compared record by record with what Kafka acknowledged.

The tests share one broker, one job and one running driver, and run in file order, each starting
from the state the previous one left (the job running its last good application): Spark starts cost
15-25 s each on this machine, so every run that starts Spark is also a scenario. A feeder thread
keeps producing records while a run is in progress, because a restarted job only commits batches
(and so only passes its health gate) when there is something to read.

1. BLOCK (retention passed the checkpoint of a second job): the run stops before anything changes.
2. Two runs triggered at once (an ``airflow dags test`` process and this one): one driver only; the
   job starts.
3. ``keep``: graceful stop, backup, no reset, same query, sink exact.
4. Dry run of a reset while the job runs: nothing changes.
5. ``auto`` after a checkpoint-breaking change (compatibility_version bump + ``--stateful dedup``):
   reset ``preserve``, new query continues at the old position, sink exact.
6. A broken build (``--fail-at-start``, compatibility bump): its driver exits before Spark starts, so
   the submit fails (not the gate), the rollback restores this run's backup and resubmits the
   previous application; the run fails with the driver's own last line.
7. ``restore`` of a named backup (the one run 6 took): the replay stays within what the restore announced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.runtime import drivers
from devstack import oracle, topics
from devstack.produce import ProducedRecord, produce
from tests.airflow.conftest import TIMINGS
from tests.support.airflow_env import SECRET, SPARK_LOCAL_CONN, assert_no_secret, kafka_conn, write_registry
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.dag_runs import RunResult, collect
from tests.support.kafka import end_offsets
from tests.support.processes import driver_groups
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAG_ID = "streaming_safe_restart"
JOB = "shop"
BLOCKED_JOB = "frozen"
PARTITIONS = 2
V1_ARGS = ["--trigger", "processing:1s", "--shuffle-partitions", "2"]
V2_ARGS = [*V1_ARGS, "--stateful", "dedup"]


class Feed:
    """Produces ``rate`` records a second in a thread while a run is in progress; keeps the truth."""

    def __init__(self, bootstrap: str, topic: str, rate: int = 20) -> None:
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.produced: list[ProducedRecord] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, n: int) -> None:
        self.produced += produce(self.bootstrap, self.topic, n, partitions=PARTITIONS, start_id=len(self.produced))

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.add(self.rate)

    def __enter__(self) -> Feed:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


@dataclass
class Stack:
    base: Path
    data: Path
    registry: Path
    bootstrap: str
    topic: str
    feed: Feed
    dag: Any = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.data / "checkpoints" / JOB

    @property
    def sink(self) -> Path:
        return self.data / "sinks" / JOB

    def record(self) -> LifecycleRecord:
        rec = LifecycleRecord.load(str(self.checkpoint))
        assert rec is not None
        return rec

    def write_registry(self, *, compat: str, args: list[str]) -> None:
        write_registry(self.registry, [
            {"name": JOB, "topics": [self.topic], "sink": "idempotent", "max_offsets_per_trigger": 200,
             "compatibility_version": compat, "application_args": args,
             "backup_retention": {"keep_last": 2},   # the rollback test's finish prunes the keep test's backup
             "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"}},
            {"name": BLOCKED_JOB, "topics": [f"{self.topic}-frozen"]},
        ])

    def conf(self, mode: str, **kw: Any) -> dict[str, Any]:
        """What the trigger form sends: every field, unset ones as null."""
        return {"job": JOB, "mode": mode, "backup_id": None, "datetime": None, "dry_run": False,
                "accept_data_loss": False, "reason": f"test {mode}", **kw}

    def run(self, conf: dict[str, Any], what: str) -> RunResult:
        started = time.perf_counter()
        dr = self.dag.test(run_conf=conf)
        result = collect(DAG_ID, dr.run_id, dr.state, time.perf_counter() - started)
        TIMINGS[f"safe restart: {what}"] = result.seconds
        return result

    def live_drivers(self) -> list[int]:
        """Process groups of the local drivers on this job's checkpoint (one group per driver)."""
        return sorted(driver_groups(f"--checkpoint {self.checkpoint} "))

    def wait_caught_up(self, timeout: float = 180) -> None:
        def done() -> bool:
            st = read_checkpoint(str(self.checkpoint))
            if st.latest_committed is None:
                return False
            ends = end_offsets(self.bootstrap, self.topic, PARTITIONS)
            have = {tp.partition: o for tp, o in st.latest_committed.kafka_offsets.items()}
            return have == ends
        wait_until(done, timeout=timeout, interval=1.0, what="the job to commit every produced record")

    def compare(self) -> oracle.Comparison:
        return oracle.compare(self.feed.produced, oracle.read_sink(self.sink, "idempotent"))


def tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def events(rec: LifecycleRecord, name: str) -> list[dict[str, Any]]:
    return [e for e in rec.history if e["event"] == name]


@pytest.fixture(scope="module")
def stack(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-dag")
    data = base / "data"
    data.mkdir()
    topic = f"shop-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    topics.create_topic(broker.bootstrap_servers, f"{topic}-frozen", PARTITIONS)
    st = Stack(base=base, data=data, registry=base / "streaming_jobs.yaml", bootstrap=broker.bootstrap_servers,
               topic=topic, feed=Feed(broker.bootstrap_servers, topic))
    st.write_registry(compat="1", args=V1_ARGS)
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(st.registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers, **{
        "sasl.username": "svc-streaming", "sasl.password": SECRET}))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()   # [core] dags_folder = the repository's dags/, parsed with the test registry
    assert DAG_ID in bag.dags, bag.import_errors
    st.dag = bag.get_dag(DAG_ID)
    st.feed.add(200)
    yield st
    rec = LifecycleRecord.load(str(st.checkpoint))
    if rec is not None and rec.driver is not None:
        drivers.kill_local(rec.driver, grace_s=5)
    for pid in st.live_drivers():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    mp.undo()


# --------------------------------------------------------------------------------------------------

def test_block_verdict_stops_the_run_before_anything_changes(stack, capfd):
    """Retention deleted records the job never read: BLOCK, and the run changes nothing at all."""
    ck = stack.data / "checkpoints" / BLOCKED_JOB
    frozen = f"{stack.topic}-frozen"
    produce(stack.bootstrap, frozen, 200, partitions=PARTITIONS)
    write_checkpoint(ck, batches=3, sources=({frozen: PARTITIONS},), records_per_batch=10,
                     start_timestamp_ms=int(time.time() * 1000) - 60_000)          # C = 30 per partition
    topics.delete_records(stack.bootstrap, frozen, {0: 60, 1: 60})                 # log start 60 > C
    watched = [ck, stack.data / "sinks" / BLOCKED_JOB, stack.data / "backups" / BLOCKED_JOB]
    before = [tree(p) for p in watched]

    r = stack.run(stack.conf("auto", job=BLOCKED_JOB), "BLOCK verdict")
    assert r.state == "failed"
    assert r.states["plan"] == "success" and r.states["validate_before"] == "failed"
    for step in ("stop", "submit", "health_gate"):
        assert r.states[step] == "upstream_failed", (step, r.states)
    assert r.states["rollback"] == "skipped" and r.states["finish"] == "failed"
    assert "OFFSET_BELOW_LOG_START" in r.xcom("validate_before", "failure")
    assert r.xcom("finish", "failure").startswith(f"safe restart of job {BLOCKED_JOB} BLOCKED: validate_before: ")
    assert [tree(p) for p in watched] == before            # checkpoint, sink and backups untouched
    rec = LifecycleRecord.load(str(ck))
    assert rec.driver is None and rec.next_starting_offsets is None
    (audit,) = events(rec, "safe_restart")
    assert audit["details"]["outcome"] == "BLOCKED" and audit["details"]["verdict_before"]["verdict"] == "BLOCK"
    assert audit["details"]["backup_id"] is None
    lease = LifecycleRecord.load(str(ck) + ".safe-restart.lifecycle.json").lease
    assert lease is None                                   # the run lease was given back
    out, err = capfd.readouterr()
    assert_no_secret(r, out, err)


def _leased(stack) -> bool:
    rec = LifecycleRecord.load(str(stack.checkpoint))
    return rec is not None and rec.lease is not None


def test_two_runs_triggered_at_once_start_one_driver(stack):
    """Two runs for the same job at the same moment, from two processes (an ``airflow dags test``
    subprocess and this one): the run lease lets one through; the other fails in its first task and
    changes nothing. Exactly one driver runs afterwards. (This is also the job's first start.)

    This process's run starts once the subprocess's run holds the lease (or ended): on a loaded machine
    the subprocess's start alone once outlasted this process's whole run, so the two never overlapped and
    both succeeded one after the other, which tests nothing about two at once."""
    conf = stack.conf("auto", reason="two at once")
    started = time.perf_counter()
    with stack.feed:
        other = subprocess.Popen([str(Path(sys.executable).with_name("airflow")), "dags", "test", DAG_ID,
                                  "-c", json.dumps(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=dict(os.environ))
        try:
            deadline = time.monotonic() + 180
            while other.poll() is None and time.monotonic() < deadline and not _leased(stack):
                time.sleep(0.1)
            here = stack.run(conf, "two runs at once (this process)")
        finally:
            other_out = other.communicate(timeout=600)[0]
    TIMINGS["safe restart: two runs at once (both)"] = time.perf_counter() - started
    outcomes = sorted([here.state, "success" if other.returncode == 0 else "failed"])
    assert outcomes == ["failed", "success"], (here.states, other_out[-3000:])
    if here.state == "failed":
        assert here.states["plan"] == "failed" and "is being restarted by another run" in here.xcom("plan", "failure")
        assert here.states["stop"] == "upstream_failed" and here.xcom("finish", "failure").startswith(
            "safe restart of job shop REFUSED")
    else:
        assert "is being restarted by another run, nothing was changed" in other_out and "REFUSED" in other_out
    assert len(stack.live_drivers()) == 1
    rec = stack.record()
    assert drivers.local_alive(rec.driver) and rec.compatibility_version == "1"
    assert sorted(e["details"]["outcome"] for e in events(rec, "safe_restart")) == ["REFUSED", "SUCCESS"]
    assert len(events(rec, "driver_submitted")) == 1
    assert SECRET not in other_out


def test_keep_mode_restarts_on_the_same_checkpoint_and_the_sink_is_exact(stack, capfd):
    before = stack.record()
    old_driver = before.driver
    query_before = read_checkpoint(str(stack.checkpoint)).query_id
    with stack.feed:
        r = stack.run(stack.conf("keep"), "keep")
    assert r.state == "success", r.xcom("finish", "failure")
    assert r.states["rollback"] == "skipped" and "reset" not in r.states and "restore" not in r.states
    assert r.xcom("submit", "reset") is None and r.xcom("submit", "restore") is None   # keep changes nothing
    stop = r.xcom("stop")
    assert stop["outcome"] == "STOPPED" and stop["graceful"] and not stop["killed"]
    assert stop["driver"]["id"] == old_driver.id and not drivers.local_alive(old_driver)
    assert r.xcom("stop", "backup")["backup_id"]
    stack.notes["keep_backup_id"] = r.xcom("stop", "backup")["backup_id"]
    # The backup was pre-copied while the old driver ran: the backup after the stop took from the
    # pre-copy every file not already in the previous backup, and read only what came after it.
    pre, backup = stop["precopy"], r.xcom("stop", "backup")
    assert "error" not in pre and pre["files"] > 0
    assert pre["passes"] and "passes_during_stop" in pre and "error_during_stop" not in pre
    assert backup["files_from_precopy"] > 0
    assert r.xcom("health_gate")["new_batches"] >= 2
    # A local driver: the submit task ended only after the new query's first commit (first_batch_wait_s),
    # so the gate's task did not start beside the driver's JVM.
    first_commit = stack.checkpoint / "commits" / str(stop["last_committed"] + 1)
    assert first_commit.stat().st_mtime <= r.ended["submit"], (first_commit.stat().st_mtime, r.ended["submit"])
    rec = stack.record()
    assert rec.driver.id != old_driver.id and drivers.local_alive(rec.driver)
    assert stack.live_drivers() and len(stack.live_drivers()) == 1
    assert read_checkpoint(str(stack.checkpoint)).query_id == query_before       # same query: no reset
    entry = events(rec, "safe_restart")[-1]
    audit = entry["details"]
    assert entry["actor"]                                    # who triggered it (dag.test: "dag_test")
    assert (audit["outcome"], audit["mode"], audit["action"]) == ("SUCCESS", "keep", "keep")
    assert audit["backup_id"] == r.xcom("stop", "backup")["backup_id"] and audit["reason"] == "test keep"
    assert audit["offsets_before"] and audit["offsets_after"] != audit["offsets_before"]
    assert audit["verdict_before"]["verdict"] in ("PASS", "WARN") and audit["verdict_after"]["verdict"]
    stack.wait_caught_up()
    cmp = stack.compare()
    assert cmp.exact, cmp.summary()
    stack.notes["keep"] = cmp.summary()

    # Secrets: the Kafka connection's SASL password is nowhere in XCom, rendered fields, task logs,
    # the driver log or the lifecycle record.
    out, err = capfd.readouterr()
    driver_log = Path(r.xcom("submit")["log_path"]).read_text(errors="replace")
    assert_no_secret(r, out, err, driver_log, Path(str(stack.checkpoint) + ".lifecycle.json").read_text())
    assert "sasl" not in r.xcom("submit")["command"]


def test_dry_run_of_a_reset_changes_nothing(stack):
    rec = stack.record()
    backups = tree(stack.data / "backups" / JOB)
    query = read_checkpoint(str(stack.checkpoint)).query_id
    r = stack.run(stack.conf("reset-preserve", dry_run=True), "dry run")
    assert r.state == "success", r.xcom("finish", "failure")
    assert r.xcom("stop")["outcome"] == "DRY_RUN" and r.xcom("stop")["driver_alive"] is True
    assert r.xcom("stop")["would"].startswith("pre-copy the backup (publishes nothing), then write")
    assert "precopy" not in r.xcom("stop")                # and none was taken (the backup tree is unchanged below)
    assert r.xcom("submit", "reset")["dry_run"] is True and r.xcom("submit", "reset")["starting_offsets"]
    assert r.xcom("submit")["dry_run"] is True and "--starting-offsets" in r.xcom("submit")["command"]
    assert r.xcom("finish")["outcome"] == "DRY_RUN"
    after = stack.record()
    assert after.driver.id == rec.driver.id and drivers.local_alive(after.driver)
    assert read_checkpoint(str(stack.checkpoint)).query_id == query
    assert tree(stack.data / "backups" / JOB) == backups
    assert len(after.history) == len(rec.history)       # not even an audit entry: a plan changes nothing


def test_auto_with_a_checkpoint_breaking_change_resets_preserve_and_the_sink_stays_exact(stack):
    stack.write_registry(compat="2", args=V2_ARGS)
    before = read_checkpoint(str(stack.checkpoint))
    with stack.feed:
        r = stack.run(stack.conf("auto", reason="add dedup"), "auto -> reset preserve")
    assert r.state == "success", r.xcom("finish", "failure")
    plan = r.xcom("plan")
    assert (plan["action"], plan["reset_mode"]) == ("reset", "preserve")
    assert plan["recorded_compatibility_version"] == "1" and plan["registry_compatibility_version"] == "2"
    reset = r.xcom("submit", "reset")
    # preserve: the new query starts exactly where the old one's last committed batch ended
    old = read_checkpoint(reset["aside_location"])       # the old checkpoint, moved aside, never deleted
    assert old.latest_committed.batch_id == r.xcom("stop")["last_committed"]
    assert json.loads(reset["starting_offsets"]) == {
        stack.topic: {str(tp.partition): o for tp, o in old.latest_committed.kafka_offsets.items()}}
    assert reset["plan"]["totals"]["skipped"] == 0 and reset["plan"]["totals"]["replayed"] == 0
    # the reset adopted the backup task's verified backup of the stopped checkpoint (ops/backup/adopt.py)
    assert reset["backup_adopted"] is True and reset["backup_id"] == r.xcom("stop", "backup")["backup_id"], \
        reset["backup_note"]
    # proven on the two logs alone: the stop task recorded the stop before its backup
    assert "after the recorded stop; offsets/ and commits/ unchanged since" in reset["backup_note"]
    after = read_checkpoint(str(stack.checkpoint))
    assert after.query_id != before.query_id
    # The reset wrote Spark's own sources/0/0 with these offsets, so the reference job was started without its
    # --starting-offsets-file (one write fewer in the window): the exact sink below is Spark starting there.
    submitted = r.xcom("submit")
    assert submitted["starting_offsets_file"] is None and "--starting-offsets-file" not in submitted["command"], \
        submitted["command"]
    gate = r.xcom("health_gate")
    assert gate["starting_offsets_consumed"] == reset["starting_offsets"] and gate["compatibility_version"] == "2"
    rec = stack.record()
    assert rec.compatibility_version == "2" and rec.next_starting_offsets is None
    assert "--stateful" in rec.extra["last_good_app"]["application_args"]
    assert not Path(str(stack.checkpoint) + ".starting-offsets.json").exists()
    stack.wait_caught_up()
    cmp = stack.compare()
    assert cmp.exact, cmp.summary()
    stack.notes["reset"] = cmp.summary()


def test_a_broken_build_is_rolled_back_to_the_previous_application(stack):
    stack.write_registry(compat="3", args=[*V2_ARGS, "--fail-at-start"])
    query_v2 = read_checkpoint(str(stack.checkpoint)).query_id
    with stack.feed:
        r = stack.run(stack.conf("auto", reason="broken build"), "broken build -> rollback")
        assert r.state == "failed"
        assert r.states["submit"] == "failed" and r.xcom("submit", "reset")["starting_offsets"]   # reset, then died
        assert r.xcom("submit", "verdict")["verdict"] != "BLOCK"                       # ... before Spark started
        assert r.states["health_gate"] == "upstream_failed" and r.states["rollback"] == "success"
        assert r.states["finish"] == "failed"
        rollback = r.xcom("rollback")
        backup_id = r.xcom("stop", "backup")["backup_id"]
        assert rollback["failed_steps"] == ["submit"] and rollback["restored_backup_id"] == backup_id
        resubmitted = rollback["resubmitted"]
        assert resubmitted["previous"] is True and resubmitted["application_args"] == V2_ARGS
        assert resubmitted["compatibility_version"] == "2"
        failure = r.xcom("finish", "failure")
        assert failure.startswith("safe restart of job shop ROLLED_BACK: submit: ")
        assert "exited before Spark started" in failure and "--fail-at-start given, exiting 1" in failure
        assert f"restored backup {backup_id}" in failure and "resubmitted the previous application" in failure
        rec = stack.record()
        assert rec.driver.id == str(resubmitted["driver"]["id"]) and drivers.local_alive(rec.driver)
        assert rec.compatibility_version == "2" and rec.next_starting_offsets is None
        assert events(rec, "safe_restart")[-1]["details"]["outcome"] == "ROLLED_BACK"
        # Retention (keep_last 2) ran in the finish task, after the window, not in the stop task's backup:
        # the keep test's backup went, this run's (the one the rollback restored) and the auto test's stayed.
        assert r.xcom("stop", "backup")["pruned"] == []
        assert events(rec, "safe_restart")[-1]["details"]["pruned"] == [stack.notes["keep_backup_id"]]
        listed = {m.backup_id for m in list_backups(str(stack.data / "backups"), JOB).backups}
        assert backup_id in listed and stack.notes["keep_backup_id"] not in listed and len(listed) == 2
        # The previous application runs on its restored checkpoint: same query, new batches.
        restored_batch = read_checkpoint(str(stack.checkpoint)).latest_committed.batch_id
        wait_until(lambda: read_checkpoint(str(stack.checkpoint)).latest_committed.batch_id > restored_batch,
                   timeout=180, interval=1.0, what="the rolled-back job to commit a batch")
    assert read_checkpoint(str(stack.checkpoint)).query_id == query_v2
    assert len(stack.live_drivers()) == 1
    stack.wait_caught_up()
    cmp = stack.compare()
    assert cmp.exact, cmp.summary()
    stack.notes["rollback_backup_id"] = backup_id
    stack.write_registry(compat="2", args=V2_ARGS)       # the fix: back to the good build


def test_restore_of_a_named_backup(stack):
    backup_id = stack.notes.get("rollback_backup_id")
    if not backup_id:
        pytest.skip("needs the backup taken by the rollback test")
    from airflow_kafka_spark.ops.backup.catalog import load_backup

    manifest = load_backup(str(stack.data / "backups"), JOB, backup_id)
    with stack.feed:
        r = stack.run(stack.conf("restore", backup_id=backup_id, reason="roll back to a named backup"), "restore")
    assert r.state == "success", r.xcom("finish", "failure")
    assert r.states["submit"] == "success" and r.xcom("submit", "reset") is None
    restore = r.xcom("submit", "restore")
    assert restore["restored"] is True and restore["backup_id"] == backup_id
    assert r.xcom("stop", "backup")["pruned"] == []    # retention is the finish task's, after the restore read it
    assert restore["pre_restore_backup_id"]            # the checkpoint it replaced was backed up first
    rec = stack.record()
    (event,) = [e for e in events(rec, "checkpoint_restored") if e["details"]["backup_id"] == backup_id
                and e["details"]["operation_id"] == restore["operation_id"]]
    assert event["details"]["restored_batch"] == manifest.last_committed_batch
    assert drivers.local_alive(rec.driver) and len(stack.live_drivers()) == 1
    stack.wait_caught_up()
    cmp = stack.compare()
    # Nothing is lost; what is read twice is bounded by the replay the restore announced (the
    # idempotent sink overwrites a replayed batch only when Spark cuts it the same way).
    assert not cmp.missing and not cmp.unexpected, cmp.summary()
    assert cmp.duplicate_count <= restore["records_to_replay"], (cmp.summary(), restore["records_to_replay"])
    stack.notes["restore"] = {**cmp.summary(), "announced_replay": restore["records_to_replay"]}
