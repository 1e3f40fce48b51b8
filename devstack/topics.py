"""Create, delete and trim topics on a local broker (test and demo plumbing, not product logic)."""

from __future__ import annotations

import time

from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from airflow_kafka_spark.kafka.client import with_log


def admin(bootstrap_servers: str) -> AdminClient:
    return AdminClient(with_log({"bootstrap.servers": bootstrap_servers}))


def create_topic(bootstrap_servers: str, topic: str, partitions: int = 1, config: dict | None = None,
                 timeout: float = 30) -> None:
    a = admin(bootstrap_servers)  # keep the client alive until the futures resolve
    fut = a.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})])
    fut[topic].result(timeout)
    _wait(bootstrap_servers, topic, lambda t: t is not None and len(t.partitions) == partitions, timeout)


def delete_topic(bootstrap_servers: str, topic: str) -> None:
    a = admin(bootstrap_servers)
    a.delete_topics([topic])[topic].result(30)
    _wait(bootstrap_servers, topic, lambda t: t is None)


def add_partitions(bootstrap_servers: str, topic: str, total: int, timeout: float = 30) -> None:
    a = admin(bootstrap_servers)
    a.create_partitions([NewPartitions(topic, total)])[topic].result(timeout)
    _wait(bootstrap_servers, topic, lambda t: t is not None and len(t.partitions) == total, timeout)


def delete_records(bootstrap_servers: str, topic: str, before: dict[int, int]) -> None:
    """Advance the log-start offset, exactly what retention does to a reader's view."""
    a = admin(bootstrap_servers)
    futs = a.delete_records([KTP(topic, p, o) for p, o in before.items()])
    for f in futs.values():
        f.result(30)


def _wait(bootstrap_servers: str, topic: str, ok, timeout: float = 30) -> None:
    a = admin(bootstrap_servers)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = a.list_topics(timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is not None:
            t = None
        if ok(t):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {topic} did not reach the expected state in {timeout}s")
