"""What Kafka said: topics, a broker snapshot, a consumer group — plain values, no client.

Field names of :class:`TopicInfo` and :class:`BrokerState` are the contract used by the verdict, lag
and backup code and the Airflow layer; extend, do not rename.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str | None          # Kafka topic id (changes when a topic is deleted and recreated)
    partitions: int
    retention_ms: int | None      # -1 = infinite
    retention_bytes: int | None   # -1 = infinite
    cleanup_policy: str           # "delete", "compact", "compact,delete"; "unknown" without DESCRIBE_CONFIGS


@dataclass(frozen=True)
class BrokerState:
    bootstrap_servers: str
    cluster_id: str | None
    topics: dict[str, TopicInfo]                 # only the topics asked for that exist
    missing_topics: list[str]                    # asked for, but not in the cluster
    earliest: PartitionOffsets                   # log-start offset per partition
    latest: PartitionOffsets                     # log-end (high watermark) per partition
    sampled_at_ms: int
    resampled: list[TopicPartition] = field(default_factory=list)  # partitions re-read after a regression
    # For each re-sampled partition, every latest offset read, first (regressed) sample first. Lets
    # the verdict say "healed after 2 samples" (WARN) versus "regressed in all 4 samples" (BLOCK).
    latest_samples: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)

    @property
    def partitions(self) -> list[TopicPartition]:
        """All partitions of the existing topics asked for, sorted."""
        return sorted(TopicPartition(t.name, p) for t in self.topics.values() for p in range(t.partitions))

    def still_regressed(self, reference: PartitionOffsets) -> list[TopicPartition]:
        """Partitions whose (confirmed) latest offset is still below ``reference`` (e.g. a checkpoint's)."""
        return sorted(tp for tp, ref in reference.items()
                      if ref >= 0 and tp in self.latest and self.latest[tp] < ref)


@dataclass(frozen=True)
class GroupInfo:
    """A consumer group as the coordinator sees it (S24: who else uses this group id)."""

    group_id: str
    state: str                    # "STABLE", "EMPTY", "DEAD" (= does not exist), ...
    type: str                     # "CLASSIC" or "CONSUMER" (KIP-848)
    members: list[str]            # "client_id@host" per live member

    @property
    def exists(self) -> bool:
        return self.state not in ("DEAD", "UNKNOWN")
