"""The soak's producer: ``rate`` records a second for the whole soak, through broker restarts.

What the sink is checked against is **what Kafka's log holds** once the feeder stops, read back
from the topic, not only the delivery reports: a librdkafka idempotent producer can stall after
many broker restarts (seed 360148 at its 45th: no delivery for 9 minutes while the broker served
everyone else; librdkafka#3009 reports the same). The watchdog then purges the stalled producer and
starts a new one. A purged record that was in flight may still be in the log; reading the log back
makes it expected in the sink instead of "unexpected", and every acknowledged record must be in the
log at its offset (a loss on Kafka's side fails the soak too).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KTP

from devstack.produce import ProducedRecord

STALL_S = 90.0   # records pending and no delivery report for this long: the producer is stalled
_PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}


class Feeder:
    """``rate`` records a second to ``partitions`` partitions; the truth is the log, read back at :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.acked: list[ProducedRecord] = []
        self.failed: list[str] = []
        self.purged = 0          # delivery reports of purged records (their fate is read from the log)
        self.restarts: list[str] = []
        self.sent = 0
        self.log: list[ProducedRecord] | None = None
        self._last_report = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="soak-feeder")
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        # A delivery may wait out a broker restart: retry for up to 5 minutes rather than drop it.
        return Producer({
            "bootstrap.servers": self.bootstrap,
            "linger.ms": 20,
            "enable.idempotence": True,
            "message.timeout.ms": 300_000,
            "reconnect.backoff.max.ms": 1000,
            "log_level": 2,  # a broker restart is expected: no line per refused connection
        })

    def _delivered(self, err: Any, msg: Any) -> None:
        with self._lock:
            self._last_report = time.monotonic()
            if err is not None:
                if err.code() in _PURGED:
                    self.purged += 1
                else:
                    self.failed.append(str(err))
                return
            rid = json.loads(msg.value())["id"]
            self.acked.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), rid, msg.timestamp()[1]))

    def _send(self, n: int) -> None:
        for _ in range(n):
            i = self.sent
            value = json.dumps({"id": i, "p": i % self.partitions, "ts": int(time.time() * 1000)}).encode()
            while True:
                try:
                    self.producer.produce(self.topic, value=value, key=str(i % 10).encode(),
                                          partition=i % self.partitions, on_delivery=self._delivered)
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.sent += 1

    def _restart_if_stalled(self) -> None:
        with self._lock:
            quiet_s = time.monotonic() - self._last_report
        pending = len(self.producer)
        if pending and quiet_s > STALL_S:
            self.producer.purge()          # queued and in-flight: reports come as _PURGE_*
            self.producer.flush(10)
            self.restarts.append(f"{pending} pending, no delivery report for {quiet_s:.0f}s")
            print(f"feeder: producer stalled ({self.restarts[-1]}); purged, new producer", flush=True)
            self.producer = self._new_producer()
            with self._lock:
                self._last_report = time.monotonic()

    def _run(self) -> None:
        step, sent_at = 0.25, time.monotonic()
        while not self._stop.wait(step):
            # by the clock, not by the loop: poll() returns early whenever a delivery report arrives
            due = round((time.monotonic() - sent_at) * self.rate)
            if due:
                self._send(due)
                sent_at += due / self.rate
            self.producer.poll(0)
            self._restart_if_stalled()

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self, timeout: float = 120) -> None:
        """Stop sending, wait for the delivery reports (purging what is still stuck after ``timeout``),
        then read the topic back: :attr:`log` is what the sink is checked against."""
        self._stop.set()
        self._thread.join(30)
        remaining = self.producer.flush(timeout)
        if remaining:
            self.producer.purge()
            self.producer.flush(10)
            self.restarts.append(f"{remaining} still pending at the end, after {timeout:.0f}s")
        self.log = self._read_log()
        at = {(r.partition, r.offset): r.id for r in self.log}
        lost = [r for r in self.acked if at.get((r.partition, r.offset)) != r.id]
        assert not lost, f"acknowledged records not in the log at their offsets: {lost[:5]}"

    def _read_log(self) -> list[ProducedRecord]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"soak-truth-{time.time_ns()}",
                             "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            ends = {p: consumer.get_watermark_offsets(KTP(self.topic, p), timeout=30)[1]
                    for p in range(self.partitions)}
            consumer.assign([KTP(self.topic, p, 0) for p in range(self.partitions)])
            out: list[ProducedRecord] = []
            done = {p for p, end in ends.items() if end == 0}
            deadline = time.monotonic() + 300
            while len(done) < self.partitions:
                assert time.monotonic() < deadline, f"could not read the topic back to {ends}"
                for msg in consumer.consume(1000, timeout=1.0):
                    if msg.error():
                        continue
                    rid = json.loads(msg.value())["id"]
                    out.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), rid, msg.timestamp()[1]))
                    if msg.offset() + 1 >= ends[msg.partition()]:
                        done.add(msg.partition())
            return sorted(out, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()

    @property
    def produced(self) -> list[ProducedRecord]:
        """What Kafka holds (after :meth:`stop`), else what it acknowledged so far."""
        if self.log is not None:
            return self.log
        with self._lock:
            return sorted(self.acked, key=lambda r: (r.partition, r.offset))

    def end_offsets(self) -> dict[int, int]:
        """Per partition, one past the highest offset of :attr:`produced`."""
        ends: dict[int, int] = {}
        for r in self.produced:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return ends
