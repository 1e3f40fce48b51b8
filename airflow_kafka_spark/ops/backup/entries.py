"""A backup manifest's file entries and the checks of its untrusted scalar fields.

Apart from :mod:`~airflow_kafka_spark.ops.backup.manifest` because parsing the ``files`` list is most
of reading a manifest (40,000 entries and more) and has its own rules per proof; the manifest
imports these names, and ``FileEntry`` / ``SNAPSHOT_PROOF`` stay importable from it.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, NamedTuple

from airflow_kafka_spark._util.text import MAX_MS


class FileEntry(NamedTuple):
    """One checkpoint file in a backup: its path relative to the checkpoint, size and content hash.

    A named tuple, not a dataclass: a manifest holds one per checkpoint file (40,000 and more), and
    building them is most of parsing one. For an entry of an HDFS snapshot backup (``proof``
    ``hdfs-snapshot``, ``ops.backup.snapshot``) ``sha256`` holds the cluster's file checksum
    instead (``<algorithm>:<hex>``, written as ``checksum``): the one name of the file's content
    such a backup has, and never a blob name (those are 64 hex digits, with no colon).
    """

    path: str
    size: int
    sha256: str
    mtime: float | None = None   # of the source file; lets the next backup skip re-hashing it
    ctime: float | None = None   # local disks: inode change time, which no one can set back (see reuse.reusable)
    #: Who computed ``sha256``: absent when this product hashed the bytes it read; a :data:`PROOFS`
    #: name when the store vouched for it without the bytes passing through here (``ops.backup.kinds``).
    proof: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "size": self.size,
                             ("checksum" if self.proof == SNAPSHOT_PROOF else "sha256"): self.sha256}
        if self.mtime is not None:
            d["mtime"] = self.mtime
        if self.ctime is not None:
            d["ctime"] = self.ctime
        if self.proof is not None:
            d["proof"] = self.proof
        return d


#: The proofs an entry's ``proof`` may name. ``s3-sha256``: the source object's full-object SHA-256
#: as the S3 store keeps it (``x-amz-checksum-sha256``, checked by the store against the body when
#: the object was written), and the blob is the store's own copy of that object (``CopyObject``).
#: ``hdfs-snapshot``: the file is in the backup's read-only HDFS snapshot (``Manifest.snapshot``),
#: named by the cluster's checksum (``GETFILECHECKSUM``), computed again by verify and restore.
SNAPSHOT_PROOF = "hdfs-snapshot"
PROOFS = frozenset({"s3-sha256", SNAPSHOT_PROOF})
#: A cluster's file checksum as an ``hdfs-snapshot`` entry records it: ``MD5-of-0MD5-of-512CRC32C:<hex>``.
_CHECKSUM = re.compile(r"[A-Za-z0-9-]{1,64}:[0-9a-f]{8,512}")


def file_entries(docs: Any) -> tuple[FileEntry, ...]:
    """The ``files`` of a parsed manifest, each field checked; a bad one raises ``ValueError`` naming it.

    One pass with exact type checks (``json.loads`` makes exact ``str``/``int``/``float``; ``bool`` is
    not ``int`` here) and one regular expression over all digests at once: 40,000 entries in ~40 ms
    instead of five checking calls each. An entry that fails is checked again by the per-field
    checks, whose message names the field.
    """
    if not isinstance(docs, list):
        raise ValueError(f"expected a list of files, got {type(docs).__name__}")
    out: list[FileEntry] = []
    append = out.append
    numbers = _NUMBER_TYPES
    for f in docs:
        try:
            path, size, mtime, ctime = f["path"], f["size"], f.get("mtime"), f.get("ctime")
            sha = f["sha256"] if f.get("proof") != SNAPSHOT_PROOF else _checksum(f["checksum"], f)
        except (KeyError, TypeError, AttributeError):
            raise ValueError(f"file entry {str(f)[:80]!r} lacks path, size or sha256") from None
        if type(path) is not str or not path or type(size) is not int or size < 0 or type(sha) is not str \
                or type(mtime) not in numbers or type(ctime) not in numbers:
            # raises, naming the field
            append(FileEntry(as_text(path), as_count(size), as_sha256(sha), as_number(mtime), as_number(ctime)))
            raise ValueError(f"malformed file entry {str(f)[:80]!r}")
        proof = f.get("proof")
        if proof is not None and proof not in PROOFS:
            raise ValueError(f"file entry {path!r} names an unknown proof {str(proof)[:40]!r}")
        append(FileEntry(path, size, sha, mtime, ctime, proof))
    hashed = [e for e in out if e.proof != SNAPSHOT_PROOF]
    joined = "\n".join(e.sha256 for e in hashed)
    # n digests of 64 hex characters each, and nothing else: the length pins where each one lies
    if hashed and (len(joined) != 65 * len(hashed) - 1 or not _SHA256_LINES.fullmatch(joined)):
        for e in hashed:
            as_sha256(e.sha256)
    return tuple(out)


def _checksum(v: Any, entry: Any) -> str:
    if not isinstance(v, str) or not _CHECKSUM.fullmatch(v) or "sha256" in entry:
        raise ValueError(f"file entry {str(entry)[:80]!r}: malformed cluster checksum")
    return v


def snapshot_of(doc: Any, files: tuple[FileEntry, ...]) -> dict[str, str]:
    """The ``snapshot`` of a parsed manifest, checked: absolute normalized paths, ``path`` inside
    ``<folder>/.snapshot/<name>``, every entry an ``hdfs-snapshot`` one (such entries without a
    snapshot are a pre-copy's cache: never restored, and no blob has their name)."""
    if not doc:
        return {}
    kinds = {f.proof == SNAPSHOT_PROOF for f in files}
    folder, name, path = doc["folder"], doc["name"], doc["path"]
    inside = posixpath.join(folder, ".snapshot", name)
    if not all(isinstance(v, str) and v for v in (folder, name, path)) or "/" in name or name in {".", ".."} \
            or any(posixpath.normpath(v) != v or not v.startswith("/") for v in (folder, path)) \
            or not (path == inside or path.startswith(inside + "/")) or False in kinds or set(doc) != {
                "folder", "name", "path"}:
        raise ValueError(f"malformed snapshot {str(doc)[:120]!r}")
    return {"folder": folder, "name": name, "path": path}


_NUMBER_TYPES = frozenset((int, float, type(None)))
_SHA256_LINES = re.compile(r"[0-9a-f]{64}(?:\n[0-9a-f]{64})*")


def as_number(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"expected a number, got {v!r}")
    return v


def as_text(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected a non-empty string, got {v!r}")
    return v


def as_count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v


def as_millis(v: Any) -> int:
    """An epoch-millisecond time: a non-negative integer no later than year 9999."""
    if as_count(v) > MAX_MS:
        raise ValueError(f"expected epoch milliseconds before year 10000, got {v!r}")
    return v


_SHA256 = re.compile(r"[0-9a-f]{64}")


def as_sha256(v: Any) -> str:
    if not isinstance(v, str) or not _SHA256.fullmatch(v):
        raise ValueError(f"expected a sha256 hex digest, got {v!r}")
    return v
