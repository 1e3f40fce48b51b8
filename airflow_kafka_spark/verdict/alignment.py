"""Per-partition alignment of an existing checkpoint with the broker's logs.

What is checked, per topic-partition (the codes: docs/findings.md; what Spark did: docs/scenarios.md),
with ``C`` the position Spark resumes from (end offsets of the last committed batch), ``P`` the end
of a pending (planned but uncommitted) batch, ``LS``/``LE`` the broker's log start/end:

* ``LS ≤ C`` (else records are gone: ``OFFSET_BELOW_LOG_START``, ``records_lost = LS − C``),
* ``C ≤ LE`` (else the log went backwards: ``OFFSET_AHEAD_OF_LOG_END``),
* ``LS ≤ C ≤ P ≤ LE`` for a pending batch (else its replay is not faithful),
* partitions of ``C`` ⊆ current partitions of subscribed topics (``PARTITIONS_GONE``), and new
  partitions start at 0 (``NEW_PARTITION`` / ``NEW_PARTITION_TRUNCATED``),
* identity: cluster id and topic ids equal the lifecycle record's, or, without a record, the record
  just below ``C`` is not newer than the batch that read it (``TOPIC_RESET``, marked inferred).

Offsets are not dense (transaction markers, compaction, S25), so nothing here counts records from
gaps: a record count is always a difference of offsets and is labelled as an upper bound where
markers or compaction may make the true number lower. A data-loss BLOCK never depends on
``failOnDataLoss`` (S31): that option only decides whether Spark fails or skips silently.

This module walks the partitions and decides which condition holds; each finding's wording, numbers
and counts are built in :mod:`~airflow_kafka_spark.verdict.partition_findings`, a pending batch's
replay in :mod:`~airflow_kafka_spark.verdict.replay`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Finding, Number
from airflow_kafka_spark.verdict.first_batch import RecentBatches
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.partition_findings import (
    ProbedRecord,
    Span,
    ahead_of_log_end,
    below_log_start,
    gone_counts,
    offsets_unavailable,
    place,
    topic_not_found_finding,
    topic_reset,
    truncated_new_partition,
)
from airflow_kafka_spark.verdict.replay import ReplayRange, pending_replay_finding

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def alignment_findings(
    pos: ResumePosition,
    broker: BrokerState,
    record: LifecycleRecord | None,
    options: DeployOptions,
    timestamps: Mapping[TopicPartition, ProbedRecord],
    cluster_mismatch: bool,
    recent: RecentBatches | None = None,
) -> list[Finding]:
    ckpt_topics = {tp.topic for tp in pos.start} | {tp.topic for tp in pos.pending}
    deploy_topics = options.topics or tuple(sorted(ckpt_topics))
    findings, backlog = check_start(pos, broker, record, options, timestamps, deploy_topics, cluster_mismatch)
    new, new_backlog = _new_partitions(pos, broker, deploy_topics, ckpt_topics)
    findings += new
    backlog += new_backlog
    if backlog:
        findings.append(backlog_finding(backlog, options, recent))
    return findings


def check_start(
    pos: ResumePosition,
    broker: BrokerState,
    record: LifecycleRecord | None,
    options: DeployOptions,
    timestamps: Mapping[TopicPartition, ProbedRecord],
    deploy_topics: Iterable[str],
    cluster_mismatch: bool,
    *,
    group: bool = False,
) -> tuple[list[Finding], int]:
    """Findings for every partition the position names, and the backlog after it (records)."""
    subscribed = set(deploy_topics)
    out: list[Finding] = []
    backlog = 0
    replay: list[ReplayRange] = []
    for tp in sorted(set(pos.start) | set(pos.pending)):
        c = pos.start.get(tp)
        p = pos.pending.get(tp)
        base: dict[str, Number] = {"checkpoint_offset": c}
        if p is not None:
            base["pending_end"] = p
        info = broker.topics.get(tp.topic)
        gone_why = _gone_why(tp, info, subscribed, broker)
        if gone_why:
            if p is not None:
                replay.append(ReplayRange(tp, c if c is not None else 0, p, None, None, readable=False))
            out.append(_partitions_gone(tp, c, p, gone_why, base, subscribed=tp.topic in subscribed, broker=broker))
            continue
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is None or le is None:
            out.append(offsets_unavailable(tp, broker, base))
            continue
        nums = {**base, "log_start": ls, "log_end": le}
        here: list[Finding] = []
        compacted = "compact" in (getattr(info, "cleanup_policy", "") or "")
        if not cluster_mismatch and c is not None:
            reset = topic_reset(tp, Span(c, ls, le), pos, record, info, options, timestamps.get(tp), nums)
            if reset is not None:
                here.append(reset)
        if c is None:  # a partition first seen in the pending batch: the re-run reads it from earliest
            if ls > 0:
                here.append(truncated_new_partition(tp, ls, le, nums, inferred=True, compacted=compacted))
        else:
            if ls > c:
                here.append(below_log_start(tp, c, ls, nums, compacted, pos.label, group))
            if c > le:
                here.append(ahead_of_log_end(tp, c, ls, le, nums, broker))
            elif tp in broker.resampled:
                here.append(_transient_regression(tp, c, le, nums, broker))
        if p is not None:
            r_from = c if c is not None else 0
            replay.append(ReplayRange(tp, r_from, p, ls, le, readable=ls <= r_from and p <= le))
        after = max(x for x in (c, p, ls) if x is not None)
        part_backlog = max(le - after, 0) if not any(f.severity == BLOCK for f in here) else 0
        backlog += part_backlog
        if not here:
            ok_nums = {**nums, "backlog": part_backlog}
            if p is not None:
                ok_nums.update(replay_from=c if c is not None else 0, replay_to=p)
            to_read = f"; {part_backlog:,} to read" if part_backlog else ""
            here.append(
                Finding(
                    "OK",
                    PASS,
                    **place(tp),
                    numbers=ok_nums,
                    message=f"{tp} resumes at {c if c is not None else ls:,} within [{ls:,}, {le:,}]{to_read}",
                )
            )
        out += here
    if pos.pending_batch is not None:
        out.append(pending_replay_finding(pos, replay, options))
    return out, backlog


def _gone_why(tp: TopicPartition, info: TopicInfo | None, subscribed: set[str], broker: BrokerState) -> str | None:
    """Why Spark cannot resume ``tp`` where the checkpoint says (unsubscribed, topic deleted, partition gone)."""
    if tp.topic not in subscribed:
        return (
            f"{tp.topic} is in the checkpoint but not in the deploy's subscription: Spark "
            f"reports {tp} as gone (KAFKA_DATA_LOSS.PARTITIONS_DELETED) and fails, or silently "
            f"drops it with failOnDataLoss=false"
        )
    if info is None:
        return f"topic {tp.topic} no longer exists on {broker.bootstrap_servers} (deleted)"
    if tp.partition >= info.partitions:
        return (
            f"{tp.topic} now has {info.partitions} partition(s): partition {tp.partition} is "
            f"gone (topic recreated with fewer partitions?)"
        )
    return None


def _partitions_gone(tp: TopicPartition, c: int | None, p: int | None, why: str, base: dict[str, Number], *,
                     subscribed: bool, broker: BrokerState) -> Finding:
    pending_left = p - c if p is not None and c is not None and p > c else 0
    unread = f" with {pending_left:,} records still pending" if pending_left else ""
    fix = (
        "keep subscribing to it, or start a new checkpoint with the position of the remaining "
        "partitions carried over (reset)"
        if not subscribed
        else "restore the topic/partitions, or reset the checkpoint for the current partitions with an "
        "explicit override"
    )
    return Finding(
        "PARTITIONS_GONE",
        BLOCK,
        **place(tp),
        numbers=base,
        message=why + unread,
        fix=fix,
        counts={tp: gone_counts(tp, c, broker)},
    )


def _transient_regression(tp: TopicPartition, c: int, le: int, nums: dict[str, Number], broker: BrokerState
                          ) -> Finding:
    samples = broker.latest_samples.get(tp, ())
    return Finding(
        "TRANSIENT_REGRESSION",
        WARN,
        **place(tp),
        numbers={**nums, "samples": len(samples)},
        message=(
            f"the broker first reported log end {samples[0] if samples else '?'} for {tp}, "
            f"below the checkpoint's {c:,}, then {le:,} on re-sampling: a transient answer "
            f"(leader change, S26), not a reset"
        ),
        fix="none needed; if it recurs, check the brokers' leader elections before deploying",
    )


def _new_partitions(
    pos: ResumePosition, broker: BrokerState, deploy_topics: Iterable[str], ckpt_topics: set[str]
) -> tuple[list[Finding], int]:
    """Partitions of subscribed topics the checkpoint does not know: Spark reads them from earliest."""
    out: list[Finding] = []
    backlog = 0
    known = set(pos.start) | set(pos.pending)
    for topic in deploy_topics:
        info = broker.topics.get(topic)
        if info is None:
            if topic not in ckpt_topics:
                out.append(
                    topic_not_found_finding(topic, broker, ": the query reads nothing from it until it is created")
                )
            continue
        tps = [TopicPartition(topic, p) for p in range(info.partitions)]
        new = [tp for tp in tps if tp not in known]
        if not new:
            continue
        is_new_topic = topic not in ckpt_topics
        total = 0
        for tp in new:
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                out.append(offsets_unavailable(tp, broker))
                continue
            nums: dict[str, Number] = {"checkpoint_offset": None, "log_start": ls, "log_end": le}
            if ls > 0:
                compacted = "compact" in (getattr(info, "cleanup_policy", "") or "")
                out.append(truncated_new_partition(tp, ls, le, nums, inferred=is_new_topic, compacted=compacted))
                continue
            total += le - ls
            if not is_new_topic:
                out.append(
                    Finding(
                        "NEW_PARTITION",
                        INFO,
                        **place(tp),
                        numbers={**nums, "records": le - ls, "backlog": le - ls},
                        message=f"{tp} is new to the checkpoint: Spark reads it from offset 0 ({le - ls:,} records)",
                    )
                )
        backlog += total
        if is_new_topic:
            out.append(
                Finding(
                    "NEW_TOPIC_FROM_EARLIEST",
                    WARN,
                    topic=topic,
                    numbers={"records": total, "partitions": len(new)},
                    message=(
                        f"{topic} is subscribed by the deploy but not in the checkpoint: Spark reads all of "
                        f"it from earliest ({total:,} records in {len(new)} partition(s)); changing "
                        f"subscriptions on a checkpoint is 'not allowed' per the Spark guide (S13)"
                    ),
                    fix=(
                        f"accept the full read of {topic}, or give it its own query/checkpoint with an explicit "
                        f"startingOffsets"
                    ),
                )
            )
    return out, backlog


def backlog_finding(backlog: int, options: DeployOptions, recent: RecentBatches | None = None) -> Finding:
    """BACKLOG: the records to catch up, and how the first batches look (S28). Without a rate limit the
    first batch is all of it: a WARN when that is huge, or far beyond what the job's recent batches held
    (:class:`~.first_batch.RecentBatches`, with the time it takes at their peak rate)."""
    limit = options.max_offsets_per_trigger
    if limit:
        batches = math.ceil(backlog / limit)
        return Finding(
            "BACKLOG",
            INFO,
            numbers={"backlog": backlog, "max_offsets_per_trigger": limit, "batches": batches},
            message=(
                f"{backlog:,} records to catch up, ≈{batches:,} batch(es) of at most "
                f"{limit:,} (maxOffsetsPerTrigger); Trigger.Once ignores the limit"
            ),
            fix="",
        )
    numbers: dict[str, Number] = {"backlog": backlog, "first_batch_records": backlog}
    why = (
        f": at least {options.backlog_warn_records:,}, a long first batch (S28)"
        if backlog >= options.backlog_warn_records
        else ""
    )
    if recent is not None:
        numbers.update(recent.numbers(backlog))
        why = recent.warning(backlog) or why
    big = bool(why)
    return Finding(
        "BACKLOG",
        WARN if big else INFO,
        numbers=numbers,
        message=f"{backlog:,} records to catch up, all in the first batch (no maxOffsetsPerTrigger){why}",
        fix="set maxOffsetsPerTrigger to split the catch-up into batches of a size the job digests" if big else "",
    )
