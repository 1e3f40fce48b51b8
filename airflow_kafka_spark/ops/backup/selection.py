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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from airflow_kafka_spark.checkpoint.formats import batch_id_from_name

_STATE_VERSION_FILE = re.compile(r"^([0-9]+)(?:_[^.]+)?\.(delta|snapshot|zip|changelog)$")
_STATE_BASE_KINDS = ("snapshot", "zip")


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
                     state_version=state_version, state_problems=problems)


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
