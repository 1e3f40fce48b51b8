"""Issue 4 headline: keep the exact Kafka position across a checkpoint-breaking change — real spark-submit.

The story, with records produced continuously the whole time:

1. The reference job (stateless) runs with a processing trigger and is stopped gracefully by its
   stop marker; two copies run side by side, one with the idempotent sink, one with the append
   (non-idempotent) sink.
2. The new version adds a stateful stage (``--stateful dedup``). Started on the old checkpoint,
   Spark refuses it (its error text is captured).
3. ``aks reset --mode preserve`` (the real command line) moves the old checkpoint aside and
   records the startingOffsets in the lifecycle record. For the append sink a pending batch is
   staged first (``commits/C`` removed after its output was written: a kill between the sink
   write and the commit), so the plan announces a non-zero replay.
4. The new version starts on the fresh checkpoint from the recorded startingOffsets, more records
   are produced, the job is stopped gracefully.
5. The two naive procedures run in the same test: delete the checkpoint and restart with
   ``startingOffsets`` = latest, or = earliest.

Spark is the oracle: every sink is compared record by record with what Kafka acknowledged. The
counts go to ``.cache/reset-comparison.json`` (the docs quote them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as KafkaProducer

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime.probe import checkpoint_refusal
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from devstack import oracle, spark, topics
from devstack.produce import ProducedRecord, produce
from tests.support import spark_session
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COMPARISON = REPO / ".cache" / "reset-comparison.json"
PARTS = 3
# Seven short-lived drivers share two cores here: the C1 JIT and the serial GC start them faster.
FAST_START = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


class Producer(threading.Thread):
    """Produces records continuously (one long-lived client, ~50 records/s) until stopped.

    Keeps the records Kafka acknowledged (the ground truth), in the same shape as
    :func:`devstack.produce.produce`.
    """

    def __init__(self, bootstrap: str, topic: str, per_tick: int = 5, tick_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.topic, self.per_tick, self.tick_s = topic, per_tick, tick_s
        self.client = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.records: list[ProducedRecord] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.next_id = 0
        self.errors: list[str] = []

    def _acked(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        rid = json.loads(msg.value())["id"]
        with self.lock:
            self.records.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), rid, msg.timestamp()[1]))

    def _produce_one(self) -> None:
        i = self.next_id
        self.next_id += 1
        value = json.dumps({"id": i, "p": i % PARTS, "ts": int(time.time() * 1000)}).encode()
        self.client.produce(self.topic, value=value, key=str(i % 10).encode(), partition=i % PARTS,
                            on_delivery=self._acked)

    def burst(self, n: int) -> None:
        """Produce ``n`` records and wait for their acks, before the thread starts (no race on ``next_id``)."""
        assert not self.is_alive()
        for _ in range(n):
            self._produce_one()
        assert self.client.flush(30) == 0
        assert len(self.records) == n, self.errors[:3]

    def run(self) -> None:
        while not self.stopped.is_set():
            for _ in range(self.per_tick):
                self._produce_one()
            self.client.poll(0)
            time.sleep(self.tick_s)
        self.client.flush(30)

    def stop(self) -> None:
        self.stopped.set()
        self.join(60)
        assert not self.errors, self.errors[:3]

    def produced(self) -> list:
        with self.lock:
            return sorted(self.records, key=lambda r: (r.partition, r.offset))


class Run:
    """One spark-submit of the reference job, detached: processing trigger with a stop marker, or
    ``availableNow`` (it stops by itself once it has read what was there at its start)."""

    def __init__(self, name: str, root: Path, args: list[str], *, available_now: bool = False) -> None:
        self.name, self.root = name, root
        self.marker = root / f"STOP-{name}"
        self.log = root / f"{name}.log"
        trigger = ["--trigger", "availableNow"] if available_now else \
            ["--trigger", "processing:1s", "--stop-marker", str(self.marker)]
        self.proc = spark.start_job([*args, *trigger], self.log, conf=FAST_START)

    def stop(self, timeout: float = 180, *, expect_ok: bool = True) -> dict:
        """Touch the stop marker (if any) and wait for the exit; the last status line."""
        self.marker.touch()
        try:
            self.proc.wait(timeout)
        finally:
            self.kill()
        statuses = spark.parse_statuses(self.log.read_text())
        if expect_ok:
            assert self.proc.returncode == 0, \
                f"{self.name} exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
        return statuses[-1] if statuses else {}

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited early ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}")


def job_args(bootstrap: str, topic: str, checkpoint: Path, output: Path, sink: str, *extra: str) -> list[str]:
    # Two shuffle partitions: the dedup state store work per batch is what a 2-core machine feels.
    return ["--topics", topic, "--bootstrap-servers", bootstrap, "--checkpoint", str(checkpoint),
            "--output", str(output), "--sink", sink, "--shuffle-partitions", "2", *extra]


def committed_through(checkpoint: Path, ends: dict[int, int], topic: str) -> bool:
    state = read_checkpoint(str(checkpoint))
    if state.latest_committed is None or state.pending_batch is not None:
        return False
    offs = state.latest_committed.kafka_offsets
    return all(offs.get(TopicPartition(topic, p), -1) >= o for p, o in ends.items())


def aks(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_reset_preserve_keeps_every_record_exactly_once_across_an_incompatible_change(broker, tmp_path, topic_name):
    t0 = time.monotonic()
    bootstrap, topic = broker.bootstrap_servers, topic_name
    topics.create_topic(bootstrap, topic, PARTS)
    backups = tmp_path / "backups"
    ours_idem, ours_append = tmp_path / "idem", tmp_path / "append"
    for d in (ours_idem, ours_append):
        d.mkdir()
        LifecycleRecord.create(d.name, str(d / "ck")).save()
    producer = Producer(bootstrap, topic)
    # Records before the first start, acknowledged: the append copy's availableNow run (400 a trigger) then
    # commits at least 3 batches whatever the driver's start time (a timed head start left 1 batch in CI).
    producer.burst(1000)
    producer.start()
    runs: list[Run] = []
    timings: dict[str, float] = {}
    try:
        # ---- 1. the old version runs, records arrive continuously, graceful stop
        v1_idem = Run("v1-idem", tmp_path, job_args(bootstrap, topic, ours_idem / "ck", ours_idem / "out",
                                                    "idempotent"), available_now=True)
        v1_append = Run("v1-append", tmp_path, job_args(bootstrap, topic, ours_append / "ck", ours_append / "out",
                                                        "append", "--max-offsets-per-trigger", "400"),
                        available_now=True)
        runs += [v1_idem, v1_append]
        assert v1_idem.stop().get("event") == "finished"
        timings["v1"] = time.monotonic() - t0

        # ---- 2. the new version (a stateful stage) refuses the old checkpoint
        refused_run = Run("v2-on-old-checkpoint", tmp_path, job_args(bootstrap, topic, ours_idem / "ck",
                                                                     ours_idem / "out", "idempotent", "--stateful",
                                                                     "dedup"), available_now=True)
        runs.append(refused_run)
        assert v1_append.stop().get("event") == "finished"
        assert len(read_checkpoint(str(ours_append / "ck")).commit_batch_ids) >= 2
        refused_run.stop(expect_ok=False)
        assert refused_run.proc.returncode != 0, "Spark should refuse the old checkpoint for the new stateful version"
        refused_log = refused_run.log.read_text()
        spark_error = checkpoint_refusal(refused_log)   # Spark 4.2: STREAMING_STATEFUL_OPERATOR_MISSING_...
        assert spark_error, refused_log[-3000:]
        timings["refused"] = time.monotonic() - t0

        # The refused attempt planned a batch (offsets/N, no commit) and wrote nothing for it.
        idem_old = read_checkpoint(str(ours_idem / "ck"))
        assert idem_old.pending_batch is not None
        idem_pending_written = len(oracle.read_sink(ours_idem / "out" / f"query={idem_old.query_id}"
                                                    / f"batch={idem_old.pending_batch.batch_id}", "idempotent"))
        assert idem_pending_written == 0   # Spark may leave an empty batch folder (_temporary), never rows
        spark_error = spark_error.replace(str(tmp_path), "<tmp>")

        # The append copy: a kill between the sink write and commits/C leaves batch C pending but written.
        append_state = read_checkpoint(str(ours_append / "ck"))
        c = append_state.latest_committed.batch_id
        (ours_append / "ck" / "commits" / str(c)).unlink()
        with contextlib.suppress(FileNotFoundError):
            (ours_append / "ck" / "commits" / f".{c}.crc").unlink()
        written_by_pending = sum(1 for row in oracle.read_sink(ours_append / "out", "append") if row["batch_id"] == c)
        assert written_by_pending > 0

        # The naive procedures start from the same point: the old sink output, no checkpoint.
        naive = {}
        for name in ("naive-latest", "naive-earliest"):
            d = tmp_path / name
            d.mkdir()
            shutil.copytree(ours_idem / "out", d / "out")
            naive[name] = d

        # ---- 3. reset --mode preserve (the real command line)
        plans = {}
        for d in (ours_idem, ours_append):
            out = aks("reset", "--checkpoint", str(d / "ck"), "--backup-root", str(backups), "--mode", "preserve",
                      "--bootstrap-servers", bootstrap, "--json", "--settle", "0.5", "--execute")
            assert out.returncode == 0, out.stdout + out.stderr
            plans[d.name] = json.loads(out.stdout)
            # the fresh location holds only Spark's start file at the plan (ops/reset_start.py)
            assert [str(p.relative_to(d / "ck")) for p in (d / "ck").rglob("*") if p.is_file()] == ["sources/0/0"]
            assert plans[d.name]["plan"]["totals"]["skipped"] == 0
        announced_append_replay = plans["append"]["plan"]["totals"]["pending_replay"]
        assert announced_append_replay == written_by_pending
        # the idempotent copy's pending batch is the refused attempt's: planned, never written
        assert plans["idem"]["plan"]["details"]["pending_batch"] is not None
        starting = {}
        for d in (ours_idem, ours_append):
            rec = LifecycleRecord.load(str(d / "ck"))
            assert rec.next_starting_offsets == plans[d.name]["starting_offsets"]
            assert len(parse_offsets_json(rec.next_starting_offsets)) == PARTS
            starting[d.name] = d / "starting-offsets.json"
            starting[d.name].write_text(rec.next_starting_offsets)   # what the DAG's submit hands to the job
            verdict = validate(checkpoint_location=str(d / "ck"), kafka_config={"bootstrap.servers": bootstrap},
                               options=DeployOptions(topics=(topic,)), record_identity=False)
            assert verdict.severity != "BLOCK", verdict.to_dict()
            assert "NEW_QUERY_START" in {f.code for f in verdict.findings}
        timings["reset"] = time.monotonic() - t0

        # ---- 4. the new version on fresh checkpoints (ours and the two naive procedures), more records
        v2 = [Run("v2-ours-idem", tmp_path, job_args(bootstrap, topic, ours_idem / "ck", ours_idem / "out",
                                                     "idempotent", "--stateful", "dedup", "--starting-offsets-file",
                                                     str(starting["idem"]))),
              Run("v2-ours-append", tmp_path, job_args(bootstrap, topic, ours_append / "ck", ours_append / "out",
                                                       "append", "--stateful", "dedup", "--starting-offsets-file",
                                                       str(starting["append"]))),
              Run("v2-naive-latest", tmp_path, job_args(bootstrap, topic, naive["naive-latest"] / "ck",
                                                        naive["naive-latest"] / "out", "idempotent", "--stateful",
                                                        "dedup", "--starting-offsets", "latest")),
              Run("v2-naive-earliest", tmp_path, job_args(bootstrap, topic, naive["naive-earliest"] / "ck",
                                                          naive["naive-earliest"] / "out", "idempotent", "--stateful",
                                                          "dedup", "--starting-offsets", "earliest"))]
        runs += v2
        dirs = [ours_idem, ours_append, naive["naive-latest"], naive["naive-earliest"]]

        def v2_started() -> bool:
            for r in v2:
                r.check_alive()
            return all(read_checkpoint(str(d / "ck")).commit_batch_ids for d in dirs)

        wait_until(v2_started, timeout=300, interval=1, what="the new version to commit its first batch")
        time.sleep(3)                      # produce more while the new version runs
        producer.stop()
        ends = end_offsets(bootstrap, topic, PARTS)

        def caught_up() -> bool:
            for r in v2:
                r.check_alive()
            return all(committed_through(d / "ck", ends, topic) for d in dirs)

        wait_until(caught_up, timeout=240, interval=1, what="the new version to read everything produced")
        for r in v2:
            r.marker.touch()                 # all stop together: each waits for its batch boundary
        for r in v2:
            assert r.stop().get("graceful") is True
        timings["v2"] = time.monotonic() - t0
    finally:
        producer.stopped.set()
        for r in runs:
            r.kill()

    # ---- 5. the oracle
    produced = producer.produced()
    assert len(produced) == sum(ends.values())
    results = {
        "reset --mode preserve (idempotent sink)": oracle.compare(produced, oracle.read_sink(ours_idem / "out",
                                                                                             "idempotent")),
        "reset --mode preserve (append sink)": oracle.compare(produced, oracle.read_sink(ours_append / "out",
                                                                                         "append")),
        "delete checkpoint + startingOffsets=latest": oracle.compare(
            produced, oracle.read_sink(naive["naive-latest"] / "out", "idempotent")),
        "delete checkpoint + startingOffsets=earliest": oracle.compare(
            produced, oracle.read_sink(naive["naive-earliest"] / "out", "idempotent")),
    }
    ours_i = results["reset --mode preserve (idempotent sink)"]
    ours_a = results["reset --mode preserve (append sink)"]
    latest = results["delete checkpoint + startingOffsets=latest"]
    earliest = results["delete checkpoint + startingOffsets=earliest"]
    assert ours_i.exact, ours_i.summary()
    assert not ours_a.missing and not ours_a.unexpected, ours_a.summary()
    assert ours_a.duplicate_count == announced_append_replay, (ours_a.summary(), announced_append_replay)
    assert latest.missing and not latest.duplicated, latest.summary()
    assert earliest.duplicated and not earliest.missing, earliest.summary()

    report = {
        "produced": len(produced),
        "spark_refused_old_checkpoint": spark_error[:400],
        "procedures": {
            name: {**cmp.summary(),
                   **({"announced_replay": announced_append_replay} if "append" in name else {}),
                   **({"announced_replay": plans["idem"]["plan"]["totals"]["pending_replay"],
                       "announced_replay_reached_sink": int(idem_pending_written)} if "idempotent sink" in name
                      else {})}
            for name, cmp in results.items()},
        "seconds": {k: round(v, 1) for k, v in timings.items()} | {"total": round(time.monotonic() - t0, 1)},
    }
    COMPARISON.parent.mkdir(parents=True, exist_ok=True)
    COMPARISON.write_text(json.dumps(report, indent=2) + "\n")
    print("RESET_COMPARISON " + json.dumps(report))


def test_file_sink_reset_moves_the_sink_log_or_refuses(broker, tmp_path, topic_name):
    """S20 with Spark's real parquet sink (warm session): refused by default; with the sink log moved
    aside the new run's batches are written instead of being silently discarded."""
    bootstrap, topic = broker.bootstrap_servers, topic_name
    topics.create_topic(bootstrap, topic, 2)
    ck, out = tmp_path / "ck", tmp_path / "out"
    first = produce(bootstrap, topic, 120, partitions=2)
    res = spark_session.run_available_now(bootstrap, topic, ck, out, sink="parquet", max_offsets_per_trigger=40)
    assert res.ok, res.error
    assert oracle.compare(first, oracle.read_sink(out, "parquet")).exact
    later = produce(bootstrap, topic, 60, partitions=2, start_id=120)

    base = ("reset", "--checkpoint", str(ck), "--backup-root", str(tmp_path / "backups"), "--mode", "preserve",
            "--bootstrap-servers", bootstrap, "--sink-output", str(out), "--settle", "0", "--execute")
    refused = aks(*base)
    assert refused.returncode == 3 and "SINK_WILL_DISCARD_BATCHES" in refused.stderr, refused.stderr
    assert ck.exists()
    done = aks(*base, "--sink-log", "move-aside", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    starting = LifecycleRecord.load(str(ck)).next_starting_offsets
    res = spark_session.run_available_now(bootstrap, topic, ck, out, sink="parquet", starting_offsets=starting,
                                          stateful="dedup")
    assert res.ok, res.error
    # Through the (new) sink log: exactly the records produced after the reset position, none discarded.
    assert oracle.compare(later, oracle.read_sink(out, "parquet")).exact
    moved = Path(json.loads(done.stdout)["sink_aside_location"])
    assert moved.parent == out and moved.name.startswith("_spark_metadata.reset-")
    assert "0" in {p.name for p in moved.iterdir()}   # the old run's batch log, kept
