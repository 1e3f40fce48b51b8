"""The files of one checkpoint, read-only through fsspec: listings, file kinds and bytes.

Spark's readers follow symlinks and refuse directories and special files where they expect a
file; these helpers answer the same questions without ever writing or creating anything (mode
``"rb"`` only), and turn an unreadable location into one :class:`UserError` line. The base of the
reader's one pass over a checkpoint (:mod:`~airflow_kafka_spark.checkpoint.reader`).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Collection, Mapping
from types import MappingProxyType
from typing import Any

from airflow_kafka_spark._util.fs import is_local_fs, open_location
from airflow_kafka_spark._util.localfs import list_local_detail, stat_local_detail
from airflow_kafka_spark._util.text import one_line
from airflow_kafka_spark.errors import UserError

GLOB_CHARS = frozenset("*?[")
#: The info of a name listed without a ``stat`` (see ``CheckpointFiles._ls_names``): no type, no size.
NOT_STATED: Mapping[str, Any] = MappingProxyType({})


class CheckpointFiles:
    """Paths relative to the checkpoint root (``offsets/5``), listed and read through one fsspec file system."""

    def __init__(self, fs: Any, root: str, location: str) -> None:
        self.fs = fs
        self.root = root
        self.location = location

    def _path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _display(self, rel: str) -> str:
        return f"{self.location.rstrip('/')}/{rel}" if rel else self.location

    def _ls_names(self, rel: str) -> tuple[Collection[str], dict[str, Mapping[str, Any]] | None]:
        """The names in one directory, with their infos where they come free: on local disk names
        only (None: a size costs a ``stat`` per file there, 20,000 in a 10,000-batch log; see
        :meth:`_stat`), while a remote listing returns sizes with the names anyway."""
        if is_local_fs(self.fs):
            return self._listing(rel, os.listdir, vanished=[]), None
        entries = self._ls(rel)
        return entries.keys(), entries

    def _ls(self, rel: str, *, required: bool = False) -> dict[str, Mapping[str, Any]]:
        """Base name -> fsspec info of one directory; {} if it vanished (unless ``required``)."""
        if is_local_fs(self.fs):
            return self._listing(rel, list_local_detail, vanished={}, required=required)
        listing = self._listing(rel, lambda path: self.fs.ls(path, detail=True), vanished=[], required=required)
        out: dict[str, dict] = {}
        for info in listing:
            name = posixpath.basename(str(info.get("name", "")).rstrip("/"))
            if name:
                out[name] = info
        return out

    def _listing(self, rel: str, lister: Callable[[str], Any], *, vanished: Any, required: bool = False) -> Any:
        """One listing of ``rel``: ``vanished`` if the folder is gone (an error if ``required``), any
        other OS error one line naming the folder."""
        try:
            return lister(self._path(rel))
        except FileNotFoundError:
            if required:
                raise UserError(f"checkpoint location {self.location} disappeared while being read") from None
            return vanished
        except OSError as exc:
            raise UserError(f"cannot list {self._display(rel)}: {os_reason(exc)}") from None

    def _stat(self, rel: str) -> Mapping[str, Any]:
        """The info of one path a names-only listing returned (local disk only)."""
        return stat_local_detail(self._path(rel))

    def _type(self, rel: str, info: Mapping[str, Any]) -> str:
        """``file``, ``directory`` or ``other``; symlinks are followed, FIFOs and sockets are
        ``other`` (never opened: reading a FIFO would block forever)."""
        kind = info.get("type")
        if kind in ("directory", "file"):
            return kind
        path = self._path(rel)
        if is_dir(self.fs, path):
            return "directory"
        try:
            if self.fs.isfile(path):
                return "file"
        except (OSError, ValueError):
            pass
        return "other"

    def _is_dir(self, rel: str, info: Mapping[str, Any]) -> bool:
        return self._type(rel, info) == "directory"

    def _not_a_file(self, rel: str, info: Mapping[str, Any]) -> str | None:
        """Why a path Spark reads as a file cannot be read as one, or None if it can."""
        kind = self._type(rel, info)
        if kind == "directory":
            return "is a directory, not a file"
        if kind == "other":
            return "is not a regular file"
        return None

    def _read_file(self, rel: str) -> bytes | None:
        """Bytes of one file; None if it vanished. IsADirectoryError is left to the caller."""
        try:
            return self.fs.cat_file(self._path(rel))
        except (FileNotFoundError, IsADirectoryError):
            if self.fs.isdir(self._path(rel)):
                raise IsADirectoryError(rel) from None
            return None
        except OSError as exc:
            raise UserError(f"cannot read {self._display(rel)}: {os_reason(exc)}") from None

    def _cat_many(self, rels: list[str]) -> list[bytes | None]:
        """Read many small files: concurrently on async filesystems (object stores), else in a loop.

        A file purged by a running query between listing and reading comes back as None: history
        is best effort, unlike offsets/L which must be there.
        """
        paths = [self._path(r) for r in rels]
        if len(paths) > 1 and getattr(self.fs, "async_impl", False) and not any(GLOB_CHARS & set(p) for p in paths):
            results = self.fs.cat(paths, on_error="return")
            out: list[bytes | None] = []
            for rel, path in zip(rels, paths, strict=True):
                value = results.get(path, results.get(self.fs._strip_protocol(path)))
                if isinstance(value, BaseException) and not isinstance(value, FileNotFoundError):
                    raise UserError(f"cannot read {self._display(rel)}: {os_reason(value)}")
                out.append(value if isinstance(value, bytes) else None)
            return out
        out = []
        for rel in rels:
            try:
                out.append(self._read_file(rel))
            except IsADirectoryError:
                out.append(None)
        return out


def open_fs(location: Any, storage_options: dict | None) -> tuple[Any, str]:
    loc = open_location(location, storage_options, what="checkpoint location")
    return loc.fs, loc.path


def is_dir(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isdir(path))
    except OSError:
        return False


def os_reason(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return one_line(exc)
