"""Conditional writes on a :class:`~airflow_kafka_spark._util.fs.Location`: exclusive create and
compare-and-swap, for stores where write-then-rename cannot decide between two writers.

Why: a lock file must have exactly one creator and a read-modify-write must not overwrite a change
it did not see, on every store a checkpoint can live on. How each store does it:

=========  ===========================================  ==========================================
store      exclusive create (locks)                     read-modify-write (lifecycle record)
=========  ===========================================  ==========================================
local      ``O_CREAT | O_EXCL``                          under the lock; temp file + ``rename``
HDFS       WebHDFS ``CREATE overwrite=false``            under the lock; temp file + ``rename2``
S3         ``PutObject`` + ``If-None-Match: *``          under the lock, *and* ``If-Match: <etag>``
others     none: best effort (write, read back)          under the (best-effort) lock; one PUT
=========  ===========================================  ==========================================
"""

from __future__ import annotations

import os

from airflow_kafka_spark._util.fs import Location, os_reason, read_bytes, write_atomic
from airflow_kafka_spark._util.stores import (
    ABSENT,
    is_s3,
    is_webhdfs,
    s3_put_if,
    s3_read_versioned,
    webhdfs_create_exclusive,
    webhdfs_rename,
)
from airflow_kafka_spark.errors import UserError


def rename_file(src: Location, dst: Location) -> bool:
    """Move one file into place; False (``src`` left) when ``dst`` already exists on HDFS.

    Why not ``fs.mv``: on HDFS it answers a silent ``false`` onto an existing file *or a missing
    parent folder*, so the file never arrives and nothing says so.
    """
    if src.local:
        os.makedirs(os.path.dirname(dst.path), exist_ok=True)
        os.replace(src.path, dst.path)
        return True
    if is_webhdfs(src.fs):
        try:
            webhdfs_rename(src.fs, src.path, dst.path, overwrite=False)
        except FileExistsError:
            return False
        return True
    src.fs.mv(src.path, dst.path)
    return True


def create_exclusive(loc: Location, data: bytes) -> bool | None:
    """Create ``loc`` only if it does not exist: True created, False exists, None: this store has no
    exclusive create (the caller falls back to its best effort). Local: ``O_EXCL``; HDFS:
    ``overwrite=false``; S3: ``If-None-Match: *``."""
    try:
        if loc.local:
            os.makedirs(os.path.dirname(loc.path), exist_ok=True)
            try:
                fd = os.open(loc.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return True
        if is_webhdfs(loc.fs):
            return webhdfs_create_exclusive(loc.fs, loc.path, data)
        if is_s3(loc.fs):
            return s3_put_if(loc.fs, loc.path, data, ABSENT)
    except OSError as exc:
        raise UserError(f"cannot create {loc.url}: {os_reason(exc)}") from None
    return None


class WriteConflict(UserError):
    """A conditional write found the file changed since it was read (another writer won)."""


def read_versioned(loc: Location, *, limit: int | None = None) -> tuple[bytes | None, str | None]:
    """(bytes or None, version) for :func:`write_if_unchanged`; version None where the store has no
    compare-and-swap (local disks and HDFS: the caller's lock alone keeps the read-modify-write safe)."""
    if is_s3(loc.fs):
        try:
            data, etag = s3_read_versioned(loc.fs, loc.path)
        except OSError as exc:
            raise UserError(f"cannot read {loc.url}: {os_reason(exc)}") from None
        if data is not None and limit is not None and len(data) > limit:
            raise UserError(f"{loc.url} is larger than {limit:,} bytes; it cannot be what it should be")
        return data, etag
    return read_bytes(loc, limit=limit), None


def write_if_unchanged(loc: Location, data: bytes, version: str | None) -> None:
    """Write ``loc`` if it is still at ``version`` (S3: ``If-Match``/``If-None-Match``), else
    :class:`WriteConflict`; a None version is a plain :func:`write_atomic`."""
    if version is None:
        write_atomic(loc, data)
        return
    try:
        written = s3_put_if(loc.fs, loc.path, data, version)
    except OSError as exc:
        raise UserError(f"cannot write {loc.url}: {os_reason(exc)}") from None
    if not written:
        raise WriteConflict(f"{loc.url} was changed by another process after this one read it (its lock was "
                            "broken as stale meanwhile); nothing was written: run the step again")
