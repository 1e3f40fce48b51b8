"""``aks backup``, ``aks backups``, ``aks restore``, ``aks reset``: the checkpoint operations on the command line.

Listed in :data:`COMMANDS`, which :mod:`airflow_kafka_spark.cli` gathers. Same conventions as
``aks validate``: heavy imports inside the run functions, ``--json`` for machines, exit 0 when
done (or when a plan would pass), 3 when blocked (the plan/verdict is still printed, on stdout,
before the one ``error:`` line on stderr), 2 for bad input and 4 for unreachable Kafka or storage
as one ``error:`` line. Nothing is changed when the exit code is not 0.

``restore``, ``reset`` and ``backups --prune`` print their plan and change nothing unless
``--execute`` is given (see :mod:`airflow_kafka_spark.cli._job`). ``--job NAME`` takes the
checkpoint, backup root, sink and Kafka connection from the registry; flags given here win.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, add_kafka_arguments, key_value, positive_int
from airflow_kafka_spark.cli._job import (
    add_execute_argument,
    add_registry_argument,
    executes,
    kafka_config_for,
    pick,
    registry_job,
)
from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.ops.modes import ResetMode, SinkLogPolicy
from airflow_kafka_spark.registry.model import SINK_CHOICES, JobSpec, Sink


def _storage_arguments(p: argparse.ArgumentParser, *, checkpoint: bool = True) -> None:
    kv = key_value
    g = p.add_argument_group("storage")
    if checkpoint:
        g.add_argument("--checkpoint", metavar="PATH", help="checkpoint location (path or fsspec URL; default: the "
                                                            "registry job's)")
        g.add_argument("--storage-option", metavar="KEY=VALUE", type=kv, action="append", default=[],
                       help="fsspec option for the checkpoint's file system (repeatable)")
    g.add_argument("--backup-root", metavar="URL", help="backup root (path or fsspec URL; default: the registry job's)")
    g.add_argument("--backup-storage-option", metavar="KEY=VALUE", type=kv, action="append", default=[],
                   help="fsspec option for the backup root's file system (repeatable)")
    g.add_argument("--job", metavar="NAME",
                   help="a registry job: its checkpoint, backup root, sink and Kafka connection (flags given here "
                        "win); with --checkpoint and --backup-root any job name (default: the lifecycle record's, "
                        "else the folder name)")
    add_registry_argument(g)
    g.add_argument("--seal-key-file", metavar="PATH",
                   help="key of the keyed manifest seal (HMAC-SHA256); manifests without a valid one are refused "
                        "(default: [kafka_spark] seal_key_file; none: the unkeyed seal only)")


def _job_and_paths(args: argparse.Namespace, *, checkpoint: bool = True) -> tuple[JobSpec | None, str | None, str]:
    """(registry job or None, checkpoint, backup root): flags win, the ``--job`` entry fills the rest.

    With every location given as a flag, ``--job`` is only the job name (as before the registry):
    the registry entry's sink and connection describe its own checkpoint, not one named by hand.
    """
    explicit = bool(args.backup_root) and (not checkpoint or bool(args.checkpoint))
    spec = None if explicit else registry_job(args)
    ck = pick(args.checkpoint, spec, "checkpoint", what="checkpoint") if checkpoint else None
    root = pick(args.backup_root, spec, "backup_root", what="backup root")
    return spec, ck, root


def _progress_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action="store_true",
                   help="print the steps of a run that takes over a second on stderr even when it is not a "
                        "terminal (on a terminal they are always shown)")
    # Seconds before the step lines start (tests set 0 to see them on a run that is quick on their machine).
    p.add_argument("--progress-after", metavar="SECONDS", type=float, default=1.0, help=argparse.SUPPRESS)


def _progress(what: str, args: argparse.Namespace) -> report.Progress:
    return report.Progress(what, after_s=args.progress_after, enabled=args.progress or sys.stderr.isatty())


def _seal_key(args: argparse.Namespace) -> bytes | None:
    """The key from --seal-key-file, else None (the core functions then read the seal_key_file setting)."""
    from airflow_kafka_spark.ops.seal import read_key_file

    return read_key_file(args.seal_key_file) if getattr(args, "seal_key_file", None) else None


def _opts(pairs: list[tuple[str, str]]) -> dict[str, str] | None:
    return dict(pairs) or None


def _blocked(exc: Exception, args: argparse.Namespace, render: Callable[[dict], str] | None = None) -> int:
    """Print what blocked (plan/verdict) and the one error line; exit 3."""
    details = getattr(exc, "details", {}) or {}
    if args.json:
        report.emit(report.dump_json({"error": str(exc), "exit_code": ExitCode.BLOCKED,
                                      "code": getattr(exc, "code", None), **details}))
    elif render is not None and details:
        report.emit(render(details))
    report.emit(report.error_line(str(exc)), sys.stderr)
    return ExitCode.BLOCKED


# --------------------------------------------------------------------------------------------------
# backup / backups
# --------------------------------------------------------------------------------------------------

def _backup_arguments(p: argparse.ArgumentParser) -> None:
    _storage_arguments(p)
    _progress_argument(p)
    p.add_argument("--reason", default="manual", help="why (kept in the manifest)")
    p.add_argument("--force", action="store_true",
                   help="back up a running query anyway: only its last committed batch is captured")
    p.add_argument("--spark-version", metavar="X.Y.Z", help="Spark version that wrote the checkpoint, if known")
    p.add_argument("--keep-last", metavar="N", type=positive_int, help="then prune to the newest N backups")
    p.add_argument("--max-age", metavar="DURATION", help="then prune backups older than this (7d, 12h, ...)")
    p.add_argument("--settle", metavar="SECONDS", type=float, default=2.0,
                   help="least time between the two listings that detect a running query (default 2)")
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _backup(args: argparse.Namespace) -> int:
    from airflow_kafka_spark._util.text import parse_duration
    from airflow_kafka_spark.errors import OperationBlocked
    from airflow_kafka_spark.ops.commands import backup_checkpoint

    _, checkpoint, backup_root = _job_and_paths(args)
    try:
        with _progress("backup", args) as progress:
            result = backup_checkpoint(
                checkpoint, backup_root, job=args.job, reason=args.reason, force=args.force,
                spark_version=args.spark_version, settle_s=args.settle, keep_last=args.keep_last,
                max_age_s=parse_duration(args.max_age) if args.max_age else None,
                storage_options=_opts(args.storage_option), backup_storage_options=_opts(args.backup_storage_option),
                seal_key=_seal_key(args), progress=progress)
    except OperationBlocked as exc:
        return _blocked(exc, args)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
        return ExitCode.OK
    m = result.manifest
    lines = [f"backup {m.backup_id} of job {m.job} published (verified)",
             f"  query {m.query_id}, last committed batch {report.fmt(m.last_committed_batch)}"
             + (f", pending batch {m.pending_batch} kept" if m.pending_batch is not None else "")
             + (" — FORCED on a running query: last committed batch only" if m.forced else ""),
             f"  {result.files:,} files, {result.bytes:,} bytes; read {result.files_hashed:,} "
             f"({result.bytes_hashed:,} bytes), stored {result.blobs_written:,} new blobs "
             f"({result.bytes_written:,} bytes), {result.files_from_previous:,} unchanged since the previous backup",
             f"  {result.seconds:.2f}s (verify {result.verify_seconds:.2f}s)"]
    if m.problems:
        lines += [f"  warning: {p}" for p in m.problems]
    if result.pruned:
        lines.append(f"  pruned: {', '.join(result.pruned)}")
    report.emit("\n".join(lines))
    return ExitCode.OK


def _backups_arguments(p: argparse.ArgumentParser) -> None:
    _storage_arguments(p, checkpoint=False)
    p.add_argument("--verify", metavar="ID", help="verify one backup deeply (every blob re-hashed); 'latest' works")
    p.add_argument("--prune", action="store_true",
                   help="apply retention (--keep-last / --max-age, default the registry job's backup_retention) and "
                        "collect blobs: a plan unless --execute is given")
    p.add_argument("--keep-last", metavar="N", type=positive_int, help="retention: keep the newest N")
    p.add_argument("--max-age", metavar="DURATION", help="retention: drop backups older than this (7d, 12h, ...)")
    add_execute_argument(p, "with --prune: delete")
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _backups(args: argparse.Namespace) -> int:
    from airflow_kafka_spark._util.text import parse_duration
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.ops.backup.manifest import list_backups
    from airflow_kafka_spark.ops.backup.store import verify_backup
    from airflow_kafka_spark.ops.commands import prune_backups

    if not args.job:
        raise UserError("backups are listed per job: pass --job NAME")
    execute = executes(args)
    if execute and not args.prune:
        raise UserError("--execute acts on --prune only: add --prune (with --keep-last/--max-age or the registry's "
                        "backup_retention)")
    spec, _, backup_root = _job_and_paths(args, checkpoint=False)
    so = _opts(args.backup_storage_option)
    key = _seal_key(args)
    out: dict[str, Any] = {}
    if args.prune:
        keep_last = args.keep_last
        max_age_s = parse_duration(args.max_age) if args.max_age else None
        if keep_last is None and max_age_s is None and spec is not None:
            keep_last = spec.backup_retention.keep_last
            days = spec.backup_retention.max_age_days
            max_age_s = None if days is None else days * 86400.0
        if keep_last is None and max_age_s is None:
            raise UserError("--prune needs a retention rule: --keep-last N and/or --max-age DURATION")
        pr = prune_backups(backup_root, args.job, keep_last=keep_last, max_age_s=max_age_s,
                           dry_run=not execute, storage_options=so, seal_key=key)
        out["prune"] = pr.to_dict()
    if args.verify:
        backup_id = args.verify
        if backup_id == "latest":
            newest = list_backups(backup_root, args.job, storage_options=so, seal_key=key).newest
            if newest is None:
                raise UserError(f"job {args.job} has no backups under {backup_root}")
            backup_id = newest.backup_id
        m = verify_backup(backup_root, args.job, backup_id, deep=True, storage_options=so, seal_key=key)
        out["verified"] = {"backup_id": m.backup_id, "files": len(m.files), "bytes": m.total_bytes, "ok": True}
    catalog = list_backups(backup_root, args.job, storage_options=so, seal_key=key)
    out["catalog"] = catalog.to_dict()
    if args.json:
        report.emit(report.dump_json(out))
        return ExitCode.OK
    lines = []
    if "prune" in out:
        pr = out["prune"]
        lines.append(f"{'removed' if execute else 'would remove'} {len(pr['removed'])} backup(s)"
                     f"{': ' + ', '.join(pr['removed']) if pr['removed'] else ''}; {pr['blobs_removed']:,} blobs "
                     f"({pr['bytes_freed']:,} bytes), {pr['leftovers_removed']} leftovers of interrupted backups")
        if not execute:
            lines.append("plan only: nothing was deleted; pass --execute to prune")
    if "verified" in out:
        v = out["verified"]
        lines.append(f"backup {v['backup_id']}: verified, {v['files']:,} files, {v['bytes']:,} bytes, every blob "
                     "matches its sha256")
    rows = [[m.backup_id, m.created_at, m.last_committed_batch, len(m.files), m.total_bytes,
             "forced" if m.forced else "", m.reason] for m in catalog.backups]
    lines.append(f"backups of job {args.job} (newest first):")
    lines.append(report.render_table(("BACKUP", "CREATED", "BATCH", "FILES", "BYTES", "", "REASON"), rows,
                                     right=(2, 3, 4)) if rows else "  (none)")
    for name, why in catalog.invalid:
        lines.append(f"INVALID {name}: {why}")
    report.emit("\n".join(lines))
    return ExitCode.OK


# --------------------------------------------------------------------------------------------------
# restore
# --------------------------------------------------------------------------------------------------

def _restore_arguments(p: argparse.ArgumentParser) -> None:
    _storage_arguments(p)
    _progress_argument(p)
    p.add_argument("--backup", metavar="ID", required=True, help="backup id to restore ('latest': the newest)")
    add_kafka_arguments(p)
    p.add_argument("--sink", choices=SINK_CHOICES,
                   help="the job's sink, which decides whether a replay duplicates output (non-idempotent = append)")
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
        plan.moves.append(PartitionMove(topic=m["topic"], partition=m["partition"], old=m["old"], new=m["new"],
                                        log_start=m["log_start"], log_end=m["log_end"], pending_end=m["pending_end"],
                                        source=m.get("source", ""), note=m.get("note", "")))
    for f in d.get("findings", []):
        plan.findings.append(Finding(f["code"], Severity(f["severity"]), topic=f.get("topic"),
                                     partition=f.get("partition"), numbers=f.get("numbers") or {},
                                     message=f.get("message", ""), fix=f.get("fix", "")))
    return plan.render()


def _restore(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.errors import OperationBlocked, UserError
    from airflow_kafka_spark.ops.backup.manifest import list_backups
    from airflow_kafka_spark.ops.commands import restore_checkpoint
    from airflow_kafka_spark.ops.restore import restore_job_name

    execute = executes(args)
    spec, checkpoint, backup_root = _job_and_paths(args)
    config = kafka_config_for(args, spec)
    key = _seal_key(args)
    backup_id = args.backup
    if backup_id == "latest":
        job = restore_job_name(checkpoint, args.job, _opts(args.storage_option))
        newest = list_backups(backup_root, job, storage_options=_opts(args.backup_storage_option),
                              seal_key=key).newest
        if newest is None:
            raise UserError(f"job {job} has no backups under {backup_root}"
                            + ("" if args.job else " (the job name comes from the lifecycle record, else the "
                                                   "checkpoint folder's name; pass --job NAME for another)"))
        backup_id = newest.backup_id
    try:
        sink = Sink.named(args.sink) if args.sink else (spec.sink if spec else None)
        with _progress("restore", args) as progress:
            result = restore_checkpoint(
                checkpoint, backup_root, backup_id, config, job=args.job, dry_run=not execute,
                idempotent_sink=None if sink is None else sink.replay_is_idempotent,
                sink_output=args.sink_output or (spec.sink_output if spec else None), progress=progress,
                storage_options=_opts(args.storage_option), backup_storage_options=_opts(args.backup_storage_option),
                kafka_timeout=args.timeout, backup_settle_s=args.settle, seal_key=key)
    except OperationBlocked as exc:
        return _blocked(exc, args, _render_plan_doc)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
    else:
        lines = [result.plan.render(), "", result.verdict.headline]
        if result.already_restored:
            lines = [f"backup {result.backup.backup_id} is already in place (restore {result.operation_id or '-'}); "
                     "nothing was done"]
        elif result.restored:
            lines.append(f"restored backup {result.backup.backup_id} (batch {result.backup.last_committed_batch}); "
                         f"the previous checkpoint is at {result.aside_location or '-'} (backed up as "
                         f"{result.pre_restore_backup_id or '-'}); the restart re-reads "
                         f"{result.records_to_replay:,} records")
        else:
            lines.append(f"plan only: nothing changed; restoring {result.backup.backup_id} would re-read "
                         f"{result.records_to_replay:,} records; pass --execute to restore")
        report.emit("\n".join(lines))
    return ExitCode.BLOCKED if result.plan.blocked else ExitCode.OK


# --------------------------------------------------------------------------------------------------
# reset
# --------------------------------------------------------------------------------------------------

def _reset_arguments(p: argparse.ArgumentParser) -> None:
    _storage_arguments(p)
    _progress_argument(p)
    add_kafka_arguments(p)
    m = p.add_argument_group("the new position")
    m.add_argument("--mode", required=True,
                   choices=tuple(ResetMode),
                   help="preserve = carry the last committed offsets over (the safe default for a code change)")
    m.add_argument("--to-datetime", metavar="TIME", help="for to-datetime: ISO-8601 or epoch ms")
    m.add_argument("--shift-by", metavar="N", type=int, help="for shift-by: records (negative = read again)")
    m.add_argument("--to-offsets", metavar="JSON|@FILE", help="for to-offsets: Spark offsets JSON or @file")
    m.add_argument("--topics", metavar="A,B", help="the new run's subscription (default: the checkpoint's topics)")
    s = p.add_argument_group("sink and safety")
    s.add_argument("--sink-output", metavar="PATH", help="the job's output path, to check a file sink's log (S20)")
    s.add_argument("--sink-log", choices=tuple(SinkLogPolicy), default=SinkLogPolicy.REFUSE.value,
                   help="what to do with a file sink's _spark_metadata (default: refuse)")
    s.add_argument("--accept-data-loss", action="store_true", help="allow a plan that skips records (audited)")
    s.add_argument("--write-starting-offsets", metavar="FILE",
                   help="also write the startingOffsets JSON to FILE (e.g. for the job's --starting-offsets-file)")
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
    spec, checkpoint, backup_root = _job_and_paths(args)
    config = kafka_config_for(args, spec)
    if args.seal_key_file:
        import os

        from airflow_kafka_spark.ops.seal import KEY_FILE_ENV

        _seal_key(args)                                  # a bad key file is one line before anything runs
        os.environ[KEY_FILE_ENV] = args.seal_key_file    # reset's backups read the setting (this process only)
    request = ResetRequest(
        mode=args.mode,
        to_datetime_ms=parse_datetime(args.to_datetime) if args.to_datetime else None,
        shift_by=args.shift_by, to_offsets=parse_to_offsets(args.to_offsets) if args.to_offsets else None,
        topics=tuple(args.topics.split(",")) if args.topics else None,
        sink_output=args.sink_output or (spec.sink_output if spec else None),
        sink_log=args.sink_log, accept_data_loss=args.accept_data_loss)
    try:
        with _progress("reset", args) as progress:
            result = reset_checkpoint(
                checkpoint, backup_root, config, request, job=args.job, dry_run=not execute, progress=progress,
                actor=args.actor, storage_options=_opts(args.storage_option),
                backup_storage_options=_opts(args.backup_storage_option), kafka_timeout=args.timeout,
                backup_settle_s=args.settle)
    except OperationBlocked as exc:
        return _blocked(exc, args, _render_plan_doc)
    if args.write_starting_offsets and result.starting_offsets and execute:
        Path(args.write_starting_offsets).write_text(result.starting_offsets)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
    else:
        lines = [result.plan.render(), ""]
        if result.dry_run:
            lines.append("plan only: nothing changed" + ("; the plan is BLOCKED" if result.plan.blocked
                                                        else "; pass --execute to reset"))
        else:
            resumed = " — resumed an interrupted reset" if result.resumed else ""
            lines += [f"reset done ({result.operation_id}){resumed}",
                      f"  backup: {result.backup_id}",
                      f"  old checkpoint moved to {result.aside_location}",
                      *([f"  sink log moved to {result.sink_aside_location}"] if result.sink_aside_location else []),
                      f"  next run starts at (lifecycle record next_starting_offsets): {result.starting_offsets}"]
        report.emit("\n".join(lines))
    return ExitCode.BLOCKED if result.dry_run and result.plan.blocked else ExitCode.OK


COMMANDS = (
    Command("backup", "back up a stopped query's checkpoint (verified, incremental)", _backup_arguments, _backup),
    Command("backups", "list, verify or prune the backups of a job (--prune plans unless --execute)",
            _backups_arguments, _backups),
    Command("restore", "roll a checkpoint back to a backup, judged against Kafka first (plans unless --execute)",
            _restore_arguments, _restore),
    Command("reset", "move a job to a new checkpoint at an exact Kafka position (plans unless --execute)",
            _reset_arguments, _reset),
)
