"""Small test-side readers of Kafka state (independent of the product's own KafkaView)."""

from __future__ import annotations

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "aks-test-peek", "enable.auto.commit": False})
    try:
        return {p: c.get_watermark_offsets(KTP(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        c.close()
