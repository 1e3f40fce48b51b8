"""Writing bodies into the blob store of a backup root: each under its sha256, appearing only when complete.

Apart from ``store`` (reading back, verifying, restoring) so each stays readable; the per-store
choices (server-side copies, the store's own checksums) are ``ops.backup.kinds``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import stat
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.conditional import rename_file
from airflow_kafka_spark._util.fs import TRAFFIC, Location, file_kind, open_new, open_regular, os_reason, remove_file
from airflow_kafka_spark._util.localfs import sync_filesystem
from airflow_kafka_spark._util.paths import Contained
from airflow_kafka_spark.errors import CheckpointWritten, UserError
from airflow_kafka_spark.ops.backup.catalog import blob_rel
from airflow_kafka_spark.ops.backup.kinds import Streamed, Vouched
from airflow_kafka_spark.ops.backup.manifest import TMP_DIR

_CHUNK = 1 << 20
#: Files up to this size are read whole and hashed before anything is written (checkpoint files are KiBs).
_SMALL = 4 << 20
#: Requests to an object store at once in :meth:`BlobWriter.prefetch` (each is a round trip's latency).
_STORE_THREADS = 8



def _discard(tmp: Location) -> None:
    """Remove a temp file after a failed write, best effort: the failure that brought us here is the one to
    report. A store still failing (a NameNode restarting answered this DELETE with 404) leaves the file in
    ``.tmp/``, which retention's sweep removes (ops/backup/prune.py)."""
    with contextlib.suppress(OSError):
        remove_file(tmp)

class BlobWriter:
    """Copies source files into the blob store; a blob appears under its name only when complete.

    Local stores, where the cost is (it was 100 s for a 40,000-file checkpoint, ``cp -a && sync``
    8 s): a file of up to :data:`_SMALL` bytes is read once into memory and hashed *before* anything
    is written, so a body the store already has costs no write at all; a new body goes to a temp
    file without an fsync each. :meth:`sync` then makes them durable together — one ``syncfs`` of the
    store's file system, the renames to their blob names, a second ``syncfs`` for the directory
    entries — so a blob name never points at data that is not on disk, with two flushes instead of
    one ``fsync`` per file. A crash before that leaves temp files only, which pruning collects.
    """

    #: A snapshot backup's ``Manifest.snapshot`` (``ops.backup.snapshot.SnapshotWriter``); none here.
    snapshot_doc: dict[str, str] | None = None

    def __init__(self, job_loc: Location, index: dict[str, int], kind: Streamed | None = None) -> None:
        self.job_loc = job_loc
        self.kind = kind or Streamed()   # what the two stores can do without this process (ops.backup.kinds)
        self.below = Contained(job_loc)   # .tmp/ and blobs/ never through a link out of the store
        self.index = index
        self.written: set[str] = set()
        self.bytes_written = 0
        self.bytes_hashed = 0
        self.files_hashed = 0
        self.files_vouched = 0            # sha256 the store kept for the source (never read here)
        self.bytes_copied_by_store = 0    # bodies the store copied itself (CopyObject)
        #: blobs written by this run whose proof is asked of the store (sha -> their source, if any)
        self._store_proves: dict[str, Location | None] = {}
        self._staged: list[tuple[str, Location]] = []   # (temp path, blob) waiting for sync()
        self._tmp_made = False
        self._tmp_dir: Location | None = None
        self._tmp_prefix = uuid.uuid4().hex
        self._tmp_count = itertools.count(1)   # next() is atomic: parallel puts never share a temp name
        self._lock = threading.Lock()           # the counters below, updated by parallel puts
        self._blob_dirs: dict[str, Location] = {}
        #: ``blobs/<aa>`` folders there are (a blob was listed in it) or this run made: a rename into one
        #: needs no ``MKDIRS`` first (HDFS; should one have gone, the rename makes it: ``webhdfs_rename``)
        self._folders_there = {sha[:2] for sha in index} if self.kind.folder_before_rename else set()
        self._asked: dict[str, Vouched | None] = {}   # src path -> what the store said (prefetch)
        self._copied_ahead: set[str] = set()           # blobs the store copied during the prefetch

    def prefetch(self, sources: list[tuple[Location, int]]) -> None:
        """Ask the store, :data:`_STORE_THREADS` at a time, for the kept SHA-256 of each source, and have
        it copy the bodies it vouches for: what :meth:`put` would do one request at a time.

        Only where the kind copies inside the store (``kinds.S3``); :meth:`put` then only accounts.
        A source whose copy fails here (changed since it was listed) is left to :meth:`put`.
        """
        if not self.kind.copies or len(sources) < 2:
            return
        lock = threading.Lock()
        claimed: set[str] = set()

        def one(item: tuple[Location, int]) -> None:
            src, size = item
            try:
                vouched = self.kind.vouched_sha256(src, size)
            except FileNotFoundError:
                return
            if vouched is None:
                with lock:
                    self._asked[src.path] = None
                return
            sha = vouched.sha256
            with lock:
                mine = self.index.get(sha) != size and sha not in claimed
                if mine:
                    claimed.add(sha)
                    blob = self._blob_location(sha)
            if mine and not self.kind.copy_in(src, blob, vouched.token):
                with lock:
                    claimed.discard(sha)
                return
            with lock:
                if mine:
                    self._copied_ahead.add(sha)
                self._asked[src.path] = vouched

        with ThreadPoolExecutor(max_workers=_STORE_THREADS) as pool:
            list(pool.map(one, sources))

    def put(self, src: Location, listed_size: int) -> tuple[str, int, str | None]:
        """(sha256, size, proof) of ``src``; the body is stored unless a blob with that hash exists.

        ``src`` must be a regular file (never a link, FIFO or device: :func:`open_regular`)
        and is read to at most its listed size: a file that grows meanwhile is an error, not an
        endless copy. When the store keeps a SHA-256 of ``src`` (``proof`` then names it), the
        body is copied by the store itself, or not at all when the blob exists.
        """
        vouched = self._asked.pop(src.path) if src.path in self._asked \
            else self.kind.vouched_sha256(src, listed_size)
        if vouched is not None:
            sha = vouched.sha256
            if self.index.get(sha) == listed_size and sha not in self._copied_ahead:
                self._add(files_vouched=1)
                return sha, listed_size, self.kind.name + "-sha256"
            blob = self._blob_location(sha)
            if sha in self._copied_ahead or self.kind.copy_in(src, blob, vouched.token):
                self._copied_ahead.discard(sha)
                self._add(files_vouched=1, bytes_copied_by_store=listed_size)
                self.index[sha] = listed_size
                self.written.add(sha)
                self._store_proves[sha] = None
                return sha, listed_size, self.kind.name + "-sha256"
            # the object changed since it was listed, or the copy was refused: read it
        if listed_size <= _SMALL:
            sha, size = self._put_small(src, listed_size)
            return sha, size, None
        tmp = self._new_tmp()
        h = hashlib.sha256()
        size = 0
        self._make_tmp_dir(tmp)
        try:
            with open_regular(src, follow_links=False) as fin, open_new(tmp) as fout:
                while chunk := fin.read(_CHUNK):
                    h.update(chunk)
                    size += len(chunk)
                    if size > listed_size:
                        raise _grew(src, listed_size)
                    fout.write(chunk)
        except BaseException as exc:
            _discard(tmp)
            if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError):
                raise UserError(f"cannot copy {src.url} to {self.job_loc.url}: {os_reason(exc)}") from None
            raise
        return (*self._keep(tmp, h.hexdigest(), size, src), None)

    def _put_small(self, src: Location, listed_size: int) -> tuple[str, int]:
        try:
            data = self.kind.read_whole(src, listed_size + 1)   # HDFS: one OPEN, no GETFILESTATUS first
            if data is None:
                with open_regular(src, follow_links=False) as fin:
                    data = fin.read(listed_size + 1)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise UserError(f"cannot copy {src.url} to {self.job_loc.url}: {os_reason(exc)}") from None
        if len(data) > listed_size:
            raise _grew(src, listed_size)
        sha, size = hashlib.sha256(data).hexdigest(), len(data)
        if self.index.get(sha) == size:
            self._add(files_hashed=1, bytes_hashed=size)
            return sha, size
        if not self.job_loc.local:
            blob = self._blob_location(sha)
            faults.crash_point("backup.blob")
            if self.kind.put_checked(blob, data, sha):   # one write the store checks against sha
                TRAFFIC.add(written=size)
                self._add(files_hashed=1, bytes_hashed=size)
                self._store_proves[sha] = None
                return self._account(sha, size)
        tmp = self._new_tmp()
        self._make_tmp_dir(tmp)
        try:
            if not self.kind.write_whole(tmp, data, overwrite=False):   # HDFS: one CREATE with the body
                with open_new(tmp) as fout:
                    fout.write(data)
        except OSError as exc:
            _discard(tmp)
            raise UserError(f"cannot store a blob in {self.job_loc.url}: {os_reason(exc)}") from None
        return self._keep(tmp, sha, size, src)

    def to_rehash(self) -> set[str]:
        """The blobs this run wrote that must be read back and re-hashed: those the store does not prove itself.

        S3: the blob's kept SHA-256 (``HeadObject``) is its name; HDFS: the NameNode's checksum of the
        blob is its source file's. A blob the store cannot vouch for is re-hashed as before. The
        proofs are asked ``kind.parallel_puts`` at a time: each is a round trip or two (HDFS: two
        ``GETFILECHECKSUM``, each a NameNode request and its DataNode leg), asked one after the other
        they were most of the verify step inside a restart's downtime (docs/benchmarks.md, round 9).
        Asked after every put, not inside it: a blob damaged after its put is still caught here.
        """
        asked = [(sha, self._blob_location(sha), self.index[sha], source)
                 for sha, source in self._store_proves.items()]

        def proven(item: tuple[str, Location, int, Location | None]) -> bool:
            return self.kind.proves(item[1], item[0], item[2], item[3])

        threads = min(max(1, self.kind.parallel_puts), len(asked))
        if threads <= 1:
            results = [proven(item) for item in asked]
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                results = list(pool.map(proven, asked))
        return self.written - {item[0] for item, ok in zip(asked, results, strict=True) if ok}

    def _new_tmp(self) -> Location:
        """A fresh temp file name in the store's ``.tmp/`` (one random prefix per run, then a counter);
        the folder is proven (no link) once per run."""
        if self._tmp_dir is None:
            self._tmp_dir = self.below.child(TMP_DIR, what="backup store path")
        return self._tmp_dir.child(f"{self._tmp_prefix}-{next(self._tmp_count)}.blob")

    def _blob_location(self, sha: str) -> Location:
        """``blobs/<aa>/<sha>``: each of the 256 ``<aa>`` folders proven (no link) once per run; a hex
        name below a proven folder cannot leave it (the name itself is ``lstat``-ed by :meth:`sync`)."""
        rel = blob_rel(sha)
        folder, _, name = rel.rpartition("/")
        if len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
            return self.below.child(rel, what="backup store path")
        known = self._blob_dirs.get(folder)
        if known is None:
            known = self._blob_dirs[folder] = self.below.child(folder, what="backup store path")
        return known.child(name)

    def _make_tmp_dir(self, tmp: Location) -> None:
        if tmp.local and not self._tmp_made:
            os.makedirs(os.path.dirname(tmp.path), exist_ok=True)
            self._tmp_made = True

    def _keep(self, tmp: Location, sha: str, size: int, src: Location) -> tuple[str, int]:
        """Account a hashed body; keep its temp file as the blob unless the store has it already."""
        self._add(files_hashed=1, bytes_hashed=size)
        with self._lock:   # one of two parallel puts of the same body keeps its temp file
            have = self.index.get(sha) == size
            if not have and not tmp.local:
                self.index[sha] = size
        if have:
            remove_file(tmp)
            return sha, size
        try:
            final = self._blob_location(sha)
        except UserError:
            _discard(tmp)
            raise
        if tmp.local:
            self._staged.append((tmp.path, final))
        else:
            try:
                faults.crash_point("backup.blob")
                self._make_folder(sha, final)
                if not rename_file(tmp, final):   # HDFS: a racing backup stored the same blob first
                    remove_file(tmp)
            except BaseException:
                with self._lock:   # not stored: give up the claim taken above
                    if sha not in self.written:
                        self.index.pop(sha, None)
                _discard(tmp)
                raise
            self._store_proves[sha] = src
        return self._account(sha, size)

    def _make_folder(self, sha: str, final: Location) -> None:
        """HDFS: make the blob's ``blobs/<aa>`` folder before the first rename into it this run (one
        ``MKDIRS`` per new folder, none per blob)."""
        if not self.kind.folder_before_rename or sha[:2] in self._folders_there:
            return
        final.fs.makedirs(final.path.rsplit("/", 1)[0], exist_ok=True)
        with self._lock:
            self._folders_there.add(sha[:2])

    def _account(self, sha: str, size: int) -> tuple[str, int]:
        with self._lock:
            self.index[sha] = size
            self.written.add(sha)
            self.bytes_written += size
        return sha, size

    def _add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def put_many(self, sources: list[tuple[Location, int]]) -> Iterator[tuple[str, int, str | None] | BaseException]:
        """:meth:`put` of each source, in order, each result or the exception it raised.

        On a store whose requests wait on the network (``kind.parallel_puts``: S3, HDFS) several
        puts run at once; on a local disk one after the other, each only when the caller asks for
        the next result (a caller that stops at a failure copies nothing more, as a loop would).
        """
        def one(item: tuple[Location, int]) -> tuple[str, int, str | None] | BaseException:
            try:
                return self.put(*item)
            except (OSError, UserError) as exc:   # the caller decides, in order, as a loop would
                return exc

        threads = 1 if self.job_loc.local else self.kind.parallel_puts
        if threads <= 1 or len(sources) < 2:
            return (one(item) for item in sources)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return iter(list(pool.map(one, sources)))

    def sync(self) -> None:
        """Make the new blobs durable and give them their names (local disks) before a manifest names them."""
        if not self.job_loc.local:
            return
        staged, self._staged = self._staged, []
        if staged:
            sync_filesystem(staged[0][0])   # the bodies, all at once
        made: set[str] = set()
        try:
            for tmp_path, final in staged:
                faults.crash_point("backup.blob")
                parent = os.path.dirname(final.path)
                if parent not in made:
                    os.makedirs(parent, exist_ok=True)
                    made.add(parent)
                if not stat.S_ISREG(_lmode(final.path, stat.S_IFREG)):
                    raise UserError(f"blob {final.url} is {file_kind(_lmode(final.path, 0))}, not a regular file: "
                                    "something other than airflow-kafka-spark wrote into the backup store; remove "
                                    "it and back up again")
                os.replace(tmp_path, final.path)
        except OSError as exc:
            raise UserError(f"cannot store blobs in {self.job_loc.url}: {os_reason(exc)}") from None
        finally:
            for tmp_path, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp_path)
        if staged:
            sync_filesystem(staged[0][1].path)   # the directory entries of the renames


def _grew(src: Location, listed_size: int) -> CheckpointWritten:
    return CheckpointWritten(f"{src.url} grew while it was copied (listed with {listed_size:,} bytes): "
                     "something writes into the checkpoint; stop the query and back up again")


def _lmode(path: str, missing: int) -> int:
    """``lstat`` mode of ``path`` (never through a link); ``missing`` when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return missing
