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
  the listing taken before the copy and the one taken after it, refuse the backup unless
  ``force=True``.

The entry point users call is ``ops.commands.backup_checkpoint`` (it first refuses a checkpoint
with an interrupted reset/restore); reset and restore, which hold the operation lock and have
already recovered, call :func:`take_backup` directly.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util import faults
from airflow_kafka_spark._util.fs import (
    Location,
    list_files,
    mtime_of,
    open_location,
    read_bytes,
    remove_file,
    write_atomic,
)
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.paths import Contained, check_relative, irregular_entries
from airflow_kafka_spark.checkpoint.formats import parse_offsets_file
from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import OperationBlocked, UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import default_job_name, new_backup_id, validate_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import job_location, open_backup_root, store_path
from airflow_kafka_spark.ops.backup.kinds import kind_for
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, LOCK_NAME, STAGING_DIR, FileEntry, Manifest
from airflow_kafka_spark.ops.backup.prune import check_retention, prune_job
from airflow_kafka_spark.ops.backup.reuse import (
    PRECOPY_NAME,
    known_entries,
    precopied,
    previous_manifest,
    reusable,
    stat_of,
    unchanged,
)
from airflow_kafka_spark.ops.backup.selection import Selection, layout_misfit, log_ids, select_files
from airflow_kafka_spark.ops.backup.snapshot import snapshot_writer
from airflow_kafka_spark.ops.backup.store import blob_index, check_blobs
from airflow_kafka_spark.ops.backup.writer import BlobWriter
from airflow_kafka_spark.ops.guards import check_locations, running_reason

#: How far a remote store's clock may be behind ours before its mtimes would fool :func:`_settle_wait`.
_CLOCK_SKEW_S = 60.0


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


def open_sides(checkpoint_location: str, backup_root: str, storage_options: dict | None,
               backup_storage_options: dict | None) -> tuple[Location, CheckpointState, Location, Any]:
    """Both ends of a backup (or pre-copy), opened and checked once: the checkpoint (no links or special
    files), its state, the backup root, that neither holds the other, and the lifecycle record."""
    refuse_irregular(open_location(checkpoint_location, storage_options, what="checkpoint location"))
    ck, state = open_checkpoint(checkpoint_location, storage_options)
    root = open_backup_root(backup_root, backup_storage_options)
    check_locations(ck, root)
    return ck, state, root, LifecycleRecord.load(checkpoint_location)


def open_checkpoint(checkpoint_location: str, storage_options: dict | None) -> tuple[Location, CheckpointState]:
    """Open and read a checkpoint that must exist and have something to back up."""
    loc = open_location(checkpoint_location, storage_options, what="checkpoint location")
    state = read_checkpoint(checkpoint_location, storage_options=storage_options)
    if not state.exists:
        if state.legacy_escaped:
            raise UserError(f"checkpoint location {checkpoint_location} does not exist, but "
                            f"{state.problems[0].message}; back up {state.legacy_escaped} itself, or move it first")
        raise UserError(f"checkpoint location {checkpoint_location} does not exist; pass the folder that holds "
                        "offsets/, commits/ and metadata")
    if not state.offset_batch_ids and not state.commit_batch_ids and state.query_id is None \
            and not state.initial_offsets:
        raise UserError(f"{checkpoint_location} is not a Structured Streaming checkpoint (no metadata, offsets/ "
                        "or commits/); pass the folder that holds them")
    return loc, state


def take_backup(checkpoint_location: str, backup_root: str, *, job: str | None = None,
                      reason: str = "manual", force: bool = False, spark_version: str | None = None,
                      settle_s: float = 2.0, keep_last: int | None = None, max_age_s: float | None = None,
                      storage_options: dict | None = None, backup_storage_options: dict | None = None,
                      now_ms: int | None = None, seal_key: bytes | None = None,
                      keep_ids: Collection[str] = ()) -> BackupResult:
    """Copy the last committed version of a stopped query's checkpoint to ``backup_root``; see the module doc.

    ``settle_s`` is the least time between the listing before the copy and the one after it: if
    the batch ids moved in between, the query is running. ``keep_last`` / ``max_age_s`` apply
    :func:`prune_backups` after a successful backup. Raises :class:`OperationBlocked` (exit 3) for
    a running query without ``force``, :class:`UserError` (exit 2) for bad input; in both cases
    nothing is published. ``seal_key`` (default: ``$AKS_SEAL_KEY_FILE``'s) adds the keyed seal.
    """
    t0 = time.monotonic()
    seal_key = seal.resolve_key(seal_key)
    ck, state, root, record = open_sides(checkpoint_location, backup_root, storage_options, backup_storage_options)
    explicit_job = job is not None
    if job is None:
        job = default_job_name(checkpoint_location, record.job_name if record else None)
    validate_job_name(job)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r} (lifecycle record), "
                        f"not {job!r}: back it up under its own job name")
    check_retention(keep_last, max_age_s)
    running = running_reason(record)
    if running and not force:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before backing up, "
                               "or pass force to capture only its last committed batch", code="QUERY_RUNNING")
    job_loc = job_location(root, job)
    if record is None and explicit_job:
        # Bind the checkpoint to the job named here, so later restore/reset find their backups
        # under the same name without being told again (the record is ours, beside the checkpoint).
        record = LifecycleRecord.create(job, checkpoint_location)
        record.save()
    with LockFile(store_path(job_loc, LOCK_NAME), what=f"backups of job {job}"):
        for attempt in range(3):
            try:
                result = _backup_once(ck, state, job_loc, job, record, reason=reason, force=force,
                                      running=running, spark_version=spark_version, settle_s=settle_s,
                                      t0=t0, now_ms=now_ms, seal_key=seal_key)
                break
            except FileNotFoundError:
                # A file listed a moment ago vanished: only a running query (purge, state maintenance)
                # does that. Re-list and try again; the blobs already stored are reused.
                if not force or attempt == 2:
                    raise OperationBlocked(f"files of checkpoint {checkpoint_location} disappeared during the "
                                           "backup: the query is running; stop it first (or pass force)",
                                           code="QUERY_RUNNING") from None
                state = read_checkpoint(checkpoint_location, storage_options=storage_options)
        if keep_last is not None or max_age_s is not None:
            pr = prune_job(job_loc, job, keep_last=keep_last, max_age_s=max_age_s, now_ms=now_ms,
                               dry_run=False, grace_s=0.0 if job_loc.local else 3600.0, seal_key=seal_key,
                               keep_ids=keep_ids)
            result.pruned = [m.backup_id for m in pr.removed]
    return result


def _backup_once(ck: Location, state: CheckpointState, job_loc: Location, job: str,
                 record: LifecycleRecord | None, *, reason: str, force: bool, running: str | None,
                 spark_version: str | None, settle_s: float, t0: float, now_ms: int | None,
                 seal_key: bytes | None) -> BackupResult:
    listed_at = time.monotonic()
    listed_wall = time.time()
    # The checkpoint listing (a stat per file), then the previous manifest. Not side by side in two
    # threads: every ``stat`` gives up the interpreter lock and waits to get it back from the parsing
    # thread, which made the pair take 590 ms instead of 350 ms one after the other (40,000 files).
    # The blob store is then listed by name, the blobs the previous (verified) manifest names taking
    # their sizes from it (``blob_index``): 40,000 stats fewer.
    listing = list_files(ck)
    last = previous_manifest(job_loc, job, ck, state.query_id, seal_key)
    pre = precopied(job_loc, job, ck, state.query_id, seal_key)
    previous = known_entries(last, pre)
    before = log_ids(listing)
    newest_before = _newest_log_files(listing, before)
    committed = max(before[1]) if before[1] else None
    planned = max(before[0]) if before[0] else None
    misfit = layout_misfit(listing, [(p.code, p.path) for p in state.problems], ids=before)
    if misfit and force and running:
        raise OperationBlocked(f"cannot capture one consistent version of running job {job}: {misfit}, so no file "
                               "can be proven garbage while Spark writes; stop it on a batch boundary and back up "
                               "again (the whole folder is copied then)", code="QUERY_RUNNING")
    sel = select_files(listing, committed, planned, keep_pending=not (force and running), whole=misfit)
    faults.crash_point("backup.listed")

    created = now_ms if now_ms is not None else int(time.time() * 1000)
    backup_id = new_backup_id(created, committed)
    # An HDFS snapshot where the folder allows one (ops.backup.snapshot), else bodies into the blob store.
    writer = snapshot_writer(ck, job_loc, job, backup_id, previous) or BlobWriter(
        job_loc, blob_index(job_loc, trusted={f.sha256: f.size for f in previous.values()}), kind_for(ck, job_loc))
    index = writer.index
    entries: list[FileEntry] = []
    reused = 0
    below_ck = Contained(ck)   # each checkpoint folder checked once (state stores hold 10,000s of files)
    local, files = ck.local, sel.files
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
            raise put   # the first failure in path order, as one put after the other would raise it
        sha, actual, proof = put
        entries[slot] = FileEntry(rel, actual, sha, mtime, ctime, proof)
    writer.sync()
    pre_objs = {id(f) for f in pre.files} if pre is not None else set()
    from_precopy = sum(id(e) in pre_objs for e in entries)

    # The second listing: did batches advance while we copied? (Running query detection.)
    # Only offsets/ and commits/ are listed again: a running query shows there first.
    wait = _settle_wait(settle_s, newest_before, listed_wall, time.monotonic() - listed_at, local=ck.local)
    if wait > 0:
        time.sleep(wait)
    after_listing = _log_listing(ck)
    after = log_ids(after_listing)
    if after == before and _newest_log_files(after_listing, after) != newest_before:
        after = (after[0] | {-1}, after[1])  # same ids, rewritten newest file: something writes there
    if after != before and not force:
        raise OperationBlocked(
            f"checkpoint {ck.url} changed during the backup (offsets/commits {_span(before)} -> {_span(after)}): "
            "the query is running; stop it on a batch boundary first, or pass force to capture only the last "
            "committed batch", code="QUERY_RUNNING")
    running = running or (f"batches advanced during the backup ({_span(before)} -> {_span(after)})"
                          if after != before else None)

    committed_offsets = _offsets_at(ck, state, committed)
    # A batch planned after the last commit (a whole copy may also hold commits ahead of offsets/: no pending then)
    pending = sel.log_bound if sel.log_bound is not None and (committed is None or sel.log_bound > committed) \
        else None
    pending_offsets = _offsets_at(ck, state, pending)
    initial: PartitionOffsets = {}
    for offs in state.initial_offsets.values():
        initial.update(offs)
    manifest = Manifest(
        backup_id=backup_id, job=job, created_at_ms=created, reason=reason,
        checkpoint_location=ck.url, query_id=state.query_id, last_committed_batch=committed,
        committed_offsets=committed_offsets,
        pending_batch=pending,
        pending_offsets=pending_offsets, initial_offsets=initial or None,
        spark_version=spark_version or (record.spark_version if record else None),
        kafka_cluster_id=record.kafka_cluster_id if record else None,
        topics={n: {"topic_id": t.topic_id, "partitions": t.partitions}
                for n, t in sorted((record.topics if record else {}).items())},
        forced=force, running=bool(running),
        state={"has_state": state.has_state, "version": sel.state_version if state.has_state else None,
               "complete": not sel.state_problems},
        selection=sel.record(), snapshot=writer.snapshot_doc or {},
        problems=[*sel.state_problems, *(f"{p.code} {p.path}: {p.message}" for p in state.problems)],
        files=tuple(entries),
        # Every entry the previous manifest's own, in its order: its sealed file list is this one.
        files_json=last.files_json if last is not None and len(entries) == len(last.files)
        and all(map(operator.is_, entries, last.files)) else None,
        stats={"excluded_files": len(sel.excluded), "files_hashed": writer.files_hashed,
               "bytes_hashed": writer.bytes_hashed, "blobs_written": len(writer.written),
               "bytes_written": writer.bytes_written, "files_from_previous": reused,
               **({"files_vouched_by_store": writer.files_vouched,
                   "bytes_copied_by_store": writer.bytes_copied_by_store} if writer.files_vouched else {}),
               **({"files_from_precopy": from_precopy} if pre is not None else {})},
    )
    manifest, written = manifest.sealed_json(seal_key)

    # Stage, read back, verify, publish.
    staging = store_path(job_loc, STAGING_DIR, f"{backup_id}.json")
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
    check_blobs(job_loc, staged, deep_shas=writer.to_rehash(), index=index)
    verify_seconds = time.monotonic() - v0
    faults.crash_point("backup.verified")
    write_atomic(store_path(job_loc, BACKUPS_DIR, f"{backup_id}.json"), raw)
    faults.crash_point("backup.published")
    remove_file(staging)
    if pre is not None:   # consumed: its blobs this backup names are kept, the rest are pruning's
        remove_file(store_path(job_loc, PRECOPY_NAME))
    return BackupResult(
        manifest=staged, seconds=time.monotonic() - t0, files=len(entries), bytes=staged.total_bytes,
        files_hashed=writer.files_hashed, bytes_hashed=writer.bytes_hashed, blobs_written=len(writer.written),
        bytes_written=writer.bytes_written, files_from_previous=reused, verify_seconds=verify_seconds,
        excluded=sel.excluded, selection=sel, files_from_precopy=from_precopy, files_vouched=writer.files_vouched,
        bytes_copied_by_store=writer.bytes_copied_by_store)


def _log_listing(ck: Location) -> dict[str, dict]:
    """The files of ``offsets/`` and ``commits/`` only (relative to the checkpoint)."""
    out: dict[str, dict] = {}
    for log in ("offsets", "commits"):
        out.update({f"{log}/{rel}": info for rel, info in list_files(ck.child(log)).items() if "/" not in rel})
    return out


def _newest_log_files(listing: dict[str, dict], ids: tuple[frozenset[int], frozenset[int]]
                      ) -> tuple[tuple[str, float | None, int], ...]:
    """(path, mtime, size) of the newest ``offsets/`` and ``commits/`` files: what a running query writes next."""
    out = []
    for log, batch_ids in zip(("offsets", "commits"), ids, strict=True):
        if batch_ids:
            rel = f"{log}/{max(batch_ids)}"
            info = listing.get(rel, {})
            out.append((rel, mtime_of(info), int(info.get("size") or 0)))
    return tuple(out)


def _settle_wait(settle_s: float, newest: tuple[tuple[str, float | None, int], ...], listed_wall: float,
                 elapsed: float, *, local: bool = True) -> float:
    """How long to wait before the second listing: only while the checkpoint may be changing.

    The two listings prove the query is stopped when they span a quiet period of at least
    ``settle_s`` seconds. That period starts at the newest ``offsets/``/``commits/`` file's mtime,
    not at the first listing: when that file was written ``settle_s`` or more before the first
    listing, and the second listing finds the same ids, mtimes and sizes, the quiet period already
    covers ``settle_s`` and waiting adds nothing. Only a checkpoint written within the last
    ``settle_s`` (or without mtimes) waits for the rest of it. An object store stamps files with
    its own clock: there the quiet period must be longer by :data:`_CLOCK_SKEW_S` to count.
    """
    if settle_s <= 0:
        return 0.0
    stamps = [m for _, m, _ in newest]
    if newest and all(m is not None for m in stamps):
        quiet_before = listed_wall - max(m for m in stamps if m is not None) - (0.0 if local else _CLOCK_SKEW_S)
        if quiet_before >= settle_s:
            return 0.0
        return min(settle_s - elapsed, settle_s - quiet_before - elapsed)
    return settle_s - elapsed


def _span(ids: tuple[frozenset[int], frozenset[int]]) -> str:
    offs, coms = ids
    return f"L={max(offs) if offs else '-'} C={max(coms) if coms else '-'}"


def _offsets_at(ck: Location, state: CheckpointState, batch: int | None) -> PartitionOffsets | None:
    """Kafka end offsets of ``offsets/<batch>`` (from the state already read when it is that batch)."""
    if batch is None:
        return None
    for b in (state.latest_committed, state.latest_planned):
        if b is not None and b.batch_id == batch:
            return b.kafka_offsets
    raw = read_bytes(ck.child("offsets", str(batch)))
    if raw is None:
        return None
    try:
        return parse_offsets_file(batch, raw).kafka_offsets
    except UserError:
        return None


def refuse_irregular(ck: Location) -> None:
    """Symbolic links and special files in a checkpoint are refused, before anything reads them.

    Spark never writes either. A link may lead out of the checkpoint (its target would be copied
    into the backup store), to ``/dev/zero`` (a copy without end) or nowhere; a FIFO blocks its
    first reader forever. Refusing is safer than skipping: a skipped link would make a backup that
    silently misses a file the query needs.
    """
    bad = irregular_entries(ck, limit=1)
    if bad:
        rel, kind = bad[0]
        raise UserError(f"checkpoint {ck.url} contains {rel}, {kind}: Spark writes only regular files there, so "
                        "this one was put there by hand; remove it (or replace it by the real file) and back up "
                        "again — nothing was copied")
