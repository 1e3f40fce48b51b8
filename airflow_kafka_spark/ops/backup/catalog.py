"""The catalog of a backup root: where a job's backups live, and which published manifests are intact.

Paths below a job's folder (:func:`store_path`) are proven to go through no symbolic link before
anything is read or written there; a manifest is trusted only once parsed and sealed
(:meth:`~airflow_kafka_spark.ops.backup.manifest.Manifest.from_json`). The layout itself is in
:mod:`~airflow_kafka_spark.ops.backup.manifest`.
"""

from __future__ import annotations

import contextlib
import posixpath
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util.fs import Location, info_or_none, list_files, open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import MANIFEST_MAX_BYTES
from airflow_kafka_spark._util.paths import check_relative, safe_child
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.names import validate_backup_id, validate_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, BLOBS_DIR, Manifest


def job_location(root: Location, job: str) -> Location:
    """``<root>/<job>``, refused (one line) when it is a symbolic link: every read and write of a
    job's backups goes below it, and a link there would send them outside the backup root."""
    return safe_child(root, job, what="job folder")


def store_path(job_loc: Location, *parts: str) -> Location:
    """A path below a job's folder (``backups/``, ``blobs/``, ``staging/``, ``.tmp/``, the lock),
    proven to go through no symbolic link below the backup root before anything is written there."""
    return safe_child(job_loc, "/".join(parts), what="backup store path")


def blob_rel(sha: str) -> str:
    return f"{BLOBS_DIR}/{sha[:2]}/{sha}"


def open_backup_root(backup_root: str, storage_options: dict | None = None) -> Location:
    root = open_location(backup_root, storage_options, what="backup root")
    info = info_or_none(root)
    if info is not None and info.get("type") != "directory":
        raise UserError(f"backup root {backup_root} is a file, not a folder; pass a folder or bucket prefix")
    return root


@dataclass
class Catalog:
    """The published, intact backups of one job (newest first) and the manifests that are not."""

    job: str
    backups: list[Manifest]
    invalid: list[tuple[str, str]] = field(default_factory=list)   # (file name, one-line reason)

    @property
    def newest(self) -> Manifest | None:
        return self.backups[0] if self.backups else None

    def get(self, backup_id: str) -> Manifest | None:
        return next((b for b in self.backups if b.backup_id == backup_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "backups": [b.summary() for b in self.backups],
                "invalid": [{"manifest": n, "reason": r} for n, r in self.invalid]}


def list_backups(backup_root: str, job: str, *, storage_options: dict | None = None,
                 seal_key: bytes | None = None) -> Catalog:
    """Every published backup of ``job`` whose manifest is intact, newest first.

    A manifest only exists under ``backups/`` once its copy was verified, so a killed backup is
    never listed; a manifest edited afterwards (digest mismatch) or filed under the wrong job is
    reported in ``invalid``, never returned as a backup.
    """
    validate_job_name(job)
    root = open_backup_root(backup_root, storage_options)
    return read_catalog(job_location(root, job), job, seal.resolve_key(seal_key))


def read_manifest(loc: Location) -> bytes | None:
    """A manifest's bytes: a regular file (never a link, FIFO or device), at most 256 MiB."""
    return read_bytes(loc, limit=MANIFEST_MAX_BYTES, follow_links=False)


def read_catalog(job_loc: Location, job: str, seal_key: bytes | None) -> Catalog:
    listing = list_files(store_path(job_loc, BACKUPS_DIR))
    backups: list[Manifest] = []
    invalid: list[tuple[str, str]] = []
    for rel in sorted(listing):
        if "/" in rel or not rel.endswith(".json") or rel.startswith("."):
            continue
        where = f"{job_loc.url}/{BACKUPS_DIR}/{rel}"
        try:
            check_relative(rel, what="manifest name")
            raw = read_manifest(job_loc.child(BACKUPS_DIR, rel))
            if raw is None:
                continue
            m = Manifest.from_json(raw, where=where, seal_key=seal_key)
        except UserError as exc:
            invalid.append((rel, str(exc)))
            continue
        if m.job != job or f"{m.backup_id}.json" != rel:
            invalid.append((rel, f"manifest names job {m.job!r} / backup {m.backup_id}, but is filed as "
                                 f"{job}/{BACKUPS_DIR}/{rel}"))
            continue
        backups.append(m)
    backups.sort(key=lambda m: (m.created_at_ms, m.backup_id), reverse=True)
    return Catalog(job=job, backups=backups, invalid=invalid)


def load_backup(backup_root: str, job: str, backup_id: str, *, storage_options: dict | None = None,
                seal_key: bytes | None = None) -> Manifest:
    """The manifest of one published backup, seal checked; a missing or foreign one is a one-line error."""
    validate_job_name(job)
    validate_backup_id(backup_id)
    seal_key = seal.resolve_key(seal_key)
    root = open_backup_root(backup_root, storage_options)
    job_loc = job_location(root, job)
    raw = read_manifest(store_path(job_loc, BACKUPS_DIR, f"{backup_id}.json"))
    if raw is None:
        others = [j for j in _jobs_holding(root, backup_id) if j != job]
        if others:
            raise UserError(f"backup {backup_id} belongs to job {others[0]!r}, not {job!r}: a checkpoint can only "
                            f"be restored from its own job's backups (aks backups --job {job})")
        raise UserError(f"no published backup {backup_id} for job {job} under {backup_root}; list them with "
                        f"aks backups --job {job}")
    m = Manifest.from_json(raw, where=f"{job_loc.url}/{BACKUPS_DIR}/{backup_id}.json", seal_key=seal_key)
    if m.job != job or m.backup_id != backup_id:
        raise UserError(f"backup {backup_id} filed under job {job} is a backup of job {m.job!r} "
                        f"({m.backup_id}): it was copied or renamed by hand; restore from {job}'s own backups")
    return m


def _jobs_holding(root: Location, backup_id: str) -> list[str]:
    with contextlib.suppress(OSError, UserError):
        return [posixpath.basename(p.rstrip("/")) for p in root.fs.ls(root.path, detail=False)
                if root.fs.exists(posixpath.join(p, BACKUPS_DIR, f"{backup_id}.json"))]
    return []
