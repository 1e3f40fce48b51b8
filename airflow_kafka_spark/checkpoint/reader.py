"""Read a Structured Streaming checkpoint (through fsspec) into a :class:`CheckpointState`.

Why parse instead of asking Spark: a validator must answer *before* a query starts, from plain
Python, on a copy it must not touch (Spark's own readers may create directories). So this module
re-implements exactly the readers Spark uses on restart (``OffsetSeqLog``, ``CommitLog``,
``StreamMetadata``, ``KafkaSourceInitialOffsetWriter``) and mirrors their acceptance rules: what
Spark would refuse becomes a :class:`CheckpointProblem` with a stable code and a one-line repair,
so the verdict can BLOCK with an explanation instead of failing with a traceback.

What is read, and why only that (a checkpoint keeps ~100 batches; restart needs two):

* the listings of ``offsets/``, ``commits/``, ``sources/`` and the root: names and sizes, but the
  two logs by name only on local disk, where a size is a ``stat`` per file; the newest 100 batches
  of each log are sized (zero-byte files, S09) and so is every file read;
* ``metadata`` (query id), ``offsets/L`` (latest planned batch), ``offsets/L-1`` (Spark reads it on
  every restart to find the start of batch L), ``offsets/C`` and ``commits/C`` (C = newest commit),
  and ``sources/<n>/0`` (Kafka's resolved starting offsets);
* with ``read_history=True`` every retained ``offsets/N`` as well: the job's progress time series.

Nothing is ever written: files are opened with mode ``"rb"`` only and no directory is created
(:mod:`~airflow_kafka_spark.checkpoint.files`). The pass is assembled from one concern per module:
file access (``files``), log consistency (``checks``), sources and state (``sources``), and the
repair for a damaged batch file (``repair``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from airflow_kafka_spark._util.fs import Location
from airflow_kafka_spark.checkpoint.checks import ConsistencyChecks
from airflow_kafka_spark.checkpoint.escaped import find_legacy_folder, legacy_message
from airflow_kafka_spark.checkpoint.files import NOT_STATED, CheckpointFiles, is_dir, open_fs, os_reason
from airflow_kafka_spark.checkpoint.formats import (
    MAX_LOG_FILE_BYTES,
    METADATA_MAX_BYTES,
    UnsupportedLogVersionError,
    error_detail,
    parse_commit_file,
    parse_metadata,
    parse_offsets_file,
    split_log_names,
    too_large,
)
from airflow_kafka_spark.checkpoint.model import (
    CHECKPOINT_CORRUPT,
    LEGACY_ESCAPED_PATH,
    MISSING_QUERY_ID,
    UNSUPPORTED_LOG_VERSION,
    BatchCommit,
    BatchOffsets,
    CheckpointProblem,
    CheckpointState,
)
from airflow_kafka_spark.checkpoint.repair import damaged_batch_repair
from airflow_kafka_spark.checkpoint.sources import SourcesAndState
from airflow_kafka_spark.errors import CheckpointFormatError, UserError


def read_checkpoint(
    location: str | Location,
    *,
    storage_options: dict | None = None,
    read_history: bool = False,
    history_batches: int | None = None,
) -> CheckpointState:
    """Read the checkpoint at ``location`` (a path, any fsspec URL, or the :class:`Location` the caller opened)
    without modifying it.

    A missing location gives ``exists=False``. A location that is a file, or that cannot be listed
    or read, raises :class:`UserError`. Everything else — damaged files, gaps, contradictions — is
    returned in ``problems`` so callers can explain and block rather than crash.

    ``history_batches`` (with ``read_history``): read only the newest N ``offsets/`` files (and always
    those back to the last committed batch), so the cost of a history follows what the caller needs,
    not how many batches the job retains (``minBatchesToRetain`` can keep 10,000).
    """
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if isinstance(location, Location):   # opened once by the caller (an operation holds it from its start)
        fs, root, location = location.fs, location.path, location.url
    else:
        fs, root = open_fs(location, storage_options)
    legacy = find_legacy_folder(fs, root)
    legacy_problems = [CheckpointProblem(LEGACY_ESCAPED_PATH, "", legacy_message(root, legacy))] if legacy else []
    try:
        info = fs.info(root)
    except FileNotFoundError:
        return CheckpointState(
            location=location,
            exists=False,
            query_id=None,
            offset_batch_ids=[],
            commit_batch_ids=[],
            latest_planned=None,
            latest_committed=None,
            initial_offsets={},
            has_state=False,
            problems=legacy_problems,
            legacy_escaped=legacy,
        )
    except OSError as exc:
        raise UserError(f"cannot access checkpoint location {location}: {os_reason(exc)}") from None
    if info.get("type") != "directory" and not is_dir(fs, root):
        raise UserError(
            f"checkpoint location {location} is not a directory: pass the checkpoint folder "
            f"(the one holding offsets/, commits/ and metadata)"
        )
    state = _Reader(fs, root, location).read(read_history, history_batches)
    if legacy:
        state.problems[:0] = legacy_problems
        state = replace(state, legacy_escaped=legacy)
    return state


class _Reader(CheckpointFiles, ConsistencyChecks, SourcesAndState):
    """One pass over one checkpoint; accumulates problems so a single read reports all of them."""

    def __init__(self, fs: Any, root: str, location: str) -> None:
        super().__init__(fs, root, location)
        self.problems: list[CheckpointProblem] = []
        self.stray: list[str] = []
        self.offsets: dict[int, BatchOffsets] = {}  # parsed offsets files by batch id
        self.bad_offsets: set[int] = set()  # offsets files already reported as unreadable
        self.offset_files: dict[int, Mapping[str, Any]] = {}  # batch id -> listing info (maybe NOT_STATED)
        self.commit_files: dict[int, Mapping[str, Any]] = {}
        self.latest: int | None = None  # L
        self.committed: int | None = None  # C
        self.crc_ids: dict[str, set[int]] = {}  # ".N.crc" Hadoop checksum files per log

    # ---- top level

    def read(self, read_history: bool, history_batches: int | None = None) -> CheckpointState:
        root_entries = self._ls("", required=True)
        self._note_strays("", root_entries)
        self.offset_files = self._log_listing("offsets", root_entries)
        self.commit_files = self._log_listing("commits", root_entries)
        offset_ids, commit_ids = sorted(self.offset_files), sorted(self.commit_files)
        self.latest = offset_ids[-1] if offset_ids else None
        self._note_orphan_checksums(offset_ids, root_entries)
        self.committed = commit_ids[-1] if commit_ids else None
        self.commit_log_absent = "commits" not in root_entries   # Spark 2.1 wrote no commit log
        latest, committed = self.latest, self.committed

        query_id = self._query_id(root_entries, has_batches=bool(offset_ids or commit_ids))
        self._check_structure(offset_ids, commit_ids)
        self._check_empty_history(offset_ids, commit_ids)

        planned = self._offsets(latest)
        before_latest = None
        if latest is not None and latest > 0:
            before_latest = self._offsets(latest - 1)  # Spark reads it on every restart: where batch L starts
        committed_offsets = self._offsets(committed)
        commit = self._commit(committed)
        if read_history:
            self._read_history(history_batches)
        self._check_source_consistency()
        initial = self._initial_offsets(root_entries)
        has_state = self._has_state(root_entries)

        return CheckpointState(
            location=self.location,
            exists=True,
            query_id=query_id,
            offset_batch_ids=offset_ids,
            commit_batch_ids=commit_ids,
            latest_planned=planned,
            latest_committed=committed_offsets,
            initial_offsets=initial,
            has_state=has_state,
            stray_files=sorted(self.stray),
            problems=self.problems,
            history=self._history(history_batches) if read_history else [],
            latest_commit=commit,
            before_latest=before_latest,
            commit_log_absent=self.commit_log_absent and bool(offset_ids),
        )

    # ---- listings

    def _log_listing(self, name: str, root_entries: dict[str, dict]) -> dict[int, Mapping[str, Any]]:
        """Batch id -> info for ``offsets/`` or ``commits/`` (only names Spark treats as batches)."""
        info = root_entries.get(name)
        if info is None:
            return {}
        if not self._is_dir(name, info):
            self._problem(
                CHECKPOINT_CORRUPT,
                name,
                f"{name} is a file where Spark keeps a directory of batch files: restore {name}/ from a backup",
            )
            return {}
        listed, entries = self._ls_names(name)
        names = split_log_names(listed)
        self._note_strays(name, names.temps)
        self.crc_ids[name] = names.checksums
        if entries is None:   # local disk: sized on demand (_batch_info)
            return dict.fromkeys(names.batches, NOT_STATED)
        return dict(zip(names.batches, map(entries.__getitem__, names.batches.values()), strict=True))

    # ---- metadata

    def _query_id(self, root_entries: dict[str, dict], *, has_batches: bool) -> str | None:
        info = root_entries.get("metadata")
        reason = "is missing" if info is None else self._not_a_file("metadata", info)
        size = info.get("size") if info is not None else None
        if reason is None and isinstance(size, int) and size > METADATA_MAX_BYTES:
            reason = f"is {size:,} bytes, larger than the {METADATA_MAX_BYTES:,}-byte limit (Spark writes ~45)"
        if info is not None and reason is None:
            try:
                data = self._read_file("metadata")
            except IsADirectoryError:
                data = b""
            if data is None:
                reason = "disappeared while being read"
            else:
                try:
                    return parse_metadata(data)
                except CheckpointFormatError as exc:
                    reason = error_detail(exc, "metadata")
        if has_batches:
            self._problem(
                MISSING_QUERY_ID,
                "metadata",
                f"metadata (the query id) {reason} while offsets/commits exist: restore "
                f"metadata from a backup; starting now gives the query a new id and breaks "
                f"sinks that dedupe by it",
            )
        elif info is not None:
            self._problem(
                CHECKPOINT_CORRUPT,
                "metadata",
                f"metadata {reason} and no batch has run yet: remove metadata and Spark writes a new id",
            )
        return None

    # ---- batch files

    def _batch_bytes(self, kind: str, batch_id: int) -> bytes | None:
        """The bytes of a batch file Spark must read; problems for directories and absurd sizes."""
        rel = f"{kind}/{batch_id}"
        info = self._batch_info(kind, batch_id)
        size = info.get("size")
        why = self._not_a_file(rel, info)
        if why:
            self._damaged(kind, batch_id, why)
            return None
        if isinstance(size, int) and size > MAX_LOG_FILE_BYTES:
            self._damaged(kind, batch_id, too_large(size))
            return None
        try:
            data = self._read_file(rel)
        except IsADirectoryError:
            self._damaged(kind, batch_id, "is a directory, not a batch file")
            return None
        if data is None:
            raise UserError(
                f"{self._display(rel)} disappeared while being read: is a query or a cleanup "
                f"running on this checkpoint? Read it again once it is stopped"
            )
        return data

    def _batch_info(self, kind: str, batch_id: int) -> Mapping[str, Any]:
        """Type and size of one listed batch file; a names-only listing's entry is stat-ed now."""
        files = self.offset_files if kind == "offsets" else self.commit_files
        info = files[batch_id]
        if info is NOT_STATED:
            info = files[batch_id] = self._stat(f"{kind}/{batch_id}")
        return info

    def _offsets(self, batch_id: int | None) -> BatchOffsets | None:
        if batch_id is None or batch_id not in self.offset_files or batch_id in self.bad_offsets:
            return None
        if batch_id not in self.offsets:
            data = self._batch_bytes("offsets", batch_id)
            if data is None:
                self.bad_offsets.add(batch_id)
                return None
            self._parse_offsets(batch_id, data)
        return self.offsets.get(batch_id)

    def _parse_offsets(self, batch_id: int, data: bytes) -> None:
        rel = f"offsets/{batch_id}"
        try:
            self.offsets[batch_id] = parse_offsets_file(batch_id, data)
        except UnsupportedLogVersionError as exc:
            self.bad_offsets.add(batch_id)
            self._unsupported(rel, exc)
        except CheckpointFormatError as exc:
            self.bad_offsets.add(batch_id)
            self._damaged("offsets", batch_id, error_detail(exc, rel))

    def _commit(self, batch_id: int | None) -> BatchCommit | None:
        if batch_id is None:
            return None
        rel = f"commits/{batch_id}"
        data = self._batch_bytes("commits", batch_id)
        if data is None:
            return None
        try:
            return parse_commit_file(batch_id, data)
        except UnsupportedLogVersionError as exc:
            self._unsupported(rel, exc)
        except CheckpointFormatError as exc:
            self._damaged("commits", batch_id, error_detail(exc, rel))
        return None

    def _history_ids(self, limit: int | None) -> list[int]:
        """The batch ids of the history asked for: all, or the newest ``limit`` (at least back to C-1)."""
        ids = sorted(self.offset_files)
        if limit is None:
            return ids
        keep = max(int(limit), 1)
        if self.committed is not None and self.latest is not None:
            keep = max(keep, self.latest - self.committed + 2)
        return ids[-keep:]

    def _history(self, limit: int | None) -> list[BatchOffsets]:
        wanted = set(self._history_ids(limit))
        return [self.offsets[i] for i in sorted(self.offsets) if i in wanted]

    def _read_history(self, limit: int | None = None) -> None:
        todo: list[int] = []
        for batch_id in self._history_ids(limit):
            if batch_id in self.offsets or batch_id in self.bad_offsets:
                continue
            info = self._batch_info("offsets", batch_id)
            size = info.get("size")
            why = self._not_a_file(f"offsets/{batch_id}", info)
            if why:
                self.bad_offsets.add(batch_id)
                self._damaged("offsets", batch_id, why)
            elif isinstance(size, int) and size > MAX_LOG_FILE_BYTES:
                self.bad_offsets.add(batch_id)
                self._damaged("offsets", batch_id, too_large(size))
            else:
                todo.append(batch_id)
        for batch_id, data in zip(todo, self._cat_many([f"offsets/{i}" for i in todo]), strict=True):
            if data is not None:
                self._parse_offsets(batch_id, data)

    # ---- problems

    def _problem(self, code: str, path: str, message: str) -> None:
        if all((p.code, p.path) != (code, path) for p in self.problems):
            self.problems.append(CheckpointProblem(code=code, path=path, message=" ".join(message.split())))

    def _unsupported(self, rel: str, exc: CheckpointFormatError) -> None:
        self._problem(
            UNSUPPORTED_LOG_VERSION,
            rel,
            f"{exc}: it was written by a newer Spark, which older Spark cannot read either; "
            f"do not edit it by hand: keep that Spark version and use a release of this tool "
            f"that knows the format",
        )

    def _damaged(self, kind: str, batch_id: int, detail: str) -> None:
        """Report a damaged batch file with the repair that fits where it sits in the log (S09)."""
        rel = f"{kind}/{batch_id}"
        repair = damaged_batch_repair(
            kind, batch_id, latest=self.latest, committed=self.committed, has_commit=batch_id in self.commit_files
        )
        joiner = "" if detail.startswith(":") else " "  # "offsets/5: conf must ..." vs "offsets/5 is empty"
        self._problem(CHECKPOINT_CORRUPT, rel, f"{rel}{joiner}{detail}: {repair}")
