"""The verdict for a consumer group's committed offsets (DStream direct-API jobs that ``commitAsync``):
the same per-partition alignment, judged by the consumer's reset policy instead of Spark's rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.verdict.alignment import backlog_finding, check_start
from airflow_kafka_spark.verdict.findings import INFO, WARN, Bound, Finding, Number, RecordCounts, Verdict
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.partition_findings import place, topic_not_found_finding
from airflow_kafka_spark.verdict.query_checks import apply_strict

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.kafka.model import BrokerState


def evaluate_group(group_offsets: PartitionOffsets, broker: BrokerState, options: DeployOptions,
                   batch_trail_note: bool = True, *, group_id: str | None = None,
                   processed_end: PartitionOffsets | None = None) -> Verdict:
    """The same alignment checks for a consumer group's committed offsets (DStream direct-API jobs
    that ``commitAsync``), plus the one-batch trail of ``commitAsync`` (docs/scenarios.md, DStream jobs).

    For such a job the reset policy of the consumer (``auto.offset.reset``, given here as
    ``options.starting_offsets``; Kafka's default is ``latest``) decides where partitions without a
    committed offset start, so those are judged by that policy rather than by Spark's rules.

    ``processed_end``: the end offsets of the last ranges the stopped job processed (Spark's own
    ``KafkaRDD`` log lines, :func:`airflow_kafka_spark.runtime.dstream.processed_end_from_log`). With
    them the replay is exact — the processed-but-uncommitted records; without them it is only bounded
    by the backlog, which also holds whatever arrived after the last batch.
    """
    topics = options.topics
    start = {tp: o for tp, o in group_offsets.items() if topics is None or tp.topic in topics}
    deploy_topics = tuple(topics) if topics else tuple(sorted({tp.topic for tp in start}))
    policy = options.starting_offsets if options.starting_offsets in ("earliest", "latest") else "latest"
    findings: list[Finding] = []
    label = f"group {group_id}" if group_id else "the consumer group"
    pos = ResumePosition(start=start, label=f"{label}'s committed offsets", known=True)
    per_partition, backlog = check_start(pos, broker, None, options, {}, deploy_topics, True, group=True)
    findings += per_partition
    new, new_backlog = _group_new_partitions(start, broker, deploy_topics, policy, label)
    findings += new
    backlog += new_backlog
    if not start:
        findings.append(_no_group_offsets(label, broker, deploy_topics, policy, options))
    elif batch_trail_note:
        findings.append(_trail_finding(label, start, broker, backlog, processed_end))
    if backlog:
        findings.append(backlog_finding(backlog, options))
    return Verdict.of(apply_strict(findings, options), source="group", subject=group_id)


def _trail_finding(label: str, start: PartitionOffsets, broker: BrokerState, backlog: int,
                   processed_end: PartitionOffsets | None) -> Finding:
    """commitAsync's one-batch trail: what the restart re-reads, exact when the processed end is known."""
    fix = ("make the output idempotent or store offsets with the output; for a clean stop let one more (empty) "
           "batch run after the last data so the queued commit drains")
    nums: dict[str, Number] = {"backlog": backlog, "partitions": len(start)}
    if processed_end is not None and all(tp in processed_end for tp in start):
        replay = sum(max(0, min(processed_end[tp], broker.latest.get(tp, processed_end[tp])) - c)
                     for tp, c in start.items())
        return Finding(
            "GROUP_COMMIT_TRAILS_ONE_BATCH", WARN, numbers={**nums, "records_to_replay": replay},
            message=(f"{label} is committed by commitAsync, which only queues offsets and commits them during "
                     f"the next batch: the job processed {replay:,} records past the group's offsets (its last "
                     f"ranges, from Spark's KafkaRDD log) that were never committed — exactly these are read "
                     f"again on restart; the other {backlog - replay:,} of the {backlog:,} behind the group "
                     f"arrived after its last batch and are read for the first time"),
            fix=fix)
    return Finding(
        "GROUP_COMMIT_TRAILS_ONE_BATCH", WARN, numbers={**nums, "records_to_replay": backlog},
        message=(f"{label} is committed by commitAsync, which only queues offsets and commits them during the "
                 f"next batch: the last batch processed before the stop was never committed and is read again "
                 f"on restart — at most {backlog:,} records (all behind the group's offsets): that many only "
                 f"if the job had caught up before it stopped, fewer when records arrived after its last batch "
                 f"(0 after a graceful stop whose last batch was empty); the job's driver log (Spark's KafkaRDD "
                 f"'Computing topic' lines) makes the count exact"),
        fix=fix)


def _group_new_partitions(start: PartitionOffsets, broker: BrokerState, deploy_topics: Iterable[str],
                          policy: str, label: str) -> tuple[list[Finding], int]:
    if not start:
        return [], 0
    out: list[Finding] = []
    backlog = 0
    for topic in deploy_topics:
        info = broker.topics.get(topic)
        if info is None:
            if not any(tp.topic == topic for tp in start):
                out.append(topic_not_found_finding(topic, broker))
            continue
        for p in range(info.partitions):
            tp = TopicPartition(topic, p)
            if tp in start:
                continue
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                continue
            nums: dict[str, Number] = {"checkpoint_offset": None, "log_start": ls, "log_end": le,
                                       "records": le - ls}
            if policy == "earliest":
                backlog += le - ls
                out.append(Finding("NEW_PARTITION", INFO, **place(tp), numbers={**nums, "backlog": le - ls},
                                   message=(f"{label} has no committed offset for {tp}: auto.offset.reset="
                                            f"earliest reads its {le - ls:,} records from {ls:,}"), fix=""))
            else:
                out.append(Finding(
                    "NEW_PARTITION", WARN if le > ls else INFO, **place(tp),
                    numbers={**nums, "records_skipped": le - ls},
                    message=(f"{label} has no committed offset for {tp}: auto.offset.reset=latest skips its "
                             f"{le - ls:,} records"),
                    fix="commit a starting offset for it, or run with auto.offset.reset=earliest"))
    return out, backlog


def _no_group_offsets(label: str, broker: BrokerState, topics: Iterable[str], policy: str,
                      options: DeployOptions) -> Finding:
    sizes = {tp: broker.latest.get(tp, 0) - broker.earliest.get(tp, 0)
             for tp in sorted(broker.latest) if tp.topic in set(topics)}
    total = sum(sizes.values())
    skip = policy != "earliest"
    # latest: what is there now is never read (and whatever arrives before the first poll)
    counts = {tp: RecordCounts(skipped=n, bound=Bound.AT_LEAST) for tp, n in sizes.items() if n > 0} if skip else {}
    return Finding(
        "NO_GROUP_OFFSETS", WARN if skip and total and not options.expect_new_checkpoint else INFO, counts=counts,
        numbers={"records_skipped" if skip else "records_to_read": total},
        message=(f"{label} has no committed offsets for {', '.join(topics) or 'the topics'}: the job starts "
                 f"from auto.offset.reset={policy} and " + (f"skips the {total:,} records now there" if skip
                                                            else f"reads the {total:,} records now there")),
        fix="" if not skip else "commit the intended starting offsets to the group before the first start")
