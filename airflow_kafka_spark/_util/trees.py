"""Whole trees: delete one this code created, move one (atomically where the file system can).

Why apart from :mod:`airflow_kafka_spark._util.fs`: only reset, restore and the scratch copies of a
dry run move or delete trees; the crash-safety argument for a move (one rename, or an idempotent
copy-then-delete that a journal can finish) is stated in ``fs``'s docstring and relied on here.
"""

from __future__ import annotations

import contextlib
import os
import posixpath

from airflow_kafka_spark._util.fs import Location, list_files, storage_error
from airflow_kafka_spark._util.localfs import fsync_dir
from airflow_kafka_spark._util.stores import is_webhdfs, webhdfs_rename
from airflow_kafka_spark.errors import UserError


def remove_tree(loc: Location) -> None:
    """Delete a directory tree this module's callers created themselves (staging, garbage)."""
    if loc.local:
        import shutil  # imported here: at start it costs every ``aks`` command start-up time

        shutil.rmtree(loc.path, ignore_errors=True)
        return
    from fsspec.implementations.memory import MemoryFileSystem  # loaded with the fs, which is not LOCAL_FS

    if isinstance(loc.fs, MemoryFileSystem):
        # fsspec's memory rm is quadratic (every file's info() scans the whole store): a dry run's
        # 20,000-file scratch copy took 8 minutes to delete. Drop the keys below ``loc`` directly.
        top = loc.path.rstrip("/")
        below = top + "/"
        for key in [k for k in loc.fs.store if k == top or k.startswith(below)]:
            loc.fs.store.pop(key, None)
        loc.fs.pseudo_dirs[:] = [d for d in loc.fs.pseudo_dirs if not (d == top or d.startswith(below))]
        return
    with contextlib.suppress(FileNotFoundError):
        loc.fs.rm(loc.path, recursive=True)


def move_dir(src: Location, dst: Location) -> None:
    """Move the tree at ``src`` to ``dst`` (which must not exist yet).

    Local and HDFS-like file systems: one rename (atomic). Object stores: copy every file that is
    not yet at ``dst`` with the same size, then delete ``src`` — interrupted at any point, running
    it again finishes the move (the operation journal depends on that).
    """
    try:
        if src.local:
            os.makedirs(os.path.dirname(dst.path), exist_ok=True)
            if os.path.exists(dst.path):
                raise UserError(f"cannot move {src.url} to {dst.url}: the destination exists")
            os.rename(src.path, dst.path)
            fsync_dir(os.path.dirname(dst.path))
            return
        if is_webhdfs(src.fs):
            try:
                webhdfs_rename(src.fs, src.path, dst.path, overwrite=False)
            except FileExistsError:
                raise UserError(f"cannot move {src.url} to {dst.url}: the destination exists") from None
            return
        if not src.object_store:
            if src.fs.exists(dst.path):
                raise UserError(f"cannot move {src.url} to {dst.url}: the destination exists")
            src.fs.mv(src.path, dst.path, recursive=True)
            return
        done = list_files(dst)
        for rel, info in list_files(src).items():
            have = done.get(rel)
            if have is not None and have.get("size") == info.get("size"):
                continue
            src.fs.copy(posixpath.join(src.path, rel), posixpath.join(dst.path, rel))
        src.fs.rm(src.path, recursive=True)
    except OSError as exc:
        raise storage_error(f"cannot move {src.url} to {dst.url}", exc) from None
