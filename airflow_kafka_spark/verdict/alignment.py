"""Per-partition alignment of an existing checkpoint with the broker's logs.

What is checked, per topic-partition (failure-scenarios.md §1.3), with ``C`` the position Spark
resumes from (end offsets of the last committed batch), ``P`` the end of a pending (planned but
uncommitted) batch, ``LS``/``LE`` the broker's log start/end:

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
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.counts import reset_outcome, reset_skip
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Bound, Finding, Number, RecordCounts
from airflow_kafka_spark.verdict.first_batch import RecentBatches
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.query_checks import recorded_topic_id

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.kafka.model import BrokerState
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord

#: A record-timestamp probe for the identity heuristic: ``(offset, timestamp_ms)`` of the last
#: readable record below ``C`` (KafkaView.last_record_before), or None if nothing is readable.
ProbedRecord = tuple[int, int | None] | None


def alignment_findings(pos: ResumePosition, broker: BrokerState, record: LifecycleRecord | None, options: DeployOptions,
               timestamps: Mapping[TopicPartition, ProbedRecord], cluster_mismatch: bool,
               recent: RecentBatches | None = None) -> list[Finding]:
    ckpt_topics = {tp.topic for tp in pos.start} | {tp.topic for tp in pos.pending}
    deploy_topics = options.topics or tuple(sorted(ckpt_topics))
    findings, backlog = check_start(pos, broker, record, options, timestamps, deploy_topics,
                                     cluster_mismatch)
    new, new_backlog = _new_partitions(pos, broker, deploy_topics, ckpt_topics)
    findings += new
    backlog += new_backlog
    if backlog:
        findings.append(backlog_finding(backlog, options, recent))
    return findings


def place(tp: TopicPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


def check_start(pos: ResumePosition, broker: BrokerState, record: LifecycleRecord | None, options: DeployOptions,
                 timestamps: Mapping[TopicPartition, ProbedRecord], deploy_topics: Iterable[str],
                 cluster_mismatch: bool, *, group: bool = False) -> tuple[list[Finding], int]:
    """Findings for every partition the position names, and the backlog after it (records)."""
    subscribed = set(deploy_topics)
    out: list[Finding] = []
    backlog = 0
    replay: list[_Replay] = []
    for tp in sorted(set(pos.start) | set(pos.pending)):
        c = pos.start.get(tp)
        p = pos.pending.get(tp)
        base: dict[str, Number] = {"checkpoint_offset": c}
        if p is not None:
            base["pending_end"] = p
        info = broker.topics.get(tp.topic)
        gone_why = None
        if tp.topic not in subscribed:
            gone_why = (f"{tp.topic} is in the checkpoint but not in the deploy's subscription: Spark "
                        f"reports {tp} as gone (KAFKA_DATA_LOSS.PARTITIONS_DELETED) and fails, or silently "
                        f"drops it with failOnDataLoss=false")
        elif info is None:
            gone_why = f"topic {tp.topic} no longer exists on {broker.bootstrap_servers} (deleted)"
        elif tp.partition >= info.partitions:
            gone_why = (f"{tp.topic} now has {info.partitions} partition(s): partition {tp.partition} is "
                        f"gone (topic recreated with fewer partitions?)")
        if gone_why:
            if p is not None:
                replay.append(_Replay(tp, c if c is not None else 0, p, None, None, readable=False))
            pending_left = p - c if p is not None and c is not None and p > c else 0
            unread = f" with {pending_left:,} records still pending" if pending_left else ""
            fix = ("keep subscribing to it, or start a new checkpoint with the position of the remaining "
                   "partitions carried over (reset)" if tp.topic not in subscribed else
                   "restore the topic/partitions, or reset the checkpoint for the current partitions with an "
                   "explicit override")
            out.append(Finding("PARTITIONS_GONE", BLOCK, **place(tp), numbers=base,
                               message=gone_why + unread, fix=fix, counts={tp: _gone_counts(tp, c, broker)}))
            continue
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is None or le is None:
            out.append(offsets_unavailable(tp, broker, base))
            continue
        nums = {**base, "log_start": ls, "log_end": le}
        here: list[Finding] = []
        compacted = "compact" in (getattr(info, "cleanup_policy", "") or "")
        if not cluster_mismatch and c is not None:
            reset = _identity(tp, c, ls, le, pos, record, info, options, timestamps.get(tp), nums)
            if reset is not None:
                here.append(reset)
        if c is None:  # a partition first seen in the pending batch: the re-run reads it from earliest
            if ls > 0:
                here.append(_truncated_new_partition(tp, ls, le, nums, inferred=True, compacted=compacted))
        else:
            if ls > c:
                here.append(_below_log_start(tp, c, ls, nums, compacted, pos.label, group))
            if c > le:
                here.append(_ahead_of_log_end(tp, c, ls, le, nums, broker))
            elif tp in broker.resampled:
                samples = broker.latest_samples.get(tp, ())
                here.append(Finding(
                    "TRANSIENT_REGRESSION", WARN, **place(tp), numbers={**nums, "samples": len(samples)},
                    message=(f"the broker first reported log end {samples[0] if samples else '?'} for {tp}, "
                             f"below the checkpoint's {c:,}, then {le:,} on re-sampling: a transient answer "
                             f"(leader change, S26), not a reset"),
                    fix="none needed; if it recurs, check the brokers' leader elections before deploying"))
        if p is not None:
            r_from = c if c is not None else 0
            replay.append(_Replay(tp, r_from, p, ls, le, readable=ls <= r_from and p <= le))
        after = max(x for x in (c, p, ls) if x is not None)
        part_backlog = max(le - after, 0) if not any(f.severity == BLOCK for f in here) else 0
        backlog += part_backlog
        if not here:
            ok_nums = {**nums, "backlog": part_backlog}
            if p is not None:
                ok_nums.update(replay_from=c if c is not None else 0, replay_to=p)
            to_read = f"; {part_backlog:,} to read" if part_backlog else ""
            here.append(Finding("OK", PASS, **place(tp), numbers=ok_nums,
                                message=f"{tp} resumes at {c if c is not None else ls:,} within "
                                        f"[{ls:,}, {le:,}]{to_read}"))
        out += here
    if pos.pending_batch is not None:
        out.append(_pending_replay(pos, replay, options))
    return out, backlog


def _identity(tp: TopicPartition, c: int, ls: int, le: int, pos: ResumePosition, record: LifecycleRecord | None,
              info: Any, options: DeployOptions, probe: ProbedRecord, nums: dict[str, Number]
              ) -> Finding | None:
    recorded = recorded_topic_id(record, tp.topic, info)
    skip = reset_skip(c, ls, le)
    if recorded:
        if recorded == info.topic_id:
            return None
        return Finding(
            "TOPIC_RESET", BLOCK, **place(tp), counts={tp: skip},
            numbers={**nums, "recorded_topic_id": recorded, "topic_id": info.topic_id},
            message=(f"topic {tp.topic} was deleted and recreated since it was recorded (topic id "
                     f"{recorded} → {info.topic_id}): offset {c:,} of the old topic names a different record "
                     f"of the new one; {reset_outcome(c, ls, le, skip)} (S02/S03)"),
            fix=(f"do not reuse these offsets for {tp.topic}: reset its position explicitly (e.g. earliest "
                 f"of the new topic) with a backup and an audited override"))
    if probe is None or pos.reference_ts is None:
        return None
    offset, ts = probe
    if ts is None or offset >= c or ts <= pos.reference_ts + options.clock_skew_ms:
        return None
    ahead = ts - pos.reference_ts
    return Finding(
        "TOPIC_RESET", BLOCK, **place(tp), inferred=True, counts={tp: skip},
        numbers={**nums, "record_offset": offset, "record_timestamp_ms": ts, "batch_id": pos.reference_batch,
                 "batch_timestamp_ms": pos.reference_ts, "newer_by_ms": ahead,
                 "clock_skew_ms": options.clock_skew_ms},
        message=(f"suspected topic reset: the record now at offset {offset:,} of {tp} (below the "
                 f"checkpoint's {c:,}) is {ahead / 1000:,.1f}s newer than batch {pos.reference_batch}, which "
                 f"had already read past it: the offsets now name different records (recreated topic or "
                 f"another cluster; inferred from record timestamps, no lifecycle record); "
                 f"{reset_outcome(c, ls, le, skip)}"),
        fix=(f"if {tp.topic} was recreated, reset its position explicitly instead of reusing these offsets; "
             f"if producers stamp future event times, raise the clock-skew tolerance"))


def _below_log_start(tp: TopicPartition, c: int, ls: int, nums: dict[str, Number], compacted: bool,
                     label: str, group: bool) -> Finding:
    lost = ls - c
    bound = ("at most " if compacted else "")
    who = "the group" if group else "the checkpoint"
    # A DStream job on such a group: its executors fail with OffsetOutOfRangeException and Spark's
    # graceful shutdown hook runs empty batches that commitAsync past the whole failed batch, so more
    # than the deleted records can be skipped (tests/dstream/test_kafka_changes.py: 60 deleted, 150 skipped).
    dstream = ("; a DStream job fails its batch with OffsetOutOfRangeException and its shutdown hook can "
               "commit past that whole batch, skipping more than these" if group else "")
    return Finding(
        "OFFSET_BELOW_LOG_START", BLOCK, **place(tp), numbers={**nums, "records_lost": lost},
        counts={tp: RecordCounts(lost=lost, bound=Bound.AT_MOST if compacted else Bound.EXACT)},
        message=(f"{who} resumes {tp} at {c:,} (from {label}) but the log now starts at {ls:,}: "
                 f"{bound}{lost:,} unread records were deleted (retention or delete-records, S01)"
                 + ("; compaction may already have removed some of them" if compacted else "") + dstream),
        fix=(f"restore offsets {c:,}–{ls - 1:,} of {tp} from an archive, or accept the loss explicitly "
             f"(reset {tp} to {ls:,} with an audited override); failOnDataLoss=false would skip them "
             f"silently"))


def _ahead_of_log_end(tp: TopicPartition, c: int, ls: int, le: int, nums: dict[str, Number],
                      broker: BrokerState) -> Finding:
    samples = broker.latest_samples.get(tp, ())
    extra: dict[str, Number] = {"records_ahead": c - le}
    again = ""
    if tp in broker.resampled:
        extra["samples"] = len(samples)
        again = f", in all {len(samples)} samples"
    skip = reset_skip(c, ls, le)
    return Finding(
        "OFFSET_AHEAD_OF_LOG_END", BLOCK, **place(tp), numbers={**nums, **extra}, counts={tp: skip},
        message=(f"the checkpoint resumes {tp} at {c:,} but the log ends at {le:,}{again}: the topic was "
                 f"recreated or truncated, or this is another cluster; {reset_outcome(c, ls, le, skip)} "
                 f"(S02)"),
        fix=(f"find out why {tp} went backwards; if the topic was recreated, reset its position explicitly "
             f"(its records from 0 to {le:,} are new) instead of starting on this checkpoint"))


def _truncated_new_partition(tp: TopicPartition, ls: int, le: int, nums: dict[str, Number], *,
                             inferred: bool, compacted: bool = False) -> Finding:
    """Spark reads a new partition from earliest: with failOnDataLoss=true it fails (ADDED_PARTITION_DOES_
    NOT_START_FROM_OFFSET_ZERO), with false it starts at ``ls`` — records ``[0, ls)`` are lost either way."""
    return Finding(
        "NEW_PARTITION_TRUNCATED", BLOCK, **place(tp), inferred=inferred,
        counts={tp: RecordCounts(lost=ls, bound=Bound.AT_MOST if compacted else Bound.EXACT)},
        numbers={**nums, "records_lost": ls, "records": le - ls},
        message=(f"{tp} is new to the checkpoint and Spark reads new partitions from earliest, but its log "
                 f"starts at {ls:,}, not 0: {ls:,} records were deleted before the query saw them (Spark: "
                 f"Added partition {tp} starts from {ls} instead of 0, S04)"),
        fix=(f"accept the loss of {tp}'s first {ls:,} records explicitly (audited override), or restore them "
             f"from an archive"))


def _gone_counts(tp: TopicPartition, c: int | None, broker: BrokerState) -> RecordCounts:
    """A partition Spark drops (failOnDataLoss=false) or fails on: if it still exists (the deploy stopped
    subscribing to it) its records from ``c`` on are never read by this query; if it was deleted, its
    unread tail went with it and cannot be counted any more (0, at least)."""
    info = broker.topics.get(tp.topic)
    le = broker.latest.get(tp)
    if info is None or tp.partition >= info.partitions or le is None:
        return RecordCounts(bound=Bound.AT_LEAST)
    return RecordCounts(skipped=le - (c or 0), bound=Bound.AT_LEAST)


@dataclass(frozen=True)
class _Replay:
    """One partition's share of a pending batch: Spark re-reads ``[start, end)``."""

    tp: TopicPartition
    start: int
    end: int
    log_start: int | None
    log_end: int | None
    readable: bool

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


def _pending_replay(pos: ResumePosition, replay: list[_Replay], options: DeployOptions) -> Finding:
    batch = pos.pending_batch
    records = sum(r.records for r in replay)
    unreadable = [r for r in replay if r.records and not r.readable]
    ranges = ", ".join(f"{r.tp} [{r.start:,}, {r.end:,})" for r in replay if r.records)
    if len(ranges) > 200:
        ranges = ranges[:199] + "…"
    numbers: dict[str, Number] = {"batch_id": batch, "records_to_replay": records,
                                  "partitions": sum(1 for r in replay if r.records)}
    if unreadable:
        numbers["unreadable_partitions"] = len(unreadable)
        counts = {r.tp: RecordCounts(lost=min(r.log_start, r.end) - r.start) if r.log_start is not None
                  else RecordCounts(bound=Bound.AT_LEAST) for r in unreadable}
        r = unreadable[0]
        now = (f"the log now [{r.log_start:,}, {r.log_end:,})" if r.log_start is not None
               and r.log_end is not None else "the partition gone")
        return Finding(
            "PENDING_BATCH_REPLAY", BLOCK, numbers=numbers, counts=counts,
            message=(f"batch {batch} was planned but not committed, and Spark re-runs exactly its recorded "
                     f"range ({records:,} records), but {len(unreadable)} partition range(s) are no longer "
                     f"readable, e.g. {r.tp} [{r.start:,}, {r.end:,}) with {now}: the replay cannot be "
                     f"faithful (S07)"),
            fix=(f"drop the uncommitted offsets/{batch} so Spark re-plans from the committed position (after "
                 f"resolving any loss above), or restore the records"))
    if options.idempotent_sink is True:
        sev, sink = INFO, ("the sink is idempotent for a re-run batch id (it overwrites, or a file sink skips it): no "
                           "duplicates")
    elif options.idempotent_sink is False:
        sev, sink = WARN, f"the sink is not idempotent: {records:,} duplicate records expected"
        numbers["duplicates_expected"] = records
    else:
        sev, sink = WARN, f"a sink that is not idempotent gets up to {records:,} duplicate records"
    counts = {} if options.idempotent_sink is True else replay_duplicates(replay, options.idempotent_sink)
    return Finding(
        "PENDING_BATCH_REPLAY", sev, numbers=numbers, counts=counts,
        message=(f"batch {batch} was planned but not committed: on restart Spark re-runs it with the same "
                 f"range ({records:,} records{': ' + ranges if ranges else ''}); {sink} (S07/S14)"),
        fix=("use an idempotent sink (batchId-keyed writes, MERGE) or accept the duplicates; stop queries on "
             "a batch boundary to avoid this"))


def replay_duplicates(replay: Iterable[_Replay], idempotent_sink: bool | None) -> dict[TopicPartition, RecordCounts]:
    """Spark re-runs a pending batch with exactly its recorded range, under the same batch id: a sink
    that is not idempotent gets each record of it twice (``at_most`` while the sink is unknown)."""
    bound = Bound.EXACT if idempotent_sink is False else Bound.AT_MOST
    return {r.tp: RecordCounts(duplicated=r.records, bound=bound) for r in replay if r.records}


def _new_partitions(pos: ResumePosition, broker: BrokerState, deploy_topics: Iterable[str],
                    ckpt_topics: set[str]) -> tuple[list[Finding], int]:
    """Partitions of subscribed topics the checkpoint does not know: Spark reads them from earliest."""
    out: list[Finding] = []
    backlog = 0
    known = set(pos.start) | set(pos.pending)
    for topic in deploy_topics:
        info = broker.topics.get(topic)
        if info is None:
            if topic not in ckpt_topics:
                out.append(topic_not_found_finding(topic, broker,
                                                   ": the query reads nothing from it until it is created"))
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
                out.append(_truncated_new_partition(tp, ls, le, nums, inferred=is_new_topic, compacted=compacted))
                continue
            total += le - ls
            if not is_new_topic:
                out.append(Finding(
                    "NEW_PARTITION", INFO, **place(tp),
                    numbers={**nums, "records": le - ls, "backlog": le - ls},
                    message=f"{tp} is new to the checkpoint: Spark reads it from offset 0 ({le - ls:,} "
                            f"records)"))
        backlog += total
        if is_new_topic:
            out.append(Finding(
                "NEW_TOPIC_FROM_EARLIEST", WARN, topic=topic,
                numbers={"records": total, "partitions": len(new)},
                message=(f"{topic} is subscribed by the deploy but not in the checkpoint: Spark reads all of "
                         f"it from earliest ({total:,} records in {len(new)} partition(s)); changing "
                         f"subscriptions on a checkpoint is 'not allowed' per the Spark guide (S13)"),
                fix=(f"accept the full read of {topic}, or give it its own query/checkpoint with an explicit "
                     f"startingOffsets")))
    return out, backlog


def topic_not_found(topic: str, broker: BrokerState) -> str:
    return f"subscribed topic {topic} does not exist on {broker.bootstrap_servers}"


def topic_not_found_finding(topic: str, broker: BrokerState, consequence: str = "") -> Finding:
    """TOPIC_NOT_FOUND for a subscribed topic: one wording for every check that meets it."""
    return Finding("TOPIC_NOT_FOUND", WARN, topic=topic, message=topic_not_found(topic, broker) + consequence,
                   fix="check the topic name, or create the topic before deploying")


def offsets_unavailable(tp: TopicPartition, broker: BrokerState,
                        numbers: Mapping[str, Number] | None = None) -> Finding:
    """OFFSETS_UNAVAILABLE (BLOCK) for a partition the broker gave no log start/end for."""
    return Finding("OFFSETS_UNAVAILABLE", BLOCK, **place(tp), numbers=numbers if numbers is not None else {},
                   message=f"{broker.bootstrap_servers} returned no log start/end for {tp}",
                   fix="check the partition's leader and retry the validation")


def backlog_finding(backlog: int, options: DeployOptions, recent: RecentBatches | None = None) -> Finding:
    """BACKLOG: the records to catch up, and how the first batches look (S28). Without a rate limit the
    first batch is all of it: a WARN when that is huge, or far beyond what the job's recent batches held
    (:class:`~.first_batch.RecentBatches`, with the time it takes at their peak rate)."""
    limit = options.max_offsets_per_trigger
    if limit:
        batches = math.ceil(backlog / limit)
        return Finding("BACKLOG", INFO, numbers={"backlog": backlog, "max_offsets_per_trigger": limit,
                                                 "batches": batches},
                       message=(f"{backlog:,} records to catch up, ≈{batches:,} batch(es) of at most "
                                f"{limit:,} (maxOffsetsPerTrigger); Trigger.Once ignores the limit"),
                       fix="")
    numbers: dict[str, Number] = {"backlog": backlog, "first_batch_records": backlog}
    why = f": at least {options.backlog_warn_records:,}, a long first batch (S28)" \
        if backlog >= options.backlog_warn_records else ""
    if recent is not None:
        numbers.update(recent.numbers(backlog))
        why = recent.warning(backlog) or why
    big = bool(why)
    return Finding(
        "BACKLOG", WARN if big else INFO, numbers=numbers,
        message=f"{backlog:,} records to catch up, all in the first batch (no maxOffsetsPerTrigger){why}",
        fix="set maxOffsetsPerTrigger to split the catch-up into batches of a size the job digests" if big else "")

