"""Which files of a checkpoint make up its last committed version (pure: no I/O).

What is copied is one consistent version, not "whatever is in the folder": ``metadata``,
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

Complete by construction: a file is left out only when the model *proves* it garbage for the
version kept, and every file left out is listed with its reason (``Selection.excluded``, the
manifest's ``selection``). Files outside the folders the model knows (``metadata``, ``offsets/``,
``commits/``, ``sources/``, ``state/``) are copied as they are and named (``unmodelled``). When the
checkpoint itself does not fit the model (:func:`layout_misfit`: no commit log — Spark 2.1 wrote
none and Spark restarts such a checkpoint by re-running its newest ``offsets/`` batch —, holes in
``offsets/``, logs that contradict, a log file in a version this tool cannot read) nothing can be
proven garbage, so the whole folder is copied but for temp files, and the reason is recorded:
before this rule such a checkpoint got a "verified" backup holding ``metadata`` only
(tests/integration/test_spark_corpus.py runs Spark's own test checkpoints through it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from airflow_kafka_spark.checkpoint.formats import batch_id_from_name
from airflow_kafka_spark.checkpoint.model import CHECKPOINT_CORRUPT, UNSUPPORTED_LOG_VERSION

_STATE_VERSION_FILE = re.compile(r"^([0-9]+)(?:_[^.]+)?\.(delta|snapshot|zip|changelog)$")
_STATE_BASE_KINDS = ("snapshot", "zip")
#: RocksDB's immutable files: ``state/<op>/<partition>/SSTs/<n>-<uuid>.sst``, each upload under a name of its own.
_ROCKSDB_IMMUTABLE = re.compile(r"^state/.*/SSTs/[^/]+\.sst$")
#: Why a RocksDB file still being written is left out (``select_files``'s ``being_written``).
UNFINISHED_UPLOAD = ("a RocksDB file still being written: an upload not yet ended, which no kept version lists (Spark "
                     "writes a version's zip only after every file it lists is closed)")
#: The top-level entries whose files the model places; anything else is copied as found.
MODELLED = frozenset({"metadata", ".metadata.crc", "offsets", "commits", "sources", "state"})


@dataclass(frozen=True)
class Selection:
    """The files of one consistent version and why the others were left out."""

    files: dict[str, dict]                 # relative path -> fsspec info
    excluded: dict[str, str]               # relative path -> reason
    committed: int | None                  # C
    log_bound: int | None                  # newest offsets/ id kept (C, or C+1 for a stopped pending batch)
    state_version: int | None              # newest state version kept (C+1)
    state_problems: list[str] = field(default_factory=list)
    whole: str | None = None               # why the whole folder was copied (the layout fits no model)
    unmodelled: list[str] = field(default_factory=list)   # top-level entries copied as found

    def record(self) -> dict:
        """The manifest's ``selection``: how the files were chosen and every file left out, with why."""
        return {"mode": "whole" if self.whole else "version", "why": self.whole,
                "excluded": dict(sorted(self.excluded.items())), "unmodelled": self.unmodelled}


def _inner_name(name: str) -> str | None:
    """The file a Hadoop ``.crc`` side file belongs to (``.5.crc`` -> ``5``, ``5.delta.crc`` -> ``5.delta``)."""
    if not name.endswith(".crc"):
        return None
    inner = name[:-4]
    if inner.startswith("."):
        inner = inner[1:]
    return inner


def is_rocksdb_immutable(rel: str) -> bool:
    """Is ``rel`` (a checkpoint-relative path) a RocksDB ``.sst`` a version's zip may list?"""
    return _ROCKSDB_IMMUTABLE.match(rel) is not None


def select_files(listing: Mapping[str, dict], committed: int | None, planned: int | None, *,
                 keep_pending: bool, whole: str | None = None,
                 being_written: frozenset[str] = frozenset()) -> Selection:
    """Pick the files of the last committed version out of a checkpoint listing (pure: no I/O).

    ``committed`` is ``C`` (newest ``commits/`` id), ``planned`` is ``L`` (newest ``offsets/`` id).
    ``keep_pending`` keeps ``offsets/L`` when ``L == C+1`` (a stopped query's write-ahead entry).
    ``whole`` (a :func:`layout_misfit` reason) copies every file but temp files of Spark's folders.
    ``being_written``: RocksDB ``.sst`` files a copy saw grow. Such a file is an upload that has not ended
    (an executor the stop interrupted, or one of a finished application), and Spark's file manager
    writes a version's zip only after the files it lists are closed, so no version kept lists it:
    left out as :data:`UNFINISHED_UPLOAD` (any other file that grows still fails the backup).
    """
    tops = {rel.partition("/")[0] for rel in listing} - MODELLED       # one pass: state stores hold 40,000 files
    unmodelled = sorted(top if top in listing else f"{top}/" for top in tops)
    if whole is not None:
        return _whole(listing, committed, planned, whole, unmodelled)
    log_bound = committed
    if keep_pending and planned is not None and planned == (committed + 1 if committed is not None else 0):
        log_bound = planned
    state_version = committed + 1 if committed is not None else None
    files: dict[str, dict] = {}
    excluded: dict[str, str] = {}
    stores: dict[str, _Store] = {}    # the versioned state files kept, by store folder
    for rel, info in listing.items():
        folder, _, name = rel.rpartition("/")
        if name.endswith((".tmp", ".tmp.crc")):
            excluded[rel] = "temp file of an interrupted write"
            continue
        inner = (_inner_name(name) or name) if name.endswith(".crc") else name
        if folder in ("offsets", "commits"):
            batch = batch_id_from_name(inner)
            bound = log_bound if folder == "offsets" else committed
            if batch is None:
                excluded[rel] = "not a batch file (Spark ignores it)"
            elif bound is None or batch > bound:
                excluded[rel] = f"batch {batch} is after the captured version"
            else:
                files[rel] = info
            continue
        if folder.startswith("state/") or folder == "state":
            if being_written and (upload := f"{folder}/{inner}") in being_written and is_rocksdb_immutable(upload):
                excluded[rel] = UNFINISHED_UPLOAD   # and its .crc beside it, on a local disk
                continue
            versioned = _STATE_VERSION_FILE.match(inner)
            why = _state_exclusion(rel, inner, versioned, state_version, committed)
            if why:
                excluded[rel] = why
                continue
            files[rel] = info
            if versioned is not None and inner == name:   # the file itself, not its .crc
                _add_version(stores, folder, versioned)
            continue
        files[rel] = info
    problems = _chain_problems(stores, state_version) if state_version is not None else []
    return Selection(files=files, excluded=excluded, committed=committed, log_bound=log_bound,
                     state_version=state_version, state_problems=problems, unmodelled=unmodelled)


def _whole(listing: Mapping[str, dict], committed: int | None, planned: int | None, why: str,
           unmodelled: list[str]) -> Selection:
    """Every file but the temp files of Spark's own folders (its atomic writes' leftovers, never read)."""
    files: dict[str, dict] = {}
    excluded: dict[str, str] = {}
    for rel, info in listing.items():
        if rel.split("/", 1)[0] in MODELLED and rel.rpartition("/")[2].endswith((".tmp", ".tmp.crc")):
            excluded[rel] = "temp file of an interrupted write"
        else:
            files[rel] = info
    return Selection(files=files, excluded=excluded, committed=committed, log_bound=planned,
                     state_version=None, whole=why, unmodelled=unmodelled)


def layout_misfit(listing: Mapping[str, dict], problems: Iterable[tuple[str, str]] = (), *,
                  ids: tuple[frozenset[int], frozenset[int]] | None = None) -> str | None:
    """Why this checkpoint does not fit the one-version model, or None when it does.

    The model proves a file garbage from the two logs: the newest commit ``C`` and at most one
    planned batch after it. Without a commit log (Spark 2.1), with holes in ``offsets/``, with logs
    that contradict, or with a log file this tool cannot read (``problems``: the reader's (code,
    path) pairs), ``C`` does not say what Spark restarts from, so nothing may be left out. Offsets
    after ``C+1`` are no exception: Spark's restart reads ``offsets/L`` and ``L-1``, so they are not
    garbage. ``ids`` are :func:`log_ids` of ``listing`` when the caller has them already.
    """
    offs, coms = ids if ids is not None else log_ids(listing)
    if offs:
        latest, oldest = max(offs), min(offs)
        if not coms and latest > 0:
            return (f"no commit log (offsets/{oldest}-{latest}, no commits/: Spark 2.1 wrote none, and Spark "
                    f"restarts it by re-running batch {latest})")
        if len(offs) != latest - oldest + 1:
            hole = next(i for i in range(oldest, latest) if i not in offs)
            return f"offsets/ has a hole at batch {hole} (files {oldest}-{latest}, {len(offs)} of them)"
        if coms and max(coms) > latest:
            return f"commits/{max(coms)} is newer than the newest offsets/{latest}"
        if coms and latest > max(coms) + 1:
            return f"offsets/ runs to batch {latest} but commits/ ends at {max(coms)}"
    elif coms:
        return "commits/ without offsets/"
    for code, path in problems:
        if code in (UNSUPPORTED_LOG_VERSION, CHECKPOINT_CORRUPT) and path.startswith(("offsets/", "commits/")):
            what = "is in a log format this tool cannot read" if code == UNSUPPORTED_LOG_VERSION else "is damaged"
            return f"{path} {what}"
    return None


def _state_exclusion(rel: str, inner: str, m: re.Match[str] | None, state_version: int | None,
                     committed: int | None) -> str | None:
    if m:
        version = int(m.group(1))
        if state_version is None or version > state_version:
            return f"state version {version} is after the captured version"
        return None
    parts = rel.split("/")
    if "_metadata" in parts and "v2" in parts:       # operator metadata v2: state/<op>/_metadata/v2/<batchId>
        batch = batch_id_from_name(inner)
        if batch is not None and (committed is None or batch > committed):
            return f"operator metadata of batch {batch} is after the captured version"
    if "_stateSchema" in parts:                       # transformWithState schema: <batchId>_<...>
        head = inner.split("_", 1)[0]
        if head.isdigit() and (committed is None or int(head) > committed):
            return f"state schema of batch {head} is after the captured version"
    return None


class _Store(NamedTuple):
    bases: set[int]      # snapshot / zip versions
    steps: set[int]      # delta / changelog versions


def _add_version(stores: dict[str, _Store], folder: str, m: re.Match[str]) -> None:
    store = stores.get(folder)
    if store is None:
        store = stores[folder] = _Store(set(), set())
    (store.bases if m.group(2) in _STATE_BASE_KINDS else store.steps).add(int(m.group(1)))


def _chain_problems(stores: Mapping[str, _Store], version: int) -> list[str]:
    """Store directories whose state ``version`` cannot be loaded from the files kept.

    HDFS-backed stores load the newest ``<v>.snapshot`` ≤ version plus every ``.delta`` after it;
    RocksDB stores a ``<v>.zip`` plus ``.changelog`` files. A store needs a base ≤ ``version`` (or
    steps from version 1) and every step up to ``version``. Directories without versioned files
    (``_metadata``) are not stores.
    """
    problems = []
    for store, kinds in sorted(stores.items()):
        bases = [v for v in kinds.bases if v <= version]
        start = max(bases) if bases else 0
        missing = [v for v in range(start + 1, version + 1) if v not in kinds.steps]
        if missing:
            first = missing[0]
            problems.append(f"{store}: state version {version} cannot be loaded, {first}.delta/.changelog is "
                            f"missing ({len(missing)} step(s) missing after "
                            f"{'snapshot ' + str(start) if start else 'version 0'})")
    return problems


def log_ids(listing: Mapping[str, dict]) -> tuple[frozenset[int], frozenset[int]]:
    offs, coms = set(), set()
    for rel in listing:
        parts = rel.split("/")
        if len(parts) == 2 and parts[0] in ("offsets", "commits"):
            b = batch_id_from_name(parts[1])
            if b is not None:
                (offs if parts[0] == "offsets" else coms).add(b)
    return frozenset(offs), frozenset(coms)
