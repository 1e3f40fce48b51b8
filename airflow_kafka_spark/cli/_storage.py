"""What the checkpoint commands share: storage flags, ``--job`` paths, progress lines, the seal key, exit 3.

``aks backup``/``backups`` (:mod:`.backup`) and ``aks restore``/``reset`` (:mod:`.checkpoint`) take
the same storage flags and report a blocked plan the same way; the heavy imports stay inside the
functions, as everywhere in the CLI.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import key_value
from airflow_kafka_spark.cli._job import add_registry_argument, pick, registry_job
from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.registry.model import JobSpec


def storage_arguments(p: argparse.ArgumentParser, *, checkpoint: bool = True) -> None:
    kv = key_value
    g = p.add_argument_group("storage")
    if checkpoint:
        g.add_argument(
            "--checkpoint", metavar="PATH", help="checkpoint location (path or fsspec URL; default: the registry job's)"
        )
        g.add_argument(
            "--storage-option",
            metavar="KEY=VALUE",
            type=kv,
            action="append",
            default=[],
            help="fsspec option for the checkpoint's file system (repeatable)",
        )
    g.add_argument("--backup-root", metavar="URL", help="backup root (path or fsspec URL; default: the registry job's)")
    g.add_argument(
        "--backup-storage-option",
        metavar="KEY=VALUE",
        type=kv,
        action="append",
        default=[],
        help="fsspec option for the backup root's file system (repeatable)",
    )
    g.add_argument(
        "--job",
        metavar="NAME",
        help="a registry job: its checkpoint, backup root, sink and Kafka connection (flags given here "
        "win); with --checkpoint and --backup-root any job name (default: the lifecycle record's, "
        "else the folder name)",
    )
    add_registry_argument(g)
    g.add_argument(
        "--seal-key-file",
        metavar="PATH",
        help="key of the keyed manifest seal (HMAC-SHA256); manifests without a valid one are refused "
        "(default: [kafka_spark] seal_key_file; none: the unkeyed seal only)",
    )


def job_and_paths(args: argparse.Namespace, *, checkpoint: bool = True) -> tuple[JobSpec | None, str | None, str]:
    """(registry job or None, checkpoint, backup root): flags win, the ``--job`` entry fills the rest.

    With every location given as a flag, ``--job`` is only the job name (as before the registry):
    the registry entry's sink and connection describe its own checkpoint, not one named by hand.
    """
    explicit = bool(args.backup_root) and (not checkpoint or bool(args.checkpoint))
    spec = None if explicit else registry_job(args)
    ck = pick(args.checkpoint, spec, "checkpoint", what="checkpoint") if checkpoint else None
    root = pick(args.backup_root, spec, "backup_root", what="backup root")
    return spec, ck, root


def progress_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        action="store_true",
        help="print the steps of a run that takes over a second on stderr even when it is not a "
        "terminal (on a terminal they are always shown)",
    )
    # Seconds before the step lines start (tests set 0 to see them on a run that is quick on their machine).
    p.add_argument("--progress-after", metavar="SECONDS", type=float, default=1.0, help=argparse.SUPPRESS)


def progress_lines(what: str, args: argparse.Namespace) -> report.Progress:
    return report.Progress(what, after_s=args.progress_after, enabled=args.progress or sys.stderr.isatty())


def seal_key_of(args: argparse.Namespace) -> bytes | None:
    """The key from --seal-key-file, else None (the core functions then read the seal_key_file setting)."""
    from airflow_kafka_spark.ops.seal import read_key_file

    return read_key_file(args.seal_key_file) if getattr(args, "seal_key_file", None) else None


def opts(pairs: list[tuple[str, str]]) -> dict[str, str] | None:
    return dict(pairs) or None


def blocked(exc: Exception, args: argparse.Namespace, render: Callable[[dict], str] | None = None) -> int:
    """Print what blocked (plan/verdict) and the one error line; exit 3."""
    details = getattr(exc, "details", {}) or {}
    if args.json:
        report.emit(
            report.dump_json(
                {"error": str(exc), "exit_code": ExitCode.BLOCKED, "code": getattr(exc, "code", None), **details}
            )
        )
    elif render is not None and details:
        report.emit(render(details))
    report.emit(report.error_line(str(exc)), sys.stderr)
    return ExitCode.BLOCKED
