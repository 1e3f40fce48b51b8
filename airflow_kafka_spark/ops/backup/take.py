"""Taking a backup: a verified, content-addressed copy of a stopped query's last committed version.

Why it is built this way:

* **What is copied** is one consistent version (``ops.backup.selection``).
* **Content addressed** (``ops.backup.store``): a file whose path, size and modification time equal
  an entry of the previous backup of the same query is not even re-read (checkpoint files are
  immutable once Spark renames them into place): the cost of a backup follows the new batches,
  not the history.
* **The pre-copy** (``ops.backup.precopy``), taken while the query still ran, is a second stat
  cache beside the previous backup (``reuse.known_entries``): a backup after the stop reads only
  the files written since, and the blobs the pre-copy stored are checked here like the previous
  backup's (present, with their size); the pre-copy proved them when it wrote them.
* **HDFS snapshots** (``ops.backup.snapshot``): a checkpoint in a snapshottable HDFS folder on the
  backup root's cluster is kept by one ``CREATESNAPSHOT`` instead of blobs, its files named by the
  cluster's checksums; the same selection, the same checks, the same publication.
* **Published only when verified**: the manifest is first written to ``staging/``, read back,
  checked (digest, every blob present with its size, every blob written by this run re-hashed, or
  proven by the store itself where it can: ``ops.backup.kinds``)
  and only then written to ``backups/`` in one atomic step. A backup killed at any point is never
  listed; its leftovers are collected by pruning.
* **Not of a running query**: a live lease in the lifecycle record, or batches that advance between
  the listing taken before the copy and the one taken after it (``ops.backup.quiet``), refuse the
  backup unless ``BackupRequest.force``.

The entry point users call is ``ops.commands.backup_checkpoint`` (it first refuses a checkpoint
with an interrupted reset/restore); reset and restore, which hold the operation lock and have
already recovered, call :func:`take_backup` directly. Each caller opens the checkpoint and the
backup root once and passes the locations (what may be backed up: ``ops.backup.source``).
"""

from __future__ import annotations

import logging
import operator
import time
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import Location, list_files, read_bytes, remove_file, write_atomic
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.paths import Contained, check_relative
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import CheckpointWritten, OperationBlocked, UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import new_backup_id
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import job_location, store_path
from airflow_kafka_spark.ops.backup.kinds import kind_for
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, LOCK_NAME, STAGING_DIR, FileEntry, Manifest
from airflow_kafka_spark.ops.backup.prune import check_retention, prune_job
from airflow_kafka_spark.ops.backup.quiet import ids_after, newest_log_files, span, stop_witness
from airflow_kafka_spark.ops.backup.reuse import (
    PRECOPY_NAME,
    known_entries,
    precopied,
    previous_manifest,
    remember,
    reusable,
    stat_of,
    unchanged,
)
from airflow_kafka_spark.ops.backup.selection import (
    Selection,
    is_rocksdb_immutable,
    layout_misfit,
    log_ids,
    select_files,
)
from airflow_kafka_spark.ops.backup.snapshot import snapshot_writer
from airflow_kafka_spark.ops.backup.source import job_of, offsets_at, read_source, refuse_irregular
from airflow_kafka_spark.ops.backup.source import open_sides as open_sides  # precopy's import
from airflow_kafka_spark.ops.backup.store import blob_index, check_blobs
from airflow_kafka_spark.ops.backup.writer import BlobWriter
from airflow_kafka_spark.ops.guards import check_locations, running_reason
from airflow_kafka_spark.ops.options import DEFAULT_RUN, NO_RETENTION, Retention, RunOptions


@dataclass(frozen=True)
class BackupRequest:
    """One backup asked for, apart from how it runs (``RunOptions``: stores, settle time, seal key, the Spark
    version to record) and what it prunes after (``Retention``): under which job (default: the lifecycle
    record's, else the folder's name), why, whether a running query's last committed batch may be captured
    (``force``), the clock (``now_ms``: tests pin it), and the pre-copy the caller holds in memory
    (``precopy``: the stop task's passes, ``precopy.PassChain``; taken instead of ``precopy.json`` when
    of the same checkpoint and query: what is copied is the same, only its cost changes)."""

    job: str | None = None
    reason: str = "manual"
    force: bool = False
    now_ms: int | None = None
    precopy: Manifest | None = None


DEFAULT_BACKUP = BackupRequest()


@dataclass
class BackupResult:
    """A published backup and what it cost."""

    manifest: Manifest
    seconds: float
    files: int
    bytes: int
    files_hashed: int             # source files read (new or changed since the previous backup)
    bytes_hashed: int
    blobs_written: int            # bodies stored by this backup (the rest already existed)
    bytes_written: int
    files_from_previous: int      # taken from the previous backup's manifest (or the pre-copy) without re-reading
    verify_seconds: float
    files_from_precopy: int = 0   # of those, taken from the pre-copy
    files_vouched: int = 0        # new files whose sha256 the store kept (never read here; ``ops.backup.kinds``)
    bytes_copied_by_store: int = 0
    excluded: dict[str, str] = field(default_factory=dict)
    pruned: list[str] = field(default_factory=list)
    selection: Selection | None = None

    @property
    def backup_id(self) -> str:
        return self.manifest.backup_id

    def to_dict(self) -> dict[str, Any]:
        return {"backup": self.manifest.summary(), "seconds": round(self.seconds, 3),
                "files": self.files, "bytes": self.bytes, "files_hashed": self.files_hashed,
                "bytes_hashed": self.bytes_hashed, "blobs_written": self.blobs_written,
                "bytes_written": self.bytes_written, "files_from_previous": self.files_from_previous,
                "files_from_precopy": self.files_from_precopy, "verify_seconds": round(self.verify_seconds, 3),
                "files_vouched": self.files_vouched, "bytes_copied_by_store": self.bytes_copied_by_store,
                "excluded": len(self.excluded), "pruned": self.pruned,
                **({"selection": self.selection.record()} if self.selection is not None else {})}


def take_backup(ck: Location, root: Location, request: BackupRequest = DEFAULT_BACKUP, *,
                retention: Retention = NO_RETENTION, run: RunOptions = DEFAULT_RUN) -> BackupResult:
    """Copy the last committed version of a stopped query's checkpoint ``ck`` to ``root``; see the module doc.

    ``ck`` and ``root`` are opened by the caller (``root`` by ``catalog.open_backup_root``).
    ``run.backup_settle_s`` is the least time between the listing before the copy and the one after
    it: if the batch ids moved in between, the query is running. ``retention`` applies
    :func:`prune_job` after a successful backup. Raises :class:`OperationBlocked` (exit 3) for a
    running query without ``request.force``, :class:`UserError` (exit 2) for bad input; in both cases
    nothing is published. ``run.seal_key`` (default: ``$AKS_SEAL_KEY_FILE``'s) adds the keyed seal.
    """
    t0 = time.monotonic()
    run = replace(run, seal_key=seal.resolve_key(run.seal_key))
    refuse_irregular(ck)
    state = read_source(ck)
    check_locations(ck, root)
    record = LifecycleRecord.load(ck.url, storage_options=run.stores.checkpoint)
    job = job_of(ck.url, request.job, record)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {ck.url} belongs to job {record.job_name!r} (lifecycle record), "
                        f"not {job!r}: back it up under its own job name")
    check_retention(retention.keep_last, retention.max_age_s)
    running = running_reason(record)
    if running and not request.force:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before backing up, "
                               "or pass force to capture only its last committed batch", code="QUERY_RUNNING")
    job_loc = job_location(root, job)
    if record is None and request.job is not None:
        # Bind the checkpoint to the job named here, so later restore/reset find their backups
        # under the same name without being told again (the record is ours, beside the checkpoint).
        record = LifecycleRecord.create(job, ck.url, storage_options=run.stores.checkpoint)
        record.save()
    cap = _Capture(ck=ck, job_loc=job_loc, job=job, record=record, running=running, request=request, run=run, t0=t0)
    with LockFile(store_path(job_loc, LOCK_NAME), what=f"backups of job {job}"):
        result = _backup_retrying(cap, state)
        if retention.keep_last is not None or retention.max_age_s is not None:
            pr = prune_job(job_loc, job, keep_last=retention.keep_last, max_age_s=retention.max_age_s,
                           now_ms=request.now_ms, dry_run=False, grace_s=0.0 if job_loc.local else 3600.0,
                           seal_key=run.seal_key, keep_ids=retention.keep_ids)
            result.pruned = [m.backup_id for m in pr.removed]
    return result


@dataclass(frozen=True)
class _Capture:
    """What each step of one backup reads: the checkpoint, the job's store, the job and its record, why the
    query counts as running (None: stopped), the request, how it runs (seal key resolved), when it started."""

    ck: Location
    job_loc: Location
    job: str
    record: LifecycleRecord | None
    running: str | None
    request: BackupRequest
    run: RunOptions
    t0: float


_log = logging.getLogger(__name__)

#: After a file changed under the copy, how long to wait before listing again (``_backup_retrying``).
WRITTEN_SETTLE_S = 3.0
#: At most this many growing RocksDB uploads are left out of one backup; one more fails it as any change does.
MAX_UNFINISHED_UPLOADS = 16


def _backup_retrying(cap: _Capture, state: CheckpointState) -> BackupResult:
    """:func:`_backup_once`, again on a fresh listing when a listed file vanished and ``force`` allows it,
    or when a file changed while it was copied.

    Why the second: on a cluster manager the driver's exit does not end every writer. On YARN an
    executor of a finished application wrote a RocksDB ``.sst`` of the batch the stop cut for
    seconds after the AM was gone (docs/benchmarks.md, round 21): the backup after the stop listed it
    with 0 bytes and read more. Such a write ends within seconds (the NodeManager kills the
    container); a running query's does not, and the third change still fails the backup as before.
    A RocksDB ``.sst`` that grows is left out at once instead (``select_files``' ``being_written``):
    an upload that has not ended, which no version kept lists (the YARN soak of round 25 saw one the
    reference job's stop interrupted, never closed: its executor's lease keeps it open)."""
    being_written: set[str] = set()
    attempt = 0
    while True:
        try:
            return _backup_once(cap, state, frozenset(being_written))
        except CheckpointWritten as exc:
            if (exc.path is not None and is_rocksdb_immutable(exc.path) and exc.path not in being_written
                    and len(being_written) < MAX_UNFINISHED_UPLOADS):
                # An .sst that grows is an upload that has not ended: no version kept lists it (select_files).
                _log.warning("%s; left out as an unfinished RocksDB upload, listing again", exc)
                being_written.add(exc.path)
                state = read_checkpoint(cap.ck)
                continue
            if attempt == 2:
                raise CheckpointWritten(f"{exc} (a file changed in each of 3 attempts, {WRITTEN_SETTLE_S:.0f}s "
                                        "apart)") from None
            _log.warning("%s; listing again in %.0fs (attempt %d of 3)", exc, WRITTEN_SETTLE_S, attempt + 2)
            time.sleep(WRITTEN_SETTLE_S)
            state = read_checkpoint(cap.ck)
        except FileNotFoundError:
            # A file listed a moment ago vanished: only a running query (purge, state maintenance)
            # does that. Re-list and try again; the blobs already stored are reused.
            if not cap.request.force or attempt == 2:
                raise OperationBlocked(f"files of checkpoint {cap.ck.url} disappeared during the "
                                       "backup: the query is running; stop it first (or pass force)",
                                       code="QUERY_RUNNING") from None
            state = read_checkpoint(cap.ck)
        attempt += 1


@dataclass(frozen=True)
class _Listed:
    """The first listing and what it decided: the files to copy, what the previous backup and the pre-copy
    already hold, the log ids and newest log files seen, and when it was taken."""

    at: float                     # time.monotonic()
    wall: float                   # time.time()
    last: Manifest | None
    pre: Manifest | None
    previous: dict[str, FileEntry]
    before: tuple[frozenset[int], frozenset[int]]
    newest: tuple[tuple[str, float | None, int], ...]
    committed: int | None
    sel: Selection


def _backup_once(cap: _Capture, state: CheckpointState, being_written: frozenset[str] = frozenset()) -> BackupResult:
    """One attempt: list and select, copy, check the checkpoint stayed quiet, compose the manifest, publish."""
    listed = _list(cap, state, being_written)
    faults.crash_point("backup.listed")
    created = cap.request.now_ms if cap.request.now_ms is not None else int(time.time() * 1000)
    backup_id = new_backup_id(created, listed.committed)
    # An HDFS snapshot where the folder allows one (ops.backup.snapshot), else bodies into the blob store;
    # the blob store is listed by name, the blobs the previous (verified) manifest names taking their
    # sizes from it (``blob_index``): 40,000 stats fewer.
    writer = snapshot_writer(cap.ck, cap.job_loc, cap.job, backup_id, listed.previous) or BlobWriter(
        cap.job_loc, blob_index(cap.job_loc, trusted={f.sha256: f.size for f in listed.previous.values()}),
        kind_for(cap.ck, cap.job_loc))
    entries, reused = _copy(cap.ck, listed, writer)
    pre_objs = {id(f) for f in listed.pre.files} if listed.pre is not None else set()
    from_precopy = sum(id(e) in pre_objs for e in entries)
    running = _running_after_copy(cap, listed)
    manifest = _manifest(cap, state, listed, entries, running, created=(created, backup_id),
                         snapshot=writer.snapshot_doc or {},
                         stats={"excluded_files": len(listed.sel.excluded), "files_hashed": writer.files_hashed,
                                "bytes_hashed": writer.bytes_hashed, "blobs_written": len(writer.written),
                                "bytes_written": writer.bytes_written, "files_from_previous": reused,
                                **({"files_vouched_by_store": writer.files_vouched,
                                    "bytes_copied_by_store": writer.bytes_copied_by_store}
                                   if writer.files_vouched else {}),
                                **({"files_from_precopy": from_precopy} if listed.pre is not None else {})})
    staged, verify_seconds = _publish(cap, manifest, writer, listed)
    return BackupResult(
        manifest=staged, seconds=time.monotonic() - cap.t0, files=len(entries), bytes=staged.total_bytes,
        files_hashed=writer.files_hashed, bytes_hashed=writer.bytes_hashed, blobs_written=len(writer.written),
        bytes_written=writer.bytes_written, files_from_previous=reused, verify_seconds=verify_seconds,
        excluded=listed.sel.excluded, selection=listed.sel, files_from_precopy=from_precopy,
        files_vouched=writer.files_vouched, bytes_copied_by_store=writer.bytes_copied_by_store)


def _list(cap: _Capture, state: CheckpointState, being_written: frozenset[str] = frozenset()) -> _Listed:
    """The first listing, the previous backup and pre-copy, and the files to copy."""
    ck, job_loc, seal_key = cap.ck, cap.job_loc, cap.run.seal_key
    listed_at, listed_wall = time.monotonic(), time.time()
    # The checkpoint listing (a stat per file), then the previous manifest. Not side by side in two
    # threads: every ``stat`` gives up the interpreter lock and waits to get it back from the parsing
    # thread, which made the pair take 590 ms instead of 350 ms one after the other (40,000 files).
    listing = list_files(ck)
    last = previous_manifest(job_loc, cap.job, ck, state.query_id, seal_key)
    pre = precopied(job_loc, cap.job, ck, state.query_id, seal_key, handed=cap.request.precopy)
    previous = known_entries(last, pre)
    before = log_ids(listing)
    committed = max(before[1]) if before[1] else None
    planned = max(before[0]) if before[0] else None
    misfit = layout_misfit(listing, [(p.code, p.path) for p in state.problems], ids=before)
    capture_running = cap.request.force and bool(cap.running)
    if misfit and capture_running:
        raise OperationBlocked(f"cannot capture one consistent version of running job {cap.job}: {misfit}, so no "
                               "file can be proven garbage while Spark writes; stop it on a batch boundary and back "
                               "up again (the whole folder is copied then)", code="QUERY_RUNNING")
    sel = select_files(listing, committed, planned, keep_pending=not capture_running, whole=misfit,
                       being_written=being_written)
    return _Listed(at=listed_at, wall=listed_wall, last=last, pre=pre, previous=previous, before=before,
                   newest=newest_log_files(listing, before), committed=committed, sel=sel)


def _copy(ck: Location, listed: _Listed, writer: BlobWriter) -> tuple[list[FileEntry], int]:
    """The manifest entries of the selected files, in path order, and how many were taken unchanged: a file
    whose path, size and times match the previous backup's or the pre-copy's entry is not read again."""
    previous, index = listed.previous, writer.index
    entries: list[FileEntry] = []
    reused = 0
    below_ck = Contained(ck)   # each checkpoint folder checked once (state stores hold 10,000s of files)
    local, files = ck.local, listed.sel.files
    order = sorted(files)
    todo: list[tuple[int, str, Location, int, float | None, float | None]] = []
    for rel, same in zip(order, unchanged(order, files, previous, index, local=local), strict=True):
        if same is not None:   # the previous entry itself: nothing about the file changed
            entries.append(same)
            reused += 1
            continue
        size, mtime, ctime = stat_of(files[rel], local=local)
        prev = previous.get(rel)
        if reusable(prev, size, mtime, ctime, local=local) and index.get(prev.sha256) == size:
            # ``rel`` is the path of an entry of a parsed manifest: ``check_paths`` proved it safe there.
            # Same path, size and sha256; same mtime and (local) ctime, else the previous entry's.
            entries.append(prev if (prev.mtime, prev.ctime) == (mtime, ctime)
                           else FileEntry(rel, size, prev.sha256, mtime, ctime, prev.proof))
            reused += 1
            continue
        check_relative(rel, what="checkpoint file")   # a name the manifest could not carry safely
        todo.append((len(entries), rel, below_ck.child(rel, what="checkpoint file"), size, mtime, ctime))
        entries.append(None)   # type: ignore[arg-type]  # its slot, filled below
    writer.prefetch([(src, size) for _, _, src, size, _, _ in todo])   # object stores: many requests at once
    for (slot, rel, _, _, mtime, ctime), put in zip(todo, writer.put_many([(t[2], t[3]) for t in todo]),
                                                    strict=True):
        if isinstance(put, BaseException):
            if isinstance(put, CheckpointWritten):
                put.path = rel   # which file grew: an unfinished RocksDB upload is left out (_backup_retrying)
            raise put   # the first failure in path order, as one put after the other would raise it
        sha, actual, proof = put
        entries[slot] = FileEntry(rel, actual, sha, mtime, ctime, proof)
    writer.sync()
    return entries, reused


def _running_after_copy(cap: _Capture, listed: _Listed) -> str | None:
    """Why the query counts as running once the copy is done: the lease's reason, else batches that advanced
    between the two listings (refused unless ``force``), else None."""
    # The second listing: did batches advance while we copied? (Running query detection.)
    # Only offsets/ and commits/ are listed again: a running query shows there first.
    before = listed.before
    after = ids_after(cap.ck, before, listed.newest, cap.run.backup_settle_s, listed.wall,
                      time.monotonic() - listed.at, witnessed=stop_witness(cap.record, before) is not None)
    if after != before and not cap.request.force:
        raise OperationBlocked(
            f"checkpoint {cap.ck.url} changed during the backup (offsets/commits {span(before)} -> {span(after)}): "
            "the query is running; stop it on a batch boundary first, or pass force to capture only the last "
            "committed batch", code="QUERY_RUNNING")
    return cap.running or (f"batches advanced during the backup ({span(before)} -> {span(after)})"
                           if after != before else None)


def _manifest(cap: _Capture, state: CheckpointState, listed: _Listed, entries: list[FileEntry],
              running: str | None, *, created: tuple[int, str], snapshot: dict[str, str],
              stats: dict[str, int]) -> Manifest:
    """The manifest of this backup (not sealed yet): what was captured, of which query, at which offsets;
    ``created``: when (ms) and under which id (the snapshot, if any, is already named by it)."""
    ck, record, sel, committed, last = cap.ck, cap.record, listed.sel, listed.committed, listed.last
    # A batch planned after the last commit (a whole copy may also hold commits ahead of offsets/: no pending then)
    pending = sel.log_bound if sel.log_bound is not None and (committed is None or sel.log_bound > committed) \
        else None
    initial: PartitionOffsets = {}
    for offs in state.initial_offsets.values():
        initial.update(offs)
    return Manifest(
        backup_id=created[1], job=cap.job, created_at_ms=created[0], reason=cap.request.reason,
        checkpoint_location=ck.url, query_id=state.query_id, last_committed_batch=committed,
        committed_offsets=offsets_at(ck, state, committed),
        pending_batch=pending,
        pending_offsets=offsets_at(ck, state, pending), initial_offsets=initial or None,
        spark_version=cap.run.spark_version or (record.spark_version if record else None),
        kafka_cluster_id=record.kafka_cluster_id if record else None,
        topics={n: {"topic_id": t.topic_id, "partitions": t.partitions}
                for n, t in sorted((record.topics if record else {}).items())},
        forced=cap.request.force, running=bool(running),
        state={"has_state": state.has_state, "version": sel.state_version if state.has_state else None,
               "complete": not sel.state_problems},
        selection=sel.record(), snapshot=snapshot,
        problems=[*sel.state_problems, *(f"{p.code} {p.path}: {p.message}" for p in state.problems)],
        files=tuple(entries),
        # Every entry the previous manifest's own, in its order: its sealed file list is this one.
        files_json=last.files_json if last is not None and len(entries) == len(last.files)
        and all(map(operator.is_, entries, last.files)) else None,
        stats=stats,
    )


def _publish(cap: _Capture, manifest: Manifest, writer: BlobWriter, listed: _Listed) -> tuple[Manifest, float]:
    """Seal, stage, read back, verify, publish; the published manifest and the seconds verifying took."""
    job_loc, seal_key = cap.job_loc, cap.run.seal_key
    manifest, written = manifest.sealed_json(seal_key)
    staging = store_path(job_loc, STAGING_DIR, f"{manifest.backup_id}.json")
    write_atomic(staging, written)
    faults.crash_point("backup.staged")
    v0 = time.monotonic()
    raw = read_bytes(staging)
    if raw is None:
        raise UserError(f"the staged manifest {staging.url} vanished; is another process pruning this job?")
    # Read back byte for byte what was written: then it parses to ``manifest`` itself (sealed here,
    # every path checked above), and parsing 40,000 entries again would prove nothing more.
    staged = manifest if raw == written else Manifest.from_json(raw, where=staging.url, seal_key=seal_key)
    # Presence and sizes against the index listed at the start under the job lock, plus the blobs
    # this run wrote: re-hashed from the store, unless the store itself proves them (``kinds``):
    # re-listing 40,000 blobs proved nothing more.
    check_blobs(job_loc, staged, deep_shas=writer.to_rehash(), index=writer.index)
    verify_seconds = time.monotonic() - v0
    faults.crash_point("backup.verified")
    kind_for(job_loc, job_loc).publish(staging, store_path(job_loc, BACKUPS_DIR, f"{manifest.backup_id}.json"), raw)
    faults.crash_point("backup.published")
    remember(raw, staged, seal_key)   # the next backup's stat cache, unparsed in this process
    if listed.pre is not None:   # consumed: its blobs this backup names are kept, the rest are pruning's
        remove_file(store_path(job_loc, PRECOPY_NAME))
    return staged, verify_seconds
