"""HDFS snapshot backups: the backup after the stop is one ``CREATESNAPSHOT``, no body through this process.

Why: WebHDFS has no copy, so a backup into an HDFS blob store reads every new state file through
the worker and writes it again (``ops.backup.kinds.WebHdfs``). When the checkpoint lies in a
snapshottable folder (an administrator ran ``hdfs dfsadmin -allowSnapshot`` on an ancestor of it:
its FileStatus says ``snapshotEnabled``, ``_util.stores.webhdfs_snapshot_root``; not on the
checkpoint folder itself, which restore and reset move aside) and the
backup root is on the same cluster, the NameNode can keep the checkpoint as it is instead: a
snapshot is read-only, shares the blocks of the live files and costs one request. The product never
makes a folder snapshottable (that needs the superuser).

What such a backup is (:class:`SnapshotWriter`, behind the blob writer's interface so
``ops.backup.take`` and ``ops.backup.precopy`` keep one flow):

* **The snapshot**, named ``aks-<job>-<backup id>`` (:func:`snapshot_name`), taken after the
  checkpoint was listed and its files selected, as the blob copy would be (``ops.backup.selection``).
* **The manifest** lists the selected files (complete by construction: the same selection), each
  with its size, mtime and the cluster's file checksum (``GETFILECHECKSUM``: MD5 of the per-block
  MD5s of the CRC32Cs the DataNodes keep) as ``checksum``, ``"proof": "hdfs-snapshot"``, and the
  snapshot's folder, name and the checkpoint's path inside it (``Manifest.snapshot``). A file whose
  path, size and mtime equal an ``hdfs-snapshot`` entry of the previous manifest or the pre-copy
  keeps that checksum (the pre-copy computes them while the query runs): only the files written
  since are asked for one in the downtime window.
* **Files the cluster keeps no checksum for**: most of Spark's own. Spark creates the files it writes
  through its checkpoint file manager (the logs, the state's deltas and changelogs) with HDFS
  checksums turned off (its file-context manager passes a disabled ``ChecksumOpt``; on the YARN
  bench a few RocksDB files had one), so the DataNodes keep no CRCs for them and the NameNode answers their
  ``GETFILECHECKSUM`` with a server error (Hadoop 3.4.1: a ``NullPointerException``;
  ``tests/cluster/test_scenarios_cluster.py``, the snapshot test, shows it on a checkpoint Spark
  wrote). Such a file is read here once and named by the SHA-256 of its bytes
  (:data:`READ_SHA256` ``<hex>``, :func:`content_checksum`); verify and restore read it again to
  compare. The pre-copy reads them while the query runs, so the window reads only the files
  written since, as the blob store's backup would, but writes none of them.
* **Verified** (:func:`check_snapshot`): when published, every entry's file is in the snapshot with
  its size and mtime; ``aks backup verify`` (deep) and every restore compute each file's checksum
  again and compare it with the recorded one.
* **Restore** (:func:`copy_out`): each file is copied out of the snapshot through this process (WebHDFS
  has no copy), eight at a time, and the copy is proven by its own checksum being the recorded one;
  where the two cannot be compared (another block size), by the snapshot file's checksum being the
  recorded one and the copy's bytes, read back, hashing as the bytes read from the snapshot did.
* **Pruning** a backup deletes its snapshot (:func:`release`), after its manifest.

A snapshot left by a backup that failed after taking it (the query was found running) is named by
no manifest: the job's next snapshot backup into the same root deletes it (:func:`sweep`).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_kafka_spark._util.fs import (
    Location,
    list_files,
    mtime_of,
    open_regular,
    os_reason,
    read_bytes,
    remove_file,
    write_atomic,
)
from airflow_kafka_spark._util.paths import Contained
from airflow_kafka_spark._util.stores import (
    is_webhdfs,
    webhdfs_create_snapshot,
    webhdfs_delete_snapshot,
    webhdfs_file_checksum,
    webhdfs_same_cluster,
    webhdfs_snapshot_root,
)
from airflow_kafka_spark.errors import CheckpointWritten, UserError
from airflow_kafka_spark.names import is_backup_id
from airflow_kafka_spark.ops.backup.catalog import store_path
from airflow_kafka_spark.ops.backup.kinds import WebHdfs
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, SNAPSHOT_PROOF, STAGING_DIR, FileEntry, Manifest

#: GETFILECHECKSUM requests at once (each a NameNode and a DataNode round trip, no body).
_CHECKSUM_THREADS = 8
#: Files copied out of a snapshot at once by a restore: each copy waits on a NameNode and a DataNode
#: (open, create, the copy's checksum), not on this process. 238 files, 26 MB on the minicluster
#: (load 13-20, three rounds): 31-45 s with 4, 22.5-25 s with 8; the blob-store restore (4 at a time) 28-39 s.
_COPY_THREADS = 8
_CHUNK = 1 << 20
#: The mark a snapshot backup leaves in ``staging/`` before its snapshot (:func:`sweep`).
_MARK = ".snapshot.json"
#: The ``checksum`` of an entry whose file the cluster keeps no checksum for: ``SHA-256:<hex>`` of its
#: bytes, read here (no cluster algorithm is named so: the NameNode's start ``MD5-of-`` or ``COMPOSITE-``).
READ_SHA256 = "SHA-256:"


def content_checksum(at: Location, size: int) -> tuple[str, bool]:
    """(the name of ``at``'s content, whether its bytes were read here): the cluster's checksum, or where
    the cluster keeps none for the file (a server error, not a missing file or an unreachable
    NameNode, which raise) :data:`READ_SHA256` and the SHA-256 of its ``size`` bytes."""
    try:
        return webhdfs_file_checksum(at.fs, at.path), False
    except (RuntimeError, ValueError, KeyError):
        return READ_SHA256 + _read_sha256(at, size), True


def same_content(at: Location, recorded: str, size: int) -> bool:
    """Does ``at`` hold the content an entry recorded (:func:`content_checksum`'s name of it)?"""
    if recorded.startswith(READ_SHA256):
        try:
            return READ_SHA256 + _read_sha256(at, size) == recorded
        except UserError:   # another size
            return False
    return webhdfs_file_checksum(at.fs, at.path) == recorded


def _read_sha256(at: Location, size: int) -> str:
    """SHA-256 of ``at``'s bytes, which must be exactly ``size`` (read at most one more)."""
    h, left = hashlib.sha256(), size + 1
    with open_regular(at, follow_links=False) as fh:
        while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
            h.update(chunk)
            left -= len(chunk)
    if left != 1:
        raise CheckpointWritten(f"{at.url} has {size + 1 - left:,} bytes, not the {size:,} it was listed with: "
                        "something writes into the checkpoint; stop the query and back up again")
    return h.hexdigest()


def snapshot_name(job: str, backup_id: str) -> str:
    """The snapshot of backup ``backup_id`` of ``job`` (both validated names: no ``/``)."""
    return f"aks-{job}-{backup_id}"


def snapshot_writer(ck: Location, job_loc: Location, job: str, backup_id: str | None,
                    previous: Mapping[str, FileEntry]) -> SnapshotWriter | None:
    """The writer of a snapshot backup of ``ck`` (``backup_id``; None: a pre-copy, which takes no
    snapshot), or None when the store cannot keep one: not both on one HDFS, no snapshottable
    folder above the checkpoint, or this user may not snapshot it. The snapshot is taken here."""
    if not webhdfs_same_cluster(ck.fs, job_loc.fs):
        return None
    folder = webhdfs_snapshot_root(ck.fs, ck.path)
    if folder is None or folder == posixpath.normpath(ck.path):
        # The checkpoint folder itself: HDFS refuses to rename a snapshottable folder that has
        # snapshots ("cannot be deleted since ... is snapshottable and already has snapshots",
        # minicluster), and restore and reset move the checkpoint folder aside.
        return None
    writer = SnapshotWriter(ck, folder, previous)
    if backup_id is not None:
        sweep(ck.fs, job, job_loc)
        write_atomic(store_path(job_loc, STAGING_DIR, f"{backup_id}{_MARK}"), json.dumps({"folder": folder}).encode())
        try:
            writer.take(snapshot_name(job, backup_id))
        except PermissionError:   # only the folder's owner or the superuser may: the blob store then
            return None
        except RuntimeError as exc:   # no snapshot quota left (HDFS allows 65,536 per folder)
            if "quota" not in str(exc):
                raise
            return None
    return writer


class SnapshotWriter:
    """``BlobWriter``'s interface for a snapshot backup: each ``put`` names a file by its cluster checksum.

    ``index`` holds the checksums (-> size) the previous manifest and the pre-copy computed, which
    ``take`` reuses for unchanged files; nothing is written to the blob store.
    """

    name = SNAPSHOT_PROOF

    def __init__(self, ck: Location, folder: str, previous: Mapping[str, FileEntry]) -> None:
        self.ck, self.folder = ck, folder
        self.index = {f.sha256: f.size for f in previous.values() if f.proof == SNAPSHOT_PROOF}
        self.written: set[str] = set()
        self.bytes_written = self.bytes_hashed = self.files_hashed = self.bytes_copied_by_store = 0
        self.files_vouched = 0   # checksums the cluster computed for this run
        self.snapshot_doc: dict[str, str] | None = None
        self._snap: Location | None = None

    def take(self, name: str) -> None:
        """CREATESNAPSHOT of the snapshottable folder; the checkpoint's files are read from it from now on."""
        rel = posixpath.relpath(posixpath.normpath(self.ck.path), self.folder)
        path = webhdfs_create_snapshot(self.ck.fs, self.folder, name)
        inside = posixpath.normpath(posixpath.join(path, rel)) if rel != "." else path
        self.snapshot_doc = {"folder": self.folder, "name": name, "path": inside}
        self._snap = Location(self.ck.fs, inside, f"{self.ck.url.split(self.ck.path)[0]}{inside}")

    def prefetch(self, sources: list[tuple[Location, int]]) -> None:
        """Nothing to fetch ahead: :meth:`put_many` asks for all checksums at once."""

    def put_many(self, sources: list[tuple[Location, int]]) -> Iterator[tuple[str, int, str] | BaseException]:
        """(checksum, size, proof) of each source as the snapshot holds it (the live file in a pre-copy)."""
        read: list[int] = []   # sizes of the files read here (list.append is atomic)

        def one(item: tuple[Location, int]) -> tuple[str, int, str] | BaseException:
            src, size = item
            at = self._in_snapshot(src)
            try:
                checksum, was_read = content_checksum(at, size)
            except FileNotFoundError as exc:   # gone since the listing: the query runs (take retries)
                return exc
            except UserError as exc:           # another size than listed: the query writes there
                return exc
            except OSError as exc:
                return UserError(f"cannot get the checksum of {at.url}: {os_reason(exc)}")
            if was_read:
                read.append(size)
            return checksum, size, SNAPSHOT_PROOF

        with ThreadPoolExecutor(max_workers=_CHECKSUM_THREADS) as pool:
            out = list(pool.map(one, sources))
        self.files_hashed += len(read)
        self.bytes_hashed += sum(read)
        self.files_vouched += sum(not isinstance(r, BaseException) for r in out) - len(read)
        return iter(out)

    def _in_snapshot(self, src: Location) -> Location:
        if self._snap is None:
            return src
        rel = posixpath.relpath(src.path, self.ck.path)
        return self._snap.child(rel)

    def sync(self) -> None:
        """Nothing staged: the snapshot is complete when taken."""

    def to_rehash(self) -> set[str]:
        """No blob was written; :func:`check_snapshot` checks the snapshot instead."""
        return set()


def _snapshot_location(job_loc: Location, m: Manifest) -> Location:
    if not is_webhdfs(job_loc.fs):
        raise UserError(f"backup {m.backup_id} is an HDFS snapshot ({m.snapshot['path']}), but the backup root "
                        f"{job_loc.url} is not on HDFS: open the backup root on the checkpoint's cluster")
    path = m.snapshot["path"]
    return Location(job_loc.fs, path, f"{job_loc.url.split(job_loc.path)[0]}{path}")


def check_snapshot(job_loc: Location, m: Manifest, *, deep: bool) -> None:
    """Every entry's file in the snapshot with its size and mtime; ``deep``: and its recorded checksum."""
    snap = _snapshot_location(job_loc, m)
    listing = list_files(snap)
    for f in m.files:
        info = listing.get(f.path)
        if info is None:
            raise UserError(f"backup {m.backup_id} is incomplete: {f.path} is missing from snapshot {snap.path}; "
                            "restore from another backup")
        if int(info.get("size") or 0) != f.size or (f.mtime is not None and mtime_of(info) != f.mtime):
            raise UserError(f"backup {m.backup_id} is damaged: {f.path} in snapshot {snap.path} is not the file "
                            "the manifest lists (size or mtime); restore from another backup")
    if deep:
        def same(f: FileEntry) -> bool:
            return same_content(snap.child(f.path), f.sha256, f.size)

        with ThreadPoolExecutor(max_workers=_CHECKSUM_THREADS) as pool:
            for f, ok in zip(m.files, pool.map(same, m.files), strict=True):
                if not ok:
                    raise UserError(f"backup {m.backup_id} is damaged: {f.path} in snapshot {snap.path} does not "
                                    "match its recorded checksum; restore from another backup")


def copy_out(m: Manifest, job_loc: Location, dest: Location,
             hash_only: Callable[[str], bool] | None = None) -> dict[str, int]:
    """Copy every file of snapshot backup ``m`` below ``dest``, each proven (see the module doc)."""
    snap = _snapshot_location(job_loc, m)
    below_dest = Contained(dest)
    same_cluster = webhdfs_same_cluster(job_loc.fs, dest.fs)

    def one(f: FileEntry) -> None:
        src, target = snap.child(f.path), below_dest.child(f.path, what=f"file path of backup {m.backup_id}")
        body = not (hash_only and hash_only(f.path))
        try:
            read = _copy(f, src, target, m.backup_id, body=body)
            if f.sha256.startswith(READ_SHA256):   # no cluster checksum: the bytes read name the content
                if READ_SHA256 + read != f.sha256:
                    raise UserError(f"backup {m.backup_id} is damaged: {f.path} in snapshot {snap.path} does not "
                                    "match its recorded checksum; restore from another backup")
                if body and _sha256(target, f.size) != read:
                    raise UserError(f"the copy of {f.path} of backup {m.backup_id} at {target.url} is not the "
                                    "snapshot's bytes; nothing was restored: re-run the restore")
                return
            if body and same_cluster and webhdfs_file_checksum(target.fs, target.path) == f.sha256:
                return
            if webhdfs_file_checksum(src.fs, src.path) != f.sha256:
                raise UserError(f"backup {m.backup_id} is damaged: {f.path} in snapshot {snap.path} does not match "
                                "its recorded checksum; restore from another backup")
            if body and same_cluster and _sha256(target, f.size) != read:   # checksums not comparable: re-read
                raise UserError(f"the copy of {f.path} of backup {m.backup_id} at {target.url} is not the "
                                "snapshot's bytes; nothing was restored: re-run the restore")
        except FileNotFoundError:
            raise UserError(f"backup {m.backup_id} is incomplete: {f.path} is missing from snapshot {snap.path}; "
                            "restore from another backup") from None
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            raise UserError(f"cannot copy {f.path} of backup {m.backup_id} to {dest.url}: {os_reason(exc)}") from None

    with ThreadPoolExecutor(max_workers=_COPY_THREADS) as pool:
        list(pool.map(one, m.files))
    return {"local": 0, "store": 0, "streamed": len(m.files)}


def _copy(f: FileEntry, src: Location, target: Location, backup_id: str, *, body: bool) -> str:
    """One snapshot file to ``target`` through this process (at most its size + 1 bytes); sha256 of what was read."""
    h, left = WebHdfs().copy_through(src, target, f.size, body=body)   # small files: one OPEN, one CREATE
    if left != 1:
        raise UserError(f"backup {backup_id} is damaged: {f.path} in its snapshot has {f.size + 1 - left:,} bytes, "
                        f"the manifest says {f.size:,}; restore from another backup")
    return h.hexdigest()


def _sha256(loc: Location, size: int) -> str:
    """SHA-256 of a restored copy, which must have ``size`` bytes ("" when it has another size)."""
    try:
        return _read_sha256(loc, size)
    except UserError:
        return ""


def sweep(fs: Any, job: str, job_loc: Location) -> list[str]:
    """Delete the snapshots of ``job``'s backups into this backup root that were never published
    (taken, then the backup refused: the query found running); the names deleted.

    Each snapshot backup first leaves a mark, ``staging/<backup id>.snapshot.json`` (the folder),
    before it takes its snapshot (:func:`snapshot_writer`). Called under the job's lock, so no backup
    of the job is between its snapshot and its manifest: a mark whose ``backups/<backup id>.json``
    does not exist is a leftover, and its snapshot (named from the job and the backup id, never
    from the mark) is deleted; every mark is removed. Without a mark nothing is deleted: another
    backup root's snapshots of the same job, or an administrator's, are never touched.
    """
    staged = job_loc.child(STAGING_DIR)
    marks = {rel[:-len(_MARK)]: rel for rel in list_files(staged)
             if "/" not in rel and rel.endswith(_MARK) and is_backup_id(rel[:-len(_MARK)])}
    if not marks:
        return []
    published = {rel[:-5] for rel in list_files(job_loc.child(BACKUPS_DIR)) if rel.endswith(".json")}
    gone = []
    for backup_id, rel in sorted(marks.items()):
        folder = _marked_folder(read_bytes(staged.child(rel)))
        if backup_id not in published and folder is not None \
                and webhdfs_delete_snapshot(fs, folder, snapshot_name(job, backup_id)):
            gone.append(snapshot_name(job, backup_id))
        remove_file(staged.child(rel))
    return gone


def _marked_folder(raw: bytes | None) -> str | None:
    try:
        folder = json.loads(raw or b"")["folder"]
    except (ValueError, KeyError, TypeError):
        return None
    return folder if isinstance(folder, str) and folder.startswith("/") and posixpath.normpath(folder) == folder \
        else None


def release(job_loc: Location, m: Manifest) -> bool:
    """Delete the snapshot of a pruned backup ``m`` (its manifest is gone first); False: there was none."""
    if not m.snapshot or not is_webhdfs(job_loc.fs) or m.snapshot["name"] != snapshot_name(m.job, m.backup_id):
        return False   # never a snapshot this backup did not take
    return webhdfs_delete_snapshot(job_loc.fs, m.snapshot["folder"], m.snapshot["name"])
