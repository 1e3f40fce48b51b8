"""The validate flow: read the checkpoint, Kafka and the lifecycle record, then ask :mod:`verdict`.

Why a separate module: :func:`airflow_kafka_spark.verdict.evaluate.evaluate` is pure so it can be tested
without a broker; this is the thin I/O shell around it that the CLI, the Airflow operator and the
safe-restart DAG share. Everything a user can get wrong here (a path that does not exist, a
file instead of a folder, an unreachable broker, a corrupt record) ends as one
:class:`~airflow_kafka_spark.errors.UserError` line, never a traceback.

Side effect, on purpose: after a verdict that is not BLOCK, the cluster id and topic ids seen now
are saved to the lifecycle record beside the checkpoint: the identity "recorded by the product when
the checkpoint was last validated". That is what lets the next validation catch a recreated topic
(S03) or another cluster (S04) for certain instead of by timestamps (docs/scenarios.md,
docs/findings.md ``TOPIC_RESET``). A
BLOCK is never recorded as the new baseline. Pass ``record_identity=False`` for a read-only check.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.position import resume_offsets
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState, GroupInfo
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import record_location
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import default_job_name, validate_job_name
from airflow_kafka_spark.verdict.evaluate import evaluate, identity_lookups, subscribed_topics
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, Finding, Verdict
from airflow_kafka_spark.verdict.first_batch import read_recent_batches
from airflow_kafka_spark.verdict.group import evaluate_group
from airflow_kafka_spark.verdict.interrupted import interrupted_finding
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.partition_findings import ProbedRecord
from airflow_kafka_spark.verdict.previous import find_previous_checkpoint
from airflow_kafka_spark.verdict.query_checks import problem_findings

log = logging.getLogger(__name__)


def validate(checkpoint_location: str | None = None, group_id: str | None = None,
             kafka_config: Mapping[str, Any] | None = None, options: DeployOptions | None = None,
             lifecycle_location: str | None = None, storage_options: dict | None = None, *,
             timeout: float = 10.0, record_identity: bool = True, job_name: str | None = None,
             probe_budget_s: float | None = None, view: KafkaView | None = None) -> Verdict:
    """Validate a checkpoint (or a consumer group's offsets) against Kafka for the deploy ``options``.

    Exactly one of ``checkpoint_location`` and ``group_id``. ``kafka_config`` is the librdkafka dict
    (the Kafka connection's extra). ``lifecycle_location`` defaults to the record beside the
    checkpoint. ``timeout`` bounds each Kafka request; ``probe_budget_s`` (default ``timeout``) bounds
    the record-timestamp lookups of the identity heuristic in total. ``view`` lets callers (tests,
    the S26 seam) pass their own :class:`KafkaView`.
    """
    if (checkpoint_location is None) == (group_id is None):
        raise UserError("give exactly one offset source: a checkpoint location or a consumer group id")
    if kafka_config is None and view is None:
        raise UserError("no Kafka configuration: give at least bootstrap.servers")
    options = options or DeployOptions()
    if job_name is not None:
        validate_job_name(job_name)   # the one job-name rule: "../../etc" never reaches the record
    own_view = view is None
    kafka = view or KafkaView(dict(kafka_config or {}), timeout=timeout)
    try:
        if group_id is not None:
            return _validate_group(kafka, group_id, options)
        return _validate_checkpoint(kafka, str(checkpoint_location), options, lifecycle_location,
                                    storage_options, record_identity=record_identity, job_name=job_name,
                                    probe_budget_s=timeout if probe_budget_s is None else probe_budget_s)
    finally:
        if own_view:
            kafka.close()


# --------------------------------------------------------------------------------------------------


def _validate_group(kafka: KafkaView, group_id: str, options: DeployOptions) -> Verdict:
    if not group_id.strip():
        raise UserError("consumer group id is empty")
    offsets = kafka.group_offsets(group_id, list(options.topics) if options.topics else None)
    topics = list(options.topics or sorted({tp.topic for tp in offsets}))
    broker = kafka.broker_state(topics, reference=offsets)
    return evaluate_group(offsets, broker, options, group_id=group_id)


def _validate_checkpoint(kafka: KafkaView, location: str, options: DeployOptions,
                         lifecycle_location: str | None, storage_options: dict | None, *,
                         record_identity: bool, job_name: str | None, probe_budget_s: float) -> Verdict:
    checkpoint = read_checkpoint(location, storage_options=storage_options)
    interrupted = interrupted_finding(location, storage_options)
    if interrupted is not None and not checkpoint.exists:
        return Verdict.of([interrupted], subject=location)   # e.g. killed right after moving it aside
    if lifecycle_location is None and _record_place(location) is None:
        record_identity = False   # e.g. a bucket root: nowhere beside it to keep a record
        record = None
    else:
        record = LifecycleRecord.load(lifecycle_location or location, storage_options=storage_options)
    if not checkpoint.exists and checkpoint.legacy_escaped:
        # Spark 3+ refuses to start here whatever the deploy means (a new query too): a BLOCK naming
        # Spark's fix, not "does not exist" (checkpoint/escaped.py).
        return Verdict.of(problem_findings(checkpoint), subject=location)
    if not checkpoint.exists and not options.expect_new_checkpoint \
            and not (record is not None and record.next_starting_offsets):
        raise UserError(f"checkpoint location {location} does not exist; check the path, or declare that "
                        "this deploy starts a new query (--new-checkpoint / expect_new_checkpoint=True)")
    topics = subscribed_topics(checkpoint, record, options)
    previous = None
    if not checkpoint.offset_batch_ids and not (record is not None and record.next_starting_offsets):
        previous = find_previous_checkpoint(location, storage_options, job_name or getattr(record, "job_name", None),
                                            int(time.time() * 1000))
        if previous is not None:
            topics += [t for t in dict.fromkeys(tp.topic for tp in previous.position) if t not in topics]
    start = resume_offsets(checkpoint)
    broker = kafka.broker_state(topics, reference=start or None)
    timestamps, unprobed = _lookup_identity(kafka, checkpoint, broker, record, options, probe_budget_s)
    # The job's recent batch sizes only size an unlimited first batch (S28): not read under a rate
    # limit, nor when no partition's log end is past the position (no backlog, no first batch to size).
    recent = None
    if options.max_offsets_per_trigger is None and any(o > start.get(tp, -1) for tp, o in broker.latest.items()):
        recent = read_recent_batches(checkpoint, storage_options)
    verdict = evaluate(checkpoint, broker, record, options, timestamps, previous=previous,
                       group=_group(kafka, options.kafka_group_id), recent=recent)
    extra: list[Finding] = [interrupted] if interrupted is not None else []
    if unprobed:
        shown = ", ".join(map(str, unprobed[:5])) + (f" +{len(unprobed) - 5}" if len(unprobed) > 5 else "")
        extra.append(Finding(
            "IDENTITY_UNVERIFIED", INFO, numbers={"partitions": len(unprobed)},
            message=(f"no lifecycle record of the topic ids and no readable record below the checkpoint for "
                     f"{shown}: a recreated topic there could not be ruled out"),
            fix="keep the lifecycle record beside the checkpoint (validation writes it) so topic ids decide"))
    if record_identity and checkpoint.exists and verdict.severity != BLOCK:
        problem = _record_identity(record, broker, location, lifecycle_location, job_name, storage_options)
        if problem:
            extra.append(Finding("RECORD_NOT_WRITTEN", INFO, message=problem,
                                 fix="make the folder beside the checkpoint writable, or pass --no-record"))
    return verdict.with_findings(extra) if extra else verdict


def _group(kafka: KafkaView, group_id: str | None) -> GroupInfo | None:
    """The coordinator's view of the deploy's kafka.group.id (S24); None if not set or not answered."""
    if not group_id:
        return None
    try:
        return kafka.describe_group(group_id)
    except UserError as exc:
        log.warning("consumer group %s not described: %s", group_id, exc)
        return None


def _lookup_identity(kafka: KafkaView, checkpoint: CheckpointState, broker: BrokerState,
                    record: LifecycleRecord | None, options: DeployOptions, budget_s: float
                    ) -> tuple[dict[TopicPartition, ProbedRecord], list[TopicPartition]]:
    """Read the last record below ``C`` where only timestamps can tell a recreated topic (no lifecycle record
    yet: the identity heuristic of :func:`~airflow_kafka_spark.verdict.evaluate.identity_lookups`).

    All partitions are read by one lookup consumer (``last_records_before``) until the budget is
    spent; partitions not answered by then are reported as unverified rather than slowing the
    deploy down.
    """
    wanted = identity_lookups(checkpoint, broker, record, options)
    found: dict[TopicPartition, ProbedRecord] = {}
    if wanted:
        bounds = {tp: (broker.earliest[tp], broker.latest[tp]) for tp in wanted
                  if tp in broker.earliest and tp in broker.latest}
        found.update(kafka.last_records_before(wanted, deadline=time.monotonic() + max(budget_s, 0.0),
                                               bounds=bounds))
    unprobed = [tp for tp in wanted if found.get(tp) is None or found[tp][1] is None]
    return found, unprobed


def _record_identity(record: LifecycleRecord | None, broker: BrokerState, location: str,
                     lifecycle_location: str | None, job_name: str | None,
                     storage_options: dict | None = None) -> str | None:
    """Save cluster id and topic ids seen now; return why it failed (the verdict stands either way)."""
    try:
        if record is None:
            record = LifecycleRecord.create(job_name or _default_job_name(location), location,
                                            location=lifecycle_location, storage_options=storage_options)
        topics: dict[str, Any] = dict(record.topics)
        topics.update(broker.topics)
        changed = (record.kafka_cluster_id != broker.cluster_id
                   or any(getattr(record.topics.get(n), "topic_id", None) != t.topic_id
                          or getattr(record.topics.get(n), "partitions", None) != t.partitions
                          for n, t in broker.topics.items()))
        if not changed:
            return None
        previous = record.kafka_cluster_id
        record.set_kafka_identity(broker.cluster_id, topics)
        record.add_event(LifecycleEvent.KAFKA_IDENTITY_RECORDED, actor="validate", cluster_id=broker.cluster_id,
                         previous_cluster_id=previous,
                         topic_ids={n: t.topic_id for n, t in sorted(broker.topics.items())})
        record.save()
        return None
    except UserError as exc:
        log.warning("lifecycle record not written: %s", exc)
        return f"the Kafka identity was not recorded: {exc}"


def _record_place(location: str) -> str | None:
    """Where the record beside ``location`` lives, or None if there is no folder to put it in."""
    try:
        return record_location(location)
    except UserError:
        return None


def _default_job_name(location: str) -> str:
    """A job name for a record created by validation alone: the checkpoint folder's name."""
    return default_job_name(location)   # cleaned to the one job-name rule
