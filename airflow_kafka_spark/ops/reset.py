"""Execute a reset: back up, journal, record startingOffsets, move the sink log and the checkpoint aside.

The plan and the modes are ``ops.reset_plan``. Every reset: plans (``dry_run`` stops there and
changes nothing), refuses a plan that skips records unless ``accept_data_loss`` (recorded in the
lifecycle history), takes a verified backup — or adopts the job's newest one when it provably holds
the checkpoint as it is now (``ops.backup.adopt``; never with ``fresh_backup``) —, writes the
journal (commit point), records the ``startingOffsets`` JSON as the lifecycle record's
``next_starting_offsets`` (written *before* the checkpoint moves: if the process dies in between,
the old checkpoint is still in place and Spark ignores startingOffsets), moves a file sink's
``_spark_metadata`` aside if asked (S20), and moves the old checkpoint aside — never deletes it —
and leaves in the fresh location one ``sources/<id>/0`` per Kafka source at the planned offsets
(``ops.reset_start``: Spark reads it before any ``startingOffsets``, so a user's own job starts
there too). :func:`roll_forward` finishes a journaled reset (also after a crash). The entry point is
``ops.commands.reset_checkpoint`` (operation lock, then an interrupted operation is finished, then
:func:`run_reset`).

File sinks (S20): a fresh checkpoint restarts at batch 0 and Spark's file sink silently skips
every batch id its ``_spark_metadata`` already holds. The default is to refuse with the fix; with
``sink_log="move-aside"`` the log moves to ``<output>/_spark_metadata.reset-<id>`` (the ``_``
prefix keeps Spark readers away from it). The old data files stay in ``<output>``, but the new
log does not list them: readers that go through the log see only the new run. The plan says so.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import Location, exists, open_location
from airflow_kafka_spark._util.trees import move_dir
from airflow_kafka_spark.checkpoint.initial_offsets import initial_offsets_bytes, source_file, write_initial_offsets
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.checkpoint.sink_log import read_sink_log
from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.journal import Journal, Operation, new_operation_id
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import default_job_name, validate_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.adopt import Adoption, adopt_backup
from airflow_kafka_spark.ops.backup.catalog import job_location, open_backup_root
from airflow_kafka_spark.ops.backup.take import BackupRequest, take_backup
from airflow_kafka_spark.ops.guards import check_locations, journal_path, running_reason
from airflow_kafka_spark.ops.modes import SinkLogPolicy
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.ops.reset_plan import SINK_LOG_DIR, ResetRequest, SinkInfo, build_reset_plan, old_positions
from airflow_kafka_spark.ops.reset_start import SOURCE_FILES, files_from_payload
from airflow_kafka_spark.verdict.findings import Finding, Severity
from airflow_kafka_spark.verdict.interrupted import interrupted_finding

_log = logging.getLogger(__name__)
#: The reset's note when asked never to adopt (``aks reset --fresh-backup``, the operator's ``fresh_backup``).
FRESH_NOTE = "took its own backup: a fresh backup was asked for (fresh_backup)"


def plan_with_state(ck: Location, kafka_config: dict, request: ResetRequest, record: LifecycleRecord | None, *,
                     storage_options: dict | None, kafka_timeout: float) -> tuple[Plan, CheckpointState]:
    """The reset's plan against Kafka and the checkpoint it read; ``record`` is the one the caller loaded."""
    checkpoint_location = ck.url
    state = read_checkpoint(ck)
    if not state.exists:
        raise UserError(f"checkpoint location {checkpoint_location} does not exist: there is nothing to reset; pass "
                        "the folder that holds offsets/, commits/ and metadata")
    if not (state.offset_batch_ids or state.commit_batch_ids or state.initial_offsets or state.query_id):
        raise UserError(f"{checkpoint_location} is not a Structured Streaming checkpoint (no metadata, offsets/ or "
                        "commits/): nothing to reset")
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
    return plan, state


def read_sink_info(output: str, storage_options: dict | None) -> SinkInfo:
    """Whether ``output`` has a file-sink log and its newest batch (S20)."""
    loc = open_location(output, storage_options, what="sink output")
    if not exists(loc):
        return SinkInfo(output=output, has_log=False, latest_batch_id=None)
    log = read_sink_log(output, storage_options)
    entries = len(loc.fs.ls(loc.path, detail=False))
    return SinkInfo(output=output, has_log=log.exists, latest_batch_id=log.latest_batch_id, entries=entries)


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
    backup_adopted: bool = False     # backup_id is the newest backup, adopted (ops.backup.adopt), not a new one
    fresh_backup: bool = False       # asked never to adopt one
    backup_note: str | None = None   # how the backup came about, one line (adopted, or why a new one was taken)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "operation_id": self.operation_id, "backup_id": self.backup_id,
                "backup_adopted": self.backup_adopted, "fresh_backup": self.fresh_backup,
                "backup_note": self.backup_note,
                "aside_location": self.aside_location, "sink_aside_location": self.sink_aside_location,
                "starting_offsets": self.starting_offsets, "resumed": self.resumed, "notes": self.notes,
                "plan": self.plan.to_dict()}


def run_reset(ck: Location, backup_root: str | None, kafka_config: dict, request: ResetRequest, *,
              job: str | None, dry_run: bool, actor: str | None, run: RunOptions) -> ResetResult:
    """Plan and (unless ``dry_run``) execute a reset; ``ops.commands.reset_checkpoint`` has the lock and recovery.

    ``ck`` is the checkpoint as the caller opened it, once; ``run`` carries the stores' options and the
    seal key and Spark version of the backup taken before anything moves (None: the configured key, the
    record's version).
    """
    storage_options, backup_storage_options = run.stores.checkpoint, run.stores.backup
    step = run.progress or (lambda _text: None)
    checkpoint_location = ck.url
    if backup_root is None and not dry_run:
        raise UserError("a reset takes a verified backup first: pass a backup root (--backup-root)")
    root = open_backup_root(backup_root, backup_storage_options) if backup_root else None
    if root is not None:
        check_locations(ck, root)
    record = LifecycleRecord.load(checkpoint_location, storage_options=storage_options)
    job = job or default_job_name(checkpoint_location, record.job_name if record else None)
    validate_job_name(job)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r}, not {job!r}")
    running = running_reason(record)
    if running:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before resetting its "
                               "checkpoint", reason=BlockReason.QUERY_RUNNING)

    step("planning against Kafka")
    plan, state = plan_with_state(ck, kafka_config, request, record,
                                  storage_options=storage_options, kafka_timeout=run.kafka_timeout)
    op_id = new_operation_id()
    stamp = op_id
    aside = ck.sibling(f".reset-{stamp}")
    sink_aside = None
    sink_info = plan.details.get("sink") or {}
    if request.sink_output and request.sink_log == SinkLogPolicy.MOVE_ASIDE and sink_info.get("has_log"):
        sink_aside = open_location(request.sink_output, storage_options).child(f"{SINK_LOG_DIR}.reset-{stamp}")
    source_files = plan.details.get(SOURCE_FILES) or {}
    plan.actions = _actions(plan, checkpoint_location, backup_root, request, aside, sink_aside, source_files)
    result = ResetResult(plan=plan, dry_run=dry_run, starting_offsets=plan.starting_offsets_json,
                         aside_location=aside.url, sink_aside_location=sink_aside.url if sink_aside else None,
                         fresh_backup=request.fresh_backup)
    if dry_run:
        interrupted = interrupted_finding(ck)
        if interrupted is not None:   # the real run would finish (or refuse) that operation first
            plan.add(interrupted.code, interrupted.severity, interrupted.message, interrupted.fix)
        return result
    if plan.blocked:
        worst = plan.blocking[0]
        raise OperationBlocked(f"reset refused: {worst.code} — {worst.message}; fix: {worst.fix}",
                               reason=BlockReason.PLAN_BLOCKED, code=worst.code, details=result.to_dict())

    if root is None:   # an empty backup root: opening it is the one-line error
        root = open_backup_root(str(backup_root), backup_storage_options)
    result.backup_id, adoption = _backup(ck, root, job, (state, record), request, op_id, run)
    result.backup_adopted = adoption is not None and adoption.manifest is not None
    result.backup_note = adoption.note if adoption is not None else FRESH_NOTE
    result.operation_id = op_id
    payload = {
        "job": job, "actor": actor, "request": request.to_dict(), "backup_root": backup_root,
        "backup_id": result.backup_id, "aside": aside.url, "sink_output": request.sink_output,
        "sink_aside": sink_aside.url if sink_aside else None, "starting_offsets": plan.starting_offsets_json,
        "old_query_id": state.query_id, "skipped": plan.skipped, "replayed": plan.replayed,
        "pending_replay": plan.pending_replay, "plan": plan.to_dict(), "source_files": source_files,
        **({"backup_adopted": True} if result.backup_adopted else {}),
    }
    step("moving the old checkpoint aside and recording the new position")
    journal = Journal.begin(ck, Operation.RESET, op_id, payload)
    faults.crash_point("reset.journaled")
    roll_forward(journal, ck, storage_options=storage_options, record=record)
    return result


def _backup(ck: Location, root: Location, job: str, read: tuple[CheckpointState, LifecycleRecord | None],
            request: ResetRequest, op_id: str, run: RunOptions) -> tuple[str, Adoption | None]:
    """The reset's verified backup: the newest one adopted when it holds the checkpoint as it is now
    (``ops.backup.adopt``, with the lifecycle record the reset read; not with ``request.fresh_backup``), else
    a new one; then the checkpoint must still be as planned. Returns the backup id and the adoption tried
    (None: not tried)."""
    state, record = read
    step = run.progress or (lambda _text: None)
    adoption = None
    planned = (frozenset(state.offset_batch_ids), frozenset(state.commit_batch_ids))
    if not request.fresh_backup:
        step("checking whether the job's newest backup holds the checkpoint as it is now")
        adoption = adopt_backup(ck, job_location(root, job), job, state, seal_key=seal.resolve_key(run.seal_key),
                                record=record)
        if adoption.manifest is not None and adoption.ids != planned:   # changed since planned: refused below
            adoption = Adoption(None, "the checkpoint changed since the reset was planned", ids=adoption.ids)
    _log.info("reset of job %s: %s", job, adoption.note if adoption is not None else FRESH_NOTE)
    if adoption is not None and adoption.manifest is not None:
        step(adoption.note)
        backup_id, ids = adoption.manifest.backup_id, adoption.ids   # the listing the match was proven on
    else:
        step("backing up the checkpoint (verified before anything moves)")
        bk = take_backup(ck, root, BackupRequest(job=job, reason=f"before reset --mode {request.mode} ({op_id})"),
                         run=run)
        again = read_checkpoint(ck)
        backup_id, ids = bk.backup_id, (frozenset(again.offset_batch_ids), frozenset(again.commit_batch_ids))
    faults.crash_point("reset.backed_up")
    if ids != planned:
        raise OperationBlocked(f"checkpoint {ck.url} changed while the reset was planned: is the job "
                               "running? Stop it and re-run the reset", reason=BlockReason.QUERY_RUNNING)
    return backup_id, adoption


def _actions(plan: Plan, checkpoint_location: str, backup_root: str | None, request: ResetRequest,
             aside: Location, sink_aside: Location | None, source_files: dict) -> list[str]:
    """What the reset will do, in order, as the plan shows it."""
    how = "" if request.fresh_backup else ("; the job's newest backup is adopted instead when it holds exactly "
                                           "these files")
    actions = [f"back up {checkpoint_location} to {backup_root} (verified before anything moves{how})",
               f"record startingOffsets in the lifecycle record ({_short(plan.starting_offsets_json)})"]
    if sink_aside is not None:
        actions.append(f"move {request.sink_output}/{SINK_LOG_DIR} to {sink_aside.url}")
    actions.append(f"move {checkpoint_location} to {aside.url} (kept, never deleted); the location is left "
                   "empty for the new run")
    if source_files:
        actions.append("write " + ", ".join(f"sources/{sid}/0" for sid in sorted(source_files))
                       + f" into {checkpoint_location}: Spark starts there whatever startingOffsets the "
                       "application sets")
    return actions


def roll_forward(journal: Journal, ck: Location, *, storage_options: dict | None = None,
                 record: LifecycleRecord | None = None) -> dict[str, Any]:
    """Finish a journaled reset; every step is idempotent, so this is also the crash recovery.

    ``record``: the lifecycle record :func:`run_reset` loaded under the operation lock (None: read it
    here, as a recovery does). Reading it again was a round trip for nothing: ``save`` reads the stored
    record under its lock anyway and keeps its lease and its history.
    """
    pl = journal.payload
    op_id = journal.operation_id
    # The journal is input too: the folders it moves things to must be exactly the ones run_reset
    # derives (``<checkpoint>.reset-<op id>``, ``<sink>/_spark_metadata.reset-<op id>``) — checked
    # before the first step, so an edited journal changes nothing (not even the record).
    aside = journal_path(journal, "aside", ck.sibling(f".reset-{op_id}"), storage_options)
    sink_aside = None
    if pl.get("sink_aside"):
        out = pl.get("sink_output")
        if not isinstance(out, str) or "::" in out:
            raise UserError(f"operation journal {journal.location.url} names sink output {out!r}: it was edited; "
                            "nothing was moved — inspect it, then move it away")
        sink_aside = journal_path(journal, "sink_aside",
                                   open_location(out, storage_options).child(f"{SINK_LOG_DIR}.reset-{op_id}"),
                                   storage_options)
    try:
        source_files = files_from_payload(pl.get("source_files"))
        for sid, offsets in source_files.items():   # a bad id or offset fails here, before any step
            source_file(ck, sid)
            initial_offsets_bytes(offsets)
    except (ValueError, UserError) as exc:
        raise UserError(f"operation journal {journal.location.url} has unreadable source_files ({exc}): it was "
                        "edited; nothing was moved — inspect it, then move it away") from None
    if not journal.is_done("record"):
        record = record or LifecycleRecord.load(ck.url, storage_options=storage_options)
        if record is None:
            record = LifecycleRecord.create(pl["job"], ck.url, storage_options=storage_options)
        if not any((e.get("details") or {}).get("operation_id") == op_id for e in record.history
                   if e.get("event") == "checkpoint_reset"):
            record.set_next_starting_offsets(pl["starting_offsets"], actor=pl.get("actor"))
            req = pl["request"]
            if pl.get("skipped") and req.get("accept_data_loss"):
                record.add_event(LifecycleEvent.DATA_LOSS_ACCEPTED, actor=pl.get("actor"), operation_id=op_id,
                                 records_skipped=pl["skipped"], mode=req.get("mode"))
            record.add_event(LifecycleEvent.CHECKPOINT_RESET, actor=pl.get("actor"), operation_id=op_id,
                             mode=req.get("mode"), backup_id=pl["backup_id"], backup_root=pl["backup_root"],
                             moved_to=pl["aside"],
                             sink_log_moved_to=pl.get("sink_aside"), starting_offsets=pl["starting_offsets"],
                             old_query_id=pl.get("old_query_id"), records_skipped=pl.get("skipped"),
                             records_replayed=pl.get("replayed"), pending_replay=pl.get("pending_replay"),
                             accept_data_loss=bool(req.get("accept_data_loss")),
                             **({"backup_adopted": True} if pl.get("backup_adopted") else {}),
                             findings=(pl.get("plan") or {}).get("findings") or [])
            record.save()
        # Not marked done in the journal (a journal write is 5 WebHDFS calls): a resumed run
        # finds this operation's event in the history just above and skips the step.
        faults.crash_point("reset.recorded")
    if sink_aside is not None and not journal.is_done("sink"):
        out = open_location(pl["sink_output"], storage_options)
        _move_aside(out.child(SINK_LOG_DIR), sink_aside, "a new run wrote to the sink")
        journal.mark("sink")
        faults.crash_point("reset.sink_moved")
    if not journal.is_done("aside"):
        _move_aside(ck, aside, "something wrote to the location")
        journal.mark("aside")
        faults.crash_point("reset.moved")
    if source_files and not journal.is_done("sources"):
        # After the move: the fresh location gets Spark's own start files (idempotent, so a resumed
        # reset writes them again; other offsets already there are refused, never overwritten).
        # Not marked done: the journal is deleted next, and a run resumed before that writes the same
        # files again, which changes nothing (a journal write is 5 WebHDFS calls).
        for sid, offsets in sorted(source_files.items()):
            write_initial_offsets(ck, sid, offsets)
        faults.crash_point("reset.sources_written")
    journal.finish()
    return {"op": "reset", "operation_id": op_id, "payload": pl}


def _move_aside(src: Location, dst: Location, meanwhile: str) -> None:
    """Move ``src`` to ``dst`` if it is still there; both present (local) means ``meanwhile`` happened."""
    if exists(src):
        if exists(dst) and src.local:
            raise UserError(f"both {src.url} and {dst.url} exist: {meanwhile} while a reset was interrupted; "
                            "inspect them before re-running")
        move_dir(src, dst)


def resumed_result(done: dict[str, Any], request: ResetRequest) -> ResetResult:
    pl = done["payload"]
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
                         starting_offsets=pl.get("starting_offsets"), resumed=True,
                         backup_adopted=bool(pl.get("backup_adopted")),
                         fresh_backup=bool((pl.get("request") or {}).get("fresh_backup")))
    if done["op"] != "reset" or (pl.get("request") or {}).get("mode") != request.mode:
        raise OperationBlocked(
            f"finished an interrupted {done['op']} ({done['operation_id']}) of this checkpoint first; the "
            f"requested reset --mode {request.mode} was not applied: re-run it if it is still wanted",
            reason=BlockReason.INTERRUPTED_OPERATION_FINISHED, details=result.to_dict())
    result.notes.append(f"resumed interrupted reset {done['operation_id']} and finished it")
    return result


def finished_by(checkpoint_location: str, actor: str, request: ResetRequest, *,
                storage_options: dict | None = None) -> ResetResult | None:
    """The reset ``actor`` already finished on this still-fresh location, or None.

    Why: a task killed after its reset finished (journal closed) but before it reported is retried
    (Airflow); the retry finds no checkpoint ("nothing to reset") and no journal to resume. When the
    last reset recorded beside the location is this actor's, with the same mode, and no batch was
    written since (the new position is still pending), the retry reports that reset instead of
    failing or resetting again. The per-partition moves are in the first try's log and the backup.
    """
    record = LifecycleRecord.load(checkpoint_location, storage_options=storage_options)
    if record is None or not record.next_starting_offsets:
        return None
    ck = open_location(checkpoint_location, storage_options, what="checkpoint location")
    if Journal.load(ck) is not None:
        return None   # not finished: the reset itself rolls its journal forward
    state = read_checkpoint(ck)
    if state.offset_batch_ids or state.commit_batch_ids:
        return None
    last = record.last_event(LifecycleEvent.CHECKPOINT_RESET)
    details = (last or {}).get("details") or {}
    if last is None or last.get("actor") != actor or details.get("mode") != request.mode:
        return None
    if details.get("starting_offsets") != record.next_starting_offsets:
        return None
    done = {"op": "reset", "operation_id": details.get("operation_id"),
            "payload": {"aside": details.get("moved_to"), "sink_aside": details.get("sink_log_moved_to"),
                        "backup_id": details.get("backup_id"), "starting_offsets": details.get("starting_offsets"),
                        "backup_adopted": bool(details.get("backup_adopted")),
                        "request": {"mode": details.get("mode")},
                        "plan": {"findings": details.get("findings") or [], "details": {"mode": details.get("mode")}}}}
    result = resumed_result(done, request)
    result.notes[:] = [f"reset {details.get('operation_id')} was already finished by an earlier try of this task "
                       f"({actor}): reported, not run again"]
    return result


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
