"""Read a file sink's own batch log, ``<output>/_spark_metadata`` (Spark's ``FileStreamSinkLog``).

Why a second log matters: Spark's file sink (parquet, json, csv, ...) records every batch it
committed in the output directory itself, and ``FileStreamSink.addBatch`` silently *skips* any
batch id not greater than the newest one recorded there ("Skipping already committed batch").
So a fresh checkpoint, which restarts at batch 0, writes nothing until it passes the old batch
ids (scenario S20). ``SinkLog.latest_batch_id`` is what a reset must compare with.

The same log is also the only correct list of a file sink's output: files of failed or replayed
attempts can lie next to committed ones, so readers (the test oracle included) must read
``SinkLog.files()``, never a directory listing.

Format (``CompactibleFileStreamLog`` / ``FileStreamSinkLog``, verified against Spark 4.0 output):

* one file per batch, ``_spark_metadata/<N>``; every ``compactInterval`` batches
  (``spark.sql.streaming.fileSink.log.compactInterval``, default 10) the file is
  ``<N>.compact`` and holds every live entry up to N, so older files may be deleted;
* line 1 ``v1``, then one JSON ``SinkFileStatus`` per line: ``path`` (a URI string, percent-encoded,
  e.g. ``file:///out/part-00000-<uuid>-c000.snappy.parquet``), ``size``, ``isDir``,
  ``modificationTime``, ``blockReplication``, ``blockSize``, ``action``; no trailing newline;
* ``action`` is ``"add"``; Spark before 3.1 could also write ``"delete"``, which removes that path.

Nothing is written: files are opened read-only.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.checkpoint.formats import batch_id_from_name, log_lines, parse_log_version
from airflow_kafka_spark.errors import CheckpointFormatError, UserError

SINK_LOG_DIR = "_spark_metadata"
COMPACT_SUFFIX = ".compact"
SINK_LOG_MAX_VERSION = 1
ADD, DELETE = "add", "delete"


@dataclass(frozen=True)
class SinkFileEntry:
    """One ``SinkFileStatus`` line."""

    path: str                 # as Spark wrote it: a percent-encoded URI string
    size: int
    is_dir: bool
    modification_time: int
    block_replication: int
    block_size: int
    action: str               # "add" (or "delete" in logs of Spark < 3.1)

    @property
    def fs_path(self) -> str:
        """The path for fsspec/pyarrow: percent-decoded, and a plain local path for ``file:`` URIs."""
        parts = urlsplit(self.path)
        if parts.scheme == "file":
            return unquote(parts.path)
        return unquote(self.path)


@dataclass(frozen=True)
class SinkLog:
    """What ``_spark_metadata`` says; entries are read on demand by :meth:`entries` / :meth:`files`."""

    output: str
    exists: bool                     # the output has a ``_spark_metadata`` directory
    batch_ids: list[int]             # every retained batch file, compact ones included, sorted
    compact_batch_ids: list[int]     # the ``<N>.compact`` ones
    stray_files: list[str] = field(default_factory=list)  # leftover ``.tmp`` files (ignored by Spark)
    _fs: Any = field(default=None, repr=False, compare=False)
    _log_dir: str = field(default="", repr=False, compare=False)
    _names: dict[int, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def latest_batch_id(self) -> int | None:
        """The newest committed sink batch: a query writing here skips every batch id <= this (S20)."""
        return self.batch_ids[-1] if self.batch_ids else None

    def entries(self) -> list[SinkFileEntry]:
        """The live ``SinkFileStatus`` entries up to the latest batch, as ``allFiles`` computes them.

        Reads the newest ``.compact`` file at or below the latest batch plus every batch after it
        (or every batch from 0 when nothing was compacted yet). A missing or damaged file raises
        :class:`CheckpointFormatError`: a partial list would silently drop committed output.
        """
        latest = self.latest_batch_id
        if latest is None:
            return []
        base = max((i for i in self.compact_batch_ids if i <= latest), default=None)
        needed = range(0 if base is None else base, latest + 1)
        missing = _first_missing(self.batch_ids, needed)
        if missing is not None:
            after = "no compaction" if base is None else f"last compaction {base}"
            raise CheckpointFormatError(
                f"{self._display(str(missing))} is missing (latest batch {latest}, {after}): the file sink "
                f"log is incomplete and its committed files cannot be listed; restore it from a backup")
        live: dict[str, SinkFileEntry] = {}
        for batch_id in needed:
            for entry in self._read_batch(batch_id):
                if entry.action == DELETE:
                    live.pop(entry.path, None)
                else:
                    live[entry.path] = entry
        return list(live.values())

    def files(self) -> list[str]:
        """Committed live data files (``fs_path`` form), in log order; directories are left out."""
        return [e.fs_path for e in self.entries() if not e.is_dir]

    # ---- internals

    def _display(self, name: str) -> str:
        base = self.output.rstrip("/")
        return f"{base}/{name}" if posixpath.basename(base) == SINK_LOG_DIR else f"{base}/{SINK_LOG_DIR}/{name}"

    def _read_batch(self, batch_id: int) -> list[SinkFileEntry]:
        name = self._names[batch_id]
        what = self._display(name)
        try:
            data = self._fs.cat_file(posixpath.join(self._log_dir, name))
        except FileNotFoundError:
            raise CheckpointFormatError(f"{what} disappeared while being read: is a query compacting this "
                                        f"sink log? Read it again") from None
        except OSError as exc:
            raise UserError(f"cannot read {what}: {exc.strerror or exc}") from None
        return parse_sink_log_file(data, what=what)


def parse_sink_log_file(data: bytes, *, what: str = f"{SINK_LOG_DIR}/0") -> list[SinkFileEntry]:
    """Parse one ``_spark_metadata`` file (plain or compact) the way ``CompactibleFileStreamLog`` does."""
    lines = log_lines(data, what)
    if not lines:
        raise CheckpointFormatError(f"{what} is empty (Spark: Incomplete log file)")
    parse_log_version(lines[0], SINK_LOG_MAX_VERSION, what)
    return [_entry(line, f"{what} line {number}") for number, line in enumerate(lines[1:], start=2)]


def read_sink_log(output: str, storage_options: dict | None = None) -> SinkLog:
    """List ``<output>/_spark_metadata`` (names only; entries are read by ``files()``).

    ``output`` is the file sink's ``path`` (or its ``_spark_metadata`` folder itself). A missing
    output or log gives ``exists=False``; an output that is a file, or that cannot be listed,
    raises :class:`UserError`.
    """
    fs, root = _open_fs(output, storage_options)
    log_dir = root if posixpath.basename(root) == SINK_LOG_DIR else posixpath.join(root, SINK_LOG_DIR)
    missing = SinkLog(output=output, exists=False, batch_ids=[], compact_batch_ids=[])
    for path, what in ((root, f"file sink output {output}"), (log_dir, f"{output}/{SINK_LOG_DIR}")):
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return missing
        except OSError as exc:
            raise UserError(f"cannot access {what}: {exc.strerror or exc}") from None
        if info.get("type") != "directory" and not fs.isdir(path):
            raise UserError(f"{what} is a file, not a directory: pass the file sink's output directory")
    try:
        listing = fs.ls(log_dir, detail=True)
    except OSError as exc:
        raise UserError(f"cannot list {output}/{SINK_LOG_DIR}: {exc.strerror or exc}") from None
    names: dict[int, str] = {}
    compact: list[int] = []
    stray: list[str] = []
    for entry in listing:
        name = posixpath.basename(str(entry.get("name", "")).rstrip("/"))
        if name.endswith(".tmp"):
            stray.append(f"{SINK_LOG_DIR}/{name}")
            continue
        is_compact = name.endswith(COMPACT_SUFFIX)
        batch_id = batch_id_from_name(name[: -len(COMPACT_SUFFIX)] if is_compact else name)
        if batch_id is None:
            continue
        if is_compact:
            compact.append(batch_id)
        if is_compact or batch_id not in names:  # a compact file wins over a same-numbered plain one
            names[batch_id] = name
    return SinkLog(output=output, exists=True, batch_ids=sorted(names), compact_batch_ids=sorted(compact),
                   stray_files=sorted(stray), _fs=fs, _log_dir=log_dir, _names=names)


# --------------------------------------------------------------------------- helpers


def _open_fs(location: Any, storage_options: dict | None) -> tuple[Any, str]:
    loc = open_location(location, storage_options, what="file sink output")
    return loc.fs, loc.path


def _entry(line: str, what: str) -> SinkFileEntry:
    try:
        doc = load_json(line, what=what)
    except ValueError:
        raise CheckpointFormatError(f"{what} is not a JSON SinkFileStatus: {line[:60]!r}") from None
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"{what} must be a JSON object, got {type(doc).__name__}")
    path, action = doc.get("path"), doc.get("action")
    if not isinstance(path, str) or not path:
        raise CheckpointFormatError(f"{what} has no \"path\"")
    if action not in (ADD, DELETE):
        raise CheckpointFormatError(f"{what} has action {action!r}; expected \"add\" or \"delete\"")
    is_dir = doc.get("isDir", False)
    if not isinstance(is_dir, bool):
        raise CheckpointFormatError(f"{what}: isDir must be true or false")
    return SinkFileEntry(path=path, size=_int(doc, "size", what), is_dir=is_dir,
                         modification_time=_int(doc, "modificationTime", what),
                         block_replication=_int(doc, "blockReplication", what),
                         block_size=_int(doc, "blockSize", what), action=action)


def _first_missing(present: list[int], needed: range) -> int | None:
    """First id of ``needed`` not in sorted ``present``, walking ``present`` (``needed`` may be huge)."""
    expected = needed.start
    for i in present:
        if i < expected:
            continue
        if i > expected:
            break
        expected += 1
    return expected if expected < needed.stop else None


def _int(doc: dict, key: str, what: str) -> int:
    value = doc.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CheckpointFormatError(f"{what}: {key} must be an integer, got {value!r}")
    return value

