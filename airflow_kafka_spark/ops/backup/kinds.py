"""What each store can do for a backup without streaming bodies through this process.

One class per kind of store, chosen once per pair of ends (:func:`kind_for`), never an ``if`` per
file: the blob writer and the restore copy ask their kind, and a kind that cannot do a thing says
so (``None`` / ``False``), which sends the body through this process as before.

* **S3** (:class:`S3`): a store keeps a full-object SHA-256 for an object written with
  ``x-amz-checksum-sha256`` (it checks the body against it on PutObject and refuses a mismatch),
  and ``CopyObject`` carries it to the copy. So a checkpoint object that has one is copied into the
  blob store under that SHA-256 by ``CopyObject`` (``CopySourceIfMatch`` its ETag: exactly the
  version whose checksum was read), a new blob is written with its SHA-256 for the store to check,
  and a blob is proven by ``HeadObject`` (its kept SHA-256 is its name, its size the manifest's),
  not by reading it back. A restore to the same store copies each blob with ``CopyObject`` and
  proves the copy the same way. Objects without a kept SHA-256 (Spark's S3A writes none unless
  told to) are read and hashed here, once.
* **HDFS** (:class:`WebHdfs`): WebHDFS has no copy. Bodies are read and hashed here once and
  written once; a new blob is then proven by the NameNode's checksum (``GETFILECHECKSUM``, computed
  by the DataNodes from the CRCs they keep) being its source file's, instead of reading it back.
  When the two checksums cannot be compared (other block size), the blob is read back and re-hashed.
  A small file is read in one ``OPEN`` and written in one ``CREATE`` (each a NameNode request and
  its DataNode leg: ``_util.stores.webhdfs_read`` / ``webhdfs_write``), not through fsspec's file
  objects (seven requests).
  A checkpoint in a snapshottable folder on the backup root's cluster gets no blobs at all: an HDFS
  snapshot (``ops.backup.snapshot``).
* **Local disks** and every other store (:class:`Streamed`): bodies through this process, proven by
  re-hashing.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from airflow_kafka_spark._util.fs import TRAFFIC, Location, open_new, open_regular, remove_file, write_atomic
from airflow_kafka_spark._util.stores import (
    is_s3,
    is_webhdfs,
    s3_copy,
    s3_endpoint,
    s3_head,
    s3_put_sha256,
    webhdfs_file_checksum,
    webhdfs_read,
    webhdfs_rename,
    webhdfs_write,
)
from airflow_kafka_spark.errors import UserError

_CHUNK = 1 << 20
#: Bodies up to this size are read and written whole where the store has a cheaper way for them (WebHDFS).
_WHOLE = 4 << 20


class Vouched(NamedTuple):
    """A source object's SHA-256 as the store keeps it, and the version token to copy exactly that object."""

    sha256: str
    token: str | None


class Streamed:
    """Bodies pass through this process; nothing is proven without reading it."""

    name = "streamed"
    #: Does :meth:`copy_in` ever copy inside the store (worth asking many sources at once)?
    copies = False
    #: Puts at once into this store (``BlobWriter.put_many``): each waits on the network, not the CPU.
    parallel_puts = 1
    #: Must a folder exist before a file is renamed into it (``BlobWriter`` makes each once per run)?
    folder_before_rename = False

    def vouched_sha256(self, src: Location, size: int) -> Vouched | None:
        """The SHA-256 the store keeps for ``src`` (listed with ``size``), or None.

        The object may have been replaced since it was listed: its entry then pairs the listed mtime
        with the new body's hash, which is never reused (the next listing shows another mtime), and
        the copy is of exactly the version whose SHA-256 was read (``CopySourceIfMatch``)."""
        return None

    def copy_in(self, src: Location, blob: Location, token: str | None) -> bool:
        """Copy ``src`` to ``blob`` inside the store; False: not possible (or ``src`` changed)."""
        return False

    def put_checked(self, blob: Location, data: bytes, sha256: str) -> bool:
        """Write ``data`` to ``blob`` in one request the store checks against ``sha256``; False: not offered."""
        return False

    def proves(self, blob: Location, sha256: str, size: int, source: Location | None) -> bool:
        """Does the store itself show that ``blob`` holds ``size`` bytes hashing to ``sha256``? (No read.)"""
        return False

    def read_whole(self, src: Location, limit: int) -> bytes | None:
        """At most ``limit`` bytes of ``src`` in the store's cheapest way; None: read it with ``open_regular``."""
        return None

    def write_whole(self, target: Location, data: bytes, *, overwrite: bool) -> bool:
        """``target`` written with ``data`` in the store's cheapest way; False: write it with ``open_new``."""
        return False

    def copy_through(self, src: Location, target: Location, size: int, *, body: bool) -> tuple[Any, int]:
        """:func:`stream_copy` of ``src`` to ``target`` (a restore's file through this process)."""
        return stream_copy(src, target, size, body=body)

    def copy_out(self, blob: Location, target: Location, sha256: str, size: int) -> bool:
        """Restore ``blob`` to ``target`` inside the store, proven; False: stream it instead."""
        return False

    def publish(self, staged: Location, final: Location, data: bytes) -> None:
        """Put a verified manifest (``data``, read back from ``staged``) at ``final`` in one atomic step, and
        drop ``staged``: written again here (an object store's rename is a copy, a local one needs the
        folder synced); :class:`WebHdfs` renames."""
        write_atomic(final, data)
        remove_file(staged)


class S3(Streamed):
    """S3 (and S3-compatible stores that keep checksums): ``CopyObject`` and kept SHA-256s."""

    name = "s3"
    parallel_puts = 8

    def __init__(self, same_store: bool) -> None:
        self.same_store = same_store
        self.copies = same_store

    def vouched_sha256(self, src: Location, size: int) -> Vouched | None:
        if not self.same_store or not is_s3(src.fs):
            return None
        head = s3_head(src.fs, src.path)
        if head.sha256 is None or head.size != size:
            return None   # no kept SHA-256, or not the size listed: read it (a grown file is refused there)
        return Vouched(head.sha256, head.etag)

    def copy_in(self, src: Location, blob: Location, token: str | None) -> bool:
        if not self.same_store:
            return False
        try:
            return s3_copy(blob.fs, src.path, blob.path, if_match=token)
        except PermissionError:   # the backup's credentials may not read the checkpoint's bucket: stream
            self.same_store = False
            return False

    def put_checked(self, blob: Location, data: bytes, sha256: str) -> bool:
        s3_put_sha256(blob.fs, blob.path, data, sha256)
        return True

    def proves(self, blob: Location, sha256: str, size: int, source: Location | None) -> bool:
        try:
            head = s3_head(blob.fs, blob.path)
        except FileNotFoundError:
            return False
        return head.sha256 == sha256 and head.size == size

    def copy_out(self, blob: Location, target: Location, sha256: str, size: int) -> bool:
        if not self.same_store:
            return False
        head = s3_head(blob.fs, blob.path)
        if head.sha256 != sha256 or head.size != size:
            return False   # a blob without a kept SHA-256 (older backups, large bodies): stream and hash it
        try:
            copied = s3_copy(target.fs, blob.path, target.path, if_match=head.etag)
        except PermissionError:   # the target's credentials may not read the backup bucket: stream
            return False
        return copied and self.proves(target, sha256, size, None)


class WebHdfs(Streamed):
    """HDFS through WebHDFS: no copy operation; the NameNode's file checksum proves a copy without reading it."""

    name = "webhdfs"
    #: 8, not 4: 80 small files, 4 and 8 alternated on the minicluster (2 cores), 8 was faster in every
    #: pair, by 0.4-8.8 s (docs/benchmarks.md, "After round 9"); within ``requests``' 10 kept connections
    parallel_puts = 8
    folder_before_rename = True

    def proves(self, blob: Location, sha256: str, size: int, source: Location | None) -> bool:
        """The source's checksum is asked first: Spark writes its checkpoint files with HDFS checksums
        off, so the NameNode has none for them (a server error; ``ops.backup.snapshot``) and the blob's
        is then not asked at all: the caller re-hashes the blob."""
        if source is None or not is_webhdfs(source.fs):
            return False
        try:
            return webhdfs_file_checksum(source.fs, source.path) == webhdfs_file_checksum(blob.fs, blob.path)
        except (OSError, RuntimeError, KeyError, ValueError):
            return False   # cannot compare: the caller re-hashes

    def read_whole(self, src: Location, limit: int) -> bytes | None:
        if not is_webhdfs(src.fs):
            return None
        data = webhdfs_read(src.fs, src.path, limit)   # OPEN: no GETFILESTATUS first
        TRAFFIC.add(read=len(data))
        return data

    def write_whole(self, target: Location, data: bytes, *, overwrite: bool) -> bool:
        if not is_webhdfs(target.fs):
            return False
        webhdfs_write(target.fs, target.path, data, overwrite=overwrite)   # one CREATE with the body
        TRAFFIC.add(written=len(data))
        return True

    def publish(self, staged: Location, final: Location, data: bytes) -> None:
        """One ``RENAME`` of the staged file, whose bytes were just read back and checked, instead of a
        ``MKDIRS``, a ``CREATE`` (whose close waits for the DataNode's block report under load), a
        ``RENAME`` and a ``DELETE`` (docs/benchmarks.md, round 14). Never over an existing manifest."""
        if not is_webhdfs(final.fs):
            return super().publish(staged, final, data)
        try:
            webhdfs_rename(final.fs, staged.path, final.path, overwrite=False)
        except FileExistsError:
            raise UserError(f"backup manifest {final.url} exists already: another backup took the same id; "
                            "back up again") from None

    def copy_through(self, src: Location, target: Location, size: int, *, body: bool) -> tuple[Any, int]:
        if size > _WHOLE or not (is_webhdfs(src.fs) and is_webhdfs(target.fs)):
            return stream_copy(src, target, size, body=body)
        data = self.read_whole(src, size + 1) or b""
        self.write_whole(target, data if body else b"", overwrite=True)
        return hashlib.sha256(data), size + 1 - len(data)


def kind_for(source: Location, store: Location) -> Streamed:
    """The kind that moves bodies from ``source`` to ``store`` (backup: checkpoint -> blobs;
    restore: blobs -> target)."""
    return _KINDS.get(_store_name(store), lambda s, t: Streamed())(source, store)


def _store_name(loc: Location) -> str:
    if is_s3(loc.fs):
        return "s3"
    if is_webhdfs(loc.fs):
        return "webhdfs"
    return "streamed"


def _s3(source: Location, store: Location) -> Streamed:
    same = is_s3(source.fs) and s3_endpoint(source.fs) is not None and s3_endpoint(source.fs) == s3_endpoint(store.fs)
    return S3(same)


_KINDS: dict[str, Any] = {
    "s3": _s3,
    "webhdfs": lambda source, store: WebHdfs(),
}


def stream_copy(src: Location, target: Location, size: int, *, body: bool) -> tuple[Any, int]:
    """Copy ``src`` to ``target`` through this process by fsspec (what :class:`Streamed` means), reading at
    most ``size`` + 1 bytes (one more than expected shows a body that grew); the sha256 of what was read and
    the bytes of ``size`` + 1 left unread (1 when the body had exactly ``size``). Without ``body`` only
    ``target``'s empty file is written."""
    h = hashlib.sha256()
    left = size + 1
    with open_regular(src, follow_links=False) as fin, open_new(target) as fout:
        while left > 0 and (chunk := fin.read(min(_CHUNK, left))):
            h.update(chunk)
            left -= len(chunk)
            if body:
                fout.write(chunk)
    return h, left
