"""``aks status``, ``aks stop``, ``--job`` and ``--execute`` against the real broker and one real running job.

One reference-job driver (spark-submit, local master) runs for the whole module, recorded in its
lifecycle record as a local driver, as ``SubmitStreamingJobOperator`` records it. The commands run as
the console script, with everything taken from a job registry (``--job``):

* ``status`` shows the driver RUNNING and a lag equal to ``aks lag``'s; Kafka named through
  ``--command-config`` with a whitespace-separated ``.properties`` line; an unreachable broker exits 4;
* ``stop`` plans without ``--execute`` (no marker written, the driver keeps running), then stops the
  job on a batch boundary through ``stop_job``; Spark's output holds every produced record once;
* after the stop, ``status`` says so and the lag equals the records produced since (``--check`` → 3);
* ``mirror``, ``backups --prune`` and ``reset`` change nothing without ``--execute`` and act with it;
  ``backup --progress`` prints its step lines on stderr (at once with the hidden ``--progress-after 0``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.model import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.registry.loader import load_registry
from devstack import oracle, spark, topics
from devstack.produce import produce
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOB = "clijob"
PARTS = 2
REGISTRY = """
version: 1
allowed_roots: [{root}, "${{AKS_PACKAGE_DIR}}/jobs"]
jobs:
  - name: {job}
    application: ${{AKS_PACKAGE_DIR}}/jobs/reference_job.py
    integration: reference   # the bundled job: its command-line contract
    topics: [{topic}]
    checkpoint: {root}/ck
    output: {root}/out
    sink: idempotent
    backup_root: {root}/backups
    stop_timeout_s: 120
    kafka_conn_id: no_such_connection   # every command here names Kafka on the command line
"""


def aks(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).with_name("aks"))]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def ends(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    with KafkaView({"bootstrap.servers": bootstrap}) as view:
        return view.latest_offsets([TopicPartition(topic, p) for p in range(PARTS)])


def committed_through(checkpoint: str, target: dict[TopicPartition, int]) -> bool:
    state = read_checkpoint(checkpoint)
    if state.latest_committed is None:
        return False
    offs = state.latest_committed.kafka_offsets
    return all(offs.get(tp, -1) >= o for tp, o in target.items())


class Stack:
    def __init__(self, root: Path, bootstrap: str, topic: str) -> None:
        self.root, self.bootstrap, self.topic = root, bootstrap, topic
        self.registry = root / "jobs.yaml"
        self.registry.write_text(REGISTRY.format(root=root, job=JOB, topic=topic))
        self.spec = load_registry(self.registry).get(JOB)
        self.props = root / "client.properties"
        self.props.write_text(f"# Kafka's --command-config spelling, whitespace separator\n"
                              f"bootstrap.servers   {bootstrap}\n")
        self.produced = produce(bootstrap, topic, 100, partitions=PARTS)
        self.log = root / "driver.log"
        self.proc: subprocess.Popen | None = None

    def job(self, *args: str) -> tuple[str, ...]:
        return (*args, "--job", JOB, "--registry", str(self.registry))

    def start(self) -> None:
        s = self.spec
        self.proc = spark.start_job(["--topics", self.topic, "--bootstrap-servers", self.bootstrap,
                                     "--checkpoint", s.checkpoint, "--output", str(s.output), "--sink", "idempotent",
                                     "--stop-marker", s.stop_marker, "--trigger", "processing:1s"], self.log)
        record = LifecycleRecord.load_or_create(JOB, s.checkpoint)
        record.driver = DriverInfo(kind=DriverKind.LOCAL.value, id=str(self.proc.pid), host=socket.gethostname(),
                                   started_at=int(time.time() * 1000))
        record.save()
        self.wait_caught_up()

    def wait_caught_up(self) -> None:
        target = ends(self.bootstrap, self.topic)
        wait_until(lambda: self.proc.poll() is not None or committed_through(self.spec.checkpoint, target),
                   timeout=300, interval=0.5, what="the job to commit every produced record")
        assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]


@pytest.fixture(scope="module")
def stack(broker, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    topic = f"cli-commands-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTS)
    st = Stack(root, broker.bootstrap_servers, topic)
    t0 = time.monotonic()
    st.start()
    print(f"\n[cli] driver up and caught up in {time.monotonic() - t0:.1f}s")
    yield st
    if st.proc is not None and st.proc.poll() is None:
        os.killpg(st.proc.pid, signal.SIGKILL)
        st.proc.wait(30)


def one_error_line(res: subprocess.CompletedProcess, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


def test_status_of_the_running_job_agrees_with_lag(stack):
    res = aks(*stack.job("status"), "--command-config", str(stack.props), "--json")
    assert res.returncode == 0, res.stderr
    (doc,) = json.loads(res.stdout)["jobs"]
    assert doc["state"] == "RUNNING" and doc["driver"]["id"] == str(stack.proc.pid), doc
    assert doc["error"] is None and doc["application"] is None   # recorded by hand, not by the operator
    lag = json.loads(aks(*stack.job("lag"), "--bootstrap-servers", stack.bootstrap, "--json").stdout)
    assert doc["observation"]["lag_records"] == lag["lag_records"] == 0
    assert doc["observation"]["last_committed_batch"] == lag["last_committed_batch"]
    table = aks(*stack.job("status"), "--bootstrap-servers", stack.bootstrap)
    assert table.returncode == 0 and table.stdout.splitlines()[1].split()[:4] == [
        JOB, DriverKind.LOCAL.value, str(stack.proc.pid), "RUNNING"], table.stdout


def test_status_with_kafka_unreachable_exits_4(stack):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = aks(*stack.job("status"), "--bootstrap-servers", f"127.0.0.1:{port}", "--timeout", "2")
    assert "not reachable" in one_error_line(res, 4)
    assert "RUNNING" in res.stdout          # the driver part of the row is still shown


def test_stop_plans_without_execute(stack):
    res = aks(*stack.job("stop"), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["outcome"] == "PLAN" and doc["state"] == "RUNNING" and stack.spec.stop_marker in doc["would"]
    assert not Path(stack.spec.stop_marker).exists()
    assert stack.proc.poll() is None


def test_mirror_commits_only_with_execute(stack):
    group = f"aks-mirror-{JOB}"
    plan = aks(*stack.job("mirror"), "--bootstrap-servers", stack.bootstrap)
    assert plan.returncode == 0 and "would commit" in plan.stdout and "--execute" in plan.stdout, plan.stderr
    with KafkaView({"bootstrap.servers": stack.bootstrap}) as view:
        assert not view.group_offsets(group)
        done = aks(*stack.job("mirror"), "--bootstrap-servers", stack.bootstrap, "--execute", "--json")
        assert done.returncode == 0, done.stderr
        committed = {str(tp): o for tp, o in view.group_offsets(group).items()}
    assert committed == json.loads(done.stdout)["offsets"] and committed


def test_stop_execute_stops_on_a_batch_boundary_and_spark_wrote_every_record(stack):
    stack.produced += produce(stack.bootstrap, stack.topic, 50, partitions=PARTS, start_id=100)
    stack.wait_caught_up()
    t0 = time.monotonic()
    res = aks(*stack.job("stop"), "--execute", "--json")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert (out["outcome"], out["graceful"], out["killed"]) == ("STOPPED", True, False), out
    assert stack.proc.wait(60) is not None and not Path(stack.spec.stop_marker).exists()
    record = LifecycleRecord.load(stack.spec.checkpoint)
    assert record.driver is None and record.history[-1]["event"] == "driver_stopped"
    state = read_checkpoint(stack.spec.checkpoint)
    assert state.pending_batch is None and out["last_committed"] == state.latest_committed.batch_id
    cmp = oracle.compare(stack.produced, oracle.read_sink(stack.spec.output, "idempotent"))
    assert cmp.exact and cmp.produced == 150, cmp.summary()
    print(f"\n[cli] aks stop --execute: {took:.1f}s")


def test_status_after_the_stop_counts_what_was_produced_since(stack):
    produce(stack.bootstrap, stack.topic, 30, partitions=PARTS, start_id=150)
    res = aks(*stack.job("status"), "--bootstrap-servers", stack.bootstrap, "--json", "--check")
    assert res.returncode == 3, res.stderr       # --check: the driver is not running
    (doc,) = json.loads(res.stdout)["jobs"]
    assert doc["state"] == "NONE" and doc["observation"]["lag_records"] == 30


def test_backups_prune_and_reset_act_only_with_execute(stack):
    # Not a terminal: --progress asks for the step lines; --progress-after 0 shows them on this quick backup.
    slow = aks(*stack.job("backup"), "--settle", "0", "--progress", "--progress-after", "0")
    assert slow.returncode == 0, slow.stderr
    progress = [line for line in slow.stderr.splitlines() if line.startswith("backup: [")]
    assert any("copying and hashing" in line for line in progress) and progress[-1].endswith("done"), slow.stderr
    assert aks(*stack.job("backup"), "--settle", "0", "--reason", "second").returncode == 0
    root = stack.spec.backup_root
    assert len(list_backups(root, JOB).backups) == 2

    plan = aks(*stack.job("backups"), "--prune", "--keep-last", "1")
    assert plan.returncode == 0 and "would remove 1 backup(s)" in plan.stdout, plan.stderr
    assert len(list_backups(root, JOB).backups) == 2
    done = aks(*stack.job("backups"), "--prune", "--keep-last", "1", "--execute")
    assert done.returncode == 0 and "removed 1 backup(s)" in done.stdout, done.stderr
    assert len(list_backups(root, JOB).backups) == 1

    ck = stack.spec.checkpoint
    reset = (*stack.job("reset"), "--mode", "preserve", "--bootstrap-servers", stack.bootstrap, "--settle", "0")
    plan = aks(*reset)
    assert plan.returncode == 0 and "plan only: nothing changed" in plan.stdout, plan.stdout + plan.stderr
    assert Path(ck).is_dir() and LifecycleRecord.load(ck).next_starting_offsets is None
    done = aks(*reset, "--execute", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    left = sorted(str(p.relative_to(ck)) for p in Path(ck).rglob("*") if p.is_file())
    assert left == ["sources/0/0"] and Path(json.loads(done.stdout)["aside_location"]).is_dir()   # Spark's start
    assert LifecycleRecord.load(ck).next_starting_offsets == json.loads(done.stdout)["starting_offsets"]


DSTREAM_REGISTRY = """
version: 1
allowed_roots: [{root}, "${{AKS_PACKAGE_DIR}}/jobs"]
jobs:
  - name: clicks
    kind: dstream
    group: {group}
    application: ${{AKS_PACKAGE_DIR}}/jobs/reference_job.py
    integration: reference   # the bundled job: its command-line contract
    topics: [{topic}]
    checkpoint: {root}/ck
    dstream_checkpoint: {root}/ssc
    backup_root: {root}/backups
    kafka_conn_id: no_such_connection
"""


def _dstream_job(broker, topic_name: str, root: Path, group: str, committed: dict[int, int]) -> Path:
    """The topic, the group's commits and a one-file DStream checkpoint of job ``clicks``; its registry."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    topics.create_topic(broker.bootstrap_servers, topic_name, PARTS)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[KTP(topic_name, p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()
    (root / "ssc").mkdir()
    (root / "ssc" / "checkpoint-1700000000000").write_bytes(b"a DStream checkpoint file")
    registry = root / "jobs.yaml"
    registry.write_text(DSTREAM_REGISTRY.format(root=root, group=group, topic=topic_name))
    return registry


def test_a_dstream_job_is_backed_up_listed_and_lagged_from_its_group(broker, topic_name, tmp_path):
    """`aks backup/backups/lag --job` of a DStream job act on its consumer group, as the DAG's steps do."""
    registry = _dstream_job(broker, topic_name, tmp_path, f"clicks-{os.getpid()}", {0: 20, 1: 30})
    produce(broker.bootstrap_servers, topic_name, 100, partitions=PARTS)
    job = ("--job", "clicks", "--registry", str(registry), "--bootstrap-servers", broker.bootstrap_servers)

    down = aks("backup", "--job", "clicks", "--registry", str(registry), "--bootstrap-servers", "127.0.0.1:1",
               "--timeout", "2")
    assert down.returncode != 0 and down.stderr.count("\n") == 1 and "not reachable" in down.stderr, down.stderr
    assert not (tmp_path / "backups").exists(), "an unreachable broker must leave no backup folder behind"
    taken = aks("backup", *job, "--json")
    assert taken.returncode == 0, taken.stderr
    doc = json.loads(taken.stdout)
    assert doc["group_offsets"] == {f"{topic_name}-0": 20, f"{topic_name}-1": 30}, doc
    copied = Path(doc["checkpoint_copy"]) / "checkpoint-1700000000000"
    assert copied.read_bytes() == b"a DStream checkpoint file"
    listed = aks("backups", "--job", "clicks", "--registry", str(registry), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [b["location"] for b in json.loads(listed.stdout)["backups"]] == [doc["location"]]
    refused = aks("backups", "--job", "clicks", "--registry", str(registry), "--verify", "latest")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "DStream job" in refused.stderr
    lag = aks("lag", *job, "--json")
    assert lag.returncode == 0, lag.stderr
    observed = json.loads(lag.stdout)
    produced_ends = ends(broker.bootstrap_servers, topic_name)
    assert observed["lag_records"] == sum(produced_ends.values()) - 50 > 0, observed


def test_a_dstream_jobs_backups_are_pruned_by_retention_plan_first(broker, topic_name, tmp_path):
    """`aks backups --prune` over `dstream-<stamp>/` folders: the plan deletes nothing; --execute keeps
    the newest N (ages from the stamp), removes interrupted folders past the grace period only, and
    `aks backup --keep-last` prunes right after the backup it took."""
    from airflow_kafka_spark.ops.dstream_backup import backup_dstream

    registry = _dstream_job(broker, topic_name, tmp_path, f"clicks-prune-{os.getpid()}", {0: 0, 1: 0})
    spec = load_registry(registry).get("clicks")
    with KafkaView({"bootstrap.servers": broker.bootstrap_servers}) as view:
        for stamp in ("20200101T000000Z", "20200102T000000Z", "20200103T000000Z"):
            backup_dstream(spec, kafka=view, stamp=stamp)
    job_dir = tmp_path / "backups" / "clicks"
    stale = job_dir / "dstream-20200104T000000Z" / "checkpoint"      # killed before its offsets file
    stale.mkdir(parents=True)
    (stale / "checkpoint-1").write_bytes(b"half a copy")
    os.utime(stale / "checkpoint-1", (time.time() - 7200, time.time() - 7200))
    fresh = job_dir / "dstream-20200105T000000Z" / "checkpoint"      # may be a backup in flight
    fresh.mkdir(parents=True)
    (fresh / "checkpoint-1").write_bytes(b"being copied")
    before = sorted(p.name for p in job_dir.iterdir())
    args = ("backups", "--job", "clicks", "--registry", str(registry), "--prune", "--keep-last", "2")

    for bad in (("--max-age", "soon"), ("--keep-last", "0")):    # one line each, nothing deleted
        refused = aks("backups", "--job", "clicks", "--registry", str(registry), "--prune", *bad, "--execute")
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, (bad, refused.stderr)
    assert sorted(p.name for p in job_dir.iterdir()) == before

    plan = aks(*args)
    assert plan.returncode == 0, plan.stderr
    assert "would remove 1 backup(s): dstream-20200101T000000Z; 1 interrupted" in plan.stdout, plan.stdout
    assert sorted(p.name for p in job_dir.iterdir()) == before, "a plan deletes nothing"

    done = aks(*args, "--execute", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["prune"]["removed"] == ["dstream-20200101T000000Z"]
    assert doc["prune"]["incomplete_removed"] == ["dstream-20200104T000000Z"]
    assert [b["backup_id"] for b in doc["backups"]] == ["dstream-20200103T000000Z", "dstream-20200102T000000Z"]
    assert doc["backups"][0]["created_at_ms"] == 1578009600000           # from the stamp, not the mtime
    assert sorted(p.name for p in job_dir.iterdir()) == [
        "dstream-20200102T000000Z", "dstream-20200103T000000Z", "dstream-20200105T000000Z"]

    by_age = aks("backups", "--job", "clicks", "--registry", str(registry), "--prune", "--max-age", "1d")
    assert by_age.returncode == 0, by_age.stderr      # both are years old; the newest always stays
    assert "would remove 1 backup(s): dstream-20200102T000000Z; 0 interrupted" in by_age.stdout, by_age.stdout

    taken = aks("backup", "--job", "clicks", "--registry", str(registry), "--bootstrap-servers",
                broker.bootstrap_servers, "--keep-last", "1", "--json")
    assert taken.returncode == 0, taken.stderr
    new = json.loads(taken.stdout)
    assert sorted(new["pruned"]) == ["dstream-20200102T000000Z", "dstream-20200103T000000Z"]
    left = sorted(p.name for p in job_dir.iterdir())
    assert left == sorted([Path(new["location"]).name, "dstream-20200105T000000Z"]), left
