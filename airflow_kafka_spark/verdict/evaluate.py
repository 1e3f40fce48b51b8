"""The pre-deploy verdict: a pure function of what the checkpoint, Kafka and the lifecycle record say.

Why a pure function: the same judgement serves the CLI, the Airflow operator, the sensor and the
audit DAG, and it has to be tested against hundreds of generated states without a broker. So
:func:`evaluate` does no I/O at all; :mod:`airflow_kafka_spark.verdict.validate` gathers the inputs
(checkpoint files, broker offsets, record timestamps, the lifecycle record) and calls it. The checks
themselves are in :mod:`~.query_checks`, :mod:`~.versions`, :mod:`~.alignment` and :mod:`~.new_query`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.verdict.alignment import alignment_findings
from airflow_kafka_spark.verdict.counts import with_query_counts
from airflow_kafka_spark.verdict.findings import Finding, Verdict
from airflow_kafka_spark.verdict.first_batch import RecentBatches
from airflow_kafka_spark.verdict.new_query import new_query_findings
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.partition_findings import ProbedRecord
from airflow_kafka_spark.verdict.previous import PreviousCheckpoint, previous_checkpoint_finding
from airflow_kafka_spark.verdict.query_checks import (
    apply_strict,
    cluster_mismatch,
    empty_kafka_findings,
    existing_checkpoint_option_findings,
    fail_on_data_loss_finding,
    lease_findings,
    problem_findings,
    recorded_topic_id,
    shared_group_finding,
)
from airflow_kafka_spark.verdict.versions import runtime_findings

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState
    from airflow_kafka_spark.kafka.model import BrokerState, GroupInfo
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def subscribed_topics(checkpoint: CheckpointState, record: LifecycleRecord | None,
                      options: DeployOptions) -> list[str]:
    """Every topic the verdict needs from the broker: the checkpoint's, the deploy's, a reset's."""
    names: dict[str, None] = {}
    pos = resume_position(checkpoint)
    if pos is not None:
        names.update(dict.fromkeys(sorted({tp.topic for tp in (*pos.start, *pos.pending)})))
    names.update(dict.fromkeys(options.topics or ()))
    for tp in (options.explicit_starting_offsets or {}):
        names[tp.topic] = None
    nso = getattr(record, "next_starting_offsets", None)
    if nso:
        names.update(dict.fromkeys(sorted({tp.topic for tp in parse_offsets_json(nso)})))
    return list(names)


def identity_lookups(checkpoint: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
                    options: DeployOptions) -> dict[TopicPartition, int]:
    """Partitions whose identity must be checked by record timestamps, and the offset ``C`` to look up
    below: only where the lifecycle record cannot settle it (no record, or no topic id for that topic)
    and where a record below ``C`` can exist (``LS < C ≤ LE``). :func:`evaluate` expects the lookups'
    answers in ``timestamps``."""
    pos = resume_position(checkpoint)
    if pos is None or not pos.known or pos.reference_ts is None or cluster_mismatch(record, broker):
        return {}
    out: dict[TopicPartition, int] = {}
    for tp, c in sorted(pos.start.items()):
        info = broker.topics.get(tp.topic)
        if info is None or tp.partition >= info.partitions or recorded_topic_id(record, tp.topic, info):
            continue
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is not None and le is not None and ls < c <= le:
            out[tp] = c
    return out


def evaluate(checkpoint: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
             options: DeployOptions, timestamps: Mapping[TopicPartition, ProbedRecord] | None = None,
             previous: PreviousCheckpoint | None = None, group: GroupInfo | None = None,
             recent: RecentBatches | None = None) -> Verdict:
    """Judge whether starting the deploy on this checkpoint against this cluster is safe.

    ``timestamps`` holds the answers to :func:`identity_lookups` (missing entries are simply not
    evidence). ``previous``: a checkpoint of the same job beside this one (S29,
    :func:`~.previous.find_previous_checkpoint`), judged only when this one holds no batches and no
    reset carried offsets over. ``group``: the coordinator's view of ``options.kafka_group_id`` (S24).
    ``recent``: what the job's last batches held (S28; default: from ``checkpoint.history``, if read).
    Never raises for a bad state: every problem becomes a finding.
    """
    findings: list[Finding] = []
    now = options.now_ms if options.now_ms is not None else broker.sampled_at_ms
    findings += lease_findings(record, options, now)
    if options.kafka_group_id:
        findings.append(shared_group_finding(options.kafka_group_id, group))
    mismatch = cluster_mismatch(record, broker)
    if mismatch:
        findings.append(mismatch)
    findings += problem_findings(checkpoint)
    findings += runtime_findings(checkpoint, record, options.target_spark_version)
    findings += empty_kafka_findings(checkpoint)
    pos = resume_position(checkpoint)
    if pos is None:
        findings += new_query_findings(checkpoint, broker, record, options)
        if previous is not None and not getattr(record, "next_starting_offsets", None):
            # counted against where the previous checkpoint stopped, not against the whole topic
            findings = [f.with_counts({}) if f.code == "NO_CHECKPOINT" else f for f in findings]
            findings.append(previous_checkpoint_finding(previous, checkpoint.location, broker, options))
    else:
        findings += existing_checkpoint_option_findings(checkpoint, pos, record, options)
        if pos.known:
            if recent is None and checkpoint.history:
                recent = RecentBatches.of(checkpoint.history)
            findings += alignment_findings(pos, broker, record, options, timestamps or {}, bool(mismatch), recent)
    findings = with_query_counts(findings, pos, broker, options.idempotent_sink, options.target_spark_version)
    if not options.fail_on_data_loss:
        findings.append(fail_on_data_loss_finding(findings))
    return Verdict.of(apply_strict(findings, options), source="checkpoint", subject=checkpoint.location)


#: The name before "probe" was kept for the compatibility probe alone.
identity_probes = identity_lookups
