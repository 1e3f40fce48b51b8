"""The plan of a restore: a staged backup judged against the cluster as it is now, before anything moves.

What only a rollback has, beyond the pre-deploy verdict on the staged copy: how many records the
restored query reads again (per partition, current position minus the backup's), whether the
backup is ahead of the current checkpoint, whether its state can be loaded, and whether a file
sink already holds batch ids the restored query would re-run (``SINK_AHEAD_OF_CHECKPOINT``, S19).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from airflow_kafka_spark._util.fs import Location
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.ops.options import DEFAULT_RUN, NO_SINK, RunOptions, SinkFacts
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.ops.reset import read_sink_info
from airflow_kafka_spark.ops.reset_plan import old_positions
from airflow_kafka_spark.verdict.evaluate import evaluate, identity_lookups
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, WARN, Verdict
from airflow_kafka_spark.verdict.options import DeployOptions


@dataclass(frozen=True)
class RestoreTarget:
    """A restore's inputs, checked (``ops.restore.open_restore``): the checkpoint, the backup root, the manifest (seal
    checked), the lifecycle record, the job, the seal key."""

    ck: Location
    root: Location
    manifest: Manifest
    record: LifecycleRecord | None
    job: str
    seal_key: bytes | None


def judge_restore(target: RestoreTarget, current: CheckpointState, staged: CheckpointState, kafka_config: dict, *,
                  sink: SinkFacts = NO_SINK, run: RunOptions = DEFAULT_RUN) -> tuple[Plan, Verdict]:
    """The restore's plan and verdict: the staged backup judged against Kafka now, plus the replay.

    ``target`` gives the manifest, the lifecycle record and the job (``ops.restore.open_restore``);
    ``run`` the checkpoint store's options and Kafka's timeout. Reads Kafka (and the sink's log when
    ``sink.output`` is given); changes nothing.
    """
    manifest = target.manifest
    b_c, b_p, b_label = old_positions(staged)
    cur_c, cur_p, _ = old_positions(current) if current.exists else ({}, {}, "")
    topics = sorted({tp.topic for tp in [*b_c, *b_p, *cur_c]} | set(target.record.topics if target.record else ()))
    options = DeployOptions(topics=tuple(sorted({tp.topic for tp in [*b_c, *b_p]})) or None,
                            idempotent_sink=sink.idempotent)
    broker, verdict = _verdict_now(staged, target.record, options, KafkaView(kafka_config, timeout=run.kafka_timeout),
                                   topics, reference=b_c or None)
    verdict = replace(verdict, subject=current.location)

    plan = Plan(kind="restore", subject=current.location)
    plan.details.update({"backup_id": manifest.backup_id, "backup_batch": manifest.last_committed_batch,
                         "backup_pending_batch": manifest.pending_batch, "backup_created_at": manifest.created_at,
                         "backup_query_id": manifest.query_id, "current_query_id": current.query_id,
                         "current_batch": current.latest_committed.batch_id if current.latest_committed else None,
                         "restart_position": b_label, "job": target.job})
    plan.findings.extend(verdict.findings)
    # The replay a rollback causes: what the current checkpoint already committed (and a pending batch
    # of it that may have reached the sink) beyond the backup's position.
    for tp in sorted(set(b_c) | set(cur_c)):
        new = b_c.get(tp, cur_c.get(tp))
        if new is None:
            continue
        old = cur_c.get(tp) if current.exists else None
        plan.moves.append(PartitionMove(
            topic=tp.topic, partition=tp.partition, old=old if old is not None else new, new=new,
            log_start=broker.earliest.get(tp), log_end=broker.latest.get(tp),
            pending_end=cur_p.get(tp) if cur_p.get(tp) is not None and old is not None and cur_p[tp] > old else None,
            source="backup", note="" if old is not None else "not in the current checkpoint"))
    _add_replay_findings(plan, manifest, current, sink.idempotent)
    if sink.output:
        _add_sink_finding(plan, manifest, sink.output, run.stores.checkpoint)
    return plan, verdict


def _verdict_now(staged: CheckpointState, record: LifecycleRecord | None, options: DeployOptions, view: KafkaView,
                 topics: list[str], *, reference: PartitionOffsets | None) -> tuple[BrokerState, Verdict]:
    """The broker now (``topics``: the backup's, the current checkpoint's and the record's) and the pre-deploy
    verdict on the staged copy, with the last record before each position the identity checks ask for;
    ``view`` is closed here."""
    with view:
        broker = view.broker_state(topics, reference=reference)
        lookups = identity_lookups(staged, broker, record, options)
        timestamps = {}
        for tp, c in lookups.items():
            with contextlib.suppress(UserError):
                timestamps[tp] = view.last_record_before(tp, c)
    return broker, evaluate(staged, broker, record, options, timestamps)


def _add_replay_findings(plan: Plan, manifest: Manifest, current: CheckpointState, idempotent_sink: bool | None
                         ) -> None:
    """What rolling back costs, from the plan's moves: the records read again, the records skipped, a query id
    that changes, a missing current checkpoint, a backup whose state cannot be loaded."""
    replay = plan.replayed + plan.pending_replay
    if manifest.query_id and current.query_id and manifest.query_id != current.query_id:
        plan.add("QUERY_ID_CHANGES", INFO,
                 f"the backup is of query {manifest.query_id}, the current checkpoint is query {current.query_id} "
                 "(a rollback across a reset): sinks keyed by query id see the restored query as the old one",
                 "", )
    if not current.exists:
        plan.add("NO_CURRENT_CHECKPOINT", WARN,
                 f"nothing at {current.location}: the replay relative to what the sink already has is unknown",
                 "compare the sink with the backup's offsets before starting")
    elif replay:
        committed_part = plan.replayed
        pending_part = plan.pending_replay
        what = [f"{committed_part:,} records the current checkpoint committed after the backup (batch "
                f"{manifest.last_committed_batch} -> {plan.details['current_batch']})"] if committed_part else []
        if pending_part:
            what.append(f"{pending_part:,} records of the current checkpoint's uncommitted batch (duplicates only if "
                        "its output reached the sink)")
        sev = INFO if idempotent_sink else WARN
        plan.add("REPLAY", sev,
                 "the restored query re-reads " + " and ".join(what)
                 + ("; the sink is idempotent by batch id, so replayed batches overwrite their earlier output (if "
                    "the replay is cut into fewer batches than the first run was, the earlier output of the "
                    f"batches beyond stays: up to {replay:,} duplicates)" if idempotent_sink else
                    f": a non-idempotent sink gets up to {replay:,} duplicates"),
                 "" if idempotent_sink else "use an idempotent sink, or accept the duplicates",
                 records_replayed=replay)
    if current.exists and plan.skipped:
        plan.add("BACKUP_AHEAD_OF_CURRENT", WARN,
                 f"the backup is {plan.skipped:,} records ahead of the current checkpoint: the restored query does "
                 "not read them again; they were processed by the run that made the backup (if that run's output "
                 "is not in the sink any more, they are missing there)",
                 "check the sink holds the backup run's output, or restore an older backup",
                 records_ahead=plan.skipped)
    if manifest.state.get("has_state") and not manifest.state.get("complete", True):
        plan.add("BACKUP_STATE_INCOMPLETE", BLOCK,
                 f"the backup's state cannot be loaded for version {manifest.state.get('version')}: "
                 f"{(manifest.problems or ['state files missing'])[0]}",
                 "restore an older backup whose state is complete, or reset instead")


def _add_sink_finding(plan: Plan, manifest: Manifest, sink_output: str, storage_options: dict | None) -> None:
    """A BLOCK when the file sink's log already holds batch ids beyond the backup's (S19/S20)."""
    sink = read_sink_info(sink_output, storage_options)
    last_batch = manifest.pending_batch if manifest.pending_batch is not None else manifest.last_committed_batch
    ahead = sink.latest_batch_id is not None and (last_batch is None or sink.latest_batch_id > last_batch)
    if sink.has_log and ahead:
        plan.add("SINK_AHEAD_OF_CHECKPOINT", BLOCK,
                 f"{sink_output}/_spark_metadata holds batches up to {sink.latest_batch_id} > backup batch "
                 f"{last_batch}: the file sink would silently skip the restored query's batches "
                 f"{(last_batch or -1) + 1}-{sink.latest_batch_id}, and records beyond their old ranges with "
                 "them (S19/S20)",
                 "restore a newer backup, or reset with --sink-log move-aside instead",
                 latest_sink_batch=sink.latest_batch_id, backup_batch=last_batch)
