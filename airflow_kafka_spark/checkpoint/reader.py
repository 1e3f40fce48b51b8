"""Read a Structured Streaming checkpoint (through fsspec) into a :class:`CheckpointState`.

Why parse instead of asking Spark: a validator must answer *before* a query starts, from plain
Python, on a copy it must not touch (Spark's own readers may create directories). So this module
re-implements exactly the readers Spark uses on restart (``OffsetSeqLog``, ``CommitLog``,
``StreamMetadata``, ``KafkaSourceInitialOffsetWriter``) and mirrors their acceptance rules: what
Spark would refuse becomes a :class:`CheckpointProblem` with a stable code and a one-line repair,
so the verdict can BLOCK with an explanation instead of failing with a traceback.

What is read, and why only that (a checkpoint keeps ~100 batches; restart needs two):

* the listings of ``offsets/``, ``commits/``, ``sources/`` and the root (names and sizes only);
* ``metadata`` (query id), ``offsets/L`` (latest planned batch), ``offsets/L-1`` (Spark reads it on
  every restart to find the start of batch L), ``offsets/C`` and ``commits/C`` (C = newest commit),
  and ``sources/<n>/0`` (Kafka's resolved starting offsets);
* with ``read_history=True`` every retained ``offsets/N`` as well: the job's progress time series.

Nothing is ever written: files are opened with mode ``"rb"`` only and no directory is created.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util.fs import refuse_chained_url
from airflow_kafka_spark._util.jsonfile import UntrustedJSONError, load_json
from airflow_kafka_spark.errors import CheckpointFormatError, UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json

# --------------------------------------------------------------------------- problem codes

CHECKPOINT_CORRUPT = "CHECKPOINT_CORRUPT"
"""A file Spark reads is damaged, or the logs contradict each other: Spark would fail or misbehave."""
MISSING_QUERY_ID = "MISSING_QUERY_ID"
"""``metadata`` missing/unreadable while batches exist: Spark would silently start under a new id (S10)."""
UNSUPPORTED_LOG_VERSION = "UNSUPPORTED_LOG_VERSION"
"""A log file newer than this tool understands (and than older Spark can read): never guess (S27)."""
STRAY_TEMP_FILE = "STRAY_TEMP_FILE"
"""A leftover ``.<name>.<uuid>.tmp`` from an interrupted write: Spark ignores it, backups must too (S08)."""
LOG_GAP = "LOG_GAP"
"""A hole in the retained history that Spark does not need to restart (history/backups are affected)."""
INITIAL_OFFSETS_UNREADABLE = "INITIAL_OFFSETS_UNREADABLE"
"""``sources/<n>/0`` is damaged but Spark will not read it again (a batch was already committed)."""

WARN_CODES = frozenset({STRAY_TEMP_FILE, LOG_GAP, INITIAL_OFFSETS_UNREADABLE})

# Highest log versions this reader understands. Offsets v2 is master's "OffsetMap" (named sources);
# commits v2 is checkpoint format v2 (state store unique ids). Kafka's sources/<n>/0 only has v1.
OFFSETS_MAX_VERSION = 2
COMMITS_MAX_VERSION = 2
SOURCES_MAX_VERSION = 1

_MAX_LONG = 2**63 - 1
_MIN_LONG = -(2**63)
_MAX_INT = 2**31 - 1
# Spark's log files are small (a Kafka offset line is ~20 bytes per partition); anything far larger
# is not a log file, and reading it whole would only waste memory.
_MAX_LOG_FILE_BYTES = 64 * 1024 * 1024
# ``metadata`` holds ``{"id":"<uuid>"}`` (~45 bytes; Spark has written nothing else there since 2.0):
# 1 MiB is over 20,000 times that, room for any future field, yet never a memory problem to read.
METADATA_MAX_BYTES = 1024 * 1024
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_VERSION_LINE = re.compile(r"v\+?([0-9]+)")
_JAVA_WHITESPACE = "".join(chr(c) for c in range(33))  # what Java's String.trim() strips
_GLOB_CHARS = frozenset("*?[")


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class BatchOffsets:
    """One ``offsets/<batch_id>`` file."""

    batch_id: int
    version: int                                  # 1 or 2 (the ``v<N>`` line)
    batch_timestamp_ms: int | None
    batch_watermark_ms: int | None
    conf: dict[str, str]                          # open map, as pinned by Spark
    # source id ("0", "1", ... or v2 names) -> offsets; None for "-"
    sources: dict[str, PartitionOffsets | None]
    # Every source line as written ("-" -> None), Kafka or not, in file order. Non-Kafka sources
    # (rate, files, ...) appear here only, so ``sources`` never holds something that is not Kafka.
    raw_sources: dict[str, str | None] = field(default_factory=dict)

    @property
    def kafka_offsets(self) -> PartitionOffsets:
        """All Kafka partitions of all sources merged (what lag/verdict usually need)."""
        out: PartitionOffsets = {}
        for offs in self.sources.values():
            if offs:
                out.update(offs)
        return out

    @property
    def source_count(self) -> int:
        """Number of source lines; Spark refuses a restart if the query's source count differs."""
        return len(self.raw_sources) if self.raw_sources else len(self.sources)


@dataclass(frozen=True)
class BatchCommit:
    """One ``commits/<batch_id>`` file: the batch finished and its sink output is durable."""

    batch_id: int
    version: int                        # 2 with ...stateStore.checkpointFormatVersion=2, else 1
    next_batch_watermark_ms: int | None
    has_state_unique_ids: bool = False  # v2 ``stateUniqueIds`` present


@dataclass(frozen=True)
class CheckpointProblem:
    """A self-consistency problem (S08–S10): a stable code, the file, one line with the repair."""

    code: str           # CHECKPOINT_CORRUPT, MISSING_QUERY_ID, STRAY_TEMP_FILE, ...
    path: str           # relative to the checkpoint location, e.g. "offsets/7" ("" = the location)
    message: str

    @property
    def severity(self) -> str:
        """``WARN`` for things Spark tolerates (stray temp files, holes in history), else ``BLOCK``."""
        return "WARN" if self.code in WARN_CODES else "BLOCK"


@dataclass(frozen=True)
class CheckpointState:
    location: str
    exists: bool
    query_id: str | None
    offset_batch_ids: list[int]                   # sorted numeric names in offsets/
    commit_batch_ids: list[int]                   # sorted numeric names in commits/
    latest_planned: BatchOffsets | None           # offsets/L
    latest_committed: BatchOffsets | None         # offsets/C where C = newest commits/ id
    initial_offsets: dict[str, PartitionOffsets]  # sources/<n>/0 by source id
    has_state: bool                               # state/ has files
    stray_files: list[str] = field(default_factory=list)
    problems: list[CheckpointProblem] = field(default_factory=list)
    history: list[BatchOffsets] = field(default_factory=list)  # filled only when asked (read_history=True)
    latest_commit: BatchCommit | None = None      # commits/C itself (version, watermark)

    @property
    def pending_batch(self) -> BatchOffsets | None:
        """offsets/L without commits/L: Spark re-runs exactly this range on restart (S07)."""
        if self.latest_planned is None:
            return None
        if self.latest_committed is None or self.latest_committed.batch_id != self.latest_planned.batch_id:
            return self.latest_planned
        return None

    @property
    def blocking_problems(self) -> list[CheckpointProblem]:
        return [p for p in self.problems if p.severity == "BLOCK"]


class UnsupportedLogVersionError(CheckpointFormatError):
    """A log file carries a ``v<N>`` newer than this reader understands."""


# --------------------------------------------------------------------------- pure parsers


def batch_id_from_name(name: str) -> int | None:
    """The batch id of a log file name, or None if Spark would not treat it as a batch file.

    Spark lists a file as a batch when ``name.toLong`` succeeds; ``.0.crc``, ``.0.<uuid>.tmp`` and
    other names are not batches. Non-canonical spellings (``007``, ``+7``) parse in Java but Spark
    then reads ``7``, never that file, so they are not batches here either.
    """
    if not name or not name.isascii() or not name.isdigit():
        return None
    if len(name) > 1 and name[0] == "0":
        return None
    value = int(name)
    return value if value <= _MAX_LONG else None


def parse_offsets_file(batch_id: int, data: bytes, *, what: str | None = None) -> BatchOffsets:
    """Parse ``offsets/<batch_id>`` exactly as ``OffsetSeqLog.deserialize`` would accept it.

    Raises :class:`UnsupportedLogVersionError` for ``v3``+ and :class:`CheckpointFormatError`
    (one line naming ``what``) for anything Spark would refuse.
    """
    what = what or f"offsets/{batch_id}"
    lines = log_lines(data, what)
    if not lines:
        raise CheckpointFormatError(f"{what} is empty (Spark: Incomplete log file)")
    version = parse_log_version(lines[0], OFFSETS_MAX_VERSION, what)  # OffsetSeqLog does not trim it
    if len(lines) < 2:
        raise CheckpointFormatError(f"{what} ends after the version line (no metadata line)")
    watermark = timestamp = None
    conf: dict[str, str] = {}
    meta_text = _java_trim(lines[1])
    if meta_text:
        watermark, timestamp, conf = _parse_offset_metadata(meta_text, what)
    entries = lines[2:]
    if not entries:
        raise CheckpointFormatError(f"{what} has no source offset lines (truncated after the metadata line)")
    raw: dict[str, str | None] = {}
    if version == 1:
        for index, text in enumerate(entries):
            raw[str(index)] = None if text == "-" else text
    else:
        for number, line in enumerate(entries, start=3):
            source_id, sep, text = line.partition(":")
            if not sep:
                raise CheckpointFormatError(
                    f"{what} line {number} is not 'sourceId:offset' (Spark: Invalid OffsetMap format)")
            if source_id in raw:
                raise CheckpointFormatError(f"{what} names source {source_id!r} twice")
            raw[source_id] = None if text == "-" else text
    sources: dict[str, PartitionOffsets | None] = {}
    for source_id, text in raw.items():
        if text is None:
            sources[source_id] = None
            continue
        offsets = _parse_source_offset(text, f"{what} source {source_id}")
        if offsets is not None:
            sources[source_id] = offsets
    return BatchOffsets(batch_id=batch_id, version=version, batch_timestamp_ms=timestamp,
                        batch_watermark_ms=watermark, conf=conf, sources=sources, raw_sources=raw)


def parse_commit_file(batch_id: int, data: bytes, *, what: str | None = None) -> BatchCommit:
    """Parse ``commits/<batch_id>`` as ``CommitLog.deserialize`` would (a missing JSON line means ``{}``)."""
    what = what or f"commits/{batch_id}"
    lines = log_lines(data, what)
    if not lines:
        raise CheckpointFormatError(f"{what} is empty (Spark: Incomplete log file in the offset commit log)")
    version = parse_log_version(_java_trim(lines[0]), COMMITS_MAX_VERSION, what)
    doc = _json(lines[1], what) if len(lines) > 1 else {}
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"{what} must hold a JSON object, got {type(doc).__name__}")
    watermark = _long_field(doc, "nextBatchWatermarkMs", what)
    unique_ids = doc.get("stateUniqueIds")
    if unique_ids is not None and not isinstance(unique_ids, dict):
        raise CheckpointFormatError(f"{what}: stateUniqueIds must be a JSON object")
    return BatchCommit(batch_id=batch_id, version=version, next_batch_watermark_ms=watermark,
                       has_state_unique_ids=bool(unique_ids))


def parse_initial_offsets_file(data: bytes, *, what: str = "sources/0/0") -> PartitionOffsets | None:
    """Parse Kafka's ``sources/<n>/0``; None if the file belongs to another kind of source.

    Kafka writes one 0x00 byte first (SPARK-19517, so Spark 2.1.0 can read it), then ``v1\\n`` and
    the resolved starting offsets; Spark 2.1.0 itself wrote the JSON right after that byte. Other
    sources (rate, files) keep a plain ``v1`` log there, which is recognised by its first byte.
    """
    if not data or data[:1] != b"\x00":
        return None
    text = _decode(data[1:], what)
    if not text:
        raise CheckpointFormatError(f"{what} holds only the leading 0x00 byte (truncated)")
    if text[0] == "v":
        newline = text.find("\n")
        if newline <= 0:
            raise CheckpointFormatError(f"{what} has no line break after its version line (truncated)")
        parse_log_version(text[:newline], SOURCES_MAX_VERSION, what)
        text = text[newline + 1:]
    return _kafka_offsets(text, what)


def log_lines(data: bytes, what: str) -> list[str]:
    """Decode a metadata-log file and split it like Spark does (``getLines`` = Java ``readLine``).

    Lines end at ``\\n``, ``\\r`` or ``\\r\\n``; a final line break does not add an empty line.
    Spark decodes strictly as UTF-8, so undecodable bytes are an error here too.
    """
    text = _decode(data, what)
    if not text:
        return []
    parts = _LINE_BREAK.split(text)
    if parts[-1] == "":
        parts.pop()
    return parts


def parse_log_version(line: str, max_version: int, what: str) -> int:
    """``MetadataVersionUtil.validateVersion``: ``v`` + a positive int; above ``max_version`` is refused.

    Raises :class:`UnsupportedLogVersionError` for a newer version (never guess a format) and
    :class:`CheckpointFormatError` for a malformed line.
    """
    match = _VERSION_LINE.fullmatch(line)
    version = int(match.group(1)) if match and len(match.group(1)) <= 10 else 0
    if version <= 0 or version > _MAX_INT:
        raise CheckpointFormatError(f"{what} has a malformed version line {_show(line)} (expected e.g. 'v1')")
    if version > max_version:
        raise UnsupportedLogVersionError(
            f"{what} uses log format v{version}; this tool reads up to v{max_version}")
    return version


# --------------------------------------------------------------------------- the reader


def read_checkpoint(location: str, *, storage_options: dict | None = None,
                    read_history: bool = False) -> CheckpointState:
    """Read the checkpoint at ``location`` (a path or any fsspec URL) without modifying it.

    A missing location gives ``exists=False``. A location that is a file, or that cannot be listed
    or read, raises :class:`UserError`. Everything else — damaged files, gaps, contradictions — is
    returned in ``problems`` so callers can explain and block rather than crash.
    """
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    fs, root = _open_fs(location, storage_options)
    try:
        info = fs.info(root)
    except FileNotFoundError:
        return CheckpointState(location=location, exists=False, query_id=None, offset_batch_ids=[],
                               commit_batch_ids=[], latest_planned=None, latest_committed=None,
                               initial_offsets={}, has_state=False)
    except OSError as exc:
        raise UserError(f"cannot access checkpoint location {location}: {_os_reason(exc)}") from None
    if info.get("type") != "directory" and not _is_dir(fs, root):
        raise UserError(f"checkpoint location {location} is not a directory: pass the checkpoint folder "
                        f"(the one holding offsets/, commits/ and metadata)")
    return _Reader(fs, root, location).read(read_history)


class _Reader:
    """One pass over one checkpoint; accumulates problems so a single read reports all of them."""

    def __init__(self, fs: Any, root: str, location: str) -> None:
        self.fs = fs
        self.root = root
        self.location = location
        self.problems: list[CheckpointProblem] = []
        self.stray: list[str] = []
        self.offsets: dict[int, BatchOffsets] = {}   # parsed offsets files by batch id
        self.bad_offsets: set[int] = set()           # offsets files already reported as unreadable
        self.offset_files: dict[int, dict] = {}
        self.commit_files: dict[int, dict] = {}
        self.latest: int | None = None               # L
        self.committed: int | None = None            # C
        self.crc_ids: dict[str, set[int]] = {}       # ".N.crc" Hadoop checksum files per log

    # ---- top level

    def read(self, read_history: bool) -> CheckpointState:
        root_entries = self._ls("", required=True)
        self._note_strays("", root_entries)
        self.offset_files = self._log_listing("offsets", root_entries)
        self.commit_files = self._log_listing("commits", root_entries)
        offset_ids, commit_ids = sorted(self.offset_files), sorted(self.commit_files)
        self.latest = offset_ids[-1] if offset_ids else None
        self._note_orphan_checksums(offset_ids, root_entries)
        self.committed = commit_ids[-1] if commit_ids else None
        latest, committed = self.latest, self.committed

        query_id = self._query_id(root_entries, has_batches=bool(offset_ids or commit_ids))
        self._check_structure(offset_ids, commit_ids)
        self._check_empty_history()

        planned = self._offsets(latest)
        if latest is not None and latest > 0:
            self._offsets(latest - 1)  # Spark reads it on every restart to find where batch L starts
        committed_offsets = self._offsets(committed)
        commit = self._commit(committed)
        if read_history:
            self._read_history()
        self._check_source_consistency()
        initial = self._initial_offsets(root_entries)
        has_state = self._has_state(root_entries)

        return CheckpointState(
            location=self.location, exists=True, query_id=query_id, offset_batch_ids=offset_ids,
            commit_batch_ids=commit_ids, latest_planned=planned, latest_committed=committed_offsets,
            initial_offsets=initial, has_state=has_state, stray_files=sorted(self.stray),
            problems=self.problems,
            history=[self.offsets[i] for i in sorted(self.offsets)] if read_history else [],
            latest_commit=commit)

    # ---- listings

    def _path(self, rel: str) -> str:
        return posixpath.join(self.root, rel) if rel else self.root

    def _display(self, rel: str) -> str:
        return f"{self.location.rstrip('/')}/{rel}" if rel else self.location

    def _ls(self, rel: str, *, required: bool = False) -> dict[str, dict]:
        """Base name -> fsspec info of one directory; {} if it vanished (unless ``required``)."""
        try:
            listing = self.fs.ls(self._path(rel), detail=True)
        except FileNotFoundError:
            if required:
                raise UserError(f"checkpoint location {self.location} disappeared while being read") from None
            return {}
        except OSError as exc:
            raise UserError(f"cannot list {self._display(rel)}: {_os_reason(exc)}") from None
        out: dict[str, dict] = {}
        for info in listing:
            name = posixpath.basename(str(info.get("name", "")).rstrip("/"))
            if name:
                out[name] = info
        return out

    def _type(self, rel: str, info: dict) -> str:
        """``file``, ``directory`` or ``other``; symlinks are followed, FIFOs and sockets are
        ``other`` (never opened: reading a FIFO would block forever)."""
        kind = info.get("type")
        if kind in ("directory", "file"):
            return kind
        path = self._path(rel)
        if _is_dir(self.fs, path):
            return "directory"
        try:
            if self.fs.isfile(path):
                return "file"
        except (OSError, ValueError):
            pass
        return "other"

    def _is_dir(self, rel: str, info: dict) -> bool:
        return self._type(rel, info) == "directory"

    def _not_a_file(self, rel: str, info: dict) -> str | None:
        """Why a path Spark reads as a file cannot be read as one, or None if it can."""
        kind = self._type(rel, info)
        if kind == "directory":
            return "is a directory, not a file"
        if kind == "other":
            return "is not a regular file"
        return None

    def _note_strays(self, rel_dir: str, entries: dict[str, dict]) -> None:
        for name in entries:
            if name.endswith(".tmp"):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                self.stray.append(rel)
                self._problem(STRAY_TEMP_FILE, rel,
                              f"{rel} is a leftover temp file from an interrupted write; Spark ignores it: "
                              f"delete it once the query is stopped (backups must skip it)")

    def _note_orphan_checksums(self, offset_ids: list[int], root_entries: dict[str, dict]) -> None:
        """A Hadoop ``.N.crc`` left behind when ``N`` was deleted by hand blocks Spark's next write of
        ``N``: the checksummed local/HDFS file system renames the checksum with the file and fails
        with ``FileAlreadyExistsException`` (seen with Spark 4.0 after deleting ``commits/N`` alone)."""
        latest = offset_ids[-1] if offset_ids else -1
        if ".metadata.crc" in root_entries and "metadata" not in root_entries:
            self._problem(CHECKPOINT_CORRUPT, ".metadata.crc",
                          ".metadata.crc is the checksum of a deleted metadata file: Spark's start fails with "
                          "'Multiple streaming queries are concurrently using metadata'; restore metadata from a "
                          "backup (it holds the query id), or delete .metadata.crc to accept a new query id")
        for log_name, files in (("offsets", self.offset_files), ("commits", self.commit_files)):
            for n in sorted(self.crc_ids.get(log_name, set()) - set(files)):
                will_write = n > latest if log_name == "offsets" else n >= latest
                if not will_write:
                    continue
                rel = f"{log_name}/.{n}.crc"
                self._problem(CHECKPOINT_CORRUPT, rel,
                              f"{rel} is the checksum of a deleted {log_name}/{n}: Spark's next write of batch {n} "
                              f"fails with FileAlreadyExistsException; delete {rel} too (remove batch files "
                              f"together with their .crc)")

    def _log_listing(self, name: str, root_entries: dict[str, dict]) -> dict[int, dict]:
        """Batch id -> info for ``offsets/`` or ``commits/`` (only names Spark treats as batches)."""
        info = root_entries.get(name)
        if info is None:
            return {}
        if not self._is_dir(name, info):
            self._problem(CHECKPOINT_CORRUPT, name,
                          f"{name} is a file where Spark keeps a directory of batch files: "
                          f"restore {name}/ from a backup")
            return {}
        entries = self._ls(name)
        self._note_strays(name, entries)
        self.crc_ids[name] = {int(b[1:-4]) for b in entries if b.startswith(".") and b.endswith(".crc")
                              and b[1:-4].isdigit()}
        out: dict[int, dict] = {}
        for base, entry in entries.items():
            batch_id = batch_id_from_name(base)
            if batch_id is not None:
                out[batch_id] = entry
        return out

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
                    return _parse_metadata(data)
                except CheckpointFormatError as exc:
                    reason = _detail(exc, "metadata")
        if has_batches:
            self._problem(MISSING_QUERY_ID, "metadata",
                          f"metadata (the query id) {reason} while offsets/commits exist: restore "
                          f"metadata from a backup; starting now gives the query a new id and breaks "
                          f"sinks that dedupe by it")
        elif info is not None:
            self._problem(CHECKPOINT_CORRUPT, "metadata",
                          f"metadata {reason} and no batch has run yet: remove metadata and Spark "
                          f"writes a new id")
        return None

    # ---- structure (listings only: cheap, and catches what no single file shows)

    def _check_structure(self, offset_ids: list[int], commit_ids: list[int]) -> None:
        latest = self.latest
        offsets, commits = set(offset_ids), set(commit_ids)
        if latest is None:
            if commit_ids:
                span = _fmt(_runs(commit_ids))
                self._problem(CHECKPOINT_CORRUPT, "commits",
                              f"commits/{span} exist but offsets/ is empty: restore offsets/ from a backup "
                              f"(removing commits/ instead restarts at batch 0 from sources/: a full replay)")
            return

        if latest > 0 and latest - 1 not in offsets:
            below = [i for i in offset_ids if i < latest - 1]
            if below:
                keep = below[-1]
                above = sorted({i for i in offset_ids + commit_ids if i > keep})
                repair = (f"restore offsets/{latest - 1} from a backup, or remove the offsets/ and "
                          f"commits/ files above {keep} ({_fmt(_runs(above))}) so Spark resumes after "
                          f"batch {keep}")
            else:
                repair = f"restore offsets/{latest - 1} from a backup"
            have_commits = f"commits {_fmt(_runs(commit_ids))}" if commit_ids else "no commits"
            self._problem(CHECKPOINT_CORRUPT, f"offsets/{latest - 1}",
                          f"offsets gap at {latest - 1} (have offsets {_fmt(_runs(offset_ids))}; "
                          f"{have_commits}): Spark needs offsets/{latest - 1} to restart batch {latest}: "
                          f"{repair}")

        ahead = [i for i in commit_ids if i > latest]
        if ahead:
            span = _fmt(_runs(ahead))
            self._problem(CHECKPOINT_CORRUPT, f"commits/{ahead[0]}",
                          f"commits/{span} newer than the newest offsets/{latest} (commits ahead of "
                          f"offsets; Spark would fail with CONCURRENT_STREAM_LOG_UPDATE): restore "
                          f"offsets/{span} from a backup, or remove commits/{span} so Spark resumes after "
                          f"batch {latest}")

        oldest = offset_ids[0]
        orphans = [i for i in commit_ids if oldest < i < latest - 1 and i not in offsets]
        if orphans:
            span = _fmt(_runs(orphans))
            self._problem(CHECKPOINT_CORRUPT, f"commits/{orphans[0]}",
                          f"commits/{span} without offsets/{span}: restore offsets/{span} from a backup "
                          f"(Spark does not read them to restart, but lag history and backups do)")
        purged = [i for i in commit_ids if i < oldest]
        if purged:
            self._problem(LOG_GAP, f"commits/{purged[0]}",
                          f"commits/{_fmt(_runs(purged))} are older than the oldest offsets/{oldest} (an "
                          f"interrupted purge); Spark ignores them: nothing to repair, backups may skip them")
        holes = [r for r in _gaps(offset_ids, oldest, latest - 1) if not _covers(commits, r)]
        if holes:
            self._problem(LOG_GAP, f"offsets/{holes[0][0]}",
                          f"offsets/ has no files for batches {_fmt(holes)} inside the retained range "
                          f"{oldest}-{latest}: Spark does not need them to restart, but the lag history "
                          f"has a hole (expected only with asyncProgressTrackingEnabled)")

        done = max((i for i in commit_ids if i <= latest), default=None)
        if (done is None and latest > 0) or (done is not None and done < latest - 1):
            first = 0 if done is None else done + 1
            if first in offsets or (done is None and oldest in offsets):
                first = first if first in offsets else oldest
                drop = [i for i in offset_ids if i > first]
                repair = (f"remove offsets/{_fmt(_runs(drop))} so Spark re-runs batch {first} with its "
                          f"recorded range and re-plans the rest")
            else:
                repair = "restore commits/ from a backup"
            state = "no batch is committed" if done is None else f"commits end at batch {done}"
            self._problem(CHECKPOINT_CORRUPT, f"commits/{first}",
                          f"{state} but offsets/ at {latest}: batches {_fmt([(first, latest - 1)])} were "
                          f"planned without being committed and Spark would re-run only batch {latest}: "
                          f"{repair}")
        if done is not None:
            missing = [r for r in _gaps(commit_ids, commit_ids[0], done) if _covers(offsets, r)]
            if missing:
                self._problem(LOG_GAP, f"commits/{missing[0][0]}",
                              f"commits/ has no files for batches {_fmt(missing)} below the newest commit "
                              f"{done}: Spark does not read them to restart, but audits and backups see a "
                              f"hole")

    def _check_empty_history(self) -> None:
        """Zero-byte batch files outside what is read anyway are damage too (S09); sizes come free."""
        latest, committed = self.latest, self.committed
        read_anyway = {latest, committed, latest - 1 if latest else None}
        for kind, files, skip in (("offsets", self.offset_files, read_anyway), ("commits", self.commit_files,
                                                                               {committed})):
            for batch_id in sorted(files):
                info = files[batch_id]
                if batch_id not in skip and info.get("type") == "file" and info.get("size") == 0:
                    if kind == "offsets":
                        self.bad_offsets.add(batch_id)
                    self._damaged(kind, batch_id, "is empty (a truncated write)")

    # ---- batch files

    def _read_file(self, rel: str) -> bytes | None:
        """Bytes of one file; None if it vanished. IsADirectoryError is left to the caller."""
        try:
            return self.fs.cat_file(self._path(rel))
        except (FileNotFoundError, IsADirectoryError):
            if self.fs.isdir(self._path(rel)):
                raise IsADirectoryError(rel) from None
            return None
        except OSError as exc:
            raise UserError(f"cannot read {self._display(rel)}: {_os_reason(exc)}") from None

    def _batch_bytes(self, kind: str, batch_id: int, info: dict) -> bytes | None:
        """The bytes of a batch file Spark must read; problems for directories and absurd sizes."""
        rel = f"{kind}/{batch_id}"
        size = info.get("size")
        why = self._not_a_file(rel, info)
        if why:
            self._damaged(kind, batch_id, why)
            return None
        if isinstance(size, int) and size > _MAX_LOG_FILE_BYTES:
            self._damaged(kind, batch_id, _too_large(size))
            return None
        try:
            data = self._read_file(rel)
        except IsADirectoryError:
            self._damaged(kind, batch_id, "is a directory, not a batch file")
            return None
        if data is None:
            raise UserError(f"{self._display(rel)} disappeared while being read: is a query or a cleanup "
                            f"running on this checkpoint? Read it again once it is stopped")
        return data

    def _offsets(self, batch_id: int | None) -> BatchOffsets | None:
        if batch_id is None or batch_id not in self.offset_files or batch_id in self.bad_offsets:
            return None
        if batch_id not in self.offsets:
            data = self._batch_bytes("offsets", batch_id, self.offset_files[batch_id])
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
            self._damaged("offsets", batch_id, _detail(exc, rel))

    def _commit(self, batch_id: int | None) -> BatchCommit | None:
        if batch_id is None:
            return None
        rel = f"commits/{batch_id}"
        data = self._batch_bytes("commits", batch_id, self.commit_files[batch_id])
        if data is None:
            return None
        try:
            return parse_commit_file(batch_id, data)
        except UnsupportedLogVersionError as exc:
            self._unsupported(rel, exc)
        except CheckpointFormatError as exc:
            self._damaged("commits", batch_id, _detail(exc, rel))
        return None

    def _read_history(self) -> None:
        todo: list[int] = []
        for batch_id in sorted(self.offset_files):
            if batch_id in self.offsets or batch_id in self.bad_offsets:
                continue
            info = self.offset_files[batch_id]
            size = info.get("size")
            why = self._not_a_file(f"offsets/{batch_id}", info)
            if why:
                self.bad_offsets.add(batch_id)
                self._damaged("offsets", batch_id, why)
            elif isinstance(size, int) and size > _MAX_LOG_FILE_BYTES:
                self.bad_offsets.add(batch_id)
                self._damaged("offsets", batch_id, _too_large(size))
            else:
                todo.append(batch_id)
        for batch_id, data in zip(todo, self._cat_many([f"offsets/{i}" for i in todo]), strict=True):
            if data is not None:
                self._parse_offsets(batch_id, data)

    def _cat_many(self, rels: list[str]) -> list[bytes | None]:
        """Read many small files: concurrently on async filesystems (object stores), else in a loop.

        A file purged by a running query between listing and reading comes back as None: history
        is best effort, unlike offsets/L which must be there.
        """
        paths = [self._path(r) for r in rels]
        if len(paths) > 1 and getattr(self.fs, "async_impl", False) and \
                not any(_GLOB_CHARS & set(p) for p in paths):
            results = self.fs.cat(paths, on_error="return")
            out: list[bytes | None] = []
            for rel, path in zip(rels, paths, strict=True):
                value = results.get(path, results.get(self.fs._strip_protocol(path)))
                if isinstance(value, BaseException) and not isinstance(value, FileNotFoundError):
                    raise UserError(f"cannot read {self._display(rel)}: {_os_reason(value)}")
                out.append(value if isinstance(value, bytes) else None)
            return out
        out = []
        for rel in rels:
            try:
                out.append(self._read_file(rel))
            except IsADirectoryError:
                out.append(None)
        return out

    # ---- cross-file checks

    def _check_source_consistency(self) -> None:
        """Spark matches v1 source lines by position: a changed count or kind breaks the restart."""
        latest = self.latest
        if latest is None or latest not in self.offsets:
            return
        newest = self.offsets[latest]
        for other_id in sorted({i for i in (latest - 1, self.committed) if i is not None and i < latest}):
            other = self.offsets.get(other_id)
            if other is None or newest.version != 1 or other.version != 1:
                continue  # v2 names its sources, and sources may legally come and go there
            if other.source_count != newest.source_count:
                detail = (f"offsets/{latest} has {newest.source_count} source(s) but offsets/{other_id} has "
                          f"{other.source_count}")
            else:
                changed = [sid for sid in newest.raw_sources
                           if "void" not in (_source_kind(newest, sid), _source_kind(other, sid))
                           and _source_kind(newest, sid) != _source_kind(other, sid)]
                if not changed:
                    continue
                sid = changed[0]
                detail = (f"source {sid} is {_source_kind(newest, sid)} in offsets/{latest} but "
                          f"{_source_kind(other, sid)} in offsets/{other_id}")
            if latest not in self.commit_files:
                repair = (f"drop the uncommitted last file offsets/{latest} only (it has no "
                          f"commits/{latest}); Spark will re-plan batch {latest} with the current query")
            else:
                repair = "restore the checkpoint from a backup, or reset it"
            self._problem(CHECKPOINT_CORRUPT, f"offsets/{latest}",
                          f"{detail}: the query's sources changed mid-checkpoint: {repair}")
            return

    # ---- sources and state

    def _initial_offsets(self, root_entries: dict[str, dict]) -> dict[str, PartitionOffsets]:
        """Kafka's resolved starting offsets per source; other sources' logs there are skipped."""
        info = root_entries.get("sources")
        if info is None or not self._is_dir("sources", info):
            return {}
        kafka_ids = {sid for batch in self.offsets.values() for sid, offs in batch.sources.items()
                     if offs is not None}
        out: dict[str, PartitionOffsets] = {}
        for source_id, entry in sorted(self._ls("sources").items()):
            rel_dir = f"sources/{source_id}"
            if source_id.startswith(".") or self._type(rel_dir, entry) != "directory":
                continue
            files = self._ls(rel_dir)
            self._note_strays(rel_dir, files)
            if "0" not in files:
                continue
            rel = f"{rel_dir}/0"
            why = self._not_a_file(rel, files["0"])
            size = files["0"].get("size")
            if why is None and isinstance(size, int) and size > _MAX_LOG_FILE_BYTES:
                self._bad_initial_offsets(rel_dir, f"is {size:,} bytes, larger than any offsets file Spark "
                                                   f"writes (limit {_MAX_LOG_FILE_BYTES:,})")
                continue
            try:
                data = b"" if why else self._read_file(rel)
            except IsADirectoryError:
                data, why = b"", "is a directory, not a file"
            if data is None:
                continue
            try:
                offsets = parse_initial_offsets_file(data, what=rel)
                if offsets is None and not data:
                    raise CheckpointFormatError(f"{rel} {why or 'is empty'}")
                if offsets is None and source_id in kafka_ids:
                    raise CheckpointFormatError(f"{rel} does not start with the 0x00 byte Kafka writes")
            except UnsupportedLogVersionError as exc:
                self._unsupported(rel, exc)
                continue
            except CheckpointFormatError as exc:
                self._bad_initial_offsets(rel_dir, _detail(exc, rel))
                continue
            if offsets is not None:
                out[source_id] = offsets
        return out

    def _bad_initial_offsets(self, rel_dir: str, detail: str) -> None:
        rel = f"{rel_dir}/0"
        if self.committed is None:
            self._problem(CHECKPOINT_CORRUPT, rel,
                          f"{rel} (the Kafka starting offsets) {detail}, and Spark reads it until the "
                          f"first commit: remove {rel_dir}/ and set startingOffsets explicitly, or restore "
                          f"it from a backup")
        else:
            self._problem(INITIAL_OFFSETS_UNREADABLE, rel,
                          f"{rel} (the Kafka starting offsets) {detail}; Spark reads it again only if "
                          f"offsets/ is wiped: restore it from a backup before any such reset")

    def _has_state(self, root_entries: dict[str, dict]) -> bool:
        """True at the first file found under state/ (state can be huge: never walk all of it)."""
        info = root_entries.get("state")
        if info is None:
            return False
        if not self._is_dir("state", info):
            return True
        pending = ["state"]
        while pending:
            rel = pending.pop()
            for name, entry in self._ls(rel).items():
                child = f"{rel}/{name}"
                if self._type(child, entry) != "directory":
                    return True
                pending.append(child)
        return False

    # ---- problems

    def _problem(self, code: str, path: str, message: str) -> None:
        if all((p.code, p.path) != (code, path) for p in self.problems):
            self.problems.append(CheckpointProblem(code=code, path=path, message=" ".join(message.split())))

    def _unsupported(self, rel: str, exc: CheckpointFormatError) -> None:
        self._problem(UNSUPPORTED_LOG_VERSION, rel,
                      f"{exc}: it was written by a newer Spark, which older Spark cannot read either; "
                      f"do not edit it by hand: keep that Spark version and use a release of this tool "
                      f"that knows the format")

    def _damaged(self, kind: str, batch_id: int, detail: str) -> None:
        """Report a damaged batch file with the repair that fits where it sits in the log (S09)."""
        latest, committed = self.latest, self.committed
        rel = f"{kind}/{batch_id}"
        if kind == "offsets":
            if batch_id == latest and batch_id not in self.commit_files:
                start = f"the end of batch {batch_id - 1}" if batch_id > 0 else "sources/ or startingOffsets"
                repair = (f"drop the uncommitted last file offsets/{batch_id} only (it has no "
                          f"commits/{batch_id}); Spark will re-plan batch {batch_id} from {start}")
            elif batch_id == latest:
                repair = (f"batch {batch_id} is committed, so it must not be re-planned: restore "
                          f"offsets/{batch_id} from a backup")
            elif latest is not None and batch_id == latest - 1:
                repair = f"Spark reads offsets/{batch_id} to restart batch {latest}: restore it from a backup"
            else:
                repair = (f"restore offsets/{batch_id} from a backup (Spark does not read it to restart; "
                          f"history and backups do)")
        elif batch_id == committed and batch_id == latest:
            repair = (f"remove commits/{batch_id} only; Spark will re-run batch {batch_id} with the same "
                      f"offsets (a replay for the sink)")
        elif batch_id == committed and latest is not None and batch_id == latest - 1:
            repair = (f"remove commits/{batch_id} and the uncommitted offsets/{latest}; Spark will re-run "
                      f"batch {batch_id} with the same offsets and re-plan batch {latest}")
        elif batch_id == committed:
            repair = f"restore commits/{batch_id} from a backup"
        else:
            repair = (f"committed history: restore commits/{batch_id} from a backup (Spark does not read "
                      f"it to restart)")
        joiner = "" if detail.startswith(":") else " "  # "offsets/5: conf must ..." vs "offsets/5 is empty"
        self._problem(CHECKPOINT_CORRUPT, rel, f"{rel}{joiner}{detail}: {repair}")


# --------------------------------------------------------------------------- helpers


def _open_fs(location: Any, storage_options: dict | None) -> tuple[Any, str]:
    if not isinstance(location, str) or not location.strip():
        raise UserError(f"checkpoint location must be a non-empty path or URL, got {location!r}")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise UserError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    refuse_chained_url(location, "checkpoint location")
    from fsspec.core import url_to_fs  # imported here so importing this module stays cheap

    try:
        fs, root = url_to_fs(location, **(storage_options or {}))
    except (ImportError, ValueError, TypeError) as exc:
        raise UserError(f"cannot open checkpoint location {location}: {_one_line(exc)}") from None
    root = root.rstrip("/") or root
    return fs, root


def _is_dir(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isdir(path))
    except OSError:
        return False


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return _one_line(exc)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:200] + "…") if len(text) > 200 else text or type(exc).__name__


def _show(text: str, limit: int = 40) -> str:
    """A short, single-line, escaped rendering of file content for messages."""
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def _detail(exc: CheckpointFormatError, rel: str, *, keep_name: bool = False) -> str:
    """The parser's message without the leading file name (callers put the name first themselves)."""
    text = str(exc)
    if keep_name:
        return text
    return text[len(rel):].strip() if text.startswith(rel) else text


def _decode(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointFormatError(f"{what} is not UTF-8 text (bad byte at position {exc.start})") from None


def _java_trim(text: str) -> str:
    return text.strip(_JAVA_WHITESPACE)


def _too_large(size: int) -> str:
    return f"is {size} bytes, far larger than any log file Spark writes"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _json(text: str, what: str) -> Any:
    try:
        return load_json(text, what="it", max_bytes=_MAX_LOG_FILE_BYTES, parse_constant=_reject_constant)
    except UntrustedJSONError as exc:
        reason = "nested too deeply" if "nested too deeply" in str(exc) else _one_line(exc)
        if reason.startswith("it is not JSON ("):
            reason = reason[len("it is not JSON ("):].removesuffix(")")
        raise CheckpointFormatError(f"{what} is not valid JSON ({reason}): {_show(text)}") from None


def _long_field(doc: dict, key: str, what: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not _MIN_LONG <= value <= _MAX_LONG:
        raise CheckpointFormatError(f"{what}: {key} must be a 64-bit integer, got {repr(value)[:40]}")
    return value


def _parse_offset_metadata(text: str, what: str) -> tuple[int | None, int | None, dict[str, str]]:
    doc = _json(text, f"{what} metadata line")
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"{what} metadata line must be a JSON object, got {type(doc).__name__}")
    watermark = _long_field(doc, "batchWatermarkMs", what)
    timestamp = _long_field(doc, "batchTimestampMs", what)
    raw_conf = doc.get("conf") or {}
    if not isinstance(raw_conf, dict):
        raise CheckpointFormatError(f"{what}: conf must be a JSON object, got {type(raw_conf).__name__}")
    conf: dict[str, str] = {}
    for key, value in raw_conf.items():
        if isinstance(value, dict | list):
            raise CheckpointFormatError(f"{what}: conf {key!r} must be a string")
        conf[key] = value if isinstance(value, str) else json.dumps(value)
    return watermark, timestamp, conf


def _parse_source_offset(text: str, what: str) -> PartitionOffsets | None:
    """Kafka offsets for a Kafka-shaped line, None for another source's offset (kept raw)."""
    doc = _json(text, what)
    if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):
        return _kafka_offsets(text, what)
    return None


def _kafka_offsets(text: str, what: str) -> PartitionOffsets:
    try:
        offsets = parse_offsets_json(text, what=what)
    except CheckpointFormatError:
        raise
    except UserError as exc:
        raise CheckpointFormatError(str(exc)) from None
    for tp, offset in offsets.items():
        if tp.partition > _MAX_INT or offset > _MAX_LONG:
            raise CheckpointFormatError(f"{what}: {tp} -> {offset} is out of range for Kafka")
    return offsets


def _parse_metadata(data: bytes) -> str:
    doc = _json(_decode(data, "metadata").strip(), "metadata")
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"metadata must be a JSON object like {{\"id\":\"<uuid>\"}}, got "
                                    f"{type(doc).__name__}")
    query_id = doc.get("id")
    if not isinstance(query_id, str) or not query_id.strip():
        raise CheckpointFormatError("metadata has no \"id\" string")
    return query_id


def _source_kind(batch: BatchOffsets, source_id: str) -> str:
    raw = batch.raw_sources.get(source_id)
    if raw is None:
        return "void"
    return "Kafka" if batch.sources.get(source_id) is not None else "not Kafka"


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted ids as inclusive runs: [0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _gaps(present: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Inclusive runs of ids in ``[lo, hi)`` missing from sorted ``present``; O(len(present)), so
    absurd ids (a file named 9223372036854775807) cannot make it enumerate a huge range."""
    gaps: list[tuple[int, int]] = []
    expected = lo
    for i in present:
        if i >= hi:
            break
        if i > expected:
            gaps.append((expected, i - 1))
        expected = max(expected, i + 1)
    if expected < hi:
        gaps.append((expected, hi - 1))
    return gaps


def _covers(ids: set[int], run: tuple[int, int]) -> bool:
    """Whether any id of the run is in ``ids`` (runs can be huge: check whichever side is smaller)."""
    lo, hi = run
    if hi - lo < len(ids):
        return any(i in ids for i in range(lo, hi + 1))
    return any(lo <= i <= hi for i in ids)


def _fmt(runs: list[tuple[int, int]]) -> str:
    """Runs for messages: ``3``, ``3-5``, ``0-4,7,9-12`` (long lists are elided in the middle)."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(parts) > 6:
        parts = [*parts[:3], "…", *parts[-2:]]
    return ",".join(parts)
