"""A backup's manifest and the catalog of published manifests: the on-disk format of a backup root.

Layout under a backup root (any fsspec URL)::

    <root>/<job>/blobs/<aa>/<sha256>       file bodies, named by their content (shared by all backups)
    <root>/<job>/backups/<backup_id>.json  published manifests: the catalog; nothing else is trusted
    <root>/<job>/staging/<backup_id>.json  manifests being verified (never listed, collected later)
    <root>/<job>/.lock                     held by backup and prune, so GC never races a backup

The manifest lists every file with size and sha256, the query id, the last committed batch and
its offsets, Spark version and Kafka cluster id, reason and creation time; ``digest`` (sha256 over
the canonical body) seals it, ``hmac`` too when a seal key is configured (``ops.seal``). Any file
that does not parse, does not match its seal, or names an unsafe path is never used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_kafka_spark._util.jsonfile import MANIFEST_MAX_BYTES, load_json
from airflow_kafka_spark._util.paths import all_plain_relative, check_relative
from airflow_kafka_spark._util.text import iso_millis
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.names import is_backup_id, is_job_name
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.entries import (  # noqa: F401 (FileEntry, SNAPSHOT_PROOF: their import path)
    PROOFS,
    SNAPSHOT_PROOF,
    FileEntry,
    as_count,
    as_millis,
    as_number,
    as_sha256,
    as_text,
    file_entries,
    snapshot_of,
)

FORMAT_VERSION = 1
KIND = "airflow-kafka-spark checkpoint backup"
BLOBS_DIR = "blobs"
BACKUPS_DIR = "backups"
STAGING_DIR = "staging"
TMP_DIR = ".tmp"
LOCK_NAME = ".lock"


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
    #: How the files were chosen (``ops.backup.selection``: ``mode`` version|whole, ``why``, every
    #: ``excluded`` file with its reason, ``unmodelled`` folders copied as found). Absent from
    #: manifests written before it existed, and then left out of the body, so their seals still hold.
    selection: dict[str, Any] = field(default_factory=dict)
    #: An HDFS snapshot backup (``ops.backup.snapshot``): ``folder`` (the snapshottable folder),
    #: ``name`` (of the snapshot) and ``path`` (the checkpoint inside it); every entry's file is there.
    #: Absent (and left out of the body) for a backup in the blob store.
    snapshot: dict[str, str] = field(default_factory=dict)
    digest: str = ""
    hmac: str = ""               # keyed seal (ops.seal), empty when written without a key
    #: The JSON of ``files`` exactly as a parsed manifest's seals covered it (``from_json``), carried
    #: by a re-backup whose file list is that manifest's, entry for entry: encoding 40,000 entries
    #: again is a third of an unchanged re-backup. Whoever sets it vouches that it parses to ``files``.
    files_json: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def created_at(self) -> str:
        return iso_millis(self.created_at_ms)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def body(self) -> dict[str, Any]:
        return {**self._head(), "files": [f.to_dict() for f in self.files]}

    def _head(self) -> dict[str, Any]:
        """The body without ``files``."""
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
            **({"selection": self.selection} if self.selection else {}),
            **({"snapshot": self.snapshot} if self.snapshot else {}),
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

    def sealed_json(self, seal_key: bytes | None = None) -> tuple[Manifest, bytes]:
        """:meth:`sealed` and its file bytes from one encoding of the body (40,000 entries: ~0.3 s less).

        The bytes are the canonical body both seals cover, with ``digest`` (and ``hmac``) added as
        the last keys: the same document as :meth:`to_json`, keys in another order.
        """
        canonical = self._canonical()
        digest = seal.digest_bytes(canonical)
        keyed = seal.keyed_bytes(canonical, seal_key) if seal_key else ""
        tail = f',"digest":"{digest}"' + (f',"hmac":"{keyed}"' if keyed else "") + "}\n"
        return replace(self, digest=digest, hmac=keyed), canonical[:-1] + tail.encode()

    def _canonical(self) -> bytes:
        """:func:`seal.canonical` of the body; with ``files_json`` only the rest is encoded."""
        if self.files_json is not None:
            around = _around_files(self._head())
            if around is not None:
                return around[0] + self.files_json + around[1]
        return seal.canonical(self.body())

    def to_json(self) -> bytes:
        # Compact: ``indent`` makes json use its pure-Python encoder (~1 s of CPU for 40,000 files).
        return (json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes, *, where: str, seal_key: bytes | None = None) -> Manifest:
        """Parse and check the seal(s) and every path; any problem is a one-line :class:`UserError`.

        Every file path must pass :func:`check_relative` (no ``..``, absolute path, ``::``,
        control character...) before anything uses it; with ``seal_key`` a valid HMAC is required.
        """
        try:
            doc = load_json(raw, what="it", max_bytes=MANIFEST_MAX_BYTES)
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
            files = file_entries(doc["files"])
            m = cls(
                backup_id=as_text(doc["backup_id"]), job=as_text(doc["job"]),
                created_at_ms=as_millis(doc["created_at_ms"]),
                reason=str(doc.get("reason") or ""), checkpoint_location=as_text(doc["checkpoint_location"]),
                query_id=doc.get("query_id"), last_committed_batch=doc.get("last_committed_batch"),
                committed_offsets=_offsets_of(doc.get("committed_offsets")),
                pending_batch=doc.get("pending_batch"), pending_offsets=_offsets_of(doc.get("pending_offsets")),
                initial_offsets=_offsets_of(doc.get("initial_offsets")),
                spark_version=doc.get("spark_version"), kafka_cluster_id=doc.get("kafka_cluster_id"),
                topics=dict(doc.get("topics") or {}), forced=bool(doc.get("forced")),
                running=bool(doc.get("running")), state=dict(doc.get("state") or {}),
                problems=list(doc.get("problems") or []), files=files, stats=dict(doc.get("stats") or {}),
                selection=dict(doc.get("selection") or {}),
                snapshot=snapshot_of(doc.get("snapshot"), files),
                digest=str(digest or ""), hmac=keyed if isinstance(keyed, str) else "")
        except (KeyError, TypeError, ValueError, AttributeError, UserError) as exc:
            raise _tampered(where, f"missing or malformed field ({exc})") from None
        covered = _sealed_bytes(raw, digest)
        body = m.body() if covered is None else None
        if not digest or (seal.digest_bytes(covered) if covered is not None else _digest(body)) != digest:
            raise _tampered(where, "its digest does not match its content")
        if seal_key is not None and not (seal.keyed_ok_bytes(covered, seal_key, keyed) if covered is not None
                                         else seal.keyed_ok(body, seal_key, keyed)):
            raise _tampered(where, "no valid keyed seal (HMAC) for the configured seal key"
                            if keyed else "it has no keyed seal (HMAC) but a seal key is configured")
        check_paths(m, where)
        return m if covered is None else _with_files_json(m, covered)


#: Stands for ``files`` while the rest of a body is encoded; json writes it as "\u0000files\u0000",
#: which no encoded value contains unless a field holds this very string (then it is found twice).
_FILES_MARK = "\x00files\x00"
_FILES_MARK_JSON = json.dumps(_FILES_MARK).encode()


def _around_files(head: Mapping[str, Any]) -> tuple[bytes, bytes] | None:
    """The canonical body's bytes before and after the value of ``files``, or None if not separable.

    With sorted keys and no whitespace a value encodes the same wherever it stands, so the body is
    ``before + canonical(files) + after``.
    """
    encoded = seal.canonical({**head, "files": _FILES_MARK})
    at = encoded.find(_FILES_MARK_JSON)
    if at < 0 or encoded.find(_FILES_MARK_JSON, at + 1) >= 0:
        return None
    return encoded[:at], encoded[at + len(_FILES_MARK_JSON):]


def with_own_files_json(m: Manifest, raw: bytes) -> Manifest:
    """``m`` as :meth:`Manifest.from_json` of ``raw`` returns it, where ``raw`` is what :meth:`Manifest.sealed_json`
    made of ``m``: carrying the ``files`` bytes its seals cover, so a re-backup with its file list encodes none."""
    covered = _sealed_bytes(raw, m.digest)
    return m if covered is None else _with_files_json(m, covered)


def _with_files_json(m: Manifest, covered: bytes) -> Manifest:
    """``m`` carrying the ``files`` bytes of the sealed body ``covered`` it was parsed from.

    Only when the rest of ``covered`` is exactly the canonical encoding of ``m`` without its files:
    the bytes between are then the ``files`` value that parsed to ``m.files``.
    """
    around = _around_files(m._head())
    if around is None:
        return m
    before, after = around
    if len(covered) < len(before) + len(after) or not covered.startswith(before) or not covered.endswith(after):
        return m
    return replace(m, files_json=covered[len(before):len(covered) - len(after)])


def check_paths(m: Manifest, where: str) -> None:
    """Names used to build paths (job, backup id, every file path) proven safe, and no duplicates."""
    if not is_job_name(m.job):
        raise _tampered(where, f"job name {m.job!r} cannot name a backup folder")
    if not is_backup_id(m.backup_id):
        raise _tampered(where, f"backup id {m.backup_id!r} is malformed")
    paths = [f.path for f in m.files]
    if all_plain_relative(paths) and len(set(paths)) == len(paths):
        return
    seen: set[str] = set()
    for f in m.files:
        try:
            check_relative(f.path, what="file path")
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


#: The end of a manifest written by :meth:`Manifest.sealed_json`: the seals as the last two keys.
_SEALS_TAIL = re.compile(rb',"digest":"([0-9a-f]{64})"(?:,"hmac":"hmac-sha256:[0-9a-f]{64}")?\}\n?\Z')


def _sealed_bytes(raw: bytes, digest: object) -> bytes | None:
    """The bytes the seals cover when ``raw`` was written by :meth:`Manifest.sealed_json`, else None.

    Such a file is the canonical body with ``digest`` (and ``hmac``) appended as its last keys, so
    the seals can be checked over those bytes as they are, instead of encoding the parsed body again
    (0.3 s for 40,000 files). Only when the bytes hash to the digest is this path taken: the parsed
    document is then the covered bytes plus the two seal keys (the tail is matched exactly, and the
    file parsed as one JSON object, so they are its last top-level keys). Anything else (an older,
    differently ordered file) gives None: the slow path encodes the parsed body.
    """
    start = raw.rfind(b',"digest":"')
    tail = _SEALS_TAIL.match(raw, start) if start > 0 else None
    if tail is None or tail.group(1).decode() != digest:
        return None
    covered = raw[:start] + b"}"
    return covered if seal.digest_bytes(covered) == digest else None


def _offsets_doc(offsets: PartitionOffsets | None) -> Any:
    return None if offsets is None else json.loads(to_offsets_json(offsets))


def _offsets_of(doc: Any) -> PartitionOffsets | None:
    return None if doc is None else parse_offsets_json(json.dumps(doc), what="manifest offsets")


