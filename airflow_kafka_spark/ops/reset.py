"""Reset a checkpoint to a new, exact Kafka position: modes modelled on ``kafka-consumer-groups --reset-offsets``.

The problem it solves (S21, S29, S12): a code change Spark cannot recover from (a new stateful
operator, a changed state schema, another source) forces a new checkpoint, and teams delete the
old one and restart with ``startingOffsets`` = latest (a gap) or earliest (everything again).
Spark's own answer is a new checkpoint *plus* an explicit ``startingOffsets`` JSON; this module
computes that JSON, proves it, and leaves the job ready to start there.

Modes (the position ``new`` of every partition of the subscribed topics):

* ``preserve`` — the end offsets of the last **committed** batch ``C``; a pending batch (planned,
  not committed) is read again, not skipped; partitions the checkpoint never saw start at their
  earliest offset (what Spark itself would do).
* ``earliest`` / ``latest`` — the log start / log end now (concrete numbers, not -2/-1: the next
  run starts exactly where the plan says, however long the deploy takes).
* ``to-datetime`` — the first offset whose timestamp is ≥ the time; partitions without such a
  record start at their end (said in the plan, never silently).
* ``shift-by N`` — ``C + N`` (negative: read again), clamped to the log, the clamp counted.
* ``to-offsets`` — explicit JSON (or a file); unnamed partitions keep ``C``, like
  ``kafka-consumer-groups --from-file``; a target outside the log is bad input.

Every reset: plans (``dry_run`` stops there and changes nothing), refuses a plan that skips
records unless ``accept_data_loss`` (recorded in the lifecycle history), takes a verified backup,
writes the journal (commit point), records the ``startingOffsets`` JSON as the lifecycle record's
``next_starting_offsets`` (written *before* the checkpoint moves: if the process dies in between,
the old checkpoint is still in place and Spark ignores startingOffsets), moves a file sink's
``_spark_metadata`` aside if asked (S20), and moves the old checkpoint aside — never deletes it —
leaving the location fresh.

File sinks (S20): a fresh checkpoint restarts at batch 0 and Spark's file sink silently skips
every batch id its ``_spark_metadata`` already holds. The default is to refuse with the fix; with
``sink_log="move-aside"`` the log moves to ``<output>/_spark_metadata.reset-<id>`` (the ``_``
prefix keeps Spark readers away from it). The old data files stay in ``<output>``, but the new
log does not list them: readers that go through the log see only the new run. The plan says so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import Location, exists, move_dir, open_location, os_reason
from airflow_kafka_spark.checkpoint.reader import CheckpointState, read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, parse_offsets_json
from airflow_kafka_spark.kafka.view import BrokerState, KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import (
    backup_checkpoint,
    check_locations,
    default_job_name,
    open_backup_root,
    running_reason,
    validate_job_name,
)
from airflow_kafka_spark.ops.journal import (
    Journal,
    finish_interrupted,
    interrupted_finding,
    new_operation_id,
    operation_lock,
)
from airflow_kafka_spark.ops.plan import BLOCK, INFO, WARN, OperationBlocked, PartitionMove, Plan, Severity

MODES = ("preserve", "earliest", "latest", "to-datetime", "shift-by", "to-offsets")
SINK_POLICIES = ("refuse", "move-aside")
SINK_LOG_DIR = "_spark_metadata"


# --------------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ResetRequest:
    """What the user asked for, validated (bad input fails here, before anything is read)."""

    mode: str
    to_datetime_ms: int | None = None
    shift_by: int | None = None
    to_offsets: PartitionOffsets | None = None
    topics: tuple[str, ...] | None = None         # the new run's subscription (None: the checkpoint's)
    sink_output: str | None = None                # the job's output path, to inspect a file sink's log
    sink_log: str = "refuse"
    accept_data_loss: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"reset mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode == "to-datetime" and self.to_datetime_ms is None:
            raise UserError("mode to-datetime needs a time, e.g. --to-datetime 2026-01-31T12:00:00Z")
        if self.mode == "shift-by" and self.shift_by is None:
            raise UserError("mode shift-by needs a number of records, e.g. --shift-by -500")
        if self.mode == "to-offsets" and not self.to_offsets:
            raise UserError("mode to-offsets needs offsets JSON or a file, e.g. --to-offsets '{\"orders\":{\"0\":42}}'")
        if self.sink_log not in SINK_POLICIES:
            raise UserError(f"sink log policy {self.sink_log!r} is not one of {', '.join(SINK_POLICIES)}")
        if self.topics is not None:
            names = tuple(dict.fromkeys(t.strip() for item in self.topics for t in str(item).split(",")
                                        if t.strip()))
            if not names:
                raise UserError("--topics is empty; name the topics the new run subscribes to")
            object.__setattr__(self, "topics", names)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "to_datetime_ms": self.to_datetime_ms, "shift_by": self.shift_by,
                "to_offsets": None if self.to_offsets is None else {str(k): v for k, v in self.to_offsets.items()},
                "topics": list(self.topics) if self.topics else None, "sink_output": self.sink_output,
                "sink_log": self.sink_log, "accept_data_loss": self.accept_data_loss}


def parse_datetime(text: str) -> int:
    """ISO-8601 (``2026-01-31T12:00:00Z``, ``...+02:00``; no zone = UTC) or epoch milliseconds -> ms."""
    s = str(text).strip()
    if s.isdigit():
        return int(s)
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{text!r} is not a time; use ISO-8601 like 2026-01-31T12:00:00Z or epoch milliseconds") \
            from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def parse_to_offsets(text_or_path: str) -> PartitionOffsets:
    """Offsets JSON given inline, or ``@file`` / a path to a file holding it."""
    s = str(text_or_path).strip()
    if s.startswith("@") or (not s.startswith("{") and s):
        path = Path(s[1:] if s.startswith("@") else s)
        try:
            s = path.read_text()
        except OSError as exc:
            raise UserError(f"cannot read offsets file {path}: {os_reason(exc)}") from None
    return parse_offsets_json(s, what="--to-offsets")


# --------------------------------------------------------------------------------------------------
# the plan (pure)
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SinkInfo:
    """What the job's output holds, as far as a reset cares (S20)."""

    output: str
    has_log: bool
    latest_batch_id: int | None


def old_positions(state: CheckpointState) -> tuple[PartitionOffsets, PartitionOffsets, str]:
    """(C, P, label): committed end offsets, pending end offsets ({} if none), and where C comes from.

    With nothing committed, C is where batch 0 starts (``sources/<n>/0``): a query that never
    committed anything has written nothing, so that is what was "processed up to".
    """
    committed = state.latest_committed
    pending = state.pending_batch
    initial: PartitionOffsets = {}
    for offs in state.initial_offsets.values():
        initial.update(offs)
    if committed is not None:
        c, label = dict(committed.kafka_offsets), f"offsets/{committed.batch_id} (last committed)"
    else:
        c, label = initial, "sources/<n>/0 (nothing committed yet)"
    p = dict(pending.kafka_offsets) if pending is not None else {}
    return c, p, label


def build_reset_plan(state: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
                     request: ResetRequest, *, timestamp_offsets: PartitionOffsets | None = None,
                     sink: SinkInfo | None = None) -> Plan:
    """Compute the reset plan: no I/O, so every mode and edge case is testable without a broker.

    ``timestamp_offsets`` are the answers of ``KafkaView.offsets_for_time`` for ``to-datetime``.
    """
    plan = Plan(kind="reset", subject=state.location)
    c, p, label = old_positions(state)
    pending = state.pending_batch
    ck_topics = sorted({tp.topic for tp in c} | {tp.topic for tp in p})
    topics = list(request.topics or ck_topics)
    plan.details.update({
        "mode": request.mode, "request": request.to_dict(), "old_query_id": state.query_id,
        "old_position": label, "last_committed_batch": state.latest_committed.batch_id
        if state.latest_committed else None, "pending_batch": pending.batch_id if pending else None,
        "topics": topics, "cluster_id": broker.cluster_id})
    if not topics:
        raise UserError(f"checkpoint {state.location} holds no Kafka offsets and no --topics were given: nothing to "
                        "reset; pass --topics and a mode such as earliest")
    if request.mode == "preserve" and not c and not p:
        raise UserError(f"checkpoint {state.location} has no committed batch and no starting offsets: there is no "
                        "position to preserve; use --mode earliest, latest or to-offsets")

    uses_old = request.mode in ("preserve", "shift-by", "to-offsets")
    _problems(plan, state, uses_old=uses_old)
    identity_broken = _identity(plan, broker, record, ck_topics, blocking=uses_old)

    subscribed: list[TopicPartition] = []
    for topic in topics:
        info = broker.topics.get(topic)
        if info is None:
            plan.add("TOPIC_NOT_FOUND", BLOCK,
                     f"topic {topic} does not exist on {broker.bootstrap_servers}: startingOffsets cannot name its "
                     "partitions", f"create {topic}, or pass --topics without it", topic=topic)
            continue
        subscribed += [TopicPartition(topic, i) for i in range(info.partitions)]
    gone = sorted(tp for tp in set(c) | set(p) if tp.topic in topics and tp not in set(subscribed))
    for tp in gone:
        plan.add("PARTITIONS_GONE", BLOCK,
                 f"{tp} is in the checkpoint but not on the cluster (topic recreated with fewer partitions?): its "
                 f"position {c.get(tp, p.get(tp))} cannot be carried over",
                 "reset with --mode earliest (the topic was recreated) or restore the partitions", tp=tp)
    dropped = sorted({tp.topic for tp in c} - set(topics))
    for topic in dropped:
        plan.add("TOPIC_UNSUBSCRIBED", INFO,
                 f"{topic} is in the checkpoint but not in --topics: the new run does not read it",
                 "", topic=topic)

    explicit = dict(request.to_offsets or {})
    unknown = sorted(tp for tp in explicit if tp not in set(subscribed))
    if unknown:
        raise UserError(f"--to-offsets names {', '.join(map(str, unknown[:5]))}, which the new run does not read "
                        f"(subscribed: {', '.join(topics)}); fix the JSON or --topics")

    for tp in sorted(subscribed):
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is None or le is None:
            plan.add("OFFSETS_UNAVAILABLE", BLOCK, f"{broker.bootstrap_servers} returned no log start/end for {tp}",
                     "check the partition's leader and retry", tp=tp)
            continue
        old = c.get(tp)
        pend = p.get(tp)
        if old is None and pend is not None:
            old = pend  # never-committed partition of a pending batch 0: nothing of it reached a commit
        move = _target(plan, request, tp, old, ls, le, explicit, timestamp_offsets or {})
        if move is None:
            continue
        new, source, note = move
        if identity_broken and tp.topic in identity_broken:
            note = (note + "; " if note else "") + "old position refers to an earlier incarnation of the topic"
            old = None
            pend = None
        plan.moves.append(PartitionMove(topic=tp.topic, partition=tp.partition, old=old, new=new, log_start=ls,
                                        log_end=le, pending_end=pend if pend is not None and old is not None
                                        and pend > old else None, source=source, note=note))

    _data_loss(plan, request)
    _pending(plan, pending)
    _sink(plan, request, sink)
    if not plan.blocked:
        plan.add("OK", INFO if plan.moves else WARN,
                 f"new run starts {len(plan.moves)} partition(s) at the planned offsets: {plan.backlog:,} records to "
                 f"read", "")
    return plan


def _problems(plan: Plan, state: CheckpointState, *, uses_old: bool) -> None:
    """Damage in the old checkpoint matters to a reset only where it hides the old position."""
    if state.commit_batch_ids and state.latest_committed is None:
        c = state.commit_batch_ids[-1]
        why = next((p.message for p in state.problems if p.path == f"offsets/{c}"), f"offsets/{c} is unreadable")
        plan.add("POSITION_UNKNOWN", BLOCK if uses_old else WARN,
                 f"the last committed batch {c} has no readable offsets ({why}): the old position is unknown, "
                 "so skipped/replayed counts cannot be computed",
                 "use --mode to-offsets with the position you know, or earliest / to-datetime")


def _identity(plan: Plan, broker: BrokerState, record: LifecycleRecord | None, topics: list[str], *,
              blocking: bool) -> set[str]:
    """Topics whose old offsets refer to another log (other cluster, recreated topic)."""
    broken: set[str] = set()
    if record is None:
        return broken
    sev = BLOCK if blocking else WARN
    if record.kafka_cluster_id and broker.cluster_id and record.kafka_cluster_id != broker.cluster_id:
        plan.add("CLUSTER_MISMATCH", sev,
                 f"the checkpoint's offsets were taken on Kafka cluster {record.kafka_cluster_id}, this is "
                 f"{broker.cluster_id}: they do not describe positions here (S06)",
                 "reset with --mode earliest, to-datetime or to-offsets against this cluster")
        return set(topics)
    for topic in topics:
        known = record.topics.get(topic)
        info = broker.topics.get(topic)
        if known and known.topic_id and info is not None and info.topic_id and known.topic_id != info.topic_id:
            plan.add("TOPIC_RESET", sev,
                     f"{topic} was deleted and recreated (topic id {known.topic_id} -> {info.topic_id}): the old "
                     "offsets point into a log that no longer exists (S03)",
                     "reset with --mode earliest (or to-datetime) for this topic", topic=topic)
            broken.add(topic)
    return broken


def _target(plan: Plan, request: ResetRequest, tp: TopicPartition, old: int | None, ls: int, le: int,
            explicit: PartitionOffsets, by_time: PartitionOffsets) -> tuple[int, str, str] | None:
    """(new, how, note) for one partition, or None when the plan blocks on it."""
    mode = request.mode
    if mode == "to-offsets" and tp in explicit:
        o = explicit[tp]
        o = ls if o == EARLIEST else le if o == LATEST else o
        if not ls <= o <= le:
            raise UserError(f"--to-offsets puts {tp} at {o:,}, outside its log [{ls:,}, {le:,}]; pick an offset in "
                            "that range (-2 = earliest, -1 = latest)")
        return o, "explicit", ""
    if mode == "earliest":
        return ls, "earliest", ""
    if mode == "latest":
        return le, "latest", ""
    if mode == "to-datetime":
        o = by_time.get(tp)
        if o is None or o < 0 or o >= le:
            return le, "to-datetime", "no record at or after the time: starts at the log end"
        return max(o, ls), "to-datetime", ""
    # preserve, shift-by, and to-offsets partitions not named: start from the committed position
    if old is None:
        return ls, "earliest", "new to the checkpoint: starts at its earliest offset, as Spark would"
    if mode == "shift-by":
        want = old + int(request.shift_by or 0)
        if want < ls:
            return ls, "shift-by", f"clamped to the log start (wanted {want:,})"
        if want > le:
            return le, "shift-by", f"clamped to the log end (wanted {want:,})"
        return want, "shift-by", ""
    how = "committed" if mode == "preserve" else "committed (not in --to-offsets)"
    if old < ls:
        lost = ls - old
        if request.accept_data_loss:
            return ls, how, f"{lost:,} records deleted by retention before they were read: starts at the log start"
        plan.add("OFFSET_BELOW_LOG_START", BLOCK,
                 f"{tp} was committed up to {old:,} but the log now starts at {ls:,}: {lost:,} records were deleted "
                 "before the query read them (S01)",
                 f"accept the loss (--accept-data-loss starts {tp} at {ls:,}) or restore the records", tp=tp,
                 records_lost=lost)
        return ls, how, f"{lost:,} records already deleted"
    if old > le:
        plan.add("OFFSET_AHEAD_OF_LOG_END", BLOCK,
                 f"{tp} was committed up to {old:,} but the log ends at {le:,}: the topic was recreated or truncated, "
                 "or this is another cluster (S02)",
                 "reset with --mode earliest or to-offsets against the current topic", tp=tp,
                 records_ahead=old - le)
        return None
    return old, how, ""


def _data_loss(plan: Plan, request: ResetRequest) -> None:
    skipped = plan.skipped
    if not skipped:
        return
    parts = sorted((m for m in plan.moves if m.skipped), key=lambda m: -m.skipped)
    shown = ", ".join(f"{m.tp} {m.skipped:,}" for m in parts[:3]) + (f" +{len(parts) - 3}" if len(parts) > 3 else "")
    if request.accept_data_loss:
        plan.add("DATA_LOSS_ACCEPTED", WARN,
                 f"the plan skips {skipped:,} records that were never committed ({shown}); accepted explicitly "
                 "(recorded in the lifecycle history)", "", records_skipped=skipped)
    else:
        plan.add("DATA_LOSS", BLOCK,
                 f"the plan skips {skipped:,} records that were never committed ({shown})",
                 "pass --accept-data-loss if skipping them is intended, or use --mode preserve",
                 records_skipped=skipped)


def _pending(plan: Plan, pending: Any) -> None:
    n = plan.pending_replay
    if pending is None or not n:
        return
    plan.add("PENDING_BATCH_REPLAY", WARN,
             f"batch {pending.batch_id} was planned but never committed: the new run reads its {n:,} records again "
             "(replayed, not skipped); if its output reached the sink before the query stopped, a non-idempotent "
             "sink (or one keyed by query id) gets up to that many duplicates",
             "nothing to do for an idempotent sink; otherwise expect the replay announced here",
             records_to_replay=n, batch_id=pending.batch_id)
    if plan.replayed:
        plan.add("REPLAY", WARN, f"the plan reads {plan.replayed:,} committed records again",
                 "expect duplicates in a non-idempotent sink", records_replayed=plan.replayed)


def _sink(plan: Plan, request: ResetRequest, sink: SinkInfo | None) -> None:
    if sink is None:
        plan.details["sink"] = {"inspected": False}
        plan.add("SINK_NOT_INSPECTED", INFO,
                 "the job's output was not inspected: if it writes with Spark's file sink (_spark_metadata), the "
                 "new run's first batches can be silently discarded (S20)",
                 "pass the output path (--sink-output) to have it checked")
        return
    plan.details["sink"] = {"inspected": True, "output": sink.output, "has_log": sink.has_log,
                            "latest_batch_id": sink.latest_batch_id, "policy": request.sink_log}
    if not sink.has_log or sink.latest_batch_id is None:
        plan.add("SINK_OK", INFO, f"{sink.output} has no file-sink log with batches: nothing remembers batch ids", "")
        return
    x = sink.latest_batch_id
    if request.sink_log == "refuse":
        plan.add("SINK_WILL_DISCARD_BATCHES", BLOCK,
                 f"{sink.output}/{SINK_LOG_DIR} holds batches up to {x}; the new checkpoint restarts at batch 0 and "
                 f"Spark's file sink would silently discard batches 0-{x} of the new run (S20)",
                 "point the new run at a new output path (then omit --sink-output), or pass --sink-log move-aside "
                 "to move the sink log aside with the checkpoint", latest_sink_batch=x)
        return
    plan.add("SINK_LOG_MOVED_ASIDE", WARN,
             f"{sink.output}/{SINK_LOG_DIR} (batches up to {x}) is moved aside with the checkpoint, so the new run's "
             "batches are written; the old data files stay in the output folder but the new log does not list "
             "them: readers that go through the sink log see only the new run",
             "read the old files through the moved log, or give the new run a new output path",
             latest_sink_batch=x)


# --------------------------------------------------------------------------------------------------
# planning with I/O
# --------------------------------------------------------------------------------------------------

def plan_reset(checkpoint_location: str, kafka_config: dict, request: ResetRequest, *,
               storage_options: dict | None = None, kafka_timeout: float = 10.0) -> Plan:
    """Read the checkpoint, the lifecycle record, Kafka and the sink, and build the plan. Changes nothing."""
    plan, _, _ = _plan_with_state(checkpoint_location, kafka_config, request, storage_options=storage_options,
                                  kafka_timeout=kafka_timeout)
    return plan


def _plan_with_state(checkpoint_location: str, kafka_config: dict, request: ResetRequest, *,
                     storage_options: dict | None, kafka_timeout: float
                     ) -> tuple[Plan, CheckpointState, LifecycleRecord | None]:
    state = read_checkpoint(checkpoint_location, storage_options=storage_options)
    if not state.exists:
        raise UserError(f"checkpoint location {checkpoint_location} does not exist: there is nothing to reset; pass "
                        "the folder that holds offsets/, commits/ and metadata")
    if not (state.offset_batch_ids or state.commit_batch_ids or state.initial_offsets or state.query_id):
        raise UserError(f"{checkpoint_location} is not a Structured Streaming checkpoint (no metadata, offsets/ or "
                        "commits/): nothing to reset")
    record = LifecycleRecord.load(checkpoint_location)
    c, p, _ = old_positions(state)
    topics = list(dict.fromkeys([*(request.topics or ()), *sorted({tp.topic for tp in [*c, *p]})]))
    sink = read_sink_info(request.sink_output, storage_options) if request.sink_output else None
    with KafkaView(kafka_config, timeout=kafka_timeout) as view:
        broker = view.broker_state(topics)
        by_time = None
        if request.mode == "to-datetime":
            wanted = [t for t in (request.topics or topics) if t in broker.topics]
            by_time = view.offsets_for_time(wanted, int(request.to_datetime_ms or 0)) if wanted else {}
    plan = build_reset_plan(state, broker, record, request, timestamp_offsets=by_time, sink=sink)
    return plan, state, record


def read_sink_info(output: str, storage_options: dict | None) -> SinkInfo:
    """Whether ``output`` has a file-sink log and its newest batch (S20)."""
    from airflow_kafka_spark.checkpoint.sink_log import read_sink_log

    loc = open_location(output, storage_options, what="sink output")
    if not exists(loc):
        return SinkInfo(output=output, has_log=False, latest_batch_id=None)
    log = read_sink_log(output, storage_options)
    return SinkInfo(output=output, has_log=log.exists, latest_batch_id=log.latest_batch_id)


# --------------------------------------------------------------------------------------------------
# execution
# --------------------------------------------------------------------------------------------------

@dataclass
class ResetResult:
    plan: Plan
    dry_run: bool
    operation_id: str | None = None
    backup_id: str | None = None
    aside_location: str | None = None
    sink_aside_location: str | None = None
    starting_offsets: str | None = None
    resumed: bool = False
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "operation_id": self.operation_id, "backup_id": self.backup_id,
                "aside_location": self.aside_location, "sink_aside_location": self.sink_aside_location,
                "starting_offsets": self.starting_offsets, "resumed": self.resumed, "notes": self.notes,
                "plan": self.plan.to_dict()}


def reset_checkpoint(checkpoint_location: str, backup_root: str | None, kafka_config: dict, request: ResetRequest,
                     *, job: str | None = None, dry_run: bool = False, actor: str | None = None,
                     storage_options: dict | None = None, backup_storage_options: dict | None = None,
                     kafka_timeout: float = 10.0, backup_settle_s: float = 2.0) -> ResetResult:
    """Plan and (unless ``dry_run``) execute a reset; see the module doc for the steps and their order.

    Raises :class:`OperationBlocked` (exit 3) when the plan blocks, the job is running, or the
    checkpoint moved while planning; :class:`UserError` (exit 2) for bad input. Either way nothing
    was changed. An interrupted earlier reset/restore of this location is finished first.
    """
    if dry_run:
        return _reset(checkpoint_location, backup_root, kafka_config, request, job=job, dry_run=True, actor=actor,
                      storage_options=storage_options, backup_storage_options=backup_storage_options,
                      kafka_timeout=kafka_timeout, backup_settle_s=backup_settle_s)
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    with operation_lock(ck):
        return _reset(checkpoint_location, backup_root, kafka_config, request, job=job, dry_run=False, actor=actor,
                      storage_options=storage_options, backup_storage_options=backup_storage_options,
                      kafka_timeout=kafka_timeout, backup_settle_s=backup_settle_s)


def _reset(checkpoint_location: str, backup_root: str | None, kafka_config: dict, request: ResetRequest, *,
           job: str | None, dry_run: bool, actor: str | None, storage_options: dict | None,
           backup_storage_options: dict | None, kafka_timeout: float, backup_settle_s: float) -> ResetResult:
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    if not dry_run:
        resumed = finish_interrupted(checkpoint_location, storage_options=storage_options)
        if resumed is not None:
            return _resumed_result(resumed, request)
    if backup_root is None and not dry_run:
        raise UserError("a reset takes a verified backup first: pass a backup root (--backup-root)")
    root = open_backup_root(backup_root, backup_storage_options) if backup_root else None
    if root is not None:
        check_locations(ck, root)
    record = LifecycleRecord.load(checkpoint_location)
    job = job or default_job_name(checkpoint_location, record)
    validate_job_name(job)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r}, not {job!r}")
    running = running_reason(record)
    if running:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before resetting its "
                               "checkpoint", code="QUERY_RUNNING")

    plan, state, record = _plan_with_state(checkpoint_location, kafka_config, request,
                                           storage_options=storage_options, kafka_timeout=kafka_timeout)
    op_id = new_operation_id()
    stamp = op_id
    aside = ck.sibling(f".reset-{stamp}")
    sink_aside = None
    sink_info = plan.details.get("sink") or {}
    if request.sink_output and request.sink_log == "move-aside" and sink_info.get("has_log"):
        sink_aside = open_location(request.sink_output, storage_options).child(f"{SINK_LOG_DIR}.reset-{stamp}")
    plan.actions = [f"back up {checkpoint_location} to {backup_root} (verified before anything moves)",
                    f"record startingOffsets in the lifecycle record ({_short(plan.starting_offsets_json)})"]
    if sink_aside is not None:
        plan.actions.append(f"move {request.sink_output}/{SINK_LOG_DIR} to {sink_aside.url}")
    plan.actions.append(f"move {checkpoint_location} to {aside.url} (kept, never deleted); the location is left "
                        "empty for the new run")
    result = ResetResult(plan=plan, dry_run=dry_run, starting_offsets=plan.starting_offsets_json,
                         aside_location=aside.url, sink_aside_location=sink_aside.url if sink_aside else None)
    if dry_run:
        interrupted = interrupted_finding(checkpoint_location, storage_options)
        if interrupted is not None:   # the real run would finish (or refuse) that operation first
            plan.add(interrupted.code, interrupted.severity, interrupted.message, interrupted.fix)
        return result
    if plan.blocked:
        worst = plan.blocking[0]
        raise OperationBlocked(f"reset refused: {worst.code} — {worst.message}; fix: {worst.fix}", code=worst.code,
                               details=result.to_dict())

    bk = backup_checkpoint(checkpoint_location, str(backup_root), job=job,
                           reason=f"before reset --mode {request.mode} ({op_id})", storage_options=storage_options,
                           backup_storage_options=backup_storage_options, settle_s=backup_settle_s)
    faults.crash_point("reset.backed_up")
    again = read_checkpoint(checkpoint_location, storage_options=storage_options)
    if (again.offset_batch_ids, again.commit_batch_ids) != (state.offset_batch_ids, state.commit_batch_ids):
        raise OperationBlocked(f"checkpoint {checkpoint_location} changed while the reset was planned: is the job "
                               "running? Stop it and re-run the reset", code="QUERY_RUNNING")
    result.backup_id = bk.backup_id
    result.operation_id = op_id
    payload = {
        "job": job, "actor": actor, "request": request.to_dict(), "backup_root": backup_root,
        "backup_id": bk.backup_id, "aside": aside.url, "sink_output": request.sink_output,
        "sink_aside": sink_aside.url if sink_aside else None, "starting_offsets": plan.starting_offsets_json,
        "old_query_id": state.query_id, "skipped": plan.skipped, "replayed": plan.replayed,
        "pending_replay": plan.pending_replay, "plan": plan.to_dict(),
    }
    journal = Journal.begin(ck, "reset", op_id, payload)
    faults.crash_point("reset.journaled")
    roll_forward(journal, ck, storage_options=storage_options)
    return result


def roll_forward(journal: Journal, ck: Location, *, storage_options: dict | None = None) -> dict[str, Any]:
    """Finish a journaled reset; every step is idempotent, so this is also the crash recovery."""
    pl = journal.payload
    op_id = journal.operation_id
    if not journal.is_done("record"):
        record = LifecycleRecord.load(ck.url)
        if record is None:
            record = LifecycleRecord.create(pl["job"], ck.url)
        if not any((e.get("details") or {}).get("operation_id") == op_id for e in record.history
                   if e.get("event") == "checkpoint_reset"):
            record.set_next_starting_offsets(pl["starting_offsets"], actor=pl.get("actor"))
            req = pl["request"]
            if pl.get("skipped") and req.get("accept_data_loss"):
                record.add_event("data_loss_accepted", actor=pl.get("actor"), operation_id=op_id,
                                 records_skipped=pl["skipped"], mode=req.get("mode"))
            record.add_event("checkpoint_reset", actor=pl.get("actor"), operation_id=op_id, mode=req.get("mode"),
                             backup_id=pl["backup_id"], backup_root=pl["backup_root"], moved_to=pl["aside"],
                             sink_log_moved_to=pl.get("sink_aside"), starting_offsets=pl["starting_offsets"],
                             old_query_id=pl.get("old_query_id"), records_skipped=pl.get("skipped"),
                             records_replayed=pl.get("replayed"), pending_replay=pl.get("pending_replay"),
                             accept_data_loss=bool(req.get("accept_data_loss")))
            record.save()
        journal.mark("record")
        faults.crash_point("reset.recorded")
    if pl.get("sink_aside") and not journal.is_done("sink"):
        out = open_location(pl["sink_output"], storage_options)
        src = out.child(SINK_LOG_DIR)
        dst = open_location(pl["sink_aside"], storage_options)
        if exists(src):
            if exists(dst) and src.local:
                raise UserError(f"both {src.url} and {dst.url} exist: a new run wrote to the sink while a reset was "
                                "interrupted; inspect them before re-running")
            move_dir(src, dst)
        journal.mark("sink")
        faults.crash_point("reset.sink_moved")
    if not journal.is_done("aside"):
        aside = open_location(pl["aside"], storage_options)
        if exists(ck):
            if exists(aside) and ck.local:
                raise UserError(f"both {ck.url} and {aside.url} exist: something wrote to the location while a reset "
                                "was interrupted; inspect them before re-running")
            move_dir(ck, aside)
        journal.mark("aside")
        faults.crash_point("reset.moved")
    journal.finish()
    return {"op": "reset", "operation_id": op_id, "payload": pl}


def _resumed_result(done: dict[str, Any], request: ResetRequest) -> ResetResult:
    pl = done["payload"]
    from airflow_kafka_spark.verdict.findings import Finding

    plan = Plan(kind=done["op"], subject=str(pl.get("aside") or ""))
    doc = pl.get("plan") or {}
    for m in doc.get("moves", []):
        plan.moves.append(PartitionMove(topic=m["topic"], partition=m["partition"], old=m["old"], new=m["new"],
                                        log_start=m["log_start"], log_end=m["log_end"], pending_end=m["pending_end"],
                                        source=m.get("source", ""), note=m.get("note", "")))
    for f in doc.get("findings", []):
        with contextlib.suppress(KeyError, ValueError):
            plan.findings.append(Finding(f["code"], Severity(f["severity"]), topic=f.get("topic"),
                                         partition=f.get("partition"), numbers=f.get("numbers") or {},
                                         message=f.get("message", ""), fix=f.get("fix", "")))
    plan.details = dict(doc.get("details") or {})
    result = ResetResult(plan=plan, dry_run=False, operation_id=done["operation_id"], backup_id=pl.get("backup_id"),
                         aside_location=pl.get("aside"), sink_aside_location=pl.get("sink_aside"),
                         starting_offsets=pl.get("starting_offsets"), resumed=True)
    if done["op"] != "reset" or (pl.get("request") or {}).get("mode") != request.mode:
        raise OperationBlocked(
            f"finished an interrupted {done['op']} ({done['operation_id']}) of this checkpoint first; the "
            f"requested reset --mode {request.mode} was not applied: re-run it if it is still wanted",
            code="INTERRUPTED_OPERATION_FINISHED", details=result.to_dict())
    result.notes.append(f"resumed interrupted reset {done['operation_id']} and finished it")
    return result


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
