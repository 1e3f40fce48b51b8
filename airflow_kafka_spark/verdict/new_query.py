"""The verdict for a new query (no checkpoint, or one without batches): where startingOffsets, or a
reset's carried-over offsets, make it start, and what that reads or skips (S21, S22, S28).

A folder holding only ``sources/<id>/0`` (what a reset leaves) is judged in ``verdict.sources_only``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_kafka_spark.kafka.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartition,
    parse_offsets_json,
    to_offsets_json,
)
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Bound, Finding, Number, RecordCounts
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.partition_findings import offsets_unavailable, place, topic_not_found_finding

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState
    from airflow_kafka_spark.kafka.model import BrokerState
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def new_query_findings(cp: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
                        options: DeployOptions) -> list[Finding]:
    out: list[Finding] = []
    if cp.exists and cp.has_state:
        out.append(Finding(
            "CHECKPOINT_NOT_EMPTY", WARN,
            message=(f"{cp.location} has state/ files but no batches: Spark 4.1+ refuses to start on it, "
                     f"older Spark starts a new query next to stale state"),
            fix="move the checkpoint aside and start with an empty location"))
    nso = getattr(record, "next_starting_offsets", None)
    explicit: PartitionOffsets | None = None
    if nso:
        explicit = parse_offsets_json(nso, what="next_starting_offsets")
        origin = "the reset's carried-over offsets"
    elif options.explicit_starting_offsets is not None:
        explicit, origin = options.explicit_starting_offsets, "startingOffsets (JSON)"
    else:
        origin = f"startingOffsets={options.starting_offsets or 'latest'}"
    mode = options.starting_offsets if options.starting_offsets in ("earliest", "latest") else "latest"
    topics = list(options.topics or sorted({tp.topic for tp in explicit or {}}))
    to_read = skipped = 0
    skips: dict[TopicPartition, RecordCounts] = {}   # startingOffsets=latest: what is there now is never read
    incomplete: list[str] = []
    if explicit is not None:
        extra = sorted({tp.topic for tp in explicit} - set(topics))
        incomplete += [f"{t} (not subscribed)" for t in extra]
    for topic in topics:
        info = broker.topics.get(topic)
        if info is None:
            out.append(topic_not_found_finding(topic, broker))
            continue
        for p in range(info.partitions):
            tp = TopicPartition(topic, p)
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                out.append(offsets_unavailable(tp, broker))
                continue
            if explicit is None:
                if mode == "earliest":
                    to_read += le - ls
                else:
                    skipped += le - ls
                    if le > ls:
                        skips[tp] = RecordCounts(skipped=le - ls, bound=Bound.AT_LEAST)
                continue
            if tp not in explicit:
                incomplete.append(str(tp))
                continue
            finding, reads = _explicit_start(tp, explicit[tp], ls, le, origin)
            out.append(finding)
            to_read += reads
    if incomplete:
        shown = ", ".join(incomplete[:5]) + (f" +{len(incomplete) - 5}" if len(incomplete) > 5 else "")
        out.append(Finding(
            "STARTING_OFFSETS_INCOMPLETE", BLOCK, numbers={"partitions": len(incomplete)},
            message=(f"{origin} must name exactly the subscribed partitions; mismatched: {shown} (Spark: 'If "
                     f"startingOffsets contains specific offsets, you must specify all TopicPartitions')"),
            fix="list every subscribed partition (-2 = earliest, -1 = latest) and only those"))
    expected = options.expect_new_checkpoint or bool(nso)
    numbers: dict[str, Number] = {"records_to_read": to_read}
    if explicit is None and mode == "latest":
        numbers = {"records_skipped": skipped}
    where = cp.location if cp.exists else f"{cp.location} (does not exist)"
    if explicit is not None:
        what = f"starts from {origin}: {to_read:,} records to read"
    elif mode == "earliest":
        what = f"starts from {origin}: reads the {to_read:,} records now in the topics"
    else:
        what = f"starts from {origin}: the {skipped:,} records now in the topics are skipped"
    if explicit is not None:
        numbers["starting_offsets"] = to_offsets_json(explicit)
    out.append(Finding(
        "NO_CHECKPOINT", INFO if expected else WARN, numbers=numbers, counts=skips,
        message=(f"no checkpoint at {where}: Spark starts a new query (new id, batch 0) that {what}"
                 + ("" if expected else "; the deploy did not say it expects a new checkpoint")),
        fix="" if expected else ("if this query ran before, point the deploy at its checkpoint (or reset "
                                 "with offset carry-over); otherwise mark the deploy as a new query")))
    return out


def _explicit_start(tp: TopicPartition, o: int, ls: int, le: int, origin: str) -> tuple[Finding, int]:
    """The finding for an explicit start offset of ``tp`` against its log [``ls``, ``le``], and the records
    it leaves to read."""
    o = ls if o == EARLIEST else le if o == LATEST else o
    nums: dict[str, Number] = {"checkpoint_offset": o, "log_start": ls, "log_end": le}
    if o < ls:
        return Finding(
            "OFFSET_BELOW_LOG_START", BLOCK, **place(tp), numbers={**nums, "records_lost": ls - o},
            counts={tp: RecordCounts(lost=ls - o)},
            message=(f"{origin} start {tp} at {o:,} but the log now starts at {ls:,}: {ls - o:,} "
                     f"records were deleted since the position was taken"),
            fix=f"accept the loss explicitly (start {tp} at {ls:,}) or restore the records"), 0
    if o > le:
        return Finding(
            "OFFSET_AHEAD_OF_LOG_END", BLOCK, **place(tp), numbers={**nums, "records_ahead": o - le},
            message=f"{origin} start {tp} at {o:,} but the log ends at {le:,} (topic recreated?)",
            fix=f"recompute the starting position of {tp} against the current topic"), 0
    return Finding("OK", PASS, **place(tp), numbers={**nums, "backlog": le - o},
                   message=f"{tp} starts at {o:,} within [{ls:,}, {le:,}]"), le - o
