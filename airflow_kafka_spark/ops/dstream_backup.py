"""A DStream job's backups: the group's committed offsets and a copy of its ``ssc.checkpoint``.

Layout: ``<backup_root>/<job>/dstream-<stamp>/`` holding ``group-offsets.json`` and ``checkpoint/``.
The offsets file is written last: a folder without it is a backup that was interrupted. Retention
(:func:`prune_dstream_backups`) follows the Structured Streaming backups' rule: beyond the newest
``keep_last`` or older than ``max_age_s`` goes, the newest always stays.
Apart from the restart steps in :mod:`airflow_kafka_spark.runtime.dstream`, and in ``ops`` (below
``watch``), because the command line (``aks backup``/``aks backups --job``), the audit and the DAG's
rollback all read or write them.
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.fs import (
    Location,
    exists,
    list_files,
    mtime_of,
    open_location,
    read_bytes,
    write_atomic,
)
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark._util.trees import remove_tree
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.names import DSTREAM_BACKUP_OFFSETS, DSTREAM_BACKUP_PREFIX
from airflow_kafka_spark.ops.backup.prune import check_retention, expired
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.verdict.dstream import read_state, set_recorded_build

OFFSETS_FILE = DSTREAM_BACKUP_OFFSETS


def require_dstream(spec: JobSpec) -> str:
    """The job's group; a job that is not ``kind: dstream`` is a one-line error."""
    if spec.kind is not JobKind.DSTREAM or not spec.group:
        raise UserError(
            f"job {spec.name!r} is not a DStream job (kind: dstream with a group); "
            "use the Structured Streaming steps for it"
        )
    return spec.group


def stamp_now() -> str:
    """``20261124T120000Z``: the UTC second that names a DStream backup or a checkpoint moved aside."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


@dataclass(frozen=True)
class DStreamBackup:
    location: str
    group_offsets: PartitionOffsets
    checkpoint_copy: str | None
    recorded_build: str | None = None  # the build that wrote the checkpoint copy
    recorded_application: str | None = None


@dataclass(frozen=True)
class DStreamBackupEntry:
    """One ``dstream-<stamp>/`` folder of a job, as listed (its id is the folder name)."""

    backup_id: str
    location: str
    created_at_ms: int | None


def list_dstream_backups(spec: JobSpec, storage_options: dict[str, Any] | None = None) -> list[DStreamBackupEntry]:
    """The job's DStream backups that hold their offsets file, oldest first (stamps sort by time)."""
    root = open_location(spec.backup_root, storage_options, what="backup root").child(spec.name)
    found = {rel.split("/", 1)[0]: info for rel, info in list_files(root).items()
             if rel.startswith(DSTREAM_BACKUP_PREFIX) and rel.count("/") == 1
             and rel.endswith("/" + DSTREAM_BACKUP_OFFSETS)}
    out = []
    for backup_id in sorted(found):
        mtime = mtime_of(found[backup_id])
        created_ms = _stamp_ms(backup_id) or (None if mtime is None else int(mtime * 1000))
        out.append(DStreamBackupEntry(backup_id, root.child(backup_id).url, created_ms))
    return out


def _stamp_ms(backup_id: str) -> int | None:
    """The UTC second a ``dstream-<stamp>`` folder names (the writer's clock, not the store's), in ms."""
    try:
        parsed = time.strptime(backup_id.removeprefix(DSTREAM_BACKUP_PREFIX), "%Y%m%dT%H%M%SZ")
    except ValueError:
        return None
    return calendar.timegm(parsed) * 1000


#: A folder without its offsets file younger than this may be a backup in flight (there is no lock).
INCOMPLETE_GRACE_S = 3600.0


@dataclass(frozen=True)
class DStreamPrune:
    """What retention keeps and removes of a DStream job's backups (ids are the folder names)."""

    kept: list[str]
    removed: list[str]
    incomplete_removed: list[str]  # interrupted backups (no offsets file) older than the grace period
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kept": self.kept, "removed": self.removed, "incomplete_removed": self.incomplete_removed,
                "dry_run": self.dry_run}


def prune_dstream_backups(spec: JobSpec, *, keep_last: int | None, max_age_s: float | None, dry_run: bool,
                          now_ms: int | None = None, keep: Collection[str] = (),
                          storage_options: dict[str, Any] | None = None) -> DStreamPrune:
    """Remove the DStream backups beyond the newest ``keep_last`` or older than ``max_age_s``.

    The newest backup always stays, and so does every id or location in ``keep`` (the backup the
    running safe restart may roll back to). ``dry_run``: the plan only, nothing is deleted.
    """
    require_dstream(spec)
    check_retention(keep_last, max_age_s)
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    root = open_location(spec.backup_root, storage_options, what="backup root").child(spec.name)
    kept: list[str] = []
    removed: list[DStreamBackupEntry] = []
    for i, b in enumerate(reversed(list_dstream_backups(spec, storage_options))):   # newest first
        gone = expired(i, b.created_at_ms, keep_last=keep_last, max_age_s=max_age_s, now_ms=now)
        if gone and b.backup_id not in keep and b.location not in keep:
            removed.append(b)
        else:
            kept.append(b.backup_id)
    incomplete = _incomplete(root, now)
    if not dry_run:
        for b in removed:
            remove_tree(open_location(b.location, storage_options, what="DStream backup"))
        for backup_id in incomplete:
            remove_tree(root.child(backup_id))
    return DStreamPrune(kept, [b.backup_id for b in removed], incomplete, dry_run)


def _incomplete(root: Location, now_ms: int) -> list[str]:
    """``dstream-<stamp>`` folders without their offsets file whose files are all older than the grace period."""
    newest: dict[str, float] = {}
    complete: set[str] = set()
    for rel, info in list_files(root).items():
        folder = rel.split("/", 1)[0]
        if not folder.startswith(DSTREAM_BACKUP_PREFIX) or "/" not in rel:
            continue
        if rel == f"{folder}/{DSTREAM_BACKUP_OFFSETS}":
            complete.add(folder)
        newest[folder] = max(newest.get(folder, 0.0), mtime_of(info) or float("inf"))
    cutoff = now_ms / 1000 - INCOMPLETE_GRACE_S
    return sorted(f for f, m in newest.items() if f not in complete and m < cutoff)


def backup_dstream(
    spec: JobSpec, *, kafka: KafkaView, stamp: str | None = None, storage_options: dict[str, Any] | None = None
) -> DStreamBackup:
    """``<backup_root>/<job>/dstream-<stamp>/``: the group's offsets and a copy of the DStream checkpoint."""
    group = require_dstream(spec)
    root = open_location(spec.backup_root, storage_options, what="backup root").child(
        spec.name, f"{DSTREAM_BACKUP_PREFIX}{stamp or stamp_now()}"
    )
    if exists(root):
        raise UserError(f"backup {root.url} already exists; wait a second and retry")
    offsets = kafka.group_offsets(group, spec.topics)
    copy, build, application = None, None, None
    if spec.dstream_checkpoint:
        src = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
        if list_files(src):
            _copy_tree(src, root.child("checkpoint"))
            copy = root.child("checkpoint").url
            state = read_state(spec.dstream_checkpoint, storage_options)
            build, application = state.recorded_build, state.recorded_application
    doc = {
        "group": group,
        "offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())],
        "checkpoint": spec.dstream_checkpoint,
        "checkpoint_copy": copy,
        "recorded_build": build,
        "recorded_application": application,
    }
    write_atomic(root.child(OFFSETS_FILE), json.dumps(doc, indent=1).encode())
    return DStreamBackup(root.url, offsets, copy, build, application)


def load_backup(location: str, storage_options: dict[str, Any] | None = None) -> DStreamBackup:
    raw = read_bytes(open_location(location, storage_options, what="DStream backup").child(OFFSETS_FILE))
    if raw is None:
        raise UserError(f"{location} has no {OFFSETS_FILE}: not a DStream backup")
    doc = load_json(raw, what=f"{location}/{OFFSETS_FILE}")
    offsets = {TopicPartition(str(t), int(p)): int(o) for t, p, o in doc["offsets"]}
    return DStreamBackup(
        location, offsets, doc.get("checkpoint_copy"), doc.get("recorded_build"), doc.get("recorded_application")
    )


def rollback_dstream(
    spec: JobSpec, backup: DStreamBackup, *, kafka: KafkaView, storage_options: dict[str, Any] | None = None
) -> None:
    """Put the group's offsets and the DStream checkpoint back as the backup has them (job stopped)."""
    group = require_dstream(spec)
    kafka.commit_group_offsets(group, backup.group_offsets)
    if spec.dstream_checkpoint and backup.checkpoint_copy:
        live = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
        if exists(live):
            remove_tree(live)
        _copy_tree(open_location(backup.checkpoint_copy, storage_options, what="DStream backup"), live)
        if backup.recorded_build:
            set_recorded_build(
                spec.dstream_checkpoint,
                backup.recorded_build,
                backup.recorded_application,
                storage_options=storage_options,
            )


def _copy_tree(src: Location, dst: Location) -> None:
    for rel in sorted(list_files(src)):
        data = read_bytes(src.child(rel))
        if data is not None:
            write_atomic(dst.child(rel), data)
