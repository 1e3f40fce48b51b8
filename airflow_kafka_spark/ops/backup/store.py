"""The content-addressed blob store of a backup root: verify, materialize (writing: ``ops.backup.writer``).

A file's body is stored once under its sha256 (``blobs/<aa>/<sha256>``), so a second backup copies
only what changed; a blob appears under its name only when complete. Reading back is always
checked: every blob a manifest names must be present with its size, and (deep) hash to its name.
Blobs are read as regular files only (never a link, FIFO or device), at most their size plus one.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from airflow_kafka_spark._util.fs import (
    Location,
    list_files,
    local_os_path,
    open_regular,
    os_reason,
    storage_error,
)
from airflow_kafka_spark._util.hdfs_tree import webhdfs_ls_many
from airflow_kafka_spark._util.recent import Recent
from airflow_kafka_spark._util.stores import is_webhdfs
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.backup.catalog import blob_rel, job_location, load_backup, open_backup_root
from airflow_kafka_spark.ops.backup.kinds import Streamed, kind_for
from airflow_kafka_spark.ops.backup.manifest import BLOBS_DIR, Manifest
from airflow_kafka_spark.ops.backup.restore_copy import copy_files
from airflow_kafka_spark.ops.backup.snapshot import check_snapshot

_CHUNK = 1 << 20
#: Threads re-hashing blobs in :func:`check_blobs`.
_HASH_THREADS = 4
#: HDFS ``blobs/<aa>`` folders this process listed: blobs URL -> {<aa>: (the folder's version, {sha256: size})}.
#: Four blob stores at once (a worker backs up a few jobs; each is ~100 bytes a blob).
_FOLDERS: Recent[str, dict[str, tuple[tuple[int, int, int], dict[str, int]]]] = Recent(4)


def verify_backup(backup_root: str, job: str, backup_id: str, *, deep: bool = True,
                  storage_options: dict | None = None, seal_key: bytes | None = None) -> Manifest:
    """Check a published backup: seal, and every blob present with its size (``deep``: and its sha256)."""
    m = load_backup(backup_root, job, backup_id, storage_options=storage_options, seal_key=seal_key)
    job_loc = job_location(open_backup_root(backup_root, storage_options), job)
    check_blobs(job_loc, m, deep_shas={f.sha256 for f in m.files} if deep else set())
    return m


def check_blobs(job_loc: Location, m: Manifest, *, deep_shas: set[str],
                 index: Mapping[str, int] | None = None) -> None:
    if m.snapshot:   # an HDFS snapshot backup: its files are in the snapshot, not in blobs/
        return check_snapshot(job_loc, m, deep=bool(deep_shas))
    have = index if index is not None else blob_index(job_loc)
    for f in m.files:
        size = have.get(f.sha256)
        if size is None:
            raise UserError(f"backup {m.backup_id} is incomplete: {blob_rel(f.sha256)} (for {f.path}) is missing "
                            f"from {job_loc.url}; restore from another backup")
        if size != f.size:
            raise UserError(f"backup {m.backup_id} is damaged: {blob_rel(f.sha256)} (for {f.path}) has {size} "
                            f"bytes, the manifest says {f.size}; restore from another backup")
    sizes = {f.sha256: f.size for f in m.files}
    for sha in mismatched_blobs(job_loc, {sha: sizes.get(sha, 0) for sha in deep_shas})[:1]:
        path = next(f.path for f in m.files if f.sha256 == sha)
        raise UserError(f"backup {m.backup_id} is damaged: the blob for {path} does not match its sha256 "
                        f"(content changed after the backup); restore from another backup")


def mismatched_blobs(job_loc: Location, sizes: Mapping[str, int]) -> list[str]:
    """The blobs among ``sizes`` (sha256 -> size) whose bytes do not hash to their name (missing ones too)."""
    shas = sorted(sizes)
    if not shas:
        return []

    kind = kind_for(job_loc, job_loc)   # HDFS: a small blob in one OPEN (no GETFILESTATUS first)

    def rehash(sha: str) -> str:
        return _hash_file(job_loc.child(blob_rel(sha)), sizes[sha], kind)

    # Reading and hashing release the GIL: a few threads keep both cores busy on 40,000 small blobs.
    with ThreadPoolExecutor(max_workers=_HASH_THREADS) as pool:
        return [sha for sha, actual in zip(shas, pool.map(rehash, shas, chunksize=256), strict=True) if actual != sha]


def blob_index(job_loc: Location, trusted: Mapping[str, int] | None = None) -> dict[str, int]:
    """sha256 -> size of every blob present in the job's store.

    On a local store the blobs are listed by name (``readdir`` with the entry type, no ``stat``), and
    a blob that ``trusted`` names — the previous published manifest of this job, which was verified
    before it was published: every blob present with its size, the new ones re-hashed — takes its
    size from there instead of a ``stat`` each (40,000 for a large state store). What that assumes:
    blobs are never rewritten in place (a blob is renamed into place once, complete, and never opened
    for writing again) and pruning, which runs under the same job lock, removes only blobs no
    manifest names. A *missing* blob is still seen here (it is not listed: the next backup stores it
    again); a blob damaged in place by someone else is found by ``aks verify`` (deep re-hash) and by
    restore, which hash every blob they read. Blobs not in ``trusted`` are ``stat``-ed; only regular
    files count (a link in the store is not a blob).
    """
    if is_webhdfs(job_loc.fs):
        return _webhdfs_blob_index(job_loc.child(BLOBS_DIR))
    if not job_loc.local:
        out: dict[str, int] = {}
        for rel, info in list_files(job_loc.child(BLOBS_DIR)).items():
            parts = rel.split("/")
            if len(parts) == 2 and len(parts[1]) == 64 and parts[0] == parts[1][:2]:
                out[parts[1]] = int(info.get("size") or 0)
        return out
    loc = job_loc.child(BLOBS_DIR)
    sizes = trusted or {}
    out = {}
    try:
        with os.scandir(local_os_path(loc)) as top:
            prefixes = [(d.name, d.path) for d in top if len(d.name) == 2 and d.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return out
    except OSError as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
    try:
        for prefix, folder in prefixes:
            try:
                listed = os.scandir(folder)
            except FileNotFoundError:
                continue
            with listed as entries:
                for entry in entries:
                    name = entry.name
                    if len(name) != 64 or name[:2] != prefix or not entry.is_file(follow_symlinks=False):
                        continue
                    size = sizes.get(name)
                    if size is None:
                        try:
                            size = entry.stat(follow_symlinks=False).st_size
                        except FileNotFoundError:
                            continue
                    out[name] = size
    except OSError as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
    return out


def _webhdfs_blob_index(loc: Location) -> dict[str, int]:
    """:func:`blob_index` on HDFS: ``blobs/`` listed, then those of its ``<aa>`` folders that changed since this
    process last listed them, many at once (``_util.hdfs_tree.webhdfs_ls_many``).

    Why: listing all 256 folders (20,000 blobs) took 0.9 s of the backup after a safe restart's stop on
    the minicluster, and every pre-copy pass beside the stop's wait listed them again
    (docs/benchmarks.md, round 14). The listing of ``blobs/`` gives each folder's ``fileId``,
    ``modificationTime`` and ``childrenNum``: the NameNode moves a folder's modification time with
    every entry created, renamed in or out, or deleted in it, and its count with every entry added or
    removed, so a folder whose three are unchanged holds the names listed before (a blob's size never
    changes: it is renamed into place complete and never written again, ``writer.BlobWriter``). A
    folder's listing is remembered with the version seen *before* it was listed: a change between
    the two is listed again next time. What this does not see is an add and a delete in one folder
    within the millisecond of its last change; blobs are added and pruned only under the job's lock.
    Where the NameNode gives no such fields (another WebHDFS server), every folder is listed.
    """
    try:
        top = loc.fs.ls(loc.path, detail=True)
    except FileNotFoundError:
        return {}
    except (OSError, RuntimeError) as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
    versions = {posixpath.basename(i["name"].rstrip("/")): _folder_version(i) for i in top
                if i.get("type") == "directory"}
    versions = {f: v for f, v in versions.items() if len(f) == 2}
    known = _FOLDERS.get(loc.url) or {}
    same = {f: known[f][1] for f, v in versions.items() if v is not None and f in known and known[f][0] == v}
    todo = [f for f in versions if f not in same]
    try:
        listings = webhdfs_ls_many(loc.fs, [posixpath.join(loc.path, f) for f in todo])
    except (OSError, RuntimeError) as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
    fresh = {folder: {name: int(info.get("size") or 0) for info in infos
                      if info.get("type") == "file"
                      and len(name := posixpath.basename(info["name"].rstrip("/"))) == 64 and name[:2] == folder}
             for folder, infos in zip(todo, listings, strict=True)}
    folders = {**same, **fresh}
    _FOLDERS.put(loc.url, {f: (v, folders[f]) for f, v in versions.items() if v is not None})
    out: dict[str, int] = {}
    for names in folders.values():
        out.update(names)
    return out


def _folder_version(info: Mapping) -> tuple[int, int, int] | None:
    """(fileId, modificationTime, childrenNum) of a listed HDFS folder, or None when the server gives not all three."""
    try:
        return int(info["fileId"]), int(info["modificationTime"]), int(info["childrenNum"])
    except (KeyError, TypeError, ValueError):
        return None


def _hash_file(loc: Location, size: int, kind: Streamed) -> str:
    """sha256 of a blob (a regular file, never a link), reading at most ``size + 1`` bytes."""
    h = hashlib.sha256()
    try:
        if size <= _CHUNK and (whole := kind.read_whole(loc, size + 1)) is not None:
            return hashlib.sha256(whole).hexdigest()
        with open_regular(loc, follow_links=False) as fh:
            left = size + 1
            while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise UserError(f"cannot read {loc.url}: {os_reason(exc)}") from None
    return h.hexdigest()


def materialize(manifest: Manifest, backup_root: str, dest: Location, *,
                storage_options: dict | None = None, hash_only: Callable[[str], bool] | None = None) -> None:
    """Write every file of ``manifest`` below ``dest``, each checked against its sha256 while copied.

    ``dest`` must be a fresh folder the caller owns (a staging folder beside the checkpoint, or
    ``memory://`` for a dry run): a mismatch raises :class:`UserError` and the caller deletes it.
    Every path is proven to stay below ``dest`` before it is opened (:class:`Contained`;
    ``from_json`` already refused unsafe ones); blobs are read as regular files only, at most
    their recorded size plus one byte. Files for which ``hash_only(path)`` is true are checked
    but written empty (a dry run judged in memory needs state files to exist, not their bodies).
    How each file is copied and proven: ``ops.backup.restore_copy``.
    """
    copy_files(manifest, backup_root, dest, storage_options=storage_options, hash_only=hash_only)
