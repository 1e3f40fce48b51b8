"""The previous backup as a stat cache: which checkpoint files a re-backup need not read again.

A file whose path, size, mtime and (on a local disk) inode change time equal an entry of the newest
verified backup of the same checkpoint and query keeps that entry's sha256 without being read:
checkpoint files are immutable once Spark renames them into place, so the cost of a backup follows
the new batches, not the history. Apart from ``take`` so the rule reads in one place.

The second stat cache is the **pre-copy** (``ops.backup.precopy``): the same copy, taken while the
query still runs, whose blobs were re-hashed and whose entry list was sealed like a manifest, but
which is never published. The backup after the stop reads it exactly like the previous manifest
(:func:`known_entries`), so only files written since the pre-copy are read in the downtime window.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, Sequence

from airflow_kafka_spark._util.fs import Location, comparable, list_files, mtime_of, open_location
from airflow_kafka_spark._util.recent import Recent
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.backup.catalog import read_manifest, store_path
from airflow_kafka_spark.ops.backup.manifest import BACKUPS_DIR, FileEntry, Manifest, with_own_files_json

#: The pre-copy's sealed entry list, beside ``backups/`` (never listed as a backup): ``<job>/precopy.json``.
PRECOPY_NAME = "precopy.json"

#: Manifests this process parsed or sealed: (sha256 of the file's bytes, seal key) -> the manifest. Four at once:
#: the previous backup and the pre-copy of a job or two (~0.15 s each to parse at 20,000 entries).
_PARSED: Recent[tuple[bytes, bytes | None], Manifest] = Recent(4)


def parsed(raw: bytes, *, where: str, seal_key: bytes | None) -> Manifest:
    """``Manifest.from_json(raw)``, parsed once per process for the same bytes and seal key.

    Why: the passes of a stop's pre-copy and the backup after it read the same two stat caches (the
    previous backup and ``precopy.json``) again and again; parsing and checking 20,000 entries took
    0.15 s each, twice in the downtime window (docs/benchmarks.md, round 14). The bytes are still
    read every time, so a file rewritten by another process is parsed anew; equal bytes parse to an
    equal manifest, and a failure is never remembered.
    """
    key = (hashlib.sha256(raw).digest(), seal_key)
    m = _PARSED.get(key)
    if m is None:
        m = Manifest.from_json(raw, where=where, seal_key=seal_key)
        _PARSED.put(key, m)
    return m


def remember(raw: bytes, m: Manifest, seal_key: bytes | None) -> None:
    """``m`` is what ``raw`` parses to under ``seal_key`` (its writer sealed it into those bytes)."""
    _PARSED.put((hashlib.sha256(raw).digest(), seal_key), with_own_files_json(m, raw))


def previous_manifest(job_loc: Location, job: str, ck: Location, query_id: str | None,
                      seal_key: bytes | None) -> Manifest | None:
    """The newest backup of the same checkpoint and query: its entries are the stat cache of unchanged files."""
    for m in published_newest_first(job_loc, job, seal_key):
        if _of_query(m, job, ck, query_id):
            return m
    return None


def same_location(m: Manifest, ck: Location) -> bool:
    """Whether backup ``m`` is of the checkpoint at ``ck`` (any spelling of it); a location that does not
    open (an unknown scheme in an old manifest) is another one."""
    with contextlib.suppress(UserError):
        return comparable(open_location(m.checkpoint_location, None)) == comparable(ck)
    return False


def published_newest_first(job_loc: Location, job: str, seal_key: bytes | None) -> Iterator[Manifest]:
    """The job's published manifests whose seals hold, newest first, parsed one at a time when asked for.

    Newest first because backup ids start with their UTC time; one at a time because a job with 50
    backups of 40,000 files each must not parse all of them to find the newest. A manifest that does
    not parse or seal, or is filed under another name or job, is skipped (``catalog.read_catalog``
    lists it as invalid; restore never uses it).
    """
    names = sorted((rel for rel in list_files(store_path(job_loc, BACKUPS_DIR))
                    if "/" not in rel and rel.endswith(".json") and not rel.startswith(".")), reverse=True)
    for rel in names:
        m = None
        with contextlib.suppress(UserError):
            raw = read_manifest(job_loc.child(BACKUPS_DIR, rel))
            if raw is not None:
                m = parsed(raw, where=f"{job_loc.url}/{BACKUPS_DIR}/{rel}", seal_key=seal_key)
        if m is not None and m.job == job and f"{m.backup_id}.json" == rel:
            yield m


def precopied(job_loc: Location, job: str, ck: Location, query_id: str | None,
              seal_key: bytes | None, *, handed: Manifest | None = None) -> Manifest | None:
    """The pre-copy of the same checkpoint and query, when its seals hold; None otherwise (never an error).

    A pre-copy that does not parse, is sealed with another key, or names another checkpoint or query
    is ignored: the backup then reads those files itself, which is what it did before pre-copies.
    ``handed``: the entries of a pass in this process (``precopy.PassChain``), newer than the store's
    file and never through the store, so there is no seal to check: taken when of the same checkpoint
    and query, without reading ``precopy.json``.
    """
    if handed is not None and _of_query(handed, job, ck, query_id):
        return handed
    with contextlib.suppress(UserError):
        loc = store_path(job_loc, PRECOPY_NAME)
        raw = read_manifest(loc)
        if raw is None:
            return None
        m = parsed(raw, where=loc.url, seal_key=seal_key)
        if _of_query(m, job, ck, query_id):
            return m
    return None


def _of_query(m: Manifest, job: str, ck: Location, query_id: str | None) -> bool:
    """Whether ``m`` is of this job, checkpoint (any spelling of it) and query: the one test of every stat cache."""
    return m.job == job and m.query_id == query_id and same_location(m, ck)


def known_entries(last: Manifest | None, pre: Manifest | None) -> dict[str, FileEntry]:
    """path -> entry from the previous backup, overridden by the newer pre-copy where the two differ.

    An entry equal to the previous manifest's keeps the manifest's own object, so a re-backup whose
    files are all the previous backup's still carries its sealed file list (``Manifest.files_json``).
    """
    out = {f.path: f for f in last.files} if last is not None else {}
    if pre is not None:
        for f in pre.files:
            if out.get(f.path) != f:
                out[f.path] = f
    return out


def stat_of(info: dict, *, local: bool) -> tuple[int, float | None, float | None]:
    """(size, mtime, ctime) of a listed file, what :func:`reusable` compares; ctime only on a local disk."""
    value = info.get("created") if local else None
    ctime = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return int(info.get("size") or 0), mtime_of(info), ctime


def reusable(prev: FileEntry | None, size: int, mtime: float | None, ctime: float | None, *, local: bool) -> bool:
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


def unchanged(order: Sequence[str], files: Mapping[str, dict], previous: Mapping[str, FileEntry],
              index: Mapping[str, int], *, local: bool) -> list[FileEntry | None]:
    """For each path of ``order``: the previous entry when its file is exactly as that entry says, else None.

    The common case of :func:`reusable`, decided without a call per file (a re-backup of 40,000
    files): on a local disk, size, mtime and inode change time all equal the entry's and its blob
    is in ``index`` with that size. None does not mean "read it": the caller asks :func:`reusable`.
    """
    if not local:
        return [None] * len(order)
    get, size_of = previous.get, index.get
    out: list[FileEntry | None] = []
    append = out.append
    for rel in order:
        prev, info = get(rel), files[rel]
        try:
            append(prev if prev is not None and prev.ctime is not None and prev.size == info["size"]
                   and prev.mtime == info["mtime"] and prev.ctime == info["created"]
                   and size_of(prev.sha256) == prev.size else None)
        except KeyError:   # not a local listing's entry: the caller's general rule decides
            append(None)
    return out
