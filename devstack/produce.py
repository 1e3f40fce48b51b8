"""Produce sample events and keep the ground truth of what Kafka acknowledged.

Every record is ``key = str(id % keys)``, ``value = {"id", "p", "ts"}`` and is sent to an explicit
partition (round robin), so tests can compare a sink with what was produced by (partition, offset).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from confluent_kafka import Producer

from airflow_kafka_spark.kafka.client import with_log


@dataclass(frozen=True)
class ProducedRecord:
    topic: str
    partition: int
    offset: int
    id: int
    timestamp_ms: int


def produce(bootstrap_servers: str, topic: str, count: int, *, partitions: int = 1, start_id: int = 0,
            keys: int = 10, timestamp_ms: int | None = None, config: dict | None = None,
            transactional_id: str | None = None) -> list[ProducedRecord]:
    """Send ``count`` records and return the acknowledged ones (raises if any delivery failed).

    ``timestamp_ms`` pins the record timestamps (for lag-in-seconds tests); ``transactional_id``
    wraps the whole send in one transaction, which leaves a control marker after it (S25).
    """
    conf = {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "enable.idempotence": True}
    if transactional_id:
        conf["transactional.id"] = transactional_id
    conf.update(config or {})
    producer = Producer(with_log(conf))   # librdkafka's own lines (GETPID, FAIL) to logging, not the terminal
    acked: list[ProducedRecord] = []
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        rid = json.loads(msg.value())["id"]
        acked.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), rid, msg.timestamp()[1]))

    if transactional_id:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i in range(start_id, start_id + count):
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        value = json.dumps({"id": i, "p": i % partitions, "ts": ts}).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=str(i % keys).encode(), partition=i % partitions,
                                 timestamp=ts, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if transactional_id:
        producer.commit_transaction(30)
    remaining = producer.flush(30)
    if remaining or errors:
        raise RuntimeError(f"produce to {topic}: {remaining} undelivered, errors: {errors[:3]}")
    return sorted(acked, key=lambda r: (r.partition, r.offset))
