"""Issue 6 acceptance, lag and status, on the real stack: a broker, the reference job under spark-submit
with the mirroring listener added in one line, and ``kafka-consumer-groups`` as the witness.

One job runs through the phases below, in file order (each test is one phase and relies on the
state the previous one left; run the module as a whole):

1. running, caught up → ``OK``, and the listener mirrored ``C`` into the shadow group;
2. no new data → ``IDLE`` (not an alert);
3. producing faster than ``maxOffsetsPerTrigger`` → ``WARN`` (lag growing over broker samples);
4. driver killed with records waiting (S30: a dead driver nobody restarted) → ``STALLED`` then
   ``STOPPED`` (short thresholds, set relative to the stall clock so the test is fast on a loaded
   machine too);
5. quiescent: our lag per partition equals ``kafka-consumer-groups --describe`` of the shadow group
   that ``aks mirror`` keeps, and lag in seconds is within 1 s of the true age of the first unread
   record (timestamps known from the producer's delivery reports). The listener's group is checked
   against ``kafka-consumer-groups`` in phase 1, at the last quiescent point of the running job;
6. topic deleted and recreated → ``REWIND``.

Thresholds: phases 1-3 use the status rules' own defaults (derived from the job's rhythm), except
a window of 5 evaluations in phase 3 so the trend needs 5 looks rather than Burrow's 10.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.watch.mirror import mirror_checkpoint
from airflow_kafka_spark.watch.observation import Observation, Sample, keep_recent
from airflow_kafka_spark.watch.observe import ObserveTarget, observe
from airflow_kafka_spark.watch.status import Status, StatusThresholds
from devstack import spark, topics
from devstack.produce import produce
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PARTS = 3
RATE_LIMIT = 60                      # maxOffsetsPerTrigger of the job (records per 1 s trigger, all partitions)
IDLE_THRESHOLDS = StatusThresholds(stall_after_s=4)
MEASURED: dict[str, object] = {}     # numbers printed at the end (tests/ -s shows them)

# The one line a user adds to a job is the mirror_progress(...) call; the rest is the reference job.
WRAPPER = '''
import sys
from pyspark.sql import SparkSession
from airflow_kafka_spark.jobs import reference_job
from airflow_kafka_spark.jobs.listener import mirror_progress

group, bootstrap = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.getOrCreate()
mirror_progress(spark, group, bootstrap_servers=bootstrap)
sys.exit(reference_job.main(sys.argv[3:]))
'''


class SteadyProducer:
    """Produces round robin at ``rate`` records/s with the wall clock as timestamp; keeps every ack."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.topic, self.rate = topic, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.acks: dict[tuple[int, int], int] = {}      # (partition, offset) -> timestamp ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ack(self, err, msg) -> None:
        if err is None:
            self.acks[(msg.partition(), msg.offset())] = msg.timestamp()[1]

    def _run(self) -> None:
        i = 0
        t0 = time.monotonic()
        while not self._stop.is_set():
            ts = int(time.time() * 1000)
            self.producer.produce(self.topic, value=b'{"id": %d}' % i, partition=i % PARTS, timestamp=ts,
                                  on_delivery=self._ack)
            self.producer.poll(0)
            i += 1
            time.sleep(max(0.0, t0 + i / self.rate - time.monotonic()))

    def __enter__(self) -> SteadyProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)


class Scenario:
    def __init__(self, broker, root: Path) -> None:
        self.broker, self.root = broker, root
        self.bootstrap = broker.bootstrap_servers
        self.topic = "lag-real"
        self.group = "aks-mirror-lag-real"
        self.cmd_group = "aks-mirror-lag-real-cmd"
        self.checkpoint = root / "ck"
        self.marker = root / "STOP"
        self.log = root / "job.log"
        self.view = KafkaView({"bootstrap.servers": self.bootstrap})
        self.samples: list[Sample] = []
        self.acks: dict[tuple[int, int], int] = {}
        self.proc = None

    def start(self) -> None:
        wrapper = self.root / "job_with_mirror.py"
        wrapper.write_text(WRAPPER)
        args = [self.group, self.bootstrap, "--topics", self.topic, "--bootstrap-servers", self.bootstrap,
                "--checkpoint", str(self.checkpoint), "--output", str(self.root / "out"), "--sink", "idempotent",
                "--trigger", "processing:1s", "--max-offsets-per-trigger", str(RATE_LIMIT),
                "--stop-marker", str(self.marker)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        import subprocess

        fh = open(self.log, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(spark.submit_command(args, application=wrapper), stdout=fh,
                                     stderr=subprocess.STDOUT, env=spark.spark_env(), start_new_session=True)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def committed(self) -> dict[TopicPartition, int]:
        st = read_checkpoint(str(self.checkpoint))
        return dict(st.latest_committed.kafka_offsets) if st.latest_committed else {}

    def ends(self) -> dict[TopicPartition, int]:
        return self.view.latest_offsets([TopicPartition(self.topic, p) for p in range(PARTS)])

    def observe(self, thresholds: StatusThresholds | None = None) -> Observation:
        obs = observe(ObserveTarget(checkpoint=str(self.checkpoint)), self.view, thresholds=thresholds,
                      samples=self.samples)
        self.samples = keep_recent(self.samples, obs.sample)
        return obs

    def kill(self) -> None:
        """The driver dies (node drained, OOM): no graceful stop, whatever batch runs is cut."""
        import os
        import signal

        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture(scope="module")
def sc(broker, tmp_path_factory):
    s = Scenario(broker, tmp_path_factory.mktemp("lag-real"))
    topics.create_topic(s.bootstrap, s.topic, PARTS)
    for r in produce(s.bootstrap, s.topic, 90, partitions=PARTS):
        s.acks[(r.partition, r.offset)] = r.timestamp_ms
    s.start()
    yield s
    if s.alive():
        s.proc.kill()
        s.proc.wait(30)
    s.view.close()
    if MEASURED:
        print("\nmeasured:", MEASURED)


def _parse_describe(text: str) -> dict[TopicPartition, tuple[int, int, int]]:
    """kafka-consumer-groups --describe rows → {tp: (CURRENT-OFFSET, LOG-END-OFFSET, LAG)}."""
    out = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 6 and re.fullmatch(r"\d+", cols[2] or "") and cols[3].isdigit():
            out[TopicPartition(cols[1], int(cols[2]))] = (int(cols[3]), int(cols[4]), int(cols[5]))
    return out


# --------------------------------------------------------------------------------------------------


def test_1_running_caught_up_job_is_ok_and_mirrored_by_the_listener(sc):
    ends = sc.ends()

    def caught_up():
        assert sc.alive(), sc.log_tail()
        return sc.committed() == ends

    wait_until(caught_up, timeout=180, interval=0.5, what="the job to commit the topic's end offsets")
    obs = sc.observe()
    assert obs.status.status is Status.OK, obs.status.reason
    assert obs.lag.records == 0 and obs.lag.seconds == 0.0 and not obs.alerts()
    # the listener inside the job committed C to the shadow group
    wait_until(lambda: sc.view.group_offsets(sc.group) == ends, timeout=30, interval=0.5,
               what="the listener to mirror the committed offsets")
    assert sc.view.describe_group(sc.group).members == []      # a shadow group: nobody consumes with it
    described = _parse_describe(sc.broker.consumer_groups("--describe", "--group", sc.group))
    by = obs.lag.by_tp()
    assert {tp: v for tp, v in described.items()} == {tp: (p.position, p.log_end, p.records) for tp, p in by.items()}
    MEASURED["listener_group_at_catch_up"] = {str(tp): v for tp, v in sorted(described.items())}


def test_2_no_new_data_is_idle_not_an_alert(sc):
    last = max(b.batch_timestamp_ms for b in read_checkpoint(str(sc.checkpoint), read_history=True).history)
    time.sleep(max(0.0, last / 1000 + IDLE_THRESHOLDS.stall_after_s + 0.5 - time.time()))
    obs = sc.observe(IDLE_THRESHOLDS)
    assert obs.status.status is Status.IDLE, obs.status.reason
    assert not obs.status.is_alert and obs.alerts() == []


def test_3_producing_faster_than_the_rate_limit_warns(sc):
    statuses = []
    window = StatusThresholds(window=5)
    with SteadyProducer(sc.bootstrap, sc.topic, rate=3 * RATE_LIMIT) as prod:
        for _ in range(15):
            time.sleep(1.0)
            obs = sc.observe(window)
            statuses.append((obs.status.status, obs.lag.records_effective, obs.status.reason))
            if obs.status.status is Status.WARN:
                break
    sc.acks.update(prod.acks)
    assert statuses[-1][0] is Status.WARN, statuses
    # Either evaluator may see it first: broker samples ("lag grew ...") or the batches ramping up to the
    # rate limit ("... falls behind"); both are the falling-behind warning, never a stall or an idle job.
    assert "grew" in statuses[-1][2] or "falls behind" in statuses[-1][2], statuses[-1][2]
    MEASURED["warn_after_observations"] = len(statuses)
    MEASURED["warn_lag_records"] = [s[1] for s in statuses]


def test_4_killed_job_with_waiting_records_is_stalled_then_stopped(sc):
    sc.kill()
    assert not sc.alive()
    # Short thresholds placed just after the current stall clock: STALLED in ~3 s, STOPPED ~8 s later,
    # however long the last batch before the kill took on this machine.
    first = sc.observe()
    assert first.lag.records_effective > 0 and first.status.status is not Status.STALLED, first.status.reason
    clock = first.status.numbers["stall_clock_s"]
    short = StatusThresholds(stall_after_s=clock + 3, stopped_after_s=clock + 11)
    MEASURED["short_thresholds_s"] = (round(short.stall_after_s, 1), round(short.stopped_after_s, 1))
    seen: list[tuple[float, Status, str]] = [(round(clock, 1), first.status.status, first.status.reason)]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 40:
        time.sleep(1.0)
        obs = sc.observe(short)
        seen.append((round(obs.status.numbers["stall_clock_s"], 1), obs.status.status, obs.status.reason))
        if obs.status.status is Status.STOPPED:
            break
    order = [s for _, s, _ in seen]
    assert Status.STALLED in order and order[-1] is Status.STOPPED, seen
    assert order.index(Status.STALLED) < order.index(Status.STOPPED)
    assert [a.code for a in obs.alerts()] == ["STOPPED"]
    MEASURED["stall_clock_at_first_stalled_s"] = next(c for c, s, _ in seen if s is Status.STALLED)
    MEASURED["stall_clock_at_stopped_s"] = seen[-1][0]


def test_5_lag_equals_kafka_consumer_groups_and_seconds_match_the_record_age(sc):
    committed = sc.committed()
    ends = sc.ends()
    assert all(ends[tp] > committed[tp] for tp in committed), (committed, ends)   # a real backlog
    mirrored = mirror_checkpoint(str(sc.checkpoint), sc.cmd_group, view=sc.view)
    assert mirrored.offsets == committed

    t_before = time.time() * 1000
    obs = sc.observe()
    t_after = time.time() * 1000
    by = obs.lag.by_tp()
    described = _parse_describe(sc.broker.consumer_groups("--describe", "--group", sc.cmd_group))
    assert set(described) == set(by), described
    for tp, (current, log_end, lag) in described.items():
        assert (current, log_end, lag) == (by[tp].position, by[tp].log_end, by[tp].records), tp
    MEASURED["kafka_consumer_groups"] = {str(tp): v for tp, v in sorted(described.items())}
    MEASURED["ours"] = {str(p.tp): (p.position, p.log_end, p.records) for p in obs.lag.partitions}
    # The listener's group holds a committed batch end: C itself, or the batch before when the kill
    # came between the commit and the listener's (asynchronous) mirror.
    ends_of_batches = [b.kafka_offsets for b in read_checkpoint(str(sc.checkpoint), read_history=True).history]
    listener = sc.view.group_offsets(sc.group)
    assert listener in ends_of_batches and all(listener[tp] <= committed[tp] for tp in committed)
    MEASURED["listener_group_equals_C_after_kill"] = listener == committed

    errors = {}
    for p in obs.lag.partitions:
        ts = sc.acks[(p.tp.partition, p.position)]          # the first unread record, as the producer saw it
        true_age = ((t_before + t_after) / 2 - ts) / 1000.0
        assert p.method == "record-timestamp"
        assert abs(p.seconds - true_age) <= 1.0 + (t_after - t_before) / 2000.0, (p, true_age)
        errors[str(p.tp)] = round(p.seconds - true_age, 3)
    MEASURED["lag_seconds_error_s"] = errors
    MEASURED["lag_seconds"] = {str(p.tp): round(p.seconds, 2) for p in obs.lag.partitions}


def test_5b_the_command_line_agrees(sc, capsys):
    """``aks lag --json`` prints the same numbers; ``aks audit`` writes the report and exits 3 (STOPPED)."""
    import json

    from airflow_kafka_spark import cli

    assert cli.main(["lag", "--checkpoint", str(sc.checkpoint), "--bootstrap-servers", sc.bootstrap, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    committed = sc.committed()
    assert {f"{p['topic']}-{p['partition']}": p["position"] for p in doc["lag"]["partitions"]} == \
        {str(tp): o for tp, o in committed.items()}
    assert doc["lag_records"] == sum(sc.ends()[tp] - o for tp, o in committed.items())

    registry = sc.root / "streaming_jobs.yaml"
    registry.write_text(f"""
version: 1
allowed_roots: ["{sc.root}", "${{AKS_PACKAGE_DIR}}/jobs"]
jobs:
  - name: lag-real
    application: ${{AKS_PACKAGE_DIR}}/jobs/reference_job.py
    integration: reference   # the bundled job: its command-line contract
    topics: [{sc.topic}]
    checkpoint: {sc.checkpoint}
    backup_root: {sc.root}/backups
    stall_after_s: 2
""")
    code = cli.main(["audit", "--registry", str(registry), "--out", str(sc.root / "audit"),
                     "--bootstrap-servers", sc.bootstrap])
    out = capsys.readouterr().out
    assert code == 3, out
    assert "FAIL" in out and (sc.root / "audit" / "latest.md").exists() and (sc.root / "audit" / "latest.png").exists()


def test_6_recreated_topic_is_rewind(sc):
    topics.delete_topic(sc.bootstrap, sc.topic)
    topics.create_topic(sc.bootstrap, sc.topic, PARTS)
    produce(sc.bootstrap, sc.topic, 3 * PARTS, partitions=PARTS)
    statuses = []
    for _ in range(3):
        obs = sc.observe()
        statuses.append((obs.status.status, obs.status.reason))
        if obs.status.status is Status.REWIND:
            break
    assert statuses[-1][0] is Status.REWIND, statuses
    assert obs.lag.ahead and "REWIND" in [a.code for a in obs.alerts()]
    MEASURED["rewind_after_observations"] = len(statuses)
