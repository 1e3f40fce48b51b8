"""Retention and garbage collection of a job's backups.

A backup goes when it is beyond the newest ``keep_last`` or older than ``max_age_s``; the newest
intact backup always stays. Blobs no remaining backup references, staged manifests and temp files
of killed backups are collected once older than a grace period (0 on local disks, where the job
lock is exclusive; an hour on object stores, where it is best effort).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import Location, list_files, mtime_of, remove_file
from airflow_kafka_spark._util.paths import safe_child
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.backup.catalog import read_catalog, read_manifest, store_path
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, BLOBS_DIR, STAGING_DIR, TMP_DIR, Manifest
from airflow_kafka_spark.ops.backup.snapshot import release


def check_retention(keep_last: int | None, max_age_s: float | None) -> None:
    """The retention rule is sane: one line naming the bad value otherwise (before anything is read)."""
    if keep_last is not None and keep_last < 1:
        raise UserError(f"keep_last must be at least 1 (the newest backup is always kept), got {keep_last}")
    if max_age_s is not None and max_age_s <= 0:
        raise UserError(f"max age must be positive, got {max_age_s}s")


def expired(rank: int, created_at_ms: int | None, *, keep_last: int | None, max_age_s: float | None,
            now_ms: int) -> bool:
    """The retention rule, for manifests and DStream backups alike: beyond the newest ``keep_last`` or
    older than ``max_age_s`` goes; ``rank`` 0 (the newest) always stays, and so does an unknown age."""
    too_many = keep_last is not None and rank >= keep_last
    too_old = max_age_s is not None and created_at_ms is not None and now_ms - created_at_ms > max_age_s * 1000
    return rank > 0 and (too_many or too_old)


@dataclass
class PruneResult:
    kept: list[Manifest]
    removed: list[Manifest]
    blobs_removed: int
    bytes_freed: int
    leftovers_removed: int        # staging manifests and temp blobs of killed backups
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kept": [m.backup_id for m in self.kept], "removed": [m.backup_id for m in self.removed],
                "blobs_removed": self.blobs_removed, "bytes_freed": self.bytes_freed,
                "leftovers_removed": self.leftovers_removed, "dry_run": self.dry_run}


def prune_job(job_loc: Location, job: str, *, keep_last: int | None, max_age_s: float | None,
                  now_ms: int | None, dry_run: bool, grace_s: float, seal_key: bytes | None = None,
                  keep_ids: Collection[str] = ()) -> PruneResult:
    """``keep_ids``: backups retention must not remove whatever their age or rank (the backup a
    restore in the same run is about to read: a restore of the oldest kept backup must not lose it to
    the backup that run takes first)."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    catalog = read_catalog(job_loc, job, seal_key)
    kept: list[Manifest] = []
    removed: list[Manifest] = []
    for i, m in enumerate(catalog.backups):
        gone = expired(i, m.created_at_ms, keep_last=keep_last, max_age_s=max_age_s, now_ms=now)
        (removed if gone and m.backup_id not in keep_ids else kept).append(m)
    referenced = {f.sha256 for m in kept for f in m.files}
    if seal_key is not None:
        # Manifests without the keyed seal (written before the key was configured) are not listed,
        # but their blobs are not garbage either: only retention removes a backup's blobs.
        gone = {m.backup_id for m in removed}
        referenced |= {f.sha256 for m in read_catalog(job_loc, job, None).backups if m.backup_id not in gone
                       for f in m.files}
    cutoff = time.time() - grace_s
    # Staged manifests younger than the grace period may belong to a backup in flight (object
    # stores): their blobs are referenced too. Older ones are leftovers of killed backups.
    leftovers: list[Location] = []
    for rel, info in list_files(job_loc.child(STAGING_DIR)).items():
        loc = _listed(job_loc.child(STAGING_DIR), rel)
        if loc is None:
            continue
        if (mtime_of(info) or 0) > cutoff:
            with contextlib.suppress(UserError):
                raw = read_manifest(loc)
                referenced |= {f.sha256 for f in Manifest.from_json(raw or b"", where=loc.url).files}
        else:
            leftovers.append(loc)
    for rel, info in list_files(job_loc.child(TMP_DIR)).items():
        loc = _listed(job_loc.child(TMP_DIR), rel)
        if loc is not None and (mtime_of(info) or 0) <= cutoff:
            leftovers.append(loc)
    garbage: list[tuple[Location, int]] = []
    for rel, info in list_files(job_loc.child(BLOBS_DIR)).items():
        sha = rel.rsplit("/", 1)[-1]
        loc = _listed(job_loc.child(BLOBS_DIR), rel)
        if loc is None or sha in referenced or (mtime_of(info) or 0) > cutoff:
            continue
        garbage.append((loc, int(info.get("size") or 0)))
    if not dry_run:
        for m in removed:
            remove_file(store_path(job_loc, BACKUPS_DIR, f"{m.backup_id}.json"))
            faults.crash_point("prune.manifest")
            release(job_loc, m)   # an HDFS snapshot backup's snapshot, once no manifest names it
        for loc, _ in garbage:
            remove_file(loc)
        for loc in leftovers:
            remove_file(loc)
    return PruneResult(kept=kept, removed=removed, blobs_removed=len(garbage),
                       bytes_freed=sum(s for _, s in garbage), leftovers_removed=len(leftovers), dry_run=dry_run)


def _listed(base: Location, rel: str) -> Location | None:
    """A listed file below ``base`` that GC may touch, or None: a name that is not a safe relative
    path, or one reached through a symbolic link (a link planted in the backup root would
    otherwise make prune delete files wherever it points)."""
    try:
        return safe_child(base, rel, what="file")
    except UserError:
        return None


