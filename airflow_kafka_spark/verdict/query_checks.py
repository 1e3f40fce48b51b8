"""Query-level checks of the pre-deploy verdict: leases, cluster identity, damaged files, options the
checkpoint overrides, strict mode. Per-partition checks are in :mod:`~airflow_kafka_spark.verdict.alignment`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.verdict.findings import (
    BLOCK,
    INFO,
    WARN,
    Finding,
    Number,
    Severity,
    merged_counts,
    total_counts,
)
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.sources_only import sources_only_finding, started_by_reset

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState
    from airflow_kafka_spark.kafka.model import BrokerState, GroupInfo
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def empty_kafka_findings(cp: CheckpointState) -> list[Finding]:
    """A Kafka source whose restart offsets are ``{}``: no position at all (a hostile or damaged checkpoint;
    docs/security.md, tests/integration/test_hostile_corpus.py).

    BLOCK, like reset (which refuses to preserve it): Spark treats every partition as new and reads
    it from the earliest offset, so the restart silently replays whole topics — or, if the file was
    emptied by damage, nobody can say how far the job really got.
    """
    if not cp.exists:
        return []
    batches = [b for b in (cp.latest_committed, cp.latest_planned) if b is not None]
    where = [(f"offsets/{b.batch_id}", sid) for b in batches for sid, offs in sorted(b.sources.items())
             if offs is not None and not offs]
    if not batches:
        where = [(f"sources/{sid}/0", sid) for sid, offs in sorted(cp.initial_offsets.items()) if not offs]
    if not where:
        return []
    path, sid = where[0]
    return [Finding(
        "KAFKA_OFFSETS_EMPTY", BLOCK, numbers={"sources": len({s for _, s in where})},
        message=(f"{path} holds Kafka source {sid} with no partitions ({{}}): the checkpoint keeps no position, so "
                 "Spark would read every partition from its earliest offset (a full replay); reset refuses it too"),
        fix=("restore the checkpoint from a backup, or reset it with --topics and --mode to-offsets, to-datetime "
             "or earliest"))]


def lease_findings(record: LifecycleRecord | None, options: DeployOptions, now_ms: int) -> list[Finding]:
    lease = getattr(record, "lease", None)
    if lease is None or not lease.live(now_ms):
        return []
    if options.owner is not None and lease.holder == options.owner:
        return []
    left_s = max(0, (lease.expires_at_ms - now_ms) // 1000)
    return [Finding(
        "ALREADY_RUNNING", BLOCK,
        numbers={"lease_expires_at_ms": lease.expires_at_ms, "seconds_left": left_s},
        message=(f"job {record.job_name} is leased by {lease.holder} (run {lease.run_id}) for another "
                 f"{left_s}s: a second query on the same checkpoint races for the same batch files (S16)"),
        fix=f"stop run {lease.run_id} of {lease.holder} first, or wait until its lease expires")]


def cluster_mismatch(record: LifecycleRecord | None, broker: BrokerState) -> Finding | None:
    recorded = getattr(record, "kafka_cluster_id", None)
    if not recorded or not broker.cluster_id or recorded == broker.cluster_id:
        return None
    return Finding(
        "CLUSTER_MISMATCH", BLOCK, numbers={"recorded_cluster_id": recorded, "cluster_id": broker.cluster_id},
        message=(f"{broker.bootstrap_servers} is Kafka cluster {broker.cluster_id}, but this checkpoint's "
                 f"offsets were recorded on cluster {recorded}: the same offsets name different records "
                 f"here (checkpoint copied, DR fail-over or migration, S06)"),
        fix=("point the deploy at the recorded cluster, or translate the position (reset by time with an "
             "explicit override) instead of reusing these offsets"))


def shared_group_finding(group_id: str, group: GroupInfo | None) -> Finding:
    """SHARED_GROUP_ID (S24): the deploy sets ``kafka.group.id``.

    Structured Streaming reads with ``assign()`` and never commits, so its own records are not affected
    (the oracle test runs a query beside a live member of the same group: sink exact). What the shared
    id breaks is everything else that trusts the group: other consumers in it, DStream jobs that commit
    to it, lag read from its committed offsets, and a second Spark query with the same id (Spark's
    own "not recommended" warning). Live members the coordinator reports are never this query (it
    does not join), so they are someone else: WARN; without members INFO.
    """
    members = list(group.members) if group is not None else []
    shown = ", ".join(members[:3]) + (f" +{len(members) - 3}" if len(members) > 3 else "")
    state = group.state if group is not None else "unknown"
    return Finding(
        "SHARED_GROUP_ID", WARN if members else INFO,
        numbers={"group_id": group_id, "members": len(members), "group_state": state},
        message=(f"the deploy sets kafka.group.id={group_id}"
                 + (f", which {len(members)} live consumer(s) not owned by this query use ({shown})" if members else "")
                 + ": the query itself reads by assign() and never commits, so none of its records are lost or "
                   "repeated, but every consumer, commit and lag figure of that group is shared with it (S24)"),
        fix=("drop kafka.group.id (Spark then uses a unique spark-kafka-source-<uuid> group), or give each query "
             "its own id; use groupIdPrefix if an ACL needs a prefix"))


def recorded_topic_id(record: LifecycleRecord | None, topic: str, info: Any) -> str | None:
    """The record's topic id for ``topic`` if it can settle identity (both sides known)."""
    topics = getattr(record, "topics", None) or {}
    ident = topics.get(topic)
    recorded = getattr(ident, "topic_id", None)
    return recorded if recorded and getattr(info, "topic_id", None) else None


def problem_findings(cp: CheckpointState) -> list[Finding]:
    out = []
    for p in cp.problems:
        severity = Severity(p.severity) if getattr(p, "severity", None) in Severity.__members__ else BLOCK
        out.append(Finding(p.code, severity, numbers={"path": p.path}, message=p.message,
                           fix=_repair_of(p.message)))
    return out


def _repair_of(message: str) -> str:
    """The repair clause of a checkpoint problem (its messages read ``<what>: <repair>``)."""
    _, sep, tail = message.rpartition(": ")
    return tail if sep and tail else message


def existing_checkpoint_option_findings(cp: CheckpointState, pos: ResumePosition, record: LifecycleRecord | None,
                                         options: DeployOptions) -> list[Finding]:
    out: list[Finding] = []
    has_batches = bool(cp.offset_batch_ids)
    by_reset = started_by_reset(cp, record)   # the new query's start is the reset's: nothing is ignored
    if not has_batches and cp.initial_offsets:
        out.append(sources_only_finding(cp, pos, record))
    if options.expect_new_checkpoint and not by_reset:
        what = (f"batches up to {cp.offset_batch_ids[-1]}" if has_batches
                else "resolved starting offsets in sources/")
        out.append(Finding(
            "CHECKPOINT_NOT_EMPTY", BLOCK,
            message=(f"the deploy expects a new query but {cp.location} already holds {what}: Spark resumes "
                     f"from {pos.label} and ignores startingOffsets"),
            fix="point the deploy at an empty checkpoint location, or move this checkpoint aside (reset)"))
    if options.starting_offsets is not None and not by_reset:
        numbers: dict[str, Number] = {}
        explicit = options.explicit_starting_offsets
        if explicit is not None and pos.known:
            numbers["partitions_differing"] = sum(1 for tp, o in explicit.items() if pos.start.get(tp) != o)
        out.append(Finding(
            "STARTING_OFFSETS_IGNORED", WARN, numbers=numbers,
            message=(f"startingOffsets={short(options.starting_offsets)} only applies to a new query: this "
                     f"checkpoint resumes from {pos.label}"),
            fix="drop the option from the deploy, or reset the checkpoint with the position you want"))
    nso = getattr(record, "next_starting_offsets", None)
    if nso and not by_reset:
        out.append(Finding(
            "STARTING_OFFSETS_IGNORED", WARN,
            message=(f"the lifecycle record carries next_starting_offsets {short(nso)} (set by a reset) but "
                     f"the checkpoint is not empty: Spark resumes from {pos.label} instead"),
            fix="finish the reset (move the old checkpoint aside) or clear next_starting_offsets"))
    pinned = (cp.latest_planned or cp.latest_committed)
    for key, wanted in sorted(options.conf.items()):
        have = pinned.conf.get(key) if pinned is not None else None
        if have is None or have == wanted:
            continue
        note = ("state is partitioned by it" if cp.has_state else
                "the query has no state; Spark releases after SPARK-53942 may honour a new value for "
                "stateless shuffles, Spark 4.0 does not")
        out.append(Finding(
            "CONF_PINNED_BY_CHECKPOINT", WARN, numbers={"conf": key, "checkpoint_value": have,
                                                        "requested_value": wanted},
            message=(f"{key}={wanted} is requested but the checkpoint pins {have}: Spark silently keeps "
                     f"{have} on restart ({note})"),
            fix=f"keep {key}={have}, or start a new checkpoint (reset with offset carry-over) to change it"))
    return out


def fail_on_data_loss_finding(findings: list[Finding]) -> Finding:
    counted = total_counts(merged_counts(f for f in findings if f.severity == BLOCK))
    lost = counted.lost + counted.skipped
    more = (f"; here it would hide what is counted above (records {counted.describe()})" if lost else "")
    return Finding(
        "FAIL_ON_DATA_LOSS_DISABLED", WARN, numbers={"records_silently_skipped": lost},
        message=("failOnDataLoss=false makes Spark log and skip deleted, reset or truncated ranges instead "
                 f"of failing (S31); this check still blocks them{more}"),
        fix="keep failOnDataLoss=true and handle data loss explicitly (accept it with an audited override)")


def apply_strict(findings: list[Finding], options: DeployOptions) -> list[Finding]:
    if not options.strict:
        return findings
    return [replace(f, severity=BLOCK, message=f"{f.message} (strict: warnings block)")
            if f.severity == WARN else f for f in findings]


def short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
