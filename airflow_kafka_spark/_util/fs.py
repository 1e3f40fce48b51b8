"""The one way to open a location (a path or any fsspec URL), and the storage questions it answers.

Why a module of its own: backup, restore, reset, the checkpoint reader and the lifecycle record all
have to answer the same storage questions (is this rename atomic here? can a reader ever see half a
file? is that path inside this one?) and the answers depend on the file system, not on the
operation. Keeping them in one place keeps the crash-safety argument in one place too:

* **Local and HDFS-like** file systems rename atomically: files are written under a temporary name
  and renamed into place; directories are moved with one rename. ``hdfs://`` URLs are served by
  fsspec's ``webhdfs`` (no libhdfs) and renamed with the NameNode's ``rename2``
  (:mod:`airflow_kafka_spark._util.stores`): a rename onto an existing path replaces it
  atomically or fails, never answers a silent ``false``.
* **Object stores** (S3, GCS, ABFS, ``memory://``) have no rename, but a single PUT is atomic for
  readers: single files are written with one PUT; directories are "moved" by copying every object
  and then deleting the source, which is not atomic but is *idempotent* — re-running the same
  move finishes it, which is what the operation journal relies on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.hadoop_errors import webhdfs_class
from airflow_kafka_spark._util.hdfs_tree import webhdfs_tree
from airflow_kafka_spark._util.localfs import (
    LOCAL_FS,
    fsync_dir,
    plain_local_path,
    walk_local_tree,
)
from airflow_kafka_spark._util.stores import (
    hdfs_as_webhdfs,
    is_webhdfs,
    webhdfs_cat,
    webhdfs_rename,
    webhdfs_write,
)
from airflow_kafka_spark._util.text import one_line
from airflow_kafka_spark.errors import Unreachable, UserError, is_unreachable

OBJECT_STORE_PROTOCOLS = frozenset({
    "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "wasb", "wasbs", "oss", "r2", "memory",
})


class Traffic:
    """Bytes of file bodies that passed through this process: what "bytes through the worker" counts.

    Every body read through :func:`open_regular` or :func:`read_bytes` and every body written
    through :func:`write_atomic` or :func:`counted_writer` is added here (thread-safe), on any
    store. A copy the store makes itself (S3 ``CopyObject``) adds nothing, which is the point.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.read = 0
        self.written = 0

    def add(self, read: int = 0, written: int = 0) -> None:
        with self._lock:
            self.read += read
            self.written += written

    def totals(self) -> tuple[int, int]:
        with self._lock:
            return self.read, self.written


#: The process's counter (tests and the bench read its difference around an operation).
TRAFFIC = Traffic()


class _Counted:
    """A file object whose ``read``/``readinto``/``write`` add to :data:`TRAFFIC`; all else passes through."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        TRAFFIC.add(read=len(data))
        return data

    def readinto(self, buf: Any) -> int:
        n = self._fh.readinto(buf) or 0
        TRAFFIC.add(read=n)
        return n

    def write(self, data: Any) -> int:
        n = self._fh.write(data)
        TRAFFIC.add(written=len(data))
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _Counted:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._fh.close()


def is_local_fs(fs: Any) -> bool:
    """:data:`LOCAL_FS` or fsspec's ``LocalFileSystem`` (a ``file://`` URL, local storage options)."""
    if fs is LOCAL_FS:
        return True
    from fsspec.implementations.local import LocalFileSystem  # loaded already: ``fs`` came from fsspec

    return isinstance(fs, LocalFileSystem)


@dataclass(frozen=True)
class Location:
    """A URL opened through fsspec: the file system, the path it understands, and the URL as given."""

    fs: Any
    path: str
    url: str

    @property
    def local(self) -> bool:
        return is_local_fs(self.fs)

    @property
    def object_store(self) -> bool:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple | list) else (self.fs.protocol,)
        return any(p in OBJECT_STORE_PROTOCOLS for p in protocols)

    def child(self, *parts: str) -> Location:
        """A location below this one (URL and path both extended)."""
        rel = "/".join(p.strip("/") for p in parts if p)
        return Location(self.fs, posixpath.join(self.path, rel), self.url.rstrip("/") + "/" + rel)

    def sibling(self, name: str) -> Location:
        """A location next to this one, e.g. ``<checkpoint>.reset-...`` beside ``<checkpoint>``."""
        return Location(self.fs, self.path.rstrip("/") + name, self.url.rstrip("/") + name)


def open_location(url: str, storage_options: dict | None = None, *, what: str = "location") -> Location:
    """Open ``url`` (a path or any fsspec URL); a scheme without a driver is a one-line error.

    ``hdfs://`` goes through ``webhdfs`` (see :func:`~airflow_kafka_spark._util.stores.hdfs_as_webhdfs`);
    the Location keeps the URL as the user wrote it, for messages, records and journals.
    """
    if not isinstance(url, str) or not url.strip():
        raise UserError(f"{what} must be a non-empty path or a URL such as /data/ckpt or s3://bucket/ckpt, "
                        f"got {url!r}")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise UserError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    refuse_chained_url(url, what)
    local = plain_local_path(url) if not storage_options else None
    if local is not None:
        return Location(LOCAL_FS, local, url.rstrip("/") or url)
    try:
        import fsspec

        if url.lower().startswith("hdfs://"):
            options, path = hdfs_as_webhdfs(url, storage_options)
            fs = webhdfs_class()(**options)
        else:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    except ImportError as exc:
        raise UserError(f"cannot open {what} {url}: {one_line(exc)}; install the fsspec driver for this URL "
                        "scheme") from None
    except (ValueError, TypeError) as exc:
        raise UserError(f"cannot open {what} {url}: {one_line(exc)}") from None
    path = path.rstrip("/") or "/"
    return Location(fs, path, url.rstrip("/") or url)


def comparable(loc: Location) -> tuple[str, str]:
    """(protocol, normalised absolute path) so two spellings of one place compare equal."""
    protocol = loc.fs.protocol if isinstance(loc.fs.protocol, str) else loc.fs.protocol[0]
    path = loc.path
    if loc.local:
        path = os.path.realpath(path)
    return protocol, posixpath.normpath(path)


def is_within(inner: Location, outer: Location) -> bool:
    """True if ``inner`` is ``outer`` or below it (same file system)."""
    pi, a = comparable(inner)
    po, b = comparable(outer)
    if pi != po:
        return False
    return a == b or a.startswith(b.rstrip("/") + "/")


def info_or_none(loc: Location) -> dict | None:
    """``fs.info`` or None when the path does not exist; other failures are one-line errors."""
    try:
        return loc.fs.info(loc.path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error(f"cannot access {loc.url}", exc) from None


def is_dir(loc: Location, info: dict | None = None) -> bool:
    info = info if info is not None else info_or_none(loc)
    return bool(info) and info.get("type") == "directory"


def exists(loc: Location) -> bool:
    return info_or_none(loc) is not None


def storage_error(message: str, exc: BaseException) -> UserError:
    """``message: <reason>`` as one line; an :class:`Unreachable` (exit 4) when the store did not answer."""
    cls = Unreachable if is_unreachable(exc) else UserError
    return cls(f"{message}: {os_reason(exc)}")


def os_reason(exc: BaseException) -> str:
    """The useful part of an OS error (``Permission denied``), not its repr."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def mtime_of(info: dict) -> float | None:
    """A modification time in epoch seconds from whichever key this fsspec driver uses."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modificationTime", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return float(value.timestamp())
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        return number / 1000 if key == "modificationTime" else number
    return None


def list_files(loc: Location) -> dict[str, dict]:
    """Every file below ``loc`` as relative path -> fsspec info (one recursive listing).

    Directories are left out. A missing ``loc`` gives ``{}``; a listing error is a one-line error.
    """
    if loc.local:
        return _list_local_tree(loc)
    if is_webhdfs(loc.fs):
        try:
            return webhdfs_tree(loc.fs, loc.fs._strip_protocol(loc.path))
        except FileNotFoundError:
            return {}
        except (OSError, RuntimeError) as exc:
            raise storage_error(f"cannot list {loc.url}", exc) from None
    try:
        found = loc.fs.find(loc.path, withdirs=False, detail=True)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
    root = loc.fs._strip_protocol(loc.path).rstrip("/")
    out: dict[str, dict] = {}
    for path, info in found.items():
        if info.get("type") == "directory":
            continue
        p = loc.fs._strip_protocol(path)
        if p == root:
            continue
        if not p.startswith(root + "/"):
            continue
        out[p[len(root) + 1:]] = info
    return out


def write_atomic(loc: Location, data: bytes) -> None:
    """Write one file so that readers see the old content or the new one, never a torn file."""
    fs, path = loc.fs, loc.path
    parent = posixpath.dirname(path)
    TRAFFIC.add(written=len(data))
    try:
        if loc.local:
            os.makedirs(parent, exist_ok=True)
            tmp = os.path.join(parent, f".{os.path.basename(path)}.{os.urandom(4).hex()}.tmp")
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            fsync_dir(parent)
        elif loc.object_store:
            fs.pipe_file(path, data)
        elif is_webhdfs(fs):
            # One CREATE with the body (it makes the parents), then rename2: not fsspec's MKDIRS, empty
            # CREATE and APPEND. The DataNode's leg of a small write still costs ~0.3 s on the minicluster
            # (block completion), with or without APPEND (docs/benchmarks.md, round 18).
            tmp = posixpath.join(parent, f".{posixpath.basename(path)}.{os.urandom(4).hex()}.tmp")
            webhdfs_write(fs, tmp, data, overwrite=False)
            webhdfs_rename(fs, tmp, path, overwrite=True)
        else:
            tmp = f"{path}.{os.urandom(4).hex()}.tmp"
            fs.makedirs(parent, exist_ok=True)
            fs.pipe_file(tmp, data)
            if fs.exists(path):
                fs.rm(path)
            fs.mv(tmp, path)
    except OSError as exc:
        raise storage_error(f"cannot write {loc.url}", exc) from None


def read_bytes(loc: Location, *, limit: int | None = None, follow_links: bool = True) -> bytes | None:
    """The file's bytes, or None if it does not exist.

    Local paths are opened with :func:`open_regular` (a FIFO or device is a one-line error, never
    a hang or an endless read); ``limit`` caps the bytes read (more is a one-line error).
    """
    try:
        if loc.local:
            with open_regular(loc, follow_links=follow_links) as fh:
                return read_bounded(fh, limit, loc)
        # WebHDFS: one OPEN (and the DataNode it redirects to), not fsspec's GETFILESTATUS first.
        data = webhdfs_cat(loc.fs, loc.path, limit) if is_webhdfs(loc.fs) else loc.fs.cat_file(loc.path)
        TRAFFIC.add(read=len(data))
        if limit is not None and len(data) > limit:
            raise UserError(f"{loc.url} is larger than {limit:,} bytes; it cannot be what it should be")
        return data
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UserError(f"{loc.url} is a directory, expected a file") from None
    except OSError as exc:
        raise storage_error(f"cannot read {loc.url}", exc) from None


def refuse_chained_url(url: str, what: str = "location") -> None:
    """fsspec reads ``a::b`` as a chain (``b`` opened through ``a``), so ``/ck::/other`` silently
    opens another folder: a checkpoint or backup URL is one location, never a chain."""
    if isinstance(url, str) and "::" in url:   # even inside [::1]: fsspec splits there too
        raise UserError(f"{what} {url!r} contains '::', which fsspec reads as a chain of file systems (another "
                        "folder than the one named); pass a single path or URL (an IPv6 host by name), and set "
                        "caching or other options through storage options")


@contextlib.contextmanager
def open_regular(loc: Location, *, follow_links: bool = True) -> Iterator[Any]:
    """Open a file for reading only if it is a regular file (local: without blocking).

    Local paths: ``os.open`` with ``O_NONBLOCK`` (a FIFO never blocks the open) and, unless
    ``follow_links``, ``O_NOFOLLOW``; then ``fstat`` must say ``S_ISREG`` — a FIFO, socket or
    device (``/dev/zero``) is a one-line :class:`UserError`. Other file systems have neither
    links nor special files: ``fs.open``.
    """
    if not loc.local:
        with loc.fs.open(loc.path, "rb") as fh:
            yield _Counted(fh)
        return
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(loc.path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(f"{loc.url} is a symbolic link; it was not followed") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", loc.path)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{loc.url} is {file_kind(st.st_mode)}, not a regular file; it was not read "
                            "(airflow-kafka-spark and Spark only write regular files: remove it)")
        os.set_blocking(fd, True)
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield _Counted(fh)


def open_new(target: Location) -> Any:
    """``target`` opened for writing (created or truncated), every byte counted in :data:`TRAFFIC`;
    local: never through a link planted at its name (``O_NOFOLLOW``)."""
    if not target.local:
        return _Counted(target.fs.open(target.path, "wb"))
    fd = os.open(target.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o644)
    return _Counted(os.fdopen(fd, "wb"))


def read_bounded(fh: Any, limit: int | None, loc: Location) -> bytes:
    """All of ``fh``, or a one-line error once more than ``limit`` bytes came."""
    if limit is None:
        return fh.read()
    data = fh.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"{loc.url} is larger than {limit:,} bytes; it cannot be what it should be")
    return data


def file_kind(mode: int) -> str:
    """``a FIFO``, ``a device``... for one-line messages."""
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def siblings_with_prefix(loc: Location, prefix: str) -> list[Location]:
    """Entries next to ``loc`` named exactly ``<name of loc><prefix>...`` (no glob: names compared).

    Why: a checkpoint named ``job[12]`` made a glob pattern match its neighbour ``job1``'s folders.
    """
    parent = posixpath.dirname(loc.path.rstrip("/")) or "/"
    start = posixpath.basename(loc.path.rstrip("/")) + prefix
    try:
        names = loc.fs.ls(parent, detail=False)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise storage_error(f"cannot list {parent}", exc) from None
    out = []
    for p in names:
        name = posixpath.basename(str(p).rstrip("/"))
        if name.startswith(start) and len(name) > len(start):
            out.append(loc.sibling(name[len(start) - len(prefix):]))
    return out


def remove_file(loc: Location) -> None:
    with contextlib.suppress(FileNotFoundError):
        loc.fs.rm_file(loc.path)


def local_os_path(loc: Location) -> str:
    """The operating system's path of a local location (for ``os.scandir`` and friends)."""
    return loc.fs._strip_protocol(loc.path).rstrip("/") or "/"


def _list_local_tree(loc: Location) -> dict[str, dict]:
    """:func:`list_files` of a local folder (:func:`walk_local_tree`), its errors as one line."""
    try:
        return walk_local_tree(local_os_path(loc))
    except OSError as exc:
        raise storage_error(f"cannot list {loc.url}", exc) from None
