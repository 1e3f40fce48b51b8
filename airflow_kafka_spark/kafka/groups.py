"""Consumer groups through the admin API: describe one, read and commit its offsets.

A mixin over :class:`~airflow_kafka_spark.kafka.client.KafkaClient`; :class:`KafkaView` has it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.client import KafkaClient, clean, err_of
from airflow_kafka_spark.kafka.model import GroupInfo
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition

#: A group's coordinator is not ready yet: a broker that just started is still loading
#: ``__consumer_offsets`` (NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS for about half a second
#: on the KRaft broker of the devstack), or the coordinator is moving. Worth asking again until the
#: deadline; librdkafka marks neither answer retriable.
COORDINATOR_NOT_READY = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                   KafkaError.COORDINATOR_NOT_AVAILABLE})
_COORDINATOR_PAUSE_S = 0.2


class GroupOffsets(KafkaClient):
    """The consumer-group calls of a Kafka view."""

    def _group_call(self, group_id: str, what: str, submit: Callable[[Any, float], dict[str, Any]]) -> Any:
        """One group request, asked again while the group's coordinator is not ready, until the deadline."""
        deadline = self._deadline()
        while True:
            futs = self._call(what, submit, deadline)
            try:
                return self._result(futs[group_id], what, deadline, raw=True)
            except KafkaException as exc:
                err = err_of(exc)
                if err is None or err.code() not in COORDINATOR_NOT_READY or time.monotonic() >= deadline:
                    raise self._user_error(exc, what) from None
            time.sleep(_COORDINATOR_PAUSE_S)

    def describe_group(self, group_id: str) -> GroupInfo:
        """State and live members of a consumer group; a group that never existed is ``DEAD``."""
        desc = self._group_call(group_id, f"describe consumer group {group_id}",
                                lambda a, rt: a.describe_consumer_groups([group_id], request_timeout=rt))
        members = [f"{m.client_id}@{m.host}" for m in (desc.members or [])]
        return GroupInfo(group_id=group_id, state=getattr(desc.state, "name", str(desc.state)),
                         type=getattr(getattr(desc, "type", None), "name", "CLASSIC"), members=members)

    def group_offsets(self, group_id: str, topics: Iterable[str] | None = None) -> PartitionOffsets:
        """Committed offsets of a consumer group (the *next* offset to read, like a checkpoint's).

        For DStream-style jobs that ``commitAsync`` (Structured Streaming never commits, S23).
        Partitions without a committed offset are left out; an unknown group gives ``{}``.

        The group is described first: librdkafka's admin client crashes the whole process (a
        segfault, no exception) when an OffsetFetch is answered NOT_COORDINATOR —
        ``rd_kafka_handle_OffsetFetch`` re-queries the coordinator through a consumer-group handle
        that an admin client does not have (librdkafka #5040, seen here with 2.16 against a fresh
        broker). A group that was never used is exactly when that answer comes (its coordinator is
        still being set up). DescribeGroups does not have the bug, and a group that does not exist
        has no offsets to fetch. A coordinator moving between brokers can still provoke it, which is
        why the listener inside a Spark job never fetches offsets at all.
        """
        if not self.describe_group(group_id).exists:
            return {}
        wanted = set(topics) if topics is not None else None
        deadline = self._deadline()
        what = f"committed offsets of group {group_id}"
        futs = self._call(what, lambda a, rt: a.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group_id)], request_timeout=rt), deadline)
        result = self._result(futs[group_id], what, deadline)
        out: PartitionOffsets = {}
        for ktp in result.topic_partitions or []:
            if wanted is not None and ktp.topic not in wanted:
                continue
            if ktp.error is not None:
                raise UserError(f"{what}: {ktp.topic}-{ktp.partition}: "
                                f"{clean(ktp.error.str(), self.config)}")
            if ktp.offset >= 0:
                out[TopicPartition(ktp.topic, ktp.partition)] = ktp.offset
        return out

    def commit_group_offsets(self, group_id: str, offsets: PartitionOffsets) -> None:
        """Set a consumer group's committed offsets (e.g. a shadow group mirroring a checkpoint).

        Refuses while the group has live members: Kafka would reject the commit anyway
        (``UNKNOWN_MEMBER_ID``), and silently moving a running consumer's position is exactly the
        kind of surprise this product exists to prevent.
        """
        if not offsets:
            return
        bad = {tp: o for tp, o in offsets.items() if o < 0}
        if bad:
            raise UserError(f"cannot commit negative offsets to group {group_id}: "
                            + ", ".join(f"{tp}={o}" for tp, o in sorted(bad.items()))
                            + "; resolve earliest/latest to real offsets first")
        info = self.describe_group(group_id)
        if info.members:
            raise UserError(f"consumer group {group_id} has {len(info.members)} active member(s) "
                            f"({', '.join(info.members[:3])}); stop those consumers before moving "
                            "its offsets")
        what = f"commit offsets of group {group_id}"
        request = [ConsumerGroupTopicPartitions(
            group_id, [KTP(tp.topic, tp.partition, int(o)) for tp, o in sorted(offsets.items())])]
        # Setting the same offsets twice is harmless, so a coordinator that was not ready is asked again.
        result = self._group_call(group_id, what,
                                  lambda a, rt: a.alter_consumer_group_offsets(request, request_timeout=rt))
        errors = [(k, k.error) for k in (result.topic_partitions or []) if k.error is not None]
        if errors:
            ktp, err = errors[0]
            if err.code() in (KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS):
                raise UserError(f"consumer group {group_id} became active while committing; stop its "
                                "consumers and retry")
            raise UserError(f"{what}: {ktp.topic}-{ktp.partition}: {clean(err.str(), self.config)}"
                            + (f" (and {len(errors) - 1} more partitions)" if len(errors) > 1 else ""))
