"""The backup's pre-copy: the expensive part of a backup, taken while the query still runs.

Why: a safe restart backs the checkpoint up *after* the stop, and every second of that backup is a
second the stream stands still (issue 28). Most of a stateful checkpoint does not change between a
moment before the stop and the stop itself: Spark writes its state files (``N.delta``,
``N.snapshot``, RocksDB's ``N.zip``, ``*.sst`` and changelog files) and log files (``offsets/N``,
``commits/N``) to a temporary name and renames them into place, and never writes them again. So
the pre-copy stores the bodies of all files it finds in the job's blob store (on S3, by the store's
own ``CopyObject`` where the store keeps the object's SHA-256: ``ops.backup.kinds``), proves the
blobs it wrote (re-hashed, or by the store's checksum), and writes their entries (path, size,
sha256, mtime, ctime) as a **sealed, unpublished** manifest, ``<job>/precopy.json``
(``reuse.PRECOPY_NAME``). The backup after the stop (``ops.backup.take``) reads it as it reads the
previous backup's manifest (``reuse.known_entries``): a file whose size, mtime and (local disk)
inode change time are the pre-copy's keeps its sha256, and only the files written since are read
in the downtime window. In a snapshottable HDFS folder (``ops.backup.snapshot``) it stores no body:
it asks the cluster for each file's checksum, and the backup after the stop is a snapshot.

What it does **not** change:

* A pre-copy never publishes a backup: it is not in ``backups/``, not listed, never restored. The
  backup after the stop selects its files with the same rules (``ops.backup.selection``), checks
  every blob present with its size, proves those it wrote, and seals and verifies its manifest
  exactly as without a pre-copy.
* Files that vanish (state maintenance deletes old versions) or grow while read are left out: the
  backup reads them itself if they still matter. A file whose stat changed while it was read
  (local disk: size, mtime or inode change time) is left out too, so an entry never pairs a stat
  with bytes read before it.
* Blobs stored but not named by a published manifest are collected by pruning (``prune``) like
  the leftovers of a killed backup.

**Passes until quiet** (:func:`precopy_until_quiet`). The files a running query writes *during* a
pre-copy are left for the backup after the stop. A first pre-copy of gigabytes takes minutes (390 s
for 2.2 GB on the HDFS minicluster, docs/benchmarks.md round 9), and the state files written meanwhile
(1,084 there) then landed in the window. So the stop's pre-copy runs again while its last pass took
longer than a quiet pass (``QUIET_PASS_S``), up to ``MAX_PASSES``: each pass reuses every entry of the
one before and reads only what was written during it, so the passes shrink, like a live migration's.
Then, while the stop waits for a batch boundary, ``runtime.stop_precopy`` runs further passes beside
that wait.

**What a pass leaves out when it cannot help.** A pass that found nothing new (every entry reused
from the previous backup or pre-copy) seals nothing: the backup after the stop would rebuild the same
entries from the same two manifests, so sealing 20,000 unchanged entries would only cost time. And a
pass beside the stop's wait that is told to give up (``abandon``: the stop returned) does so after its
listing and before its first read, raising :class:`PassAbandoned`: the backup after the stop lists
and reads those files itself, so finishing the pass would only move the stop task's end later.

**Passes that keep their entries in memory** (:class:`PassChain`). The stop task runs its passes and
the backup after the stop in one process. A pass beside the stop's wait that sealed and wrote
``precopy.json`` (20,000 entries: ~0.5 s on HDFS) only for the next pass and the backup to read it
back put that write in the window when it was the pass in flight at the stop's return
(docs/benchmarks.md, round 18). So those passes hand their entry list on in memory; the passes
before the stop still write it, for a stop task that dies before its backup (its retry then reads
only the files of the stop's wait).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_kafka_spark._util.fs import Location, list_files, write_atomic
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.paths import Contained, check_relative
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.names import default_job_name, new_backup_id, validate_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import job_location, store_path
from airflow_kafka_spark.ops.backup.kinds import kind_for
from airflow_kafka_spark.ops.backup.manifest import LOCK_NAME, FileEntry, Manifest
from airflow_kafka_spark.ops.backup.reuse import (
    PRECOPY_NAME,
    known_entries,
    precopied,
    previous_manifest,
    remember,
    reusable,
    stat_of,
)
from airflow_kafka_spark.ops.backup.selection import layout_misfit, log_ids, select_files
from airflow_kafka_spark.ops.backup.snapshot import SnapshotWriter, snapshot_writer
from airflow_kafka_spark.ops.backup.store import blob_index, mismatched_blobs
from airflow_kafka_spark.ops.backup.take import open_sides
from airflow_kafka_spark.ops.backup.writer import BlobWriter


class PassAbandoned(Exception):
    """A pass gave up before its first read because its caller asked (``abandon``); it stored nothing."""


def never_abandon() -> bool:
    """The ``abandon`` of a pass nobody will stop (the passes before a stop, the CLI's)."""
    return False


@dataclass
class PrecopyResult:
    """What a pre-copy stored and what it cost."""

    job: str
    seconds: float
    files: int                 # entries the backup after the stop may reuse
    bytes: int
    files_read: int            # files read (new since the previous backup or pre-copy)
    bytes_read: int
    blobs_written: int
    bytes_written: int
    files_skipped: int         # vanished, grew or changed while read: the backup reads them itself
    files_vouched: int = 0     # new files whose sha256 the store kept: copied by the store, never read here
    bytes_copied_by_store: int = 0
    read_seconds: float = 0.0  # of ``seconds``, reading (or a store copying) new files; the rest lists and seals
    sealed: bool = True        # False: no ``precopy.json`` written (nothing new, or kept in memory: ``manifest``)
    #: the entry list of a pass that found something new (sealed or not): a pass or backup after it in this
    #: process takes it instead of reading ``precopy.json`` back (``PassChain``); never in the XCom
    manifest: Manifest | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "seconds": round(self.seconds, 3), "files": self.files, "bytes": self.bytes,
                "files_read": self.files_read, "bytes_read": self.bytes_read, "blobs_written": self.blobs_written,
                "bytes_written": self.bytes_written, "files_skipped": self.files_skipped,
                "files_vouched": self.files_vouched, "bytes_copied_by_store": self.bytes_copied_by_store,
                "read_seconds": round(self.read_seconds, 3), "sealed": self.sealed}


def precopy_checkpoint(checkpoint_location: str, backup_root: str, *, job: str | None = None,
                       storage_options: dict | None = None, backup_storage_options: dict | None = None,
                       seal_key: bytes | None = None, now_ms: int | None = None,
                       abandon: Callable[[], bool] = never_abandon, chain: PassChain | None = None) -> PrecopyResult:
    """Store the bodies of a (running or stopped) checkpoint's files and seal their entries; see the module doc.

    Changes nothing beside the job's blob store and ``<job>/precopy.json``: no lifecycle record is
    written, no backup published. Raises :class:`UserError` for bad input (unknown checkpoint, a
    job name the lifecycle record contradicts, links or special files in the checkpoint), and
    :class:`PassAbandoned` when ``abandon()`` is true after the listing, before any read.

    ``chain``: a pass of :class:`PassChain` that keeps its entries in memory: it takes the chain's
    newest entries instead of ``precopy.json`` (when of the same checkpoint and query) and writes none;
    its entries are the result's ``manifest`` either way.
    """
    t0 = time.monotonic()
    seal_key = seal.resolve_key(seal_key)
    ck, state, root, record = open_sides(checkpoint_location, backup_root, storage_options, backup_storage_options)
    job = job if job is not None else default_job_name(checkpoint_location, record.job_name if record else None)
    validate_job_name(job)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r} (lifecycle record), "
                        f"not {job!r}")
    job_loc = job_location(root, job)
    with LockFile(store_path(job_loc, LOCK_NAME), what=f"backups of job {job}"):
        listing = list_files(ck)
        previous = known_entries(previous_manifest(job_loc, job, ck, state.query_id, seal_key),
                                 precopied(job_loc, job, ck, state.query_id, seal_key,
                                           handed=chain.newest if chain is not None else None))
        writer = snapshot_writer(ck, job_loc, job, None, previous) or BlobWriter(   # None: no snapshot yet
            job_loc, blob_index(job_loc, trusted={f.sha256: f.size for f in previous.values()}), kind_for(ck, job_loc))
        index = writer.index
        ids = log_ids(listing)
        misfit = layout_misfit(listing, [(p.code, p.path) for p in state.problems], ids=ids)
        sel = select_files(listing, max(ids[1]) if ids[1] else None, max(ids[0]) if ids[0] else None,
                           keep_pending=True, whole=misfit)
        below_ck = Contained(ck)
        entries: list[FileEntry] = []
        todo: list[tuple[str, Location, int, float, float | None]] = []
        for rel in sorted(sel.files):
            size, mtime, ctime = stat_of(sel.files[rel], local=ck.local)
            if mtime is None:   # an entry without mtime can never be reused: not worth reading now
                continue
            prev = previous.get(rel)
            if reusable(prev, size, mtime, ctime, local=ck.local) and index.get(prev.sha256) == size:
                entries.append(prev)
                continue
            check_relative(rel, what="checkpoint file")
            todo.append((rel, below_ck.child(rel, what="checkpoint file"), size, mtime, ctime))
        if abandon():
            raise PassAbandoned(f"pre-copy of job {job} abandoned before reading {len(todo)} new files")
        reused = len(entries)
        t_read = time.monotonic()
        skipped = _read_new(writer, todo, entries)
        writer.sync()
        read_s = time.monotonic() - t_read
        bad = mismatched_blobs(job_loc, {sha: index[sha] for sha in writer.to_rehash()})
        if bad:
            raise UserError(f"the pre-copy of job {job} stored a blob that does not hash to its name "
                            f"({bad[0]}): the backup store at {job_loc.url} is not keeping what is written to it")
        if len(entries) == reused:   # nothing new: the two manifests it reused already say all of it
            return _result(job, time.monotonic() - t0, entries, writer, skipped, read_s,
                           sealed=False)
        cache = _cache(job, now_ms, ck, state.query_id, max(ids[1]) if ids[1] else None, entries, writer)
        if chain is None:
            sealed, written = cache.sealed_json(seal_key)
            write_atomic(store_path(job_loc, PRECOPY_NAME), written)
            remember(written, sealed, seal_key)   # the next pass and the backup after the stop read it unparsed
    return replace(_result(job, time.monotonic() - t0, entries, writer, skipped, read_s, sealed=chain is None),
                   manifest=cache)


def _cache(job: str, now_ms: int | None, ck: Location, query_id: str | None, committed: int | None,
           entries: list[FileEntry], writer: BlobWriter | SnapshotWriter) -> Manifest:
    """A pass's entries as a manifest that is never published (``precopy.json``'s body)."""
    created = now_ms if now_ms is not None else int(time.time() * 1000)
    return Manifest(
        backup_id=new_backup_id(created, committed), job=job, created_at_ms=created,
        reason="pre-copy while the query ran (never published: a stat cache for the backup after the stop)",
        checkpoint_location=ck.url, query_id=query_id, last_committed_batch=committed,
        committed_offsets=None, pending_batch=None, pending_offsets=None, initial_offsets=None,
        spark_version=None, kafka_cluster_id=None, topics={}, forced=True, running=True,
        state={}, problems=[], files=tuple(entries),
        stats={"files_hashed": writer.files_hashed, "bytes_hashed": writer.bytes_hashed,
               "blobs_written": len(writer.written), "bytes_written": writer.bytes_written})


def _read_new(writer: BlobWriter | SnapshotWriter, todo: list[tuple[str, Location, int, float, float | None]],
              entries: list[FileEntry]) -> int:
    """Store the new files' bodies and add their entries (then sort ``entries`` by path, as one pass in
    sorted order wrote them); the number left to the backup: vanished, grew or changed while read."""
    skipped = 0
    writer.prefetch([(src, size) for _, src, size, _, _ in todo])   # object stores: many requests at once
    for (rel, src, size, mtime, ctime), put in zip(todo, writer.put_many([(t[1], t[2]) for t in todo]), strict=True):
        if isinstance(put, FileNotFoundError | UserError):   # deleted by state maintenance, or grew
            skipped += 1                                     # meanwhile: the backup's job
            continue
        if isinstance(put, BaseException):
            raise put
        sha, actual, proof = put
        if actual != size or not _same_stat(src, size, mtime, ctime):
            skipped += 1
            continue
        entries.append(FileEntry(rel, actual, sha, mtime, ctime, proof))
    entries.sort()
    return skipped


def _result(job: str, seconds: float, entries: list[FileEntry], writer: BlobWriter | SnapshotWriter, skipped: int,
            read_s: float, *, sealed: bool = True) -> PrecopyResult:
    return PrecopyResult(job=job, seconds=seconds, files=len(entries), bytes=sum(e.size for e in entries),
                         files_read=writer.files_hashed, bytes_read=writer.bytes_hashed,
                         blobs_written=len(writer.written), bytes_written=writer.bytes_written,
                         files_skipped=skipped, files_vouched=writer.files_vouched,
                         bytes_copied_by_store=writer.bytes_copied_by_store, read_seconds=read_s, sealed=sealed)


def _same_stat(src: Location, size: int, mtime: float, ctime: float | None) -> bool:
    """Local disk: the file's stat after the read is the one listed before it (else it was written meanwhile).

    Elsewhere the listing's stat stands: an object store's or HDFS's modification time moves with any
    rewrite, so a changed file's entry can never be reused by the backup after the stop.
    """
    if not src.local:
        return True
    try:
        st = os.stat(src.path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    listed = stat_of({"size": st.st_size, "mtime": st.st_mtime, "created": st.st_ctime}, local=True)
    return listed == (size, mtime, ctime)


class PassChain:
    """The stop task's passes, each handing its entry list to the next and to the backup after the stop
    (:attr:`newest`) in this process; see the module doc."""

    def __init__(self, checkpoint_location: str, backup_root: str, *, job: str) -> None:
        self.checkpoint_location, self.backup_root, self.job = checkpoint_location, backup_root, job
        self.newest: Manifest | None = None   # the newest pass's entries that found something new

    def before(self) -> PrecopyResult:
        """A pass before the stop: written to ``precopy.json`` too (a retry of a dead stop task reads it)."""
        return self._kept(precopy_checkpoint(self.checkpoint_location, self.backup_root, job=self.job))

    def beside(self, abandon: Callable[[], bool]) -> PrecopyResult:
        """A pass beside the stop's wait: in memory only, for the next pass and the backup after the stop."""
        return self._kept(precopy_checkpoint(self.checkpoint_location, self.backup_root, job=self.job,
                                             abandon=abandon, chain=self))

    def _kept(self, r: PrecopyResult) -> PrecopyResult:
        if r.manifest is not None:
            self.newest = r.manifest
        return r


#: A pass this short leaves about as many new files as one stop's wait for a batch boundary writes anyway.
QUIET_PASS_S = 10.0
MAX_PASSES = 3


def precopy_until_quiet(checkpoint_location: str, backup_root: str, *, job: str | None = None,
                        still_running: Callable[[], bool] = lambda: True, quiet_s: float = QUIET_PASS_S,
                        max_passes: int = MAX_PASSES) -> list[PrecopyResult]:
    """Pre-copy again while the last pass took longer than ``quiet_s`` and the query still runs (at most
    ``max_passes``); every pass's result, the last one's entries being what the backup after the stop reuses."""
    return passes_until_quiet(lambda: precopy_checkpoint(checkpoint_location, backup_root, job=job),
                              still_running=still_running, quiet_s=quiet_s, max_passes=max_passes)


def passes_until_quiet(one_pass: Callable[[], PrecopyResult], *, still_running: Callable[[], bool] = lambda: True,
                       quiet_s: float = QUIET_PASS_S, max_passes: int = MAX_PASSES) -> list[PrecopyResult]:
    """:func:`precopy_until_quiet`'s rule on any pass (``runtime.stop_precopy`` passes its own)."""
    passes = [one_pass()]
    while passes[-1].seconds > quiet_s and len(passes) < max_passes and still_running():
        passes.append(one_pass())
    return passes
