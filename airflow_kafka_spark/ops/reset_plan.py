"""The plan of a reset (pure): modes modelled on ``kafka-consumer-groups --reset-offsets``.

The problem it solves (S21, S29, S12): a code change Spark cannot recover from (a new stateful
operator, a changed state schema, another source) forces a new checkpoint, and teams delete the
old one and restart with ``startingOffsets`` = latest (a gap) or earliest (everything again).
Spark's own answer is a new checkpoint *plus* an explicit ``startingOffsets`` JSON; this module
computes that JSON and proves it; ``ops.reset`` executes the plan and leaves the job ready to start there.

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

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_kafka_spark._util.fs import os_reason
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.position import NOTHING_COMMITTED, resume_position
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, parse_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.modes import ResetMode, SinkLogPolicy
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.ops.reset_start import add_start_notes
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, WARN

SINK_LOG_DIR = "_spark_metadata"


@dataclass(frozen=True)
class ResetRequest:
    """What the user asked for, validated (bad input fails here, before anything is read)."""

    mode: ResetMode
    to_datetime_ms: int | None = None
    shift_by: int | None = None
    to_offsets: PartitionOffsets | None = None
    topics: tuple[str, ...] | None = None         # the new run's subscription (None: the checkpoint's)
    sink_output: str | None = None                # the job's output path, to inspect a file sink's log
    sink_log: SinkLogPolicy = SinkLogPolicy.REFUSE
    accept_data_loss: bool = False
    batch_keyed_sink: bool = False                # the job's output is keyed by batch id alone (Sink.BATCH_KEYED)
    fresh_backup: bool = False                    # never adopt the newest backup (ops.backup.adopt): take one

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", ResetMode(self.mode))
        except ValueError:
            raise UserError(f"reset mode {self.mode!r} is not one of {', '.join(ResetMode)}") from None
        if self.mode == "to-datetime" and self.to_datetime_ms is None:
            raise UserError("mode to-datetime needs a time, e.g. --to-datetime 2026-01-31T12:00:00Z")
        if self.mode == "shift-by" and self.shift_by is None:
            raise UserError("mode shift-by needs a number of records, e.g. --shift-by -500")
        if self.mode == "to-offsets" and not self.to_offsets:
            raise UserError("mode to-offsets needs offsets JSON or a file, e.g. --to-offsets '{\"orders\":{\"0\":42}}'")
        try:
            object.__setattr__(self, "sink_log", SinkLogPolicy(self.sink_log))
        except ValueError:
            raise UserError(f"sink log policy {self.sink_log!r} is not one of {', '.join(SinkLogPolicy)}") from None
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
                "sink_log": self.sink_log, "accept_data_loss": self.accept_data_loss,
                **({"batch_keyed_sink": True} if self.batch_keyed_sink else {}),
                **({"fresh_backup": True} if self.fresh_backup else {})}


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


@dataclass(frozen=True)
class SinkInfo:
    """What the job's output holds, as far as a reset cares (S20)."""

    output: str
    has_log: bool
    latest_batch_id: int | None
    entries: int = 0                  # what the output folder holds (0: absent or empty)


def old_positions(state: CheckpointState) -> tuple[PartitionOffsets, PartitionOffsets, str]:
    """(C, P, label): committed end offsets, pending end offsets ({} if none), and where C comes from.

    With nothing committed, C is where batch 0 starts (``sources/<n>/0``): a query that never
    committed anything has written nothing, so that is what was "processed up to".
    """
    pos = resume_position(state)
    if pos is None:
        return {}, {}, NOTHING_COMMITTED
    return dict(pos.committed), dict(pos.pending), pos.committed_label


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

    subscribed = _subscribed(plan, broker, topics, c, p)

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
    add_start_notes(plan, state)
    _batch_ids(plan, request, state, sink)
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


def _batch_ids(plan: Plan, request: ResetRequest, state: CheckpointState, sink: SinkInfo | None) -> None:
    """A sink keyed by batch id alone meets the new query's batch 0, 1, … where the old query's are (S20's twin).

    Harmless only when the new query writes where the old one did not: an empty (or new) output folder.
    """
    if not (request.batch_keyed_sink and plan.moves):
        return
    if sink is not None and sink.entries == 0:
        plan.add("BATCH_KEYED_OUTPUT_EMPTY", INFO,
                 f"{sink.output} is empty: the new query's batch ids (from 0) meet no earlier output", "")
        return
    last = state.latest_committed.batch_id if state.latest_committed else None
    seen = f"batches 0-{last}" if last is not None else "its batches"
    where = f"{sink.output} holds {sink.entries} entries, the old query's {seen}" if sink else (
        "the job declares no output to look at")
    plan.add("BATCH_IDS_COLLIDE", BLOCK,
             f"the job's output is keyed by batch id alone (sink: batch-keyed) and {where}; the new query restarts "
             "at batch 0, so its batches would overwrite them (or be skipped as already written, with Delta's "
             "txnVersion): records lost either way",
             "give the new query its own output (set the job's output to a new folder; the job reads it through "
             "{output}), or key the output by the query id too and declare sink: idempotent",
             last_committed_batch=last)


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


def _subscribed(plan: Plan, broker: BrokerState, topics: list[str], c: PartitionOffsets, p: PartitionOffsets
                ) -> list[TopicPartition]:
    """The partitions the new run reads; BLOCKs for a missing topic or a partition gone, INFO for a topic dropped."""
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
    return subscribed
