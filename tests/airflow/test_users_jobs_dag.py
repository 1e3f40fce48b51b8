"""``streaming_safe_restart`` managing a user's own PySpark job that has never heard of this product.

The job is ``tests/support/user_jobs/orders_stream.py``: its own argparse (no ``parse_known_args``),
``startingOffsets`` hard-coded to ``earliest``, an idempotent ``foreachBatch`` sink keyed by the
Kafka position. Its registry entry names it as spark-submit does, with its own arguments (two of
them placeholders the registry fills), and ``integration: agent`` (the default): the only thing the
product adds is the agent, by Spark configuration. Real Airflow 3 (``dag.test()`` of the repository's
DAG), the real broker, real ``spark-submit`` on a local master, records produced throughout, the
sink compared record by record with what Kafka acknowledged.

The runs share one job and one driver and go in file order (each Spark start costs 15-25 s here):

1. first start (``auto``): the job runs, placeholders filled, no reference flag on its command line;
2. ``keep``: the agent stops the query between two batches (Spark's files say so: the newest
   ``offsets/N`` has its ``commits/N``), the same query resumes, the sink is exact;
3. v2 (a new stateful operator, ``compatibility_version`` bumped) through ``auto`` → reset
   ``preserve``: the new query's first batch starts exactly at the old one's committed end although
   the job asks Spark for ``earliest``; the gate checked it; the sink is exact (nothing replayed
   from ``earliest``);
4. a broken build (arguments the job's own parser refuses): the submit fails with the job's own
   error, the rollback restores and resubmits v2, the sink stays exact.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from devstack import oracle, topics
from tests.airflow.test_safe_restart_dag import Feed, events
from tests.support.agent_harness import USER_JOBS
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, write_registry
from tests.support.dag_runs import RunResult, run_safe_restart, safe_restart_dag, wait_committed_everything
from tests.support.processes import driver_groups
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.airflow, pytest.mark.integration, pytest.mark.userjobs]

JOB = "orders"
PARTITIONS = 2


@dataclass
class UserStack:
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

    @property
    def apps(self) -> Path:
        return self.data / "apps"

    def write_registry(self, *, app: str, compat: str, extra_args: tuple[str, ...] = (), **more: Any) -> None:
        """The user's job as spark-submit names it: their script and their own arguments, verbatim."""
        write_registry(self.registry, [{
            **more, "name": JOB, "topics": [self.topic], "sink": "idempotent", "compatibility_version": compat,
            "application": str(self.apps / app), "integration": "agent",
            "application_args": ["--brokers", "{bootstrap_servers}", "--topic", self.topic,
                                 "--checkpoint", "{checkpoint}", "--out", "{output}", *extra_args],
            "stop_timeout_s": 90,
            "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"}}],
            integration="agent")

    def conf(self, mode: str, **kw: Any) -> dict[str, Any]:
        return {"job": JOB, "mode": mode, "reason": f"test {mode}", **kw}

    def run(self, conf: dict[str, Any]) -> RunResult:
        return run_safe_restart(self.dag, **conf)

    def record(self) -> LifecycleRecord:
        rec = LifecycleRecord.load(str(self.checkpoint))
        assert rec is not None
        return rec

    def live_drivers(self) -> list[int]:
        return sorted(driver_groups(f"--checkpoint {self.checkpoint} "))

    def wait_caught_up(self, timeout: float = 180) -> None:
        wait_committed_everything(str(self.checkpoint), self.bootstrap, self.topic, PARTITIONS, timeout=timeout)

    def compare(self) -> oracle.Comparison:
        rows = [json.loads(line) for f in sorted(self.sink.rglob("*.json"))
                for line in f.read_text().splitlines() if line.strip()]
        return oracle.compare(self.feed.produced, rows)


@pytest.fixture(scope="module")
def users(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-users-dag")
    data = base / "data"
    (data / "apps").mkdir(parents=True)
    for f in ("orders_stream.py", "orders_stream_v2.py"):
        shutil.copy(USER_JOBS / f, data / "apps" / f)
    topic = f"orders-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    st = UserStack(base=base, data=data, registry=base / "streaming_jobs.yaml", bootstrap=broker.bootstrap_servers,
                   topic=topic, feed=Feed(broker.bootstrap_servers, topic))
    st.write_registry(app="orders_stream.py", compat="1")
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(st.registry))
    mp.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    st.dag = safe_restart_dag()
    st.feed.add(200)
    yield st
    rec = LifecycleRecord.load(str(st.checkpoint))
    if rec is not None and rec.driver is not None:
        drivers.kill_local(rec.driver, grace_s=5)
    for pid in st.live_drivers():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    mp.undo()


def _boundary(checkpoint: Path) -> tuple[int | None, int | None]:
    st = read_checkpoint(str(checkpoint))
    return (st.latest_planned.batch_id if st.latest_planned else None,
            st.latest_committed.batch_id if st.latest_committed else None)


def test_first_start_runs_the_users_job_unchanged(users):
    with users.feed:
        r = users.run(users.conf("auto", reason="first start"))
    assert r.state == "success", r.xcom("finish", "failure")
    sub = r.xcom("submit")
    command = sub["command"]
    # The job's own arguments, placeholders filled, and nothing of the reference contract.
    assert f"--checkpoint {users.checkpoint} --out {users.sink}" in command
    assert f"--brokers {users.bootstrap}" in command
    for flag in ("--stop-marker", "--starting-offsets", "--topics", "--sink "):
        assert flag not in command, flag
    assert "spark.plugins=aks.agent.AgentPlugin" in command
    assert len(users.live_drivers()) == 1
    users.wait_caught_up()
    cmp = users.compare()
    assert cmp.exact, cmp.summary()


def test_keep_stops_the_users_job_between_two_batches_and_resumes_the_same_query(users):
    query = read_checkpoint(str(users.checkpoint)).query_id
    with users.feed:
        r = users.run(users.conf("keep"))
        assert r.state == "success", r.xcom("finish", "failure")
        stop = r.xcom("stop")
        assert (stop["outcome"], stop["graceful"], stop["killed"]) == ("STOPPED", True, False), stop
        assert stop["last_planned"] == stop["last_committed"]       # Spark's own files: no batch was cut
        witness = stop["job_reported"]                              # the agent's own account, beside the files
        assert witness["stopped_on_boundary"] is True and witness["last_committed_batch"] == stop["last_committed"]
        assert witness["how"] and set(witness["how"]) <= {"between_batches", "held_at_gate"}, witness
    assert read_checkpoint(str(users.checkpoint)).query_id == query
    users.wait_caught_up()
    cmp = users.compare()
    assert cmp.exact, cmp.summary()


def test_a_checkpoint_breaking_v2_is_reset_preserve_and_starts_exactly_where_v1_committed(users):
    users.write_registry(app="orders_stream_v2.py", compat="2")
    before = read_checkpoint(str(users.checkpoint))
    with users.feed:
        r = users.run(users.conf("auto", reason="v2 adds dropDuplicates"))
    assert r.state == "success", r.xcom("finish", "failure")
    plan = r.xcom("plan")
    assert (plan["action"], plan["reset_mode"]) == ("reset", "preserve")
    reset = r.xcom("submit", "reset")
    old = read_checkpoint(reset["aside_location"])
    planned = {str(tp.partition): o for tp, o in old.latest_committed.kafka_offsets.items()}
    assert json.loads(reset["starting_offsets"]) == {users.topic: planned}
    new = read_checkpoint(str(users.checkpoint))
    assert new.query_id != before.query_id
    # Spark's own record of where the new query began (the job itself asks for earliest).
    started = {str(tp.partition): o for tp, o in new.initial_offsets.get("0", {}).items()}
    assert started == planned, (new.initial_offsets, planned)
    users.wait_caught_up()
    cmp = users.compare()
    assert cmp.exact, cmp.summary()          # nothing replayed from earliest, nothing skipped


def test_a_build_whose_own_parser_refuses_its_arguments_fails_the_submit_and_is_rolled_back(users):
    users.write_registry(app="orders_stream_v2.py", compat="3", extra_args=("--no-such-flag",))
    query = read_checkpoint(str(users.checkpoint)).query_id
    with users.feed:
        r = users.run(users.conf("keep", reason="broken build"))
        assert r.state == "failed"
        assert r.states["submit"] == "failed" and r.states["health_gate"] == "upstream_failed", r.states
        assert r.states["rollback"] == "success"
        failure = r.xcom("finish", "failure")
        assert "exited before Spark started" in failure and "unrecognized arguments: --no-such-flag" in failure
        resubmitted = r.xcom("rollback")["resubmitted"]
        assert resubmitted["previous"] is True and resubmitted["compatibility_version"] == "2"
        rec = users.record()
        assert drivers.local_alive(rec.driver)
        assert events(rec, "safe_restart")[-1]["details"]["outcome"] == "ROLLED_BACK"
        wait_until(lambda: _boundary(users.checkpoint)[1] is not None, timeout=180, what="a committed batch")
    assert read_checkpoint(str(users.checkpoint)).query_id == query
    users.wait_caught_up()
    cmp = users.compare()
    assert cmp.exact, cmp.summary()
    users.write_registry(app="orders_stream_v2.py", compat="2")


def test_auto_whose_probe_cannot_tell_stops_the_run_before_anything_changes(users):
    """``auto`` with the compatibility probe on, and a probe that cannot answer (its time runs out before
    its driver does anything): the plan task fails with the reason and the choices; the job is neither
    stopped nor touched."""
    users.write_registry(app="orders_stream_v2.py", compat="2", compatibility_probe=True, probe_timeout_s=1)
    before = read_checkpoint(str(users.checkpoint))
    driver = users.record().driver
    r = users.run(users.conf("auto", reason="probe cannot tell"))
    assert r.state == "failed" and r.states["plan"] == "failed", r.states
    assert r.states["stop"] in ("upstream_failed", "skipped") and r.states["rollback"] == "skipped", r.states
    failure = r.xcom("finish", "failure")
    assert "could not tell" in failure and "nothing was changed" in failure and "mode keep" in failure, failure
    assert users.record().driver == driver and drivers.local_alive(driver)
    after = read_checkpoint(str(users.checkpoint))
    assert (after.query_id, after.latest_committed.batch_id >= before.latest_committed.batch_id) == (
        before.query_id, True)
    users.write_registry(app="orders_stream_v2.py", compat="2")


def test_a_job_without_the_agent_is_killed_at_once_and_says_what_will_replay(users):
    """``integration: none``: nothing added to the job, so nothing can ask it to stop. The stop kills the
    driver at once (no wait for a marker nobody reads) and says what Spark's files say: a cut batch and
    its replay, or a kill between batches — never "stopped on a batch boundary"."""
    write_registry(users.registry, [{
        "name": JOB, "topics": [users.topic], "sink": "idempotent", "compatibility_version": "2",
        "application": str(users.apps / "orders_stream_v2.py"), "integration": "none",
        "application_args": ["--brokers", "{bootstrap_servers}", "--topic", users.topic,
                             "--checkpoint", "{checkpoint}", "--out", "{output}"],
        "spark_conf": {"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "768m"}}])
    query = read_checkpoint(str(users.checkpoint)).query_id
    with users.feed:
        r = users.run(users.conf("keep", reason="no agent"))
    assert r.state == "success", r.xcom("finish", "failure")
    stop = r.xcom("stop")
    assert stop["killed"] and not stop["graceful"] and stop["waited_s"] < 30, stop
    assert stop["outcome"] in ("KILLED", "STOPPED_MID_BATCH"), stop
    assert "stopped on a batch boundary" not in stop["message"]
    if stop["outcome"] == "STOPPED_MID_BATCH":
        assert stop["replay_batch"] == stop["last_planned"] == stop["last_committed"] + 1, stop
        assert f"batch {stop['replay_batch']} was planned" in stop["message"]
    else:
        assert stop["replay_batch"] is None and stop["last_planned"] == stop["last_committed"], stop
    assert "spark.plugins" not in r.xcom("submit")["command"]
    assert read_checkpoint(str(users.checkpoint)).query_id == query
    users.wait_caught_up()
    cmp = users.compare()
    assert cmp.exact, cmp.summary()        # a replayed batch rewrote its own folders, nothing twice
    users.write_registry(app="orders_stream_v2.py", compat="2")
