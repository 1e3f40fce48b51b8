"""``aks restore``, ``aks reset``: the checkpoint operations that move a job's position, on the command line.

Listed in :data:`COMMANDS`, which :mod:`airflow_kafka_spark.cli` gathers. Same conventions as
``aks validate``: heavy imports inside the run functions, ``--json`` for machines, exit 0 when
done (or when a plan would pass), 3 when blocked (the plan/verdict is still printed, on stdout,
before the one ``error:`` line on stderr), 2 for bad input and 4 for unreachable Kafka or storage
as one ``error:`` line. Nothing is changed when the exit code is not 0.

``restore`` and ``reset`` print their plan and change nothing unless
``--execute`` is given (see :mod:`airflow_kafka_spark.cli._job`). ``--job NAME`` takes the
checkpoint, backup root, sink and Kafka connection from the registry; flags given here win.
``aks backup``/``backups`` are :mod:`.backup`; the flags and helpers both share, :mod:`._storage`.
"""

from __future__ import annotations

import argparse

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, add_kafka_arguments
from airflow_kafka_spark.cli._job import add_execute_argument, executes, kafka_config_for
from airflow_kafka_spark.cli._storage import (
    blocked,
    job_and_paths,
    opts,
    progress_argument,
    progress_lines,
    seal_key_of,
    storage_arguments,
)
from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.ops.modes import ResetMode, SinkLogPolicy
from airflow_kafka_spark.ops.options import RunOptions, SinkFacts, Stores
from airflow_kafka_spark.registry.model import SINK_CHOICES, Sink

# --------------------------------------------------------------------------------------------------
# restore
# --------------------------------------------------------------------------------------------------


def _restore_arguments(p: argparse.ArgumentParser) -> None:
    storage_arguments(p)
    progress_argument(p)
    p.add_argument("--backup", metavar="ID", required=True, help="backup id to restore ('latest': the newest)")
    add_kafka_arguments(p)
    p.add_argument(
        "--sink",
        choices=SINK_CHOICES,
        help="the job's sink, which decides whether a replay duplicates output (non-idempotent = append)",
    )
    p.add_argument("--sink-output", metavar="PATH", help="the job's output path (a file sink's log is compared)")
    add_execute_argument(p, "restore")
    p.add_argument("--settle", metavar="SECONDS", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _render_plan_doc(doc: dict) -> str:
    """Human layout of a plan dict (``Plan.to_dict()``, possibly nested under ``plan``)."""
    from airflow_kafka_spark.ops.plan import PartitionMove, Plan
    from airflow_kafka_spark.verdict.findings import Finding, Severity

    d = doc.get("plan", doc)
    plan = Plan(kind=d.get("kind", "plan"), subject=d.get("subject", ""), actions=list(d.get("actions") or []))
    for m in d.get("moves", []):
        plan.moves.append(
            PartitionMove(
                topic=m["topic"],
                partition=m["partition"],
                old=m["old"],
                new=m["new"],
                log_start=m["log_start"],
                log_end=m["log_end"],
                pending_end=m["pending_end"],
                source=m.get("source", ""),
                note=m.get("note", ""),
            )
        )
    for f in d.get("findings", []):
        plan.findings.append(
            Finding(
                f["code"],
                Severity(f["severity"]),
                topic=f.get("topic"),
                partition=f.get("partition"),
                numbers=f.get("numbers") or {},
                message=f.get("message", ""),
                fix=f.get("fix", ""),
            )
        )
    return plan.render()


def _restore(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.errors import OperationBlocked, UserError
    from airflow_kafka_spark.ops.backup.catalog import list_backups
    from airflow_kafka_spark.ops.commands import restore_checkpoint
    from airflow_kafka_spark.ops.restore import restore_job_name

    execute = executes(args)
    spec, checkpoint, backup_root = job_and_paths(args)
    config = kafka_config_for(args, spec)
    key = seal_key_of(args)
    backup_id = args.backup
    if backup_id == "latest":
        job = restore_job_name(checkpoint, args.job, opts(args.storage_option))
        newest = list_backups(backup_root, job, storage_options=opts(args.backup_storage_option), seal_key=key).newest
        if newest is None:
            raise UserError(
                f"job {job} has no backups under {backup_root}"
                + (
                    ""
                    if args.job
                    else " (the job name comes from the lifecycle record, else the "
                    "checkpoint folder's name; pass --job NAME for another)"
                )
            )
        backup_id = newest.backup_id
    try:
        sink = Sink.named(args.sink) if args.sink else (spec.sink if spec else None)
        with progress_lines("restore", args) as progress:
            facts = SinkFacts(idempotent=None if sink is None else sink.replay_is_idempotent,
                              output=args.sink_output or (spec.sink_output if spec else None))
            stores = Stores(checkpoint=opts(args.storage_option), backup=opts(args.backup_storage_option))
            run = RunOptions(stores=stores,
                             progress=progress, kafka_timeout=args.timeout, backup_settle_s=args.settle, seal_key=key)
            result = restore_checkpoint(checkpoint, backup_root, backup_id, config, job=args.job, dry_run=not execute,
                                        sink=facts, run=run)
    except OperationBlocked as exc:
        return blocked(exc, args, _render_plan_doc)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
    else:
        lines = [result.plan.render(), "", result.verdict.headline]
        if result.already_restored:
            lines = [
                f"backup {result.backup.backup_id} is already in place (restore {result.operation_id or '-'}); "
                "nothing was done"
            ]
        elif result.restored:
            lines.append(
                f"restored backup {result.backup.backup_id} (batch {result.backup.last_committed_batch}); "
                f"the previous checkpoint is at {result.aside_location or '-'} (backed up as "
                f"{result.pre_restore_backup_id or '-'}); the restart re-reads "
                f"{result.records_to_replay:,} records"
            )
        else:
            lines.append(
                f"plan only: nothing changed; restoring {result.backup.backup_id} would re-read "
                f"{result.records_to_replay:,} records; pass --execute to restore"
            )
        report.emit("\n".join(lines))
    return ExitCode.BLOCKED if result.plan.blocked else ExitCode.OK


# --------------------------------------------------------------------------------------------------
# reset
# --------------------------------------------------------------------------------------------------


def _reset_arguments(p: argparse.ArgumentParser) -> None:
    storage_arguments(p)
    progress_argument(p)
    add_kafka_arguments(p)
    m = p.add_argument_group("the new position")
    m.add_argument(
        "--mode",
        required=True,
        choices=tuple(ResetMode),
        help="preserve = carry the last committed offsets over (the safe default for a code change)",
    )
    m.add_argument("--to-datetime", metavar="TIME", help="for to-datetime: ISO-8601 or epoch ms")
    m.add_argument("--shift-by", metavar="N", type=int, help="for shift-by: records (negative = read again)")
    m.add_argument("--to-offsets", metavar="JSON|@FILE", help="for to-offsets: Spark offsets JSON or @file")
    m.add_argument("--topics", metavar="A,B", help="the new run's subscription (default: the checkpoint's topics)")
    s = p.add_argument_group("sink and safety")
    s.add_argument("--sink-output", metavar="PATH", help="the job's output path, to check a file sink's log (S20)")
    s.add_argument(
        "--sink-log",
        choices=tuple(SinkLogPolicy),
        default=SinkLogPolicy.REFUSE.value,
        help="what to do with a file sink's _spark_metadata (default: refuse)",
    )
    s.add_argument("--accept-data-loss", action="store_true", help="allow a plan that skips records (audited)")
    s.add_argument("--fresh-backup", action="store_true",
                   help="always take a new verified backup (default: adopt the job's newest backup when it holds "
                        "exactly the checkpoint's files as they are now)")
    s.add_argument(
        "--write-starting-offsets",
        metavar="FILE",
        help="also write the startingOffsets JSON to FILE (e.g. for the job's --starting-offsets-file)",
    )
    s.add_argument("--actor", metavar="NAME", help="who resets (audit trail)")
    add_execute_argument(p, "reset")
    p.add_argument("--settle", metavar="SECONDS", type=float, default=2.0, help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _reset(args: argparse.Namespace) -> int:
    from pathlib import Path

    from airflow_kafka_spark.errors import OperationBlocked
    from airflow_kafka_spark.ops.commands import reset_checkpoint
    from airflow_kafka_spark.ops.reset_plan import ResetRequest, parse_datetime, parse_to_offsets

    execute = executes(args)
    spec, checkpoint, backup_root = job_and_paths(args)
    config = kafka_config_for(args, spec)
    key = seal_key_of(args)   # a bad key file is one line before anything runs; it seals the reset's backup
    request = ResetRequest(
        mode=args.mode,
        to_datetime_ms=parse_datetime(args.to_datetime) if args.to_datetime else None,
        shift_by=args.shift_by,
        to_offsets=parse_to_offsets(args.to_offsets) if args.to_offsets else None,
        topics=tuple(args.topics.split(",")) if args.topics else None,
        sink_output=args.sink_output or (spec.sink_output if spec else None),
        sink_log=args.sink_log,
        accept_data_loss=args.accept_data_loss,
        batch_keyed_sink=bool(spec and spec.sink.keyed_by_batch_id),
        fresh_backup=args.fresh_backup,
    )
    try:
        with progress_lines("reset", args) as progress:
            stores = Stores(checkpoint=opts(args.storage_option), backup=opts(args.backup_storage_option))
            run = RunOptions(stores=stores, progress=progress, kafka_timeout=args.timeout,
                             backup_settle_s=args.settle, seal_key=key)
            result = reset_checkpoint(checkpoint, backup_root, config, request, job=args.job, dry_run=not execute,
                                      actor=args.actor, run=run)
    except OperationBlocked as exc:
        return blocked(exc, args, _render_plan_doc)
    if args.write_starting_offsets and result.starting_offsets and execute:
        Path(args.write_starting_offsets).write_text(result.starting_offsets)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
    else:
        lines = [result.plan.render(), ""]
        if result.dry_run:
            lines.append(
                "plan only: nothing changed"
                + ("; the plan is BLOCKED" if result.plan.blocked else "; pass --execute to reset")
            )
        else:
            resumed = " — resumed an interrupted reset" if result.resumed else ""
            lines += [
                f"reset done ({result.operation_id}){resumed}",
                f"  backup: {result.backup_id}" + (f" — {result.backup_note}" if result.backup_note else ""),
                f"  old checkpoint moved to {result.aside_location}",
                *([f"  sink log moved to {result.sink_aside_location}"] if result.sink_aside_location else []),
                f"  next run starts at (lifecycle record next_starting_offsets): {result.starting_offsets}",
            ]
            files = sorted(result.plan.details.get("source_files") or {})
            if files:
                written = ", ".join(f"sources/{sid}/0" for sid in files)
                lines.append(f"  Spark will start at {result.starting_offsets}, whatever startingOffsets the "
                             f"application sets ({written} written into the new checkpoint)")
        report.emit("\n".join(lines))
    return ExitCode.BLOCKED if result.dry_run and result.plan.blocked else ExitCode.OK


COMMANDS = (
    Command(
        "restore",
        "roll a checkpoint back to a backup, judged against Kafka first (plans unless --execute)",
        _restore_arguments,
        _restore,
    ),
    Command(
        "reset",
        "move a job to a new checkpoint at an exact Kafka position (plans unless --execute)",
        _reset_arguments,
        _reset,
    ),
)
