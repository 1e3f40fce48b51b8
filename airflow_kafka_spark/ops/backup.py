"""Back up a Structured Streaming checkpoint: a verified, content-addressed copy of its last committed state.

Layout under a backup root (any fsspec URL)::

    <root>/<job>/blobs/<aa>/<sha256>       file bodies, named by their content (shared by all backups)
    <root>/<job>/backups/<backup_id>.json  published manifests: the catalog; nothing else is trusted
    <root>/<job>/staging/<backup_id>.json  manifests being verified (never listed, collected later)
    <root>/<job>/.lock                     held by backup and prune, so GC never races a backup

Why it is built this way:

* **What is copied** is one consistent version, not "whatever is in the folder": ``metadata``,
  ``sources/``, ``offsets/`` and ``commits/`` up to the last committed batch ``C``, and the state
  files of versions ``≤ C+1``. Spark's state store version for batch ``N`` is ``N+1``
  (``MicroBatchExecution``: "Batch version N should generate state store checkpoint version N+1"),
  so ``C+1`` is the state a restart after ``C`` loads; files of newer versions belong to a batch
  that never committed and may be partial. For a *stopped* query a pending ``offsets/C+1`` (planned,
  not committed) is kept too: it is Spark's write-ahead log, and a restart must re-run exactly that
  range — dropping it would let Spark re-plan the batch wider, and a file sink that already
  recorded that batch id would then skip the extra records. ``--force`` on a running query keeps
  strictly ``≤ C``. Temp files (``.*.tmp``) are never copied; Hadoop ``.crc`` side files follow the
  file they belong to.
* **Content addressed**: a file's body is stored once under its sha256, so a second backup copies
  only what changed. A file whose path, size and modification time equal an entry of the previous
  backup of the same query is not even re-read (checkpoint files are immutable once Spark renames
  them into place): the cost of a backup follows the new batches, not the history.
* **Published only when verified**: the manifest (every file with size and sha256, the query id,
  the last committed batch and its offsets, Spark version and Kafka cluster id from the lifecycle
  record, reason, creation time) is first written to ``staging/``, read back, checked (digest,
  every blob present with its size, every blob written by this run re-hashed) and only then
  written to ``backups/`` in one atomic step. A backup killed at any point is never listed; its
  leftovers are collected by :func:`prune_backups`.
* **Not of a running query**: a live lease in the lifecycle record, or batches that advance between
  the listing taken before the copy and the one taken after it, refuse the backup unless
  ``force=True``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from airflow_kafka_spark._util import storage
from airflow_kafka_spark._util.storage import Location
from airflow_kafka_spark.checkpoint.reader import CheckpointState, batch_id_from_name, read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.plan import OperationBlocked

FORMAT_VERSION = 1
KIND = "airflow-kafka-spark checkpoint backup"
BLOBS_DIR = "blobs"
BACKUPS_DIR = "backups"
STAGING_DIR = "staging"
TMP_DIR = ".tmp"
LOCK_NAME = ".lock"

_JOB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_BACKUP_ID = re.compile(r"^[0-9]{8}T[0-9]{9}Z-[A-Za-z0-9._-]{1,40}$")
_STATE_VERSION_FILE = re.compile(r"^([0-9]+)(?:_[^.]+)?\.(delta|snapshot|zip|changelog)$")
_STATE_BASE_KINDS = ("snapshot", "zip")
_STATE_STEP_KINDS = ("delta", "changelog")
_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------------
# the manifest
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileEntry:
    """One checkpoint file in a backup: its path relative to the checkpoint, size and content hash."""

    path: str
    size: int
    sha256: str
    mtime: float | None = None   # of the source file; lets the next backup skip re-hashing it
    ctime: float | None = None   # local disks: inode change time, which no one can set back (see _reusable)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.mtime is not None:
            d["mtime"] = self.mtime
        if self.ctime is not None:
            d["ctime"] = self.ctime
        return d


@dataclass(frozen=True)
class Manifest:
    """What a backup holds and where it came from. ``digest`` seals everything else."""

    backup_id: str
    job: str
    created_at_ms: int
    reason: str
    checkpoint_location: str
    query_id: str | None
    last_committed_batch: int | None
    committed_offsets: PartitionOffsets | None
    pending_batch: int | None
    pending_offsets: PartitionOffsets | None
    initial_offsets: PartitionOffsets | None
    spark_version: str | None
    kafka_cluster_id: str | None
    topics: dict[str, dict[str, Any]]
    forced: bool
    running: bool
    state: dict[str, Any]
    problems: list[str]
    files: tuple[FileEntry, ...]
    stats: dict[str, Any] = field(default_factory=dict)
    digest: str = ""
    hmac: str = ""               # keyed seal (seal.py), empty when written without a key

    @property
    def created_at(self) -> str:
        return _iso(self.created_at_ms)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def start_offsets(self) -> PartitionOffsets:
        """Where a query restarted on this backup resumes (the committed end offsets)."""
        return dict(self.committed_offsets or self.initial_offsets or {})

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION, "kind": KIND, "backup_id": self.backup_id, "job": self.job,
            "created_at": self.created_at, "created_at_ms": self.created_at_ms, "reason": self.reason,
            "checkpoint_location": self.checkpoint_location, "query_id": self.query_id,
            "last_committed_batch": self.last_committed_batch,
            "committed_offsets": _offsets_doc(self.committed_offsets),
            "pending_batch": self.pending_batch, "pending_offsets": _offsets_doc(self.pending_offsets),
            "initial_offsets": _offsets_doc(self.initial_offsets),
            "spark_version": self.spark_version, "kafka_cluster_id": self.kafka_cluster_id,
            "topics": self.topics, "forced": self.forced, "running": self.running,
            "state": self.state, "problems": list(self.problems),
            "totals": {"files": len(self.files), "bytes": self.total_bytes},
            "stats": self.stats,
            "files": [f.to_dict() for f in self.files],
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.body(), "digest": self.digest, **({"hmac": self.hmac} if self.hmac else {})}

    def summary(self) -> dict[str, Any]:
        """The catalog line: everything but the file list."""
        d = self.to_dict()
        d.pop("files")
        d.pop("hmac", None)
        return d

    def sealed(self, seal_key: bytes | None = None) -> Manifest:
        """Both seals: the sha256 digest always, the HMAC when a key is given."""
        body = self.body()
        return replace(self, digest=_digest(body), hmac=seal.keyed(body, seal_key) if seal_key else "")

    def to_json(self) -> bytes:
        return (json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, *, where: str, seal_key: bytes | None = None) -> Manifest:
        """Parse and check the seal(s) and every path; any problem is a one-line :class:`UserError`.

        Every file path must pass :func:`storage.check_relative` (no ``..``, absolute path, ``::``,
        control character...) before anything uses it; with ``seal_key`` a valid HMAC is required.
        """
        try:
            doc = storage.load_json(raw, what="it", max_bytes=storage.MANIFEST_MAX_BYTES)
        except ValueError as exc:
            raise _tampered(where, str(exc)) from None
        if not isinstance(doc, dict) or doc.get("kind") != KIND:
            raise _tampered(where, "not an airflow-kafka-spark backup manifest")
        fmt = doc.get("format")
        if isinstance(fmt, int) and fmt > FORMAT_VERSION:
            raise UserError(f"backup manifest {where} has format {fmt}, newer than this airflow-kafka-spark "
                            f"understands ({FORMAT_VERSION}); upgrade airflow-kafka-spark on this host")
        digest = doc.pop("digest", None)
        keyed = doc.pop("hmac", None)
        try:
            files = tuple(FileEntry(path=_s(f["path"]), size=_i(f["size"]), sha256=_sha(f["sha256"]),
                                    mtime=_num(f.get("mtime")), ctime=_num(f.get("ctime"))) for f in doc["files"])
            m = cls(
                backup_id=_s(doc["backup_id"]), job=_s(doc["job"]), created_at_ms=_i(doc["created_at_ms"]),
                reason=str(doc.get("reason") or ""), checkpoint_location=_s(doc["checkpoint_location"]),
                query_id=doc.get("query_id"), last_committed_batch=doc.get("last_committed_batch"),
                committed_offsets=_offsets_of(doc.get("committed_offsets")),
                pending_batch=doc.get("pending_batch"), pending_offsets=_offsets_of(doc.get("pending_offsets")),
                initial_offsets=_offsets_of(doc.get("initial_offsets")),
                spark_version=doc.get("spark_version"), kafka_cluster_id=doc.get("kafka_cluster_id"),
                topics=dict(doc.get("topics") or {}), forced=bool(doc.get("forced")),
                running=bool(doc.get("running")), state=dict(doc.get("state") or {}),
                problems=list(doc.get("problems") or []), files=files, stats=dict(doc.get("stats") or {}),
                digest=str(digest or ""), hmac=keyed if isinstance(keyed, str) else "")
        except (KeyError, TypeError, ValueError, AttributeError, UserError) as exc:
            raise _tampered(where, f"missing or malformed field ({exc})") from None
        body = m.body()
        if not digest or _digest(body) != digest:
            raise _tampered(where, "its digest does not match its content")
        if seal_key is not None and not seal.keyed_ok(body, seal_key, keyed):
            raise _tampered(where, "no valid keyed seal (HMAC) for the configured seal key"
                            if keyed else "it has no keyed seal (HMAC) but a seal key is configured")
        _check_paths(m, where)
        return m


def _check_paths(m: Manifest, where: str) -> None:
    """Names used to build paths (job, backup id, every file path) proven safe, and no duplicates."""
    if not _JOB_NAME.match(m.job):
        raise _tampered(where, f"job name {m.job!r} cannot name a backup folder")
    if not _BACKUP_ID.match(m.backup_id):
        raise _tampered(where, f"backup id {m.backup_id!r} is malformed")
    seen: set[str] = set()
    for f in m.files:
        try:
            storage.check_relative(f.path, what="file path")
        except UserError as exc:
            raise _tampered(where, str(exc).replace("; it was not opened", "")) from None
        if f.path in seen:
            raise _tampered(where, f"file path {f.path!r} is listed twice")
        seen.add(f.path)


def _tampered(where: str, why: str) -> UserError:
    return UserError(f"backup manifest {where} is damaged or was modified after it was written ({why}); "
                     "do not use this backup: pick another one (aks backups lists them)")


def _digest(body: Mapping[str, Any]) -> str:
    return seal.digest(body)


def _num(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"expected a number, got {v!r}")
    return v


def _offsets_doc(offsets: PartitionOffsets | None) -> Any:
    return None if offsets is None else json.loads(to_offsets_json(offsets))


def _offsets_of(doc: Any) -> PartitionOffsets | None:
    return None if doc is None else parse_offsets_json(json.dumps(doc), what="manifest offsets")


def _s(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


def _i(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v


def _sha(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[0-9a-f]{64}", v):
        raise ValueError(f"expected a sha256 hex digest, got {v!r}")
    return v


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# --------------------------------------------------------------------------------------------------
# which files make up the last committed version
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selection:
    """The files of one consistent version and why the others were left out."""

    files: dict[str, dict]                 # relative path -> fsspec info
    excluded: dict[str, str]               # relative path -> reason
    committed: int | None                  # C
    log_bound: int | None                  # newest offsets/ id kept (C, or C+1 for a stopped pending batch)
    state_version: int | None              # newest state version kept (C+1)
    state_problems: list[str] = field(default_factory=list)


def _inner_name(name: str) -> str | None:
    """The file a Hadoop ``.crc`` side file belongs to (``.5.crc`` -> ``5``, ``5.delta.crc`` -> ``5.delta``)."""
    if not name.endswith(".crc"):
        return None
    inner = name[:-4]
    if inner.startswith("."):
        inner = inner[1:]
    return inner


def _is_temp(name: str) -> bool:
    return name.endswith(".tmp") or (name.endswith(".tmp.crc"))


def select_files(listing: Mapping[str, dict], committed: int | None, planned: int | None, *,
                 keep_pending: bool) -> Selection:
    """Pick the files of the last committed version out of a checkpoint listing (pure: no I/O).

    ``committed`` is ``C`` (newest ``commits/`` id), ``planned`` is ``L`` (newest ``offsets/`` id).
    ``keep_pending`` keeps ``offsets/L`` when ``L == C+1`` (a stopped query's write-ahead entry).
    """
    log_bound = committed
    if keep_pending and planned is not None and planned == (committed + 1 if committed is not None else 0):
        log_bound = planned
    state_version = committed + 1 if committed is not None else None
    files: dict[str, dict] = {}
    excluded: dict[str, str] = {}
    for rel, info in listing.items():
        parts = rel.split("/")
        name = parts[-1]
        inner = _inner_name(name) or name
        if _is_temp(name):
            excluded[rel] = "temp file of an interrupted write"
            continue
        top = parts[0]
        if top in ("offsets", "commits") and len(parts) == 2:
            batch = batch_id_from_name(inner)
            bound = log_bound if top == "offsets" else committed
            if batch is None:
                excluded[rel] = "not a batch file (Spark ignores it)"
            elif bound is None or batch > bound:
                excluded[rel] = f"batch {batch} is after the captured version"
            else:
                files[rel] = info
            continue
        if top == "state":
            why = _state_exclusion(parts, inner, state_version, committed)
            if why:
                excluded[rel] = why
            else:
                files[rel] = info
            continue
        files[rel] = info
    problems = state_chain_problems(files, state_version) if state_version is not None else []
    return Selection(files=files, excluded=excluded, committed=committed, log_bound=log_bound,
                     state_version=state_version, state_problems=problems)


def _state_exclusion(parts: list[str], inner: str, state_version: int | None, committed: int | None) -> str | None:
    m = _STATE_VERSION_FILE.match(inner)
    if m:
        version = int(m.group(1))
        if state_version is None or version > state_version:
            return f"state version {version} is after the captured version"
        return None
    if "_metadata" in parts and "v2" in parts:       # operator metadata v2: state/<op>/_metadata/v2/<batchId>
        batch = batch_id_from_name(inner)
        if batch is not None and (committed is None or batch > committed):
            return f"operator metadata of batch {batch} is after the captured version"
    if "_stateSchema" in parts:                       # transformWithState schema: <batchId>_<...>
        head = inner.split("_", 1)[0]
        if head.isdigit() and (committed is None or int(head) > committed):
            return f"state schema of batch {head} is after the captured version"
    return None


def state_chain_problems(files: Iterable[str], version: int) -> list[str]:
    """Store directories whose state ``version`` cannot be loaded from ``files`` alone.

    HDFS-backed stores load the newest ``<v>.snapshot`` ≤ version plus every ``.delta`` after it;
    RocksDB stores a ``<v>.zip`` plus ``.changelog`` files. A store needs a base ≤ ``version`` (or
    steps from version 1) and every step up to ``version``. Directories without versioned files
    (``_metadata``) are not stores.
    """
    stores: dict[str, dict[str, set[int]]] = {}
    for rel in files:
        parts = rel.split("/")
        if parts[0] != "state":
            continue
        m = _STATE_VERSION_FILE.match(parts[-1])
        if not m:
            continue
        kinds = stores.setdefault("/".join(parts[:-1]), {"base": set(), "step": set()})
        kinds["base" if m.group(2) in _STATE_BASE_KINDS else "step"].add(int(m.group(1)))
    problems = []
    for store, kinds in sorted(stores.items()):
        bases = [v for v in kinds["base"] if v <= version]
        start = max(bases) if bases else 0
        missing = [v for v in range(start + 1, version + 1) if v not in kinds["step"]]
        if missing:
            first = missing[0]
            problems.append(f"{store}: state version {version} cannot be loaded, {first}.delta/.changelog is "
                            f"missing ({len(missing)} step(s) missing after "
                            f"{'snapshot ' + str(start) if start else 'version 0'})")
    return problems


# --------------------------------------------------------------------------------------------------
# the blob store and the catalog
# --------------------------------------------------------------------------------------------------

def _job_location(root: Location, job: str) -> Location:
    return root.child(job)


def _blob_rel(sha: str) -> str:
    return f"{BLOBS_DIR}/{sha[:2]}/{sha}"


def validate_job_name(job: str) -> str:
    if not isinstance(job, str) or not _JOB_NAME.fullmatch(job):
        raise UserError(f"job name {job!r} cannot name a backup folder; use letters, digits, '.', '_' or '-' "
                        "(at most 128, starting with a letter or digit)")
    return job


def validate_backup_id(backup_id: str) -> str:
    if not isinstance(backup_id, str) or not _BACKUP_ID.fullmatch(backup_id):
        raise UserError(f"{backup_id!r} is not a backup id (like 20260101T120000000Z-b41-1a2b3c); "
                        "list the backups of the job with aks backups")
    return backup_id


def open_backup_root(backup_root: str, storage_options: dict | None = None) -> Location:
    root = storage.open_location(backup_root, storage_options, what="backup root")
    info = storage.info_or_none(root)
    if info is not None and info.get("type") != "directory":
        raise UserError(f"backup root {backup_root} is a file, not a folder; pass a folder or bucket prefix")
    return root


@dataclass
class Catalog:
    """The published, intact backups of one job (newest first) and the manifests that are not."""

    job: str
    backups: list[Manifest]
    invalid: list[tuple[str, str]] = field(default_factory=list)   # (file name, one-line reason)

    @property
    def newest(self) -> Manifest | None:
        return self.backups[0] if self.backups else None

    def get(self, backup_id: str) -> Manifest | None:
        return next((b for b in self.backups if b.backup_id == backup_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "backups": [b.summary() for b in self.backups],
                "invalid": [{"manifest": n, "reason": r} for n, r in self.invalid]}


def list_backups(backup_root: str, job: str, *, storage_options: dict | None = None,
                 seal_key: bytes | None = None) -> Catalog:
    """Every published backup of ``job`` whose manifest is intact, newest first.

    A manifest only exists under ``backups/`` once its copy was verified, so a killed backup is
    never listed; a manifest edited afterwards (digest mismatch) or filed under the wrong job is
    reported in ``invalid``, never returned as a backup.
    """
    validate_job_name(job)
    root = open_backup_root(backup_root, storage_options)
    return _catalog(_job_location(root, job), job, seal.resolve_key(seal_key))


def _read_manifest(loc: Location) -> bytes | None:
    """A manifest's bytes: a regular file (never a link, FIFO or device), at most 256 MiB."""
    return storage.read_bytes(loc, limit=storage.MANIFEST_MAX_BYTES, follow_links=False)


def _catalog(job_loc: Location, job: str, seal_key: bytes | None) -> Catalog:
    listing = storage.list_files(job_loc.child(BACKUPS_DIR))
    backups: list[Manifest] = []
    invalid: list[tuple[str, str]] = []
    for rel in sorted(listing):
        if "/" in rel or not rel.endswith(".json") or rel.startswith("."):
            continue
        where = f"{job_loc.url}/{BACKUPS_DIR}/{rel}"
        try:
            storage.check_relative(rel, what="manifest name")
            raw = _read_manifest(job_loc.child(BACKUPS_DIR, rel))
            if raw is None:
                continue
            m = Manifest.from_json(raw, where=where, seal_key=seal_key)
        except UserError as exc:
            invalid.append((rel, str(exc)))
            continue
        if m.job != job or f"{m.backup_id}.json" != rel:
            invalid.append((rel, f"manifest names job {m.job!r} / backup {m.backup_id}, but is filed as "
                                 f"{job}/{BACKUPS_DIR}/{rel}"))
            continue
        backups.append(m)
    backups.sort(key=lambda m: (m.created_at_ms, m.backup_id), reverse=True)
    return Catalog(job=job, backups=backups, invalid=invalid)


def load_backup(backup_root: str, job: str, backup_id: str, *, storage_options: dict | None = None,
                seal_key: bytes | None = None) -> Manifest:
    """The manifest of one published backup, seal checked; a missing or foreign one is a one-line error."""
    validate_job_name(job)
    validate_backup_id(backup_id)
    seal_key = seal.resolve_key(seal_key)
    root = open_backup_root(backup_root, storage_options)
    job_loc = _job_location(root, job)
    raw = _read_manifest(job_loc.child(BACKUPS_DIR, f"{backup_id}.json"))
    if raw is None:
        others = [j for j in _jobs_holding(root, backup_id) if j != job]
        if others:
            raise UserError(f"backup {backup_id} belongs to job {others[0]!r}, not {job!r}: a checkpoint can only "
                            f"be restored from its own job's backups (aks backups --job {job})")
        raise UserError(f"no published backup {backup_id} for job {job} under {backup_root}; list them with "
                        f"aks backups --job {job}")
    m = Manifest.from_json(raw, where=f"{job_loc.url}/{BACKUPS_DIR}/{backup_id}.json", seal_key=seal_key)
    if m.job != job or m.backup_id != backup_id:
        raise UserError(f"backup {backup_id} filed under job {job} is a backup of job {m.job!r} "
                        f"({m.backup_id}): it was copied or renamed by hand; restore from {job}'s own backups")
    return m


def _jobs_holding(root: Location, backup_id: str) -> list[str]:
    with contextlib.suppress(OSError, UserError):
        return [posixpath.basename(p.rstrip("/")) for p in root.fs.ls(root.path, detail=False)
                if root.fs.exists(posixpath.join(p, BACKUPS_DIR, f"{backup_id}.json"))]
    return []


def verify_backup(backup_root: str, job: str, backup_id: str, *, deep: bool = True,
                  storage_options: dict | None = None, seal_key: bytes | None = None) -> Manifest:
    """Check a published backup: seal, and every blob present with its size (``deep``: and its sha256)."""
    m = load_backup(backup_root, job, backup_id, storage_options=storage_options, seal_key=seal_key)
    job_loc = _job_location(open_backup_root(backup_root, storage_options), job)
    _check_blobs(job_loc, m, deep_shas={f.sha256 for f in m.files} if deep else set())
    return m


def _check_blobs(job_loc: Location, m: Manifest, *, deep_shas: set[str],
                 index: Mapping[str, int] | None = None) -> None:
    have = index if index is not None else _blob_index(job_loc)
    for f in m.files:
        size = have.get(f.sha256)
        if size is None:
            raise UserError(f"backup {m.backup_id} is incomplete: {_blob_rel(f.sha256)} (for {f.path}) is missing "
                            f"from {job_loc.url}; restore from another backup")
        if size != f.size:
            raise UserError(f"backup {m.backup_id} is damaged: {_blob_rel(f.sha256)} (for {f.path}) has {size} "
                            f"bytes, the manifest says {f.size}; restore from another backup")
    sizes = {f.sha256: f.size for f in m.files}
    for sha in sorted(deep_shas):
        actual = _hash_file(job_loc.child(_blob_rel(sha)), sizes.get(sha, 0))
        if actual != sha:
            path = next(f.path for f in m.files if f.sha256 == sha)
            raise UserError(f"backup {m.backup_id} is damaged: the blob for {path} does not match its sha256 "
                            f"(content changed after the backup); restore from another backup")


def _blob_index(job_loc: Location) -> dict[str, int]:
    out: dict[str, int] = {}
    for rel, info in storage.list_files(job_loc.child(BLOBS_DIR)).items():
        parts = rel.split("/")
        if len(parts) == 2 and len(parts[1]) == 64 and parts[0] == parts[1][:2]:
            out[parts[1]] = int(info.get("size") or 0)
    return out


def _hash_file(loc: Location, size: int) -> str:
    """sha256 of a blob (a regular file, never a link), reading at most ``size + 1`` bytes."""
    h = hashlib.sha256()
    try:
        with storage.open_regular(loc, follow_links=False) as fh:
            left = size + 1
            while left > 0 and (chunk := fh.read(min(_CHUNK, left))):
                h.update(chunk)
                left -= len(chunk)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise UserError(f"cannot read {loc.url}: {storage.os_reason(exc)}") from None
    return h.hexdigest()


class _BlobWriter:
    """Copies source files into the blob store; a blob appears under its name only when complete."""

    def __init__(self, job_loc: Location, index: dict[str, int]) -> None:
        self.job_loc = job_loc
        self.index = index
        self.written: set[str] = set()
        self.bytes_written = 0
        self.bytes_hashed = 0
        self.files_hashed = 0

    def put(self, src: Location, listed_size: int) -> tuple[str, int]:
        """(sha256, size) of ``src``; the body is stored unless a blob with that hash exists.

        ``src`` must be a regular file (never a link, FIFO or device: :func:`storage.open_regular`)
        and is read to at most its listed size: a file that grows meanwhile is an error, not an
        endless copy.
        """
        tmp = self.job_loc.child(TMP_DIR, f"{uuid.uuid4().hex}.blob")
        h = hashlib.sha256()
        size = 0
        if tmp.local:
            os.makedirs(os.path.dirname(tmp.path), exist_ok=True)
        try:
            with storage.open_regular(src, follow_links=False) as fin, tmp.fs.open(tmp.path, "wb") as fout:
                while chunk := fin.read(_CHUNK):
                    h.update(chunk)
                    size += len(chunk)
                    if size > listed_size:
                        raise UserError(f"{src.url} grew while it was copied (listed with {listed_size:,} bytes): "
                                        "something writes into the checkpoint; stop the query and back up again")
                    fout.write(chunk)
                if tmp.local:
                    fout.flush()
                    os.fsync(fout.fileno())
        except FileNotFoundError:
            storage.remove_file(tmp)
            raise
        except UserError:
            storage.remove_file(tmp)
            raise
        except OSError as exc:
            storage.remove_file(tmp)
            raise UserError(f"cannot copy {src.url} to {self.job_loc.url}: {storage.os_reason(exc)}") from None
        sha = h.hexdigest()
        self.files_hashed += 1
        self.bytes_hashed += size
        final = self.job_loc.child(_blob_rel(sha))
        if self.index.get(sha) == size:
            storage.remove_file(tmp)
            return sha, size
        storage.crash_point("backup.blob")
        if tmp.local:
            os.makedirs(os.path.dirname(final.path), exist_ok=True)
            os.replace(tmp.path, final.path)
        else:
            tmp.fs.mv(tmp.path, final.path)
        self.index[sha] = size
        self.written.add(sha)
        self.bytes_written += size
        return sha, size

    def sync(self) -> None:
        """Persist the new blob directory entries (local disks) before the manifest names them."""
        if self.job_loc.local:
            for d in {posixpath.dirname(self.job_loc.child(_blob_rel(s)).path) for s in self.written}:
                storage.fsync_dir(d)


# --------------------------------------------------------------------------------------------------
# taking a backup
# --------------------------------------------------------------------------------------------------

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
    files_from_previous: int      # taken from the previous backup's manifest without re-reading
    verify_seconds: float
    excluded: dict[str, str] = field(default_factory=dict)
    pruned: list[str] = field(default_factory=list)

    @property
    def backup_id(self) -> str:
        return self.manifest.backup_id

    def to_dict(self) -> dict[str, Any]:
        return {"backup": self.manifest.summary(), "seconds": round(self.seconds, 3),
                "files": self.files, "bytes": self.bytes, "files_hashed": self.files_hashed,
                "bytes_hashed": self.bytes_hashed, "blobs_written": self.blobs_written,
                "bytes_written": self.bytes_written, "files_from_previous": self.files_from_previous,
                "verify_seconds": round(self.verify_seconds, 3),
                "excluded": len(self.excluded), "pruned": self.pruned}


def default_job_name(checkpoint_location: str, record: LifecycleRecord | None) -> str:
    """The lifecycle record's job name, else the checkpoint folder's name."""
    if record is not None:
        return record.job_name
    name = posixpath.basename(str(checkpoint_location).rstrip("/")) or "checkpoint"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-") or "checkpoint"
    return cleaned[:128]


def check_locations(checkpoint: Location, root: Location) -> None:
    """A backup root inside the checkpoint would be copied into itself and handed to Spark."""
    if storage.is_within(root, checkpoint):
        raise UserError(f"backup root {root.url} is inside checkpoint {checkpoint.url}: Spark owns every file "
                        "there; put backups in a folder outside the checkpoint")
    if storage.is_within(checkpoint, root):
        raise UserError(f"checkpoint {checkpoint.url} is inside backup root {root.url}; keep backups in their "
                        "own folder")


def open_checkpoint(checkpoint_location: str, storage_options: dict | None) -> tuple[Location, CheckpointState]:
    """Open and read a checkpoint that must exist and have something to back up."""
    loc = storage.open_location(checkpoint_location, storage_options, what="checkpoint location")
    state = read_checkpoint(checkpoint_location, storage_options=storage_options)
    if not state.exists:
        raise UserError(f"checkpoint location {checkpoint_location} does not exist; pass the folder that holds "
                        "offsets/, commits/ and metadata")
    if not state.offset_batch_ids and not state.commit_batch_ids and state.query_id is None \
            and not state.initial_offsets:
        raise UserError(f"{checkpoint_location} is not a Structured Streaming checkpoint (no metadata, offsets/ "
                        "or commits/); pass the folder that holds them")
    return loc, state


def running_reason(record: LifecycleRecord | None, now_ms: int | None = None) -> str | None:
    """Why the lifecycle record says the job runs (a live lease), or None."""
    lease = record.lease if record is not None else None
    if lease is not None and lease.live(now_ms):
        left = (lease.expires_at_ms - (now_ms or int(time.time() * 1000))) / 1000
        return f"lease held by {lease.holder} (run {lease.run_id}, {left:.0f}s left)"
    return None


def _log_ids(listing: Mapping[str, dict]) -> tuple[frozenset[int], frozenset[int]]:
    offs, coms = set(), set()
    for rel in listing:
        parts = rel.split("/")
        if len(parts) == 2 and parts[0] in ("offsets", "commits"):
            b = batch_id_from_name(parts[1])
            if b is not None:
                (offs if parts[0] == "offsets" else coms).add(b)
    return frozenset(offs), frozenset(coms)


def backup_checkpoint(checkpoint_location: str, backup_root: str, *, job: str | None = None,
                      reason: str = "manual", force: bool = False, spark_version: str | None = None,
                      settle_s: float = 2.0, keep_last: int | None = None, max_age_s: float | None = None,
                      storage_options: dict | None = None, backup_storage_options: dict | None = None,
                      now_ms: int | None = None, seal_key: bytes | None = None) -> BackupResult:
    """Copy the last committed version of a stopped query's checkpoint to ``backup_root``; see the module doc.

    ``settle_s`` is the least time between the listing before the copy and the one after it: if
    the batch ids moved in between, the query is running. ``keep_last`` / ``max_age_s`` apply
    :func:`prune_backups` after a successful backup. Raises :class:`OperationBlocked` (exit 3) for
    a running query without ``force``, :class:`UserError` (exit 2) for bad input; in both cases
    nothing is published. ``seal_key`` (default: ``$AKS_SEAL_KEY_FILE``'s) adds the keyed seal.
    """
    t0 = time.monotonic()
    from airflow_kafka_spark.ops.journal import refuse_if_interrupted

    seal_key = seal.resolve_key(seal_key)
    refuse_if_interrupted(checkpoint_location, storage_options)
    refuse_irregular(storage.open_location(checkpoint_location, storage_options, what="checkpoint location"))
    ck, state = open_checkpoint(checkpoint_location, storage_options)
    root = open_backup_root(backup_root, backup_storage_options)
    check_locations(ck, root)
    record = LifecycleRecord.load(checkpoint_location)
    explicit_job = job is not None
    if job is None:
        job = default_job_name(checkpoint_location, record)
    validate_job_name(job)
    if record is not None and record.job_name != job:
        raise UserError(f"checkpoint {checkpoint_location} belongs to job {record.job_name!r} (lifecycle record), "
                        f"not {job!r}: back it up under its own job name")
    if keep_last is not None and keep_last < 1:
        raise UserError(f"keep_last must be at least 1 (the newest backup is always kept), got {keep_last}")
    if max_age_s is not None and max_age_s <= 0:
        raise UserError(f"max age must be positive, got {max_age_s}s")
    running = running_reason(record)
    if running and not force:
        raise OperationBlocked(f"job {job} is running ({running}): stop it on a batch boundary before backing up, "
                               "or pass force to capture only its last committed batch", code="QUERY_RUNNING")
    job_loc = _job_location(root, job)
    if record is None and explicit_job:
        # Bind the checkpoint to the job named here, so later restore/reset find their backups
        # under the same name without being told again (the record is ours, beside the checkpoint).
        record = LifecycleRecord.create(job, checkpoint_location)
        record.save()
    with storage.DirLock(job_loc.child(LOCK_NAME), what=f"backups of job {job}"):
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
            pr = _prune_locked(job_loc, job, keep_last=keep_last, max_age_s=max_age_s, now_ms=now_ms,
                               dry_run=False, grace_s=0.0 if job_loc.local else 3600.0, seal_key=seal_key)
            result.pruned = [m.backup_id for m in pr.removed]
    return result


def _backup_once(ck: Location, state: CheckpointState, job_loc: Location, job: str,
                 record: LifecycleRecord | None, *, reason: str, force: bool, running: str | None,
                 spark_version: str | None, settle_s: float, t0: float, now_ms: int | None,
                 seal_key: bytes | None) -> BackupResult:
    listed_at = time.monotonic()
    listing = storage.list_files(ck)
    before = _log_ids(listing)
    committed = max(before[1]) if before[1] else None
    planned = max(before[0]) if before[0] else None
    sel = select_files(listing, committed, planned, keep_pending=not (force and running))
    storage.crash_point("backup.listed")

    previous = _previous_stats(job_loc, job, ck, state.query_id, seal_key)
    index = _blob_index(job_loc)
    writer = _BlobWriter(job_loc, index)
    entries: list[FileEntry] = []
    reused = 0
    for rel in sorted(sel.files):
        storage.check_relative(rel, what="checkpoint file")   # a name the manifest could not carry safely
        info = sel.files[rel]
        size = int(info.get("size") or 0)
        mtime = storage.mtime_of(info)
        ctime = _ctime(ck, info)
        prev = previous.get(rel)
        if _reusable(prev, size, mtime, ctime, local=ck.local) and index.get(prev.sha256) == size:
            entries.append(FileEntry(rel, size, prev.sha256, mtime, ctime))
            reused += 1
            continue
        sha, actual = writer.put(storage.safe_child(ck, rel, what="checkpoint file"), size)
        entries.append(FileEntry(rel, actual, sha, mtime, ctime))
    writer.sync()

    # The second listing: did batches advance while we copied? (Running query detection.)
    wait = settle_s - (time.monotonic() - listed_at)
    if wait > 0:
        time.sleep(wait)
    after = _log_ids(storage.list_files(ck))
    if after != before and not force:
        raise OperationBlocked(
            f"checkpoint {ck.url} changed during the backup (offsets/commits {_span(before)} -> {_span(after)}): "
            "the query is running; stop it on a batch boundary first, or pass force to capture only the last "
            "committed batch", code="QUERY_RUNNING")
    running = running or (f"batches advanced during the backup ({_span(before)} -> {_span(after)})"
                          if after != before else None)

    created = now_ms if now_ms is not None else int(time.time() * 1000)
    backup_id = _new_backup_id(created, committed)
    committed_offsets = _offsets_at(ck, state, committed)
    pending_offsets = _offsets_at(ck, state, sel.log_bound) if sel.log_bound != committed else None
    initial: PartitionOffsets = {}
    for offs in state.initial_offsets.values():
        initial.update(offs)
    manifest = Manifest(
        backup_id=backup_id, job=job, created_at_ms=created, reason=reason,
        checkpoint_location=ck.url, query_id=state.query_id, last_committed_batch=committed,
        committed_offsets=committed_offsets,
        pending_batch=sel.log_bound if sel.log_bound != committed else None,
        pending_offsets=pending_offsets, initial_offsets=initial or None,
        spark_version=spark_version or (record.spark_version if record else None),
        kafka_cluster_id=record.kafka_cluster_id if record else None,
        topics={n: {"topic_id": t.topic_id, "partitions": t.partitions}
                for n, t in sorted((record.topics if record else {}).items())},
        forced=force, running=bool(running),
        state={"has_state": state.has_state, "version": sel.state_version if state.has_state else None,
               "complete": not sel.state_problems},
        problems=[*sel.state_problems, *(f"{p.code} {p.path}: {p.message}" for p in state.problems)],
        files=tuple(entries),
        stats={"excluded_files": len(sel.excluded), "files_hashed": writer.files_hashed,
               "bytes_hashed": writer.bytes_hashed, "blobs_written": len(writer.written),
               "bytes_written": writer.bytes_written, "files_from_previous": reused},
    ).sealed(seal_key)

    # Stage, read back, verify, publish.
    staging = job_loc.child(STAGING_DIR, f"{backup_id}.json")
    storage.write_atomic(staging, manifest.to_json())
    storage.crash_point("backup.staged")
    v0 = time.monotonic()
    raw = storage.read_bytes(staging)
    if raw is None:
        raise UserError(f"the staged manifest {staging.url} vanished; is another process pruning this job?")
    staged = Manifest.from_json(raw, where=staging.url, seal_key=seal_key)
    _check_blobs(job_loc, staged, deep_shas=set(writer.written), index=_blob_index(job_loc))
    verify_seconds = time.monotonic() - v0
    storage.crash_point("backup.verified")
    storage.write_atomic(job_loc.child(BACKUPS_DIR, f"{backup_id}.json"), raw)
    storage.crash_point("backup.published")
    storage.remove_file(staging)
    return BackupResult(
        manifest=staged, seconds=time.monotonic() - t0, files=len(entries), bytes=staged.total_bytes,
        files_hashed=writer.files_hashed, bytes_hashed=writer.bytes_hashed, blobs_written=len(writer.written),
        bytes_written=writer.bytes_written, files_from_previous=reused, verify_seconds=verify_seconds,
        excluded=sel.excluded)


def _span(ids: tuple[frozenset[int], frozenset[int]]) -> str:
    offs, coms = ids
    return f"L={max(offs) if offs else '-'} C={max(coms) if coms else '-'}"


def _new_backup_id(created_ms: int, committed: int | None) -> str:
    t = datetime.fromtimestamp(created_ms / 1000, tz=UTC)
    return f"{t:%Y%m%dT%H%M%S}{created_ms % 1000:03d}Z-b{'none' if committed is None else committed}-" \
           f"{uuid.uuid4().hex[:6]}"


def _offsets_at(ck: Location, state: CheckpointState, batch: int | None) -> PartitionOffsets | None:
    """Kafka end offsets of ``offsets/<batch>`` (from the state already read when it is that batch)."""
    if batch is None:
        return None
    for b in (state.latest_committed, state.latest_planned):
        if b is not None and b.batch_id == batch:
            return b.kafka_offsets
    from airflow_kafka_spark.checkpoint.reader import parse_offsets_file

    raw = storage.read_bytes(ck.child("offsets", str(batch)))
    if raw is None:
        return None
    try:
        return parse_offsets_file(batch, raw).kafka_offsets
    except UserError:
        return None


def _ctime(ck: Location, info: dict) -> float | None:
    """A local file's inode change time (fsspec calls it ``created``); None elsewhere."""
    value = info.get("created") if ck.local else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _reusable(prev: FileEntry | None, size: int, mtime: float | None, ctime: float | None, *, local: bool) -> bool:
    """May the previous backup's hash stand for this file without reading it?

    Size and mtime alone are not enough: ``touch -d`` / ``os.utime`` puts an old mtime back on new
    content. On a local disk the inode change time is compared too — every write or utime moves it
    and nobody can set it back — so an entry without one (older manifests) is re-read once. On
    object stores the mtime is the server's last-modified time of the object, which clients cannot
    set.
    """
    if prev is None or mtime is None or prev.size != size or prev.mtime != mtime:
        return False
    if local:
        return ctime is not None and prev.ctime == ctime
    return True


def refuse_irregular(ck: Location) -> None:
    """Symbolic links and special files in a checkpoint are refused, before anything reads them.

    Spark never writes either. A link may lead out of the checkpoint (its target would be copied
    into the backup store), to ``/dev/zero`` (a copy without end) or nowhere; a FIFO blocks its
    first reader forever. Refusing is safer than skipping: a skipped link would make a backup that
    silently misses a file the query needs.
    """
    bad = storage.irregular_entries(ck, limit=1)
    if bad:
        rel, kind = bad[0]
        raise UserError(f"checkpoint {ck.url} contains {rel}, {kind}: Spark writes only regular files there, so "
                        "this one was put there by hand; remove it (or replace it by the real file) and back up "
                        "again — nothing was copied")


def _previous_stats(job_loc: Location, job: str, ck: Location, query_id: str | None,
                    seal_key: bytes | None) -> dict[str, FileEntry]:
    """Entries of the newest backup of the same checkpoint and query: the stat cache of unchanged files."""
    try:
        catalog = _catalog(job_loc, job, seal_key)
    except UserError:
        return {}
    target = storage.comparable(ck)
    for m in catalog.backups:
        with contextlib.suppress(UserError):
            if m.query_id == query_id and storage.comparable(
                    storage.open_location(m.checkpoint_location, None)) == target:
                return {f.path: f for f in m.files if f.mtime is not None}
    return {}


# --------------------------------------------------------------------------------------------------
# putting a backup's files somewhere (used by restore)
# --------------------------------------------------------------------------------------------------

def materialize(manifest: Manifest, backup_root: str, dest: Location, *,
                storage_options: dict | None = None, hash_only: Callable[[str], bool] | None = None) -> None:
    """Write every file of ``manifest`` below ``dest``, each checked against its sha256 while copied.

    ``dest`` must be a fresh folder the caller owns (a staging folder beside the checkpoint, or
    ``memory://`` for a dry run): a mismatch raises :class:`UserError` and the caller deletes it.
    Every path is proven to stay below ``dest`` before it is opened (:func:`storage.safe_child`;
    ``from_json`` already refused unsafe ones); blobs are read as regular files only, at most
    their recorded size plus one byte. Files for which ``hash_only(path)`` is true are checked
    but written empty (a dry run judged in memory needs state files to exist, not their bodies).
    """
    _check_paths(manifest, f"of backup {manifest.backup_id}")
    job_loc = _job_location(open_backup_root(backup_root, storage_options), manifest.job)
    if dest.local:
        os.makedirs(dest.path, exist_ok=True)
    for f in manifest.files:
        blob = job_loc.child(_blob_rel(f.sha256))
        target = storage.safe_child(dest, f.path, what=f"file path of backup {manifest.backup_id}")
        if target.local:
            os.makedirs(os.path.dirname(target.path), exist_ok=True)
        h = hashlib.sha256()
        try:
            with storage.open_regular(blob, follow_links=False) as fin, target.fs.open(target.path, "wb") as fout:
                left = f.size + 1
                body = not (hash_only and hash_only(f.path))
                while left > 0 and (chunk := fin.read(min(_CHUNK, left))):
                    h.update(chunk)
                    left -= len(chunk)
                    if body:
                        fout.write(chunk)
        except FileNotFoundError:
            raise UserError(f"backup {manifest.backup_id} is incomplete: the blob for {f.path} is missing; "
                            "restore from another backup") from None
        except OSError as exc:
            raise UserError(f"cannot copy {f.path} of backup {manifest.backup_id} to {dest.url}: "
                            f"{storage.os_reason(exc)}") from None
        if h.hexdigest() != f.sha256:
            raise UserError(f"backup {manifest.backup_id} is damaged: the blob for {f.path} does not match its "
                            "sha256; restore from another backup")
        storage.crash_point("restore.file")


# --------------------------------------------------------------------------------------------------
# retention and garbage collection
# --------------------------------------------------------------------------------------------------

@dataclass
class PruneResult:
    kept: list[Manifest]
    removed: list[Manifest]
    blobs_removed: int
    bytes_freed: int
    leftovers_removed: int        # staging manifests and temp blobs of killed backups
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {"kept": [m.backup_id for m in self.kept], "removed": [m.backup_id for m in self.removed],
                "blobs_removed": self.blobs_removed, "bytes_freed": self.bytes_freed,
                "leftovers_removed": self.leftovers_removed, "dry_run": self.dry_run}


def prune_backups(backup_root: str, job: str, *, keep_last: int | None = None, max_age_s: float | None = None,
                  now_ms: int | None = None, dry_run: bool = False, grace_s: float | None = None,
                  storage_options: dict | None = None, seal_key: bytes | None = None) -> PruneResult:
    """Apply retention to ``job``'s backups, then collect blobs no remaining backup references.

    A backup goes when it is beyond the newest ``keep_last`` or older than ``max_age_s`` (either
    rule, when both are given); the newest intact backup always stays. Blobs, staged manifests and
    temp files of killed backups are deleted only when unreferenced and older than ``grace_s``
    (default 0 on local disks, where the job lock is exclusive; an hour on object stores, where it
    is best effort).
    """
    validate_job_name(job)
    if keep_last is not None and keep_last < 1:
        raise UserError(f"keep_last must be at least 1 (the newest backup is always kept), got {keep_last}")
    if max_age_s is not None and max_age_s <= 0:
        raise UserError(f"max age must be positive, got {max_age_s}s")
    root = open_backup_root(backup_root, storage_options)
    job_loc = _job_location(root, job)
    if grace_s is None:
        grace_s = 0.0 if job_loc.local else 3600.0
    with storage.DirLock(job_loc.child(LOCK_NAME), what=f"backups of job {job}"):
        return _prune_locked(job_loc, job, keep_last=keep_last, max_age_s=max_age_s, now_ms=now_ms,
                             dry_run=dry_run, grace_s=grace_s, seal_key=seal.resolve_key(seal_key))


def _prune_locked(job_loc: Location, job: str, *, keep_last: int | None, max_age_s: float | None,
                  now_ms: int | None, dry_run: bool, grace_s: float, seal_key: bytes | None = None) -> PruneResult:
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    catalog = _catalog(job_loc, job, seal_key)
    kept: list[Manifest] = []
    removed: list[Manifest] = []
    for i, m in enumerate(catalog.backups):
        too_many = keep_last is not None and i >= keep_last
        too_old = max_age_s is not None and now - m.created_at_ms > max_age_s * 1000
        (removed if i > 0 and (too_many or too_old) else kept).append(m)
    referenced = {f.sha256 for m in kept for f in m.files}
    if seal_key is not None:
        # Manifests without the keyed seal (written before the key was configured) are not listed,
        # but their blobs are not garbage either: only retention removes a backup's blobs.
        gone = {m.backup_id for m in removed}
        referenced |= {f.sha256 for m in _catalog(job_loc, job, None).backups if m.backup_id not in gone
                       for f in m.files}
    cutoff = time.time() - grace_s
    # Staged manifests younger than the grace period may belong to a backup in flight (object
    # stores): their blobs are referenced too. Older ones are leftovers of killed backups.
    leftovers: list[Location] = []
    for rel, info in storage.list_files(job_loc.child(STAGING_DIR)).items():
        loc = _listed(job_loc.child(STAGING_DIR), rel)
        if loc is None:
            continue
        if (storage.mtime_of(info) or 0) > cutoff:
            with contextlib.suppress(UserError):
                raw = _read_manifest(loc)
                referenced |= {f.sha256 for f in Manifest.from_json(raw or b"", where=loc.url).files}
        else:
            leftovers.append(loc)
    for rel, info in storage.list_files(job_loc.child(TMP_DIR)).items():
        loc = _listed(job_loc.child(TMP_DIR), rel)
        if loc is not None and (storage.mtime_of(info) or 0) <= cutoff:
            leftovers.append(loc)
    garbage: list[tuple[Location, int]] = []
    for rel, info in storage.list_files(job_loc.child(BLOBS_DIR)).items():
        sha = rel.rsplit("/", 1)[-1]
        loc = _listed(job_loc.child(BLOBS_DIR), rel)
        if loc is None or sha in referenced or (storage.mtime_of(info) or 0) > cutoff:
            continue
        garbage.append((loc, int(info.get("size") or 0)))
    if not dry_run:
        for m in removed:
            storage.remove_file(job_loc.child(BACKUPS_DIR, f"{m.backup_id}.json"))
            storage.crash_point("prune.manifest")
        for loc, _ in garbage:
            storage.remove_file(loc)
        for loc in leftovers:
            storage.remove_file(loc)
    return PruneResult(kept=kept, removed=removed, blobs_removed=len(garbage),
                       bytes_freed=sum(s for _, s in garbage), leftovers_removed=len(leftovers), dry_run=dry_run)


def _listed(base: Location, rel: str) -> Location | None:
    """A listed file below ``base`` that GC may touch, or None: a name that is not a safe relative
    path, or one reached through a symbolic link (a link planted in the backup root would
    otherwise make prune delete files wherever it points)."""
    try:
        return storage.safe_child(base, rel, what="file")
    except UserError:
        return None


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``7d``, ``2w`` or plain seconds -> seconds (for --max-age)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", str(text))
    if not m:
        raise UserError(f"{text!r} is not a duration; use e.g. 90s, 15m, 12h, 7d or 2w")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
