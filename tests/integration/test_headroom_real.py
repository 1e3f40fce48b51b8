"""Issue 6 acceptance, retention headroom: the predicted time to data loss against the broker's own deletion.

A topic keeps records for ``retention.ms`` = 30 s and rolls segments every 250 ms (``segment.ms``),
while a producer appends steadily (the active segment is never deleted until it rolls, so steady
production is what lets retention bite on time). The reference job (spark-submit) reads the topic
for a few batches and then stops for good (its driver is killed, as when nobody restarts it): its
checkpoint's ``C`` is the end of its last committed batch. Right after that,
:func:`~airflow_kafka_spark.watch.observe.observe` predicts when retention deletes the first record the job
has not read. The test then polls the log start offset until it passes ``C``
(the local broker checks retention every second) and compares the observed moment with the
prediction: within ±10 % of the predicted headroom.

Why the prediction is a lower bound that lands close: the broker deletes a whole segment once its
*largest* timestamp is older than ``now − retention.ms``; the segment holding ``C`` ends at most one
``segment.ms`` (plus one record gap) after ``C``'s own timestamp, and the retention check adds up to
``log.retention.check.interval.ms`` (1 s here). With production timestamps from the wall clock the
error is therefore ≲ 1.5 s against a ~25 s headroom.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.watch.observe import ObserveTarget, observe
from devstack import spark, topics
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

RETENTION_MS = 30_000
SEGMENT_MS = 250
PARTS = 2
RATE = 40.0            # records/s over all partitions


class Steady:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.acks: dict[tuple[int, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _ack(self, err, msg) -> None:
        if err is None:
            self.acks[(msg.partition(), msg.offset())] = msg.timestamp()[1]

    def _run(self) -> None:
        i = 0
        t0 = time.monotonic()
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"x" * 200, partition=i % PARTS,
                                  timestamp=int(time.time() * 1000), on_delivery=self._ack)
            self.producer.poll(0)
            i += 1
            time.sleep(max(0.0, t0 + i / RATE - time.monotonic()))

    def start(self) -> Steady:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        self.producer.flush(30)


def test_predicted_time_to_data_loss_matches_the_broker(broker, topic_name, tmp_path):
    bootstrap = broker.bootstrap_servers
    topics.create_topic(bootstrap, topic_name, PARTS, {"retention.ms": str(RETENTION_MS),
                                                        "segment.ms": str(SEGMENT_MS)})
    view = KafkaView({"bootstrap.servers": bootstrap})
    log = tmp_path / "job.log"
    # The job starts on the empty topic and the producer only once the query runs: every record is
    # read within seconds of being written, however slow spark-submit is to start on this machine,
    # so retention never deletes what the job is about to read.
    job = spark.start_job(["--topics", topic_name, "--bootstrap-servers", bootstrap,
                           "--checkpoint", str(tmp_path / "ck"), "--output", str(tmp_path / "out"),
                           "--trigger", "processing:1s"], log)
    producer = Steady(bootstrap, topic_name)
    try:
        wait_until(lambda: job.poll() is not None or '"event": "started"' in log.read_text(errors="replace"),
                   timeout=240, interval=0.5, what="the query to start")
        assert job.poll() is None, log.read_text(errors="replace")[-3000:]
        producer.start()
        wait_until(lambda: len(read_checkpoint(str(tmp_path / "ck")).commit_batch_ids) >= 3, timeout=120,
                   interval=0.5, what="three committed batches")
        os.killpg(job.pid, signal.SIGKILL)        # the job stops (a dead driver nobody restarts)
        job.wait(30)
        committed = read_checkpoint(str(tmp_path / "ck")).latest_committed.kafka_offsets

        # The prediction, made once, right after the job stopped.
        obs = observe(ObserveTarget(checkpoint=str(tmp_path / "ck")), view)
        predicted_at = obs.observed_at_ms
        head = obs.headroom
        assert head.seconds is not None and head.limited_by == "time" and head.lost_records == 0, head.to_dict()
        parts = head.by_tp()
        assert all(p.by_time_basis == "first-unread-record" for p in parts.values())
        assert obs.alerts(min_headroom_s=3600)[0].code == "HEADROOM_LOW"

        # Watch the broker delete: log start passing C, partition by partition.
        deleted_at: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + RETENTION_MS / 1000 + 30
        while len(deleted_at) < len(committed) and time.monotonic() < deadline:
            starts = view.earliest_offsets(list(committed))
            now = int(time.time() * 1000)
            for tp, c in committed.items():
                if tp not in deleted_at and starts.get(tp, -1) > c:
                    deleted_at[tp] = now
            time.sleep(0.05)
        assert len(deleted_at) == len(committed), f"retention did not delete past C in time: {deleted_at}"

        report = {}
        for tp, when in deleted_at.items():
            p = parts[tp]
            predicted = p.deletes_at_ms
            horizon = predicted - predicted_at          # the predicted headroom, ms
            error = when - predicted
            report[str(tp)] = {"C": committed[tp], "first_unread_ts": producer.acks.get((tp.partition, committed[tp])),
                               "predicted_headroom_s": round(horizon / 1000, 2),
                               "observed_headroom_s": round((when - predicted_at) / 1000, 2),
                               "error_s": round(error / 1000, 2), "error_pct": round(100 * error / horizon, 1)}
            assert horizon > 5_000, report                       # a meaningful horizon, not an instant
            assert abs(error) <= 0.10 * horizon, report          # ±10 %
            assert error >= -500, report                         # a lower bound: never (much) late
        print("\nheadroom predicted vs observed:", report)

        # And afterwards the same observation reports the loss.
        after = observe(ObserveTarget(checkpoint=str(tmp_path / "ck")), view)
        assert after.headroom.lost_records > 0 and "DATA_LOST" in [a.code for a in after.alerts()]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
        producer.stop()
        view.close()
