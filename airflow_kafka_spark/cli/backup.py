"""``aks backup`` and ``aks backups``: take a verified, incremental backup; list, verify or prune a job's backups.

Listed in :data:`COMMANDS`, which :mod:`airflow_kafka_spark.cli` gathers; same conventions as the
other checkpoint commands (:mod:`.checkpoint`): heavy imports inside the run functions, ``--json``
for machines, exit 3 when blocked. ``backups --prune`` prints its plan and deletes nothing unless
``--execute`` is given.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Protocol

from airflow_kafka_spark.cli import _storage as storage
from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, add_kafka_arguments, positive_int
from airflow_kafka_spark.cli._job import add_execute_argument, executes
from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.ops.options import Retention, RunOptions, Stores

if TYPE_CHECKING:
    from airflow_kafka_spark.ops.backup.catalog import Catalog
    from airflow_kafka_spark.registry.model import JobSpec


def _backup_arguments(p: argparse.ArgumentParser) -> None:
    storage.storage_arguments(p)
    storage.progress_argument(p)
    add_kafka_arguments(p)   # a DStream job's backup reads its group's offsets
    p.add_argument("--reason", default="manual", help="why (kept in the manifest)")
    p.add_argument(
        "--force", action="store_true", help="back up a running query anyway: only its last committed batch is captured"
    )
    p.add_argument("--spark-version", metavar="X.Y.Z", help="Spark version that wrote the checkpoint, if known")
    p.add_argument(
        "--pre-copy", action="store_true",
        help="copy and hash the files now, while the query may still run, and publish nothing: the backup "
             "after the stop then reads only the files written since (docs/security.md)",
    )
    p.add_argument("--keep-last", metavar="N", type=positive_int, help="then prune to the newest N backups")
    p.add_argument("--max-age", metavar="DURATION", help="then prune backups older than this (7d, 12h, ...)")
    p.add_argument(
        "--settle",
        metavar="SECONDS",
        type=float,
        default=2.0,
        help="least time between the two listings that detect a running query (default 2)",
    )
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _backup_dstream(args: argparse.Namespace, spec: Any) -> int:
    """A DStream job's backup, as the safe-restart DAG takes it: the group's offsets and a copy of its
    ``ssc.checkpoint`` under ``<backup_root>/<job>/dstream-<stamp>/`` (its position is the group)."""
    from airflow_kafka_spark.cli._job import kafka_config_for
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.ops.dstream_backup import backup_dstream, prune_dstream_backups

    so = storage.opts(args.backup_storage_option)
    keep_last, max_age_s = _retention(args, None)
    with KafkaView(kafka_config_for(args, spec), timeout=args.timeout) as view:
        taken = backup_dstream(spec, kafka=view, storage_options=so)
    doc = {"job": spec.name, "group": spec.group, "location": taken.location,
           "group_offsets": {str(tp): o for tp, o in sorted(taken.group_offsets.items())},
           "checkpoint_copy": taken.checkpoint_copy}
    if keep_last is not None or max_age_s is not None:
        doc["pruned"] = prune_dstream_backups(spec, keep_last=keep_last, max_age_s=max_age_s, dry_run=False,
                                              keep=[taken.location], storage_options=so).removed
    if args.json:
        report.emit(report.dump_json(doc))
        return ExitCode.OK
    report.emit(f"backup of DStream job {spec.name} written to {taken.location}\n"
                f"  group {spec.group}: {len(taken.group_offsets)} partition offsets; DStream checkpoint "
                + (f"copied to {taken.checkpoint_copy}" if taken.checkpoint_copy else "none (the job has none)")
                + (f"\n  pruned: {', '.join(doc['pruned'])}" if doc.get("pruned") else ""))
    return ExitCode.OK


def _retention(args: argparse.Namespace, spec: Any) -> tuple[int | None, float | None]:
    """``--keep-last``/``--max-age``, else (with ``spec``) the registry's ``backup_retention``."""
    from airflow_kafka_spark._util.text import parse_duration

    keep_last = args.keep_last
    max_age_s = parse_duration(args.max_age) if args.max_age else None
    if keep_last is None and max_age_s is None and spec is not None:
        keep_last, max_age_s = spec.backup_retention.keep_last, spec.backup_retention.max_age_s
    return keep_last, max_age_s


class _JobBackups(Protocol):
    """``aks backup`` and ``aks backups`` for one kind of job (registry ``kind``): a checkpoint's verified,
    incremental copies, or a DStream job's group offsets under ``dstream-<stamp>/``; the flags are the same."""

    def take(self, args: argparse.Namespace, spec: JobSpec | None, checkpoint: str, backup_root: str) -> int: ...

    def show(self, args: argparse.Namespace, spec: JobSpec | None, backup_root: str, execute: bool) -> int: ...


class _CheckpointBackups:
    def take(self, args: argparse.Namespace, spec: JobSpec | None, checkpoint: str, backup_root: str) -> int:
        return _backup_checkpoint(args, checkpoint, backup_root)

    def show(self, args: argparse.Namespace, spec: JobSpec | None, backup_root: str, execute: bool) -> int:
        return _checkpoint_backups(args, spec, backup_root, execute)


class _DStreamBackups:
    def take(self, args: argparse.Namespace, spec: JobSpec | None, checkpoint: str, backup_root: str) -> int:
        return _backup_dstream(args, spec)

    def show(self, args: argparse.Namespace, spec: JobSpec | None, backup_root: str, execute: bool) -> int:
        return _dstream_backups(args, spec, execute)


def _backups_of(spec: JobSpec | None) -> _JobBackups:
    """The backups of ``spec``'s kind; without ``--job``, a checkpoint's (``--checkpoint``/``--backup-root``)."""
    from airflow_kafka_spark.registry.model import JobKind

    kinds: dict[JobKind, _JobBackups] = {JobKind.STRUCTURED: _CheckpointBackups(), JobKind.DSTREAM: _DStreamBackups()}
    return kinds[spec.kind if spec is not None else JobKind.STRUCTURED]


def _backup(args: argparse.Namespace) -> int:
    spec, checkpoint, backup_root = storage.job_and_paths(args)
    return _backups_of(spec).take(args, spec, checkpoint, backup_root)


def _backup_checkpoint(args: argparse.Namespace, checkpoint: str, backup_root: str) -> int:
    from airflow_kafka_spark._util.text import parse_duration
    from airflow_kafka_spark.errors import OperationBlocked
    from airflow_kafka_spark.ops.commands import backup_checkpoint

    if args.pre_copy:
        return _pre_copy(args, checkpoint, backup_root)
    try:
        with storage.progress_lines("backup", args) as progress:
            result = backup_checkpoint(
                checkpoint,
                backup_root,
                job=args.job,
                reason=args.reason,
                force=args.force,
                settle_s=args.settle,
                retention=Retention(keep_last=args.keep_last,
                                    max_age_s=parse_duration(args.max_age) if args.max_age else None),
                run=RunOptions(stores=Stores(checkpoint=storage.opts(args.storage_option),
                                             backup=storage.opts(args.backup_storage_option)),
                               spark_version=args.spark_version, seal_key=storage.seal_key_of(args),
                               progress=progress),
            )
    except OperationBlocked as exc:
        return storage.blocked(exc, args)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
        return ExitCode.OK
    m = result.manifest
    lines = [
        f"backup {m.backup_id} of job {m.job} published (verified)",
        f"  query {m.query_id}, last committed batch {report.fmt(m.last_committed_batch)}"
        + (f", pending batch {m.pending_batch} kept" if m.pending_batch is not None else "")
        + (" — FORCED on a running query: last committed batch only" if m.forced else ""),
        f"  {result.files:,} files, {result.bytes:,} bytes; read {result.files_hashed:,} "
        f"({result.bytes_hashed:,} bytes), stored {result.blobs_written:,} new blobs "
        f"({result.bytes_written:,} bytes), {result.files_from_previous:,} unchanged since the previous backup",
        f"  {result.seconds:.2f}s (verify {result.verify_seconds:.2f}s)",
    ]
    if m.selection.get("why"):
        lines.append(f"  copied whole (every file but temp files): {m.selection['why']}")
    if m.selection.get("unmodelled"):
        lines.append(f"  copied as found (outside Spark's known folders): {', '.join(m.selection['unmodelled'])}")
    lines += [f"  left out {path}: {why}" for path, why in (m.selection.get("excluded") or {}).items()]
    if m.problems:
        lines += [f"  warning: {p}" for p in m.problems]
    if result.pruned:
        lines.append(f"  pruned: {', '.join(result.pruned)}")
    report.emit("\n".join(lines))
    return ExitCode.OK


def _pre_copy(args: argparse.Namespace, checkpoint: str, backup_root: str) -> int:
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint

    r = precopy_checkpoint(checkpoint, backup_root, job=args.job, storage_options=storage.opts(args.storage_option),
                           backup_storage_options=storage.opts(args.backup_storage_option),
                           seal_key=storage.seal_key_of(args))
    if args.json:
        report.emit(report.dump_json({"pre_copy": r.to_dict()}))
        return ExitCode.OK
    report.emit(f"pre-copy of job {r.job} (nothing published: the backup after the stop reads only newer files)\n"
                f"  {r.files:,} files, {r.bytes:,} bytes; read {r.files_read:,} ({r.bytes_read:,} bytes), stored "
                f"{r.blobs_written:,} new blobs; {r.files_skipped:,} changed while read (left to the backup); "
                f"{r.seconds:.2f}s")
    return ExitCode.OK


def _backups_arguments(p: argparse.ArgumentParser) -> None:
    storage.storage_arguments(p, checkpoint=False)
    p.add_argument("--verify", metavar="ID", help="verify one backup deeply (every blob re-hashed); 'latest' works")
    p.add_argument(
        "--prune",
        action="store_true",
        help="apply retention (--keep-last / --max-age, default the registry job's backup_retention) and "
        "collect blobs: a plan unless --execute is given",
    )
    p.add_argument("--keep-last", metavar="N", type=positive_int, help="retention: keep the newest N")
    p.add_argument("--max-age", metavar="DURATION", help="retention: drop backups older than this (7d, 12h, ...)")
    add_execute_argument(p, "with --prune: delete")
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


def _dstream_backups(args: argparse.Namespace, spec: Any, execute: bool) -> int:
    """A DStream job's ``dstream-<stamp>/`` backups, newest first; ``--prune`` applies retention to them."""
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.ops.dstream_backup import list_dstream_backups, prune_dstream_backups

    if args.verify:
        raise UserError(f"job {spec.name} is a DStream job: its backups (group offsets and a checkpoint copy) carry "
                        "no digests to verify; list them without --verify")
    so = storage.opts(args.backup_storage_option)
    pruned = None
    if args.prune:
        keep_last, max_age_s = _retention(args, spec)
        pruned = prune_dstream_backups(spec, keep_last=keep_last, max_age_s=max_age_s, dry_run=not execute,
                                       storage_options=so)
    found = list_dstream_backups(spec, so)[::-1]
    if args.json:
        report.emit(report.dump_json({"job": spec.name, "kind": "dstream", "backups": [
            {"backup_id": b.backup_id, "location": b.location, "created_at_ms": b.created_at_ms} for b in found],
            **({"prune": pruned.to_dict()} if pruned else {})}))
        return ExitCode.OK
    lines = []
    if pruned is not None:
        lines.append(f"{'removed' if execute else 'would remove'} {len(pruned.removed)} backup(s)"
                     f"{': ' + ', '.join(pruned.removed) if pruned.removed else ''}; "
                     f"{len(pruned.incomplete_removed)} interrupted backup folder(s)")
        if not execute:
            lines.append("plan only: nothing was deleted; pass --execute to prune")
    lines.append(f"backups of DStream job {spec.name} (newest first):")
    lines += [f"  {b.backup_id}  {b.location}" for b in found] or ["  (none)"]
    report.emit("\n".join(lines))
    return ExitCode.OK


def _backups(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.errors import UserError

    if not args.job:
        raise UserError("backups are listed per job: pass --job NAME")
    execute = executes(args)
    if execute and not args.prune:
        raise UserError(
            "--execute acts on --prune only: add --prune (with --keep-last/--max-age or the registry's "
            "backup_retention)"
        )
    spec, _, backup_root = storage.job_and_paths(args, checkpoint=False)
    return _backups_of(spec).show(args, spec, backup_root, execute)


def _checkpoint_backups(args: argparse.Namespace, spec: JobSpec | None, backup_root: str, execute: bool) -> int:
    """A job's verified backups of its checkpoint; ``--prune`` applies retention, ``--verify`` reads one whole."""
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.ops.backup.catalog import list_backups
    from airflow_kafka_spark.ops.backup.store import verify_backup
    from airflow_kafka_spark.ops.commands import prune_backups

    so = storage.opts(args.backup_storage_option)
    key = storage.seal_key_of(args)
    out: dict[str, Any] = {}
    if args.prune:
        keep_last, max_age_s = _retention(args, spec)
        if keep_last is None and max_age_s is None:
            raise UserError("--prune needs a retention rule: --keep-last N and/or --max-age DURATION")
        pr = prune_backups(
            backup_root,
            args.job,
            Retention(keep_last=keep_last, max_age_s=max_age_s),
            dry_run=not execute,
            storage_options=so,
            seal_key=key,
        )
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
    report.emit(_render_backups(out, catalog, args.job, execute))
    return ExitCode.OK


def _render_backups(out: dict[str, Any], catalog: Catalog, job: str, execute: bool) -> str:
    """``aks backups`` as text: what a prune did or would do, a verification, the catalog."""
    lines = []
    if "prune" in out:
        pr = out["prune"]
        lines.append(
            f"{'removed' if execute else 'would remove'} {len(pr['removed'])} backup(s)"
            f"{': ' + ', '.join(pr['removed']) if pr['removed'] else ''}; {pr['blobs_removed']:,} blobs "
            f"({pr['bytes_freed']:,} bytes), {pr['leftovers_removed']} leftovers of interrupted backups"
        )
        if not execute:
            lines.append("plan only: nothing was deleted; pass --execute to prune")
    if "verified" in out:
        v = out["verified"]
        lines.append(
            f"backup {v['backup_id']}: verified, {v['files']:,} files, {v['bytes']:,} bytes, every blob "
            "matches its sha256"
        )
    rows = [
        [
            m.backup_id,
            m.created_at,
            m.last_committed_batch,
            len(m.files),
            m.total_bytes,
            "forced" if m.forced else "",
            m.reason,
        ]
        for m in catalog.backups
    ]
    lines.append(f"backups of job {job} (newest first):")
    lines.append(
        report.render_table(("BACKUP", "CREATED", "BATCH", "FILES", "BYTES", "", "REASON"), rows, right=(2, 3, 4))
        if rows
        else "  (none)"
    )
    for name, why in catalog.invalid:
        lines.append(f"INVALID {name}: {why}")
    return "\n".join(lines)


COMMANDS = (
    Command("backup", "back up a stopped query's checkpoint (verified, incremental)", _backup_arguments, _backup),
    Command(
        "backups",
        "list, verify or prune the backups of a job (--prune plans unless --execute)",
        _backups_arguments,
        _backups,
    ),
)
