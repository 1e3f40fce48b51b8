"""The one lock: an exclusive lock file next to what it protects.

Used for the operations lock of a checkpoint (backup, restore, reset), the backups of one job
(backup and prune, so garbage collection never deletes a blob a running backup has just decided to
reuse) and every read-modify-write of a lifecycle record. Callers choose how long to wait and when a
left-over lock counts as stale: operations hold their lock for minutes, a record write for
milliseconds.

Exactly one of two racing processes wins: local (or POSIX-shared) file systems create the file with
``O_CREAT | O_EXCL``, HDFS with WebHDFS ``CREATE overwrite=false`` (an empty file, its owner in an
extended attribute: :mod:`~airflow_kafka_spark._util.hdfs_lock`), S3 with ``PutObject`` and
``If-None-Match: *`` (:func:`~airflow_kafka_spark._util.conditional.create_exclusive`). Other
object stores have no exclusive create through fsspec, so there the lock is **best effort** (write
the lock object, read it back, back off on a mismatch): it narrows the window, it does not close it.
A lock left by a killed process is broken when its owner is provably gone (same host, dead pid) or
older than ``stale_after_s``; an *empty* lock file (its token never written: a kill or a storage
outage between the create and the write) after :data:`EMPTY_STALE_AFTER_S`, which a waiter whose own
timeout is shorter waits out rather than failing.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid

from airflow_kafka_spark._util import hdfs_lock
from airflow_kafka_spark._util.conditional import create_exclusive
from airflow_kafka_spark._util.fs import Location, mtime_of, os_reason, read_bytes, remove_file
from airflow_kafka_spark._util.proc import pid_alive
from airflow_kafka_spark._util.stores import cat_checked, is_webhdfs
from airflow_kafka_spark.errors import UserError

_TOKEN_MAX = 4096   # a token is ~80 bytes; anything longer is not ours
#: An empty lock file older than this is stale (a racing create writes its token within milliseconds).
EMPTY_STALE_AFTER_S = 20.0


class LockFile:
    """``with LockFile(loc, what=...)``: hold the lock file at ``loc`` for the block.

    The file holds ``<host> <pid> <random> <epoch ms>``: enough to tell a live owner from a dead one
    and to name the owner in the one-line error after ``timeout`` seconds.
    """

    def __init__(self, loc: Location, *, what: str, timeout: float = 30.0,
                 stale_after_s: float = 6 * 3600) -> None:
        self.loc = loc
        self.what = what
        self.timeout = timeout
        self.stale_after_s = stale_after_s
        self.token = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex} {int(time.time() * 1000)}"

    def __enter__(self) -> LockFile:
        deadline = time.monotonic() + self.timeout
        delay = 0.005
        waited_out_empty = False
        while True:
            if self._try():
                return self
            stale = self._stale()
            if stale is not None:
                # Re-check right before removing: another process may have broken the stale lock
                # and taken a fresh one meanwhile (the remaining window is accepted, see module doc).
                if self._owner() == stale:
                    remove_file(self.loc)
                continue
            if time.monotonic() > deadline:
                if self._owner() == "" and not waited_out_empty:
                    # An empty lock is broken after its grace: waiting for that beats failing the operation.
                    deadline, waited_out_empty = time.monotonic() + EMPTY_STALE_AFTER_S, True
                    continue
                raise UserError(f"{self.what} is locked by {self._describe(self._owner())} (lock file "
                                f"{self.loc.url}) for more than {self.timeout:g}s; wait for that operation "
                                "to finish, or delete the lock file if no airflow-kafka-spark process is "
                                "working on it")
            time.sleep(delay + (os.getpid() % 7) / 1000)
            delay = min(delay * 2, 0.1)

    def __exit__(self, *exc: object) -> None:
        if self._owner() == self.token:
            remove_file(self.loc)

    def _try(self) -> bool:
        if self.loc.local:
            for _ in range(2):
                try:
                    fd = os.open(self.loc.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
                except FileExistsError:
                    return False
                except FileNotFoundError:
                    try:
                        os.makedirs(os.path.dirname(self.loc.path), exist_ok=True)
                    except OSError as exc:
                        raise self._unusable(f"its folder cannot be created ({os_reason(exc)})") from None
                    continue
                except OSError as exc:   # the folder is a FIFO or a file (ENOTDIR), read-only, ...
                    raise self._unusable(os_reason(exc)) from None
                try:
                    os.write(fd, self.token.encode())
                finally:
                    os.close(fd)
                return True
            return False
        if is_webhdfs(self.loc.fs):   # an empty file and its owner's attribute: no DataNode close to wait for
            try:
                return hdfs_lock.create_owned(self.loc.fs, self.loc.path, self.token)
            except OSError as exc:
                raise UserError(f"cannot create {self.loc.url}: {os_reason(exc)}") from None
        created = create_exclusive(self.loc, self.token.encode())
        if created is not None:
            return created
        if self.loc.fs.exists(self.loc.path):
            return False
        self.loc.fs.pipe_file(self.loc.path, self.token.encode())
        time.sleep(0.05)  # let a racing writer's PUT land, then see whose token survived
        return self._owner() == self.token

    def _owner(self) -> str | None:
        """The lock file's token; None when it is gone. Local: a regular file only, opened without
        blocking and read to at most 4 KiB — a FIFO or device planted as the lock is a one-line
        :class:`UserError`, never a hang (fsspec's open would wait for a FIFO's writer forever)."""
        if self.loc.local:
            try:
                data = read_bytes(self.loc, limit=_TOKEN_MAX, follow_links=False)
            except UserError as exc:
                raise self._unusable(str(exc)) from None
            return None if data is None else data.decode(errors="replace")
        try:
            if is_webhdfs(self.loc.fs):
                return hdfs_lock.owner_of(self.loc.fs, self.loc.path, _TOKEN_MAX)
            return cat_checked(self.loc.fs, self.loc.path)[:_TOKEN_MAX].decode(errors="replace")
        except (FileNotFoundError, OSError):
            return None

    def _unusable(self, why: str) -> UserError:
        return UserError(f"the lock file {self.loc.url} of {self.what} cannot be used: {why}; airflow-kafka-spark "
                         "only ever writes a small regular file there — remove what is there if no "
                         "airflow-kafka-spark process is working on it")

    def _stale(self) -> str | None:
        """The lock's token if its owner is gone or it is too old, else None (also None if gone)."""
        token = self._owner()
        if token is None:
            return None
        parts = token.split()
        if (len(parts) >= 4 and parts[0] == socket.gethostname() and parts[1].isdigit()
                and not pid_alive(int(parts[1]))):
            return token
        created = int(parts[3]) if len(parts) >= 4 and parts[3].isdigit() else None
        if created is None:
            with contextlib.suppress(OSError):
                mtime = mtime_of(self.loc.fs.info(self.loc.path))
                created = None if mtime is None else int(mtime * 1000)
        # An empty lock file is a create whose token never landed: a process killed between creating the file and
        # writing it, or (HDFS) a WebHDFS create cut off by a NameNode or DataNode outage after the NameNode made
        # the file. No owner can ever be named, so it is stale after a short grace rather than after hours.
        limit_s = EMPTY_STALE_AFTER_S if not parts else self.stale_after_s
        if created is not None and time.time() * 1000 - created > limit_s * 1000:
            return token
        return None

    @staticmethod
    def _describe(token: str | None) -> str:
        if not token:
            return "another process"
        parts = token.split()
        return f"pid {parts[1]} on {parts[0]}" if len(parts) >= 2 else token[:60]
