"""One finding per partition condition: the code, wording, numbers and record counts of each.

The checks that walk partitions (:mod:`~airflow_kafka_spark.verdict.alignment` for a checkpoint,
:mod:`~airflow_kafka_spark.verdict.group` for a consumer group, :mod:`~airflow_kafka_spark.verdict.new_query`)
decide *which* condition holds; the builders here say it the same way everywhere: records below the
log start (S01), a position past the log end (S02), a recreated topic (S02/S03), a new partition that
no longer starts at 0 (S04), a partition gone (S05), a topic or its offsets not found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.counts import reset_outcome, reset_skip
from airflow_kafka_spark.verdict.findings import BLOCK, WARN, Bound, Finding, Number, RecordCounts
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.query_checks import recorded_topic_id

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.kafka.model import BrokerState
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord

#: A record-timestamp lookup for the identity heuristic: ``(offset, timestamp_ms)`` of the last
#: readable record below ``C`` (KafkaView.last_record_before), or None if nothing is readable.
ProbedRecord = tuple[int, int | None] | None


def place(tp: TopicPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


def topic_not_found(topic: str, broker: BrokerState) -> str:
    return f"subscribed topic {topic} does not exist on {broker.bootstrap_servers}"


def topic_not_found_finding(topic: str, broker: BrokerState, consequence: str = "") -> Finding:
    """TOPIC_NOT_FOUND for a subscribed topic: one wording for every check that meets it."""
    return Finding(
        "TOPIC_NOT_FOUND",
        WARN,
        topic=topic,
        message=topic_not_found(topic, broker) + consequence,
        fix="check the topic name, or create the topic before deploying",
    )


def offsets_unavailable(
    tp: TopicPartition, broker: BrokerState, numbers: Mapping[str, Number] | None = None
) -> Finding:
    """OFFSETS_UNAVAILABLE (BLOCK) for a partition the broker gave no log start/end for."""
    return Finding(
        "OFFSETS_UNAVAILABLE",
        BLOCK,
        **place(tp),
        numbers=numbers if numbers is not None else {},
        message=f"{broker.bootstrap_servers} returned no log start/end for {tp}",
        fix="check the partition's leader and retry the validation",
    )


class Span(NamedTuple):
    """A partition's resume offset and the broker's log start and end for it."""

    resume: int
    log_start: int
    log_end: int


def topic_reset(
    tp: TopicPartition,
    span: Span,
    pos: ResumePosition,
    record: LifecycleRecord | None,
    info: Any,
    options: DeployOptions,
    probe: ProbedRecord,
    nums: dict[str, Number],
) -> Finding | None:
    """TOPIC_RESET when the topic id changed since it was recorded, or (no record) a record now below the
    resume offset is newer than the batch that read past it."""
    c, ls, le = span
    recorded = recorded_topic_id(record, tp.topic, info)
    skip = reset_skip(c, ls, le)
    if recorded:
        if recorded == info.topic_id:
            return None
        return Finding(
            "TOPIC_RESET",
            BLOCK,
            **place(tp),
            counts={tp: skip},
            numbers={**nums, "recorded_topic_id": recorded, "topic_id": info.topic_id},
            message=(
                f"topic {tp.topic} was deleted and recreated since it was recorded (topic id "
                f"{recorded} → {info.topic_id}): offset {c:,} of the old topic names a different record "
                f"of the new one; {reset_outcome(c, ls, le, skip)} (S02/S03)"
            ),
            fix=(
                f"do not reuse these offsets for {tp.topic}: reset its position explicitly (e.g. earliest "
                f"of the new topic) with a backup and an audited override"
            ),
        )
    if probe is None or pos.reference_ts is None:
        return None
    offset, ts = probe
    if ts is None or offset >= c or ts <= pos.reference_ts + options.clock_skew_ms:
        return None
    ahead = ts - pos.reference_ts
    return Finding(
        "TOPIC_RESET",
        BLOCK,
        **place(tp),
        inferred=True,
        counts={tp: skip},
        numbers={
            **nums,
            "record_offset": offset,
            "record_timestamp_ms": ts,
            "batch_id": pos.reference_batch,
            "batch_timestamp_ms": pos.reference_ts,
            "newer_by_ms": ahead,
            "clock_skew_ms": options.clock_skew_ms,
        },
        message=(
            f"suspected topic reset: the record now at offset {offset:,} of {tp} (below the "
            f"checkpoint's {c:,}) is {ahead / 1000:,.1f}s newer than batch {pos.reference_batch}, which "
            f"had already read past it: the offsets now name different records (recreated topic or "
            f"another cluster; inferred from record timestamps, no lifecycle record); "
            f"{reset_outcome(c, ls, le, skip)}"
        ),
        fix=(
            f"if {tp.topic} was recreated, reset its position explicitly instead of reusing these offsets; "
            f"if producers stamp future event times, raise the clock-skew tolerance"
        ),
    )


def below_log_start(
    tp: TopicPartition, c: int, ls: int, nums: dict[str, Number], compacted: bool, label: str, group: bool
) -> Finding:
    lost = ls - c
    bound = "at most " if compacted else ""
    who = "the group" if group else "the checkpoint"
    # A DStream job on such a group: its executors fail with OffsetOutOfRangeException and Spark's
    # graceful shutdown hook runs empty batches that commitAsync past the whole failed batch, so more
    # than the deleted records can be skipped (tests/dstream/test_kafka_changes.py: 60 deleted, 150 skipped).
    dstream = (
        "; a DStream job fails its batch with OffsetOutOfRangeException and its shutdown hook can "
        "commit past that whole batch, skipping more than these"
        if group
        else ""
    )
    return Finding(
        "OFFSET_BELOW_LOG_START",
        BLOCK,
        **place(tp),
        numbers={**nums, "records_lost": lost},
        counts={tp: RecordCounts(lost=lost, bound=Bound.AT_MOST if compacted else Bound.EXACT)},
        message=(
            f"{who} resumes {tp} at {c:,} (from {label}) but the log now starts at {ls:,}: "
            f"{bound}{lost:,} unread records were deleted (retention or delete-records, S01)"
            + ("; compaction may already have removed some of them" if compacted else "")
            + dstream
        ),
        fix=(
            f"restore offsets {c:,}–{ls - 1:,} of {tp} from an archive, or accept the loss explicitly "
            f"(reset {tp} to {ls:,} with an audited override); failOnDataLoss=false would skip them "
            f"silently"
        ),
    )


def ahead_of_log_end(
    tp: TopicPartition, c: int, ls: int, le: int, nums: dict[str, Number], broker: BrokerState
) -> Finding:
    samples = broker.latest_samples.get(tp, ())
    extra: dict[str, Number] = {"records_ahead": c - le}
    again = ""
    if tp in broker.resampled:
        extra["samples"] = len(samples)
        again = f", in all {len(samples)} samples"
    skip = reset_skip(c, ls, le)
    return Finding(
        "OFFSET_AHEAD_OF_LOG_END",
        BLOCK,
        **place(tp),
        numbers={**nums, **extra},
        counts={tp: skip},
        message=(
            f"the checkpoint resumes {tp} at {c:,} but the log ends at {le:,}{again}: the topic was "
            f"recreated or truncated, or this is another cluster; {reset_outcome(c, ls, le, skip)} "
            f"(S02)"
        ),
        fix=(
            f"find out why {tp} went backwards; if the topic was recreated, reset its position explicitly "
            f"(its records from 0 to {le:,} are new) instead of starting on this checkpoint"
        ),
    )


def truncated_new_partition(
    tp: TopicPartition, ls: int, le: int, nums: dict[str, Number], *, inferred: bool, compacted: bool = False
) -> Finding:
    """Spark reads a new partition from earliest: with failOnDataLoss=true it fails (ADDED_PARTITION_DOES_
    NOT_START_FROM_OFFSET_ZERO), with false it starts at ``ls`` — records ``[0, ls)`` are lost either way."""
    return Finding(
        "NEW_PARTITION_TRUNCATED",
        BLOCK,
        **place(tp),
        inferred=inferred,
        counts={tp: RecordCounts(lost=ls, bound=Bound.AT_MOST if compacted else Bound.EXACT)},
        numbers={**nums, "records_lost": ls, "records": le - ls},
        message=(
            f"{tp} is new to the checkpoint and Spark reads new partitions from earliest, but its log "
            f"starts at {ls:,}, not 0: {ls:,} records were deleted before the query saw them (Spark: "
            f"Added partition {tp} starts from {ls} instead of 0, S04)"
        ),
        fix=(
            f"accept the loss of {tp}'s first {ls:,} records explicitly (audited override), or restore them "
            f"from an archive"
        ),
    )


def gone_counts(tp: TopicPartition, c: int | None, broker: BrokerState) -> RecordCounts:
    """A partition Spark drops (failOnDataLoss=false) or fails on: if it still exists (the deploy stopped
    subscribing to it) its records from ``c`` on are never read by this query; if it was deleted, its
    unread tail went with it and cannot be counted any more (0, at least)."""
    info = broker.topics.get(tp.topic)
    le = broker.latest.get(tp)
    if info is None or tp.partition >= info.partitions or le is None:
        return RecordCounts(bound=Bound.AT_LEAST)
    return RecordCounts(skipped=le - (c or 0), bound=Bound.AT_LEAST)
