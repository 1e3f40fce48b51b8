"""Copying a backup's files out of the blob store (a restore's staged copy): every file proven, fast.

What is verified, per file, on every path: the bytes written to the target are exactly ``size``
bytes whose sha256 is the manifest's (the manifest's seals were checked when it was loaded).

* **Local blob store -> local target** (:func:`_copy_local`): each blob is copied by the kernel
  (``copy_file_range``, as ``cp`` does; a reflink where the file system has them) and the new file
  is then read back from the page cache and hashed, by a few threads (copying, reading and hashing
  release the interpreter lock); one ``syncfs`` at the end makes the staged copy durable before the
  restore's commit point, as ``cp -a && sync`` would.
* **S3 -> the same S3 store** (``kinds.S3.copy_out``): ``CopyObject`` of each blob whose store
  keeps its SHA-256, then ``HeadObject`` of the copy: its kept SHA-256 must be the manifest's and
  its size the manifest's. No body passes through this process. A blob without a kept SHA-256
  (written by older versions, or larger than 4 MiB) is read and hashed here as below.
* **Anything else** (HDFS, across stores, a dry run into ``memory://``): read, hashed and written
  here, chunk by chunk, as before; HDFS -> HDFS, a blob of up to 4 MiB in one ``OPEN`` and one
  ``CREATE`` (two requests each, not seven in all: ``_util.stores.webhdfs_read`` / ``webhdfs_write``).
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import TRAFFIC, Location, open_regular, os_reason
from airflow_kafka_spark._util.localfs import sync_filesystem
from airflow_kafka_spark._util.paths import Contained
from airflow_kafka_spark._util.stores import is_webhdfs
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.backup import snapshot
from airflow_kafka_spark.ops.backup.catalog import blob_rel, job_location, open_backup_root
from airflow_kafka_spark.ops.backup.kinds import S3, Streamed, kind_for
from airflow_kafka_spark.ops.backup.manifest import FileEntry, Manifest, check_paths

_CHUNK = 1 << 20
#: Copies at once: local disks (both cores hashing while a third waits on the disk), object stores
#: (each copy is a few requests' latency), HDFS (each file a NameNode round trip and a DataNode
#: pipeline), other stores one at a time.
_THREADS = {"local": 4, "s3": 8, "webhdfs": 4}


def copy_files(manifest: Manifest, backup_root: str, dest: Location, *, storage_options: dict | None = None,
               hash_only: Callable[[str], bool] | None = None) -> dict[str, int]:
    """Write every file of ``manifest`` below ``dest``, each proven against its sha256 (see the module doc).

    ``dest`` must be a fresh folder the caller owns; a mismatch raises :class:`UserError` and the
    caller deletes it. Every path is proven to stay below ``dest`` before it is opened
    (:class:`Contained`); blobs are read as regular files only, at most their recorded size plus one
    byte. Files for which ``hash_only(path)`` is true are checked but written empty. Returns how
    many files went each way (``local``, ``store``, ``streamed``).
    """
    check_paths(manifest, f"of backup {manifest.backup_id}")
    job_loc = job_location(open_backup_root(backup_root, storage_options), manifest.job)
    if manifest.snapshot:   # an HDFS snapshot backup: copied out of its snapshot (``ops.backup.snapshot``)
        return snapshot.copy_out(manifest, job_loc, dest, hash_only)
    if dest.local:
        os.makedirs(dest.path, exist_ok=True)
    below_dest, below_job = Contained(dest), Contained(job_loc)
    blobs: dict[str, Location] = {}
    made: set[str] = set()
    work: list[tuple[FileEntry, Location, Location]] = []
    for f in manifest.files:   # each folder checked and created once, each blob's path proven once
        blob = blobs.get(f.sha256) or blobs.setdefault(f.sha256, below_job.child(blob_rel(f.sha256), what="blob path"))
        target = below_dest.child(f.path, what=f"file path of backup {manifest.backup_id}")
        if target.local and (parent := os.path.dirname(target.path)) not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        work.append((f, blob, target))
    kind = kind_for(job_loc, dest) if hash_only is None else Streamed()
    local = job_loc.local and dest.local and hash_only is None
    counts = {"local": 0, "store": 0, "streamed": 0}

    def one(item: tuple[FileEntry, Location, Location]) -> str:
        f, blob, target = item
        try:
            if local:
                _copy_local(f, blob, target.path, manifest.backup_id)
                return "local"
            if kind.copy_out(blob, target, f.sha256, f.size):
                return "store"
            _copy_streamed(f, blob, target, kind, manifest.backup_id, body=not (hash_only and hash_only(f.path)))
            return "streamed"
        except FileNotFoundError:
            raise UserError(f"backup {manifest.backup_id} is incomplete: the blob for {f.path} is missing; "
                            "restore from another backup") from None
        except OSError as exc:
            raise UserError(f"cannot copy {f.path} of backup {manifest.backup_id} to {dest.url}: "
                            f"{os_reason(exc)}") from None

    threads = _THREADS["local"] if local else _THREADS.get(_remote_name(job_loc, dest, kind), 1)
    if threads == 1 or len(work) < 2:
        for item in work:
            counts[one(item)] += 1
            faults.crash_point("restore.file")
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            try:
                for how in pool.map(one, work, chunksize=16):
                    counts[how] += 1
                    faults.crash_point("restore.file")
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise
    if local and work:
        sync_filesystem(dest.path)   # the staged copy on disk before the restore's commit point
    return counts


_NEW_FLAGS = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
#: ``copy_file_range`` cannot copy between these two files: copy through a buffer instead.
_NO_KERNEL_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF})


def _remote_name(job_loc: Location, dest: Location, kind: Streamed) -> str:
    """Which thread count a remote copy gets: by the store both ends are on (one store, one client kind)."""
    if isinstance(kind, S3) and kind.same_store:
        return "s3"
    return "webhdfs" if is_webhdfs(job_loc.fs) and is_webhdfs(dest.fs) else "other"


def _copy_local(f: FileEntry, blob: Location, target_path: str, backup_id: str) -> None:
    """One blob to one new local file, copied by the kernel, then **the new file** read back and hashed.

    ``copy_file_range`` copies inside the kernel (no buffer in this process; a reflink where the
    file system shares extents, e.g. XFS or Btrfs; ext4 copies pages); at most ``size + 1`` bytes,
    so a blob that grew is seen. What is hashed is the restored file itself, read back from the
    page cache just filled: the proof is about the bytes the checkpoint will hold, not about the
    blob they came from. The blob is opened as :func:`open_regular` opens it (never a link or FIFO).
    """
    h = hashlib.sha256()
    with open_regular(blob, follow_links=False) as fin:
        out = os.open(target_path, _NEW_FLAGS, 0o644)
        try:
            copied = _kernel_copy(fin, out, f.size + 1)
            if copied <= f.size:   # more than the recorded size is damage whatever its hash
                buf = memoryview(bytearray(min(_CHUNK, max(copied, 1))))
                at = 0
                while at < copied and (n := os.preadv(out, [buf[:min(len(buf), copied - at)]], at)):
                    h.update(buf[:n])
                    at += n
                copied = at if at < copied else copied
        finally:
            os.close(out)
    TRAFFIC.add(read=copied, written=copied)
    _check(f, f.size + 1 - copied, h, backup_id)


def _kernel_copy(fin: Any, out: int, limit: int) -> int:
    """Copy up to ``limit`` bytes of ``fin`` to ``out`` (``copy_file_range``; else read and write); bytes copied."""
    src, total = fin.fileno(), 0
    try:
        while total < limit and (n := os.copy_file_range(src, out, limit - total)):
            total += n
        return total
    except OSError as exc:
        if exc.errno not in _NO_KERNEL_COPY or total:
            raise
    while total < limit and (chunk := fin.read(min(_CHUNK, limit - total))):
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view):]
        total += len(chunk)
    return total


def _copy_streamed(f: FileEntry, blob: Location, target: Location, kind: Streamed, backup_id: str, *,
                   body: bool) -> None:
    """One blob through this process (any store), hashed while copied: chunk by chunk by fsspec, or (HDFS
    -> HDFS, a small blob) read in one ``OPEN`` and written in one ``CREATE`` (``kinds.WebHdfs.copy_through``)."""
    h, left = kind.copy_through(blob, target, f.size, body=body)
    _check(f, left, h, backup_id)



def _check(f: FileEntry, left: int, h: Any, backup_id: str) -> None:
    if left != 1:   # read size != recorded size: a dry run judges what the real run would copy
        raise UserError(f"backup {backup_id} is damaged: the blob for {f.path} has {f.size + 1 - left:,} bytes, the "
                        f"manifest says {f.size:,}; restore from another backup")
    if h.hexdigest() != f.sha256:
        raise UserError(f"backup {backup_id} is damaged: the blob for {f.path} does not match its sha256; restore "
                        "from another backup")
