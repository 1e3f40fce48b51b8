"""Spark's checkpoint file formats, parsed exactly as Spark's readers accept them (pure: bytes in, values out).

``offsets/N`` (``OffsetSeqLog``), ``commits/N`` (``CommitLog``), ``metadata`` (``StreamMetadata``) and
``sources/<n>/0`` (``KafkaSourceInitialOffsetWriter``): what Spark would refuse raises a
:class:`~airflow_kafka_spark.errors.CheckpointFormatError` with a one-line reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from operator import itemgetter
from typing import Any, NamedTuple

from airflow_kafka_spark._util.jsonfile import UntrustedJSONError, load_json
from airflow_kafka_spark._util.text import one_line
from airflow_kafka_spark.checkpoint.model import BatchCommit, BatchOffsets
from airflow_kafka_spark.errors import CheckpointFormatError, UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, offsets_from_doc, parse_offsets_json

# Highest log versions this reader understands. Offsets v2 is master's "OffsetMap" (named sources);
# commits v2 is checkpoint format v2 (state store unique ids). Kafka's sources/<n>/0 only has v1.
OFFSETS_MAX_VERSION = 2
COMMITS_MAX_VERSION = 2
SOURCES_MAX_VERSION = 1
#: The newest Spark whose checkpoint formats were produced by that Spark and read here
#: (tests/integration/test_spark42_formats.py, test_spark_corpus.py); a newer version line is refused.
NEWEST_SPARK_KNOWN = "4.2.0"

_MAX_LONG = 2**63 - 1
_MIN_LONG = -(2**63)
_MAX_INT = 2**31 - 1
# Spark's log files are small (a Kafka offset line is ~20 bytes per partition); anything far larger
# is not a log file, and reading it whole would only waste memory.
MAX_LOG_FILE_BYTES = 64 * 1024 * 1024
# ``metadata`` holds ``{"id":"<uuid>"}`` (~45 bytes; Spark has written nothing else there since 2.0):
# 1 MiB is over 20,000 times that, room for any future field, yet never a memory problem to read.
METADATA_MAX_BYTES = 1024 * 1024
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_VERSION_LINE = re.compile(r"v\+?([0-9]+)")
_JAVA_WHITESPACE = "".join(chr(c) for c in range(33))  # what Java's String.trim() strips


class UnsupportedLogVersionError(CheckpointFormatError):
    """A log file carries a ``v<N>`` newer than this reader understands."""


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


class LogNames(NamedTuple):
    """The names of one log folder (``offsets/``, ``commits/``) sorted by what Spark makes of them."""

    batches: dict[int, str]  # batch id -> file name, by :func:`batch_id_from_name`'s rule
    checksums: set[int]  # ids of Hadoop ``.N.crc`` side files
    temps: list[str]  # ``*.tmp`` leftovers of interrupted writes


def split_log_names(names: Collection[str]) -> LogNames:
    """Sort a log folder's names in C-level scans of them joined by newlines: a 10,000-batch log has
    20,000 names, and a Python loop over them cost more than listing them.

    A name holding a line break (never Spark's) would split into false lines, so then each name is
    judged alone, by the same rules.
    """
    joined = "\n".join(names)
    if joined.count("\n") != max(len(names) - 1, 0) or "\r" in joined:
        return _split_each(names)
    found = _BATCH_NAME.findall(joined)
    ids = list(map(int, found))
    if ids and max(ids) > _MAX_LONG:
        return _split_each(names)
    temps = _TEMP_NAME.findall(joined) if ".tmp" in joined else []
    return LogNames(dict(zip(ids, found, strict=True)), set(map(int, _CHECKSUM_NAME.findall(joined))), temps)


def _split_each(names: Collection[str]) -> LogNames:
    batches: dict[int, str] = {}
    checksums: set[int] = set()
    for name in names:
        batch_id = batch_id_from_name(name)
        if batch_id is not None:
            batches[batch_id] = name
        elif name[:1] == "." and name[-4:] == ".crc" and name[1:-4].isascii() and name[1:-4].isdigit():
            checksums.add(int(name[1:-4]))
    return LogNames(batches, checksums, [n for n in names if n.endswith(".tmp")])


_BATCH_NAME = re.compile(r"^(?:0|[1-9][0-9]*)$", re.MULTILINE)
_CHECKSUM_NAME = re.compile(r"^\.([0-9]+)\.crc$", re.MULTILINE)
_TEMP_NAME = re.compile(r"^.*\.tmp$", re.MULTILINE)


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


def parse_initial_offsets_file(data: bytes, *, what: str = "sources/0/0",
                               kafka: bool = False) -> PartitionOffsets | None:
    """Parse Kafka's ``sources/<n>/0`` as Spark reads it; None if the file belongs to another kind of source.

    Spark's ``KafkaSourceInitialOffsetWriter.deserialize`` skips the first byte *whatever it is*
    (Kafka writes 0x00 there since SPARK-19517; Spark 2.1.0 wrote the JSON's length, e.g. ``2``
    before a 50-byte JSON), then reads ``v<N>\n`` and the offsets, or, without a ``v``, the JSON
    itself (2.1.0). Other sources (rate, files) keep a plain ``v1`` log there, without that byte.
    ``kafka`` says the offsets log already names this source as Kafka's: then the file is read
    by Spark's rule alone. Otherwise a first byte other than 0x00 makes it Kafka's only when the
    rest reads as Kafka offsets (a newer version line before Kafka offsets is still refused as
    :class:`UnsupportedLogVersionError`, as Spark's ``validateVersion`` refuses ``v99999``).
    """
    if not data:
        return None
    if kafka or data[:1] == b"\x00":
        return _initial_offsets(data, what)
    try:
        return _initial_offsets(data, what)
    except UnsupportedLogVersionError:
        text = data[1:].decode("utf-8", "replace")
        try:
            _kafka_offsets(text[text.find("\n") + 1:], what)
        except CheckpointFormatError:
            return None
        raise
    except CheckpointFormatError:
        return None


def _initial_offsets(data: bytes, what: str) -> PartitionOffsets:
    text = _decode(data[1:], what)
    if not text:
        raise CheckpointFormatError(f"{what} holds only its leading byte (truncated)")
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
            f"{what} uses log format v{version}; this tool reads up to v{max_version}, the newest that Spark "
            f"{NEWEST_SPARK_KNOWN} writes")
    return version


def _show(text: str, limit: int = 40) -> str:
    """A short, single-line, escaped rendering of file content for messages."""
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def error_detail(exc: CheckpointFormatError, rel: str, *, keep_name: bool = False) -> str:
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


def too_large(size: int) -> str:
    return f"is {size} bytes, far larger than any log file Spark writes"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _json(text: str, what: str) -> Any:
    try:
        return load_json(text, what="it", max_bytes=MAX_LOG_FILE_BYTES, parse_constant=_reject_constant)
    except UntrustedJSONError as exc:
        reason = "nested too deeply" if "nested too deeply" in str(exc) else one_line(exc)
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
    """Kafka offsets for a Kafka-shaped line, None for another source's offset (kept raw).

    The line is parsed once: a 5,000-partition offsets file is ~100 KB, and the history of an
    observation holds 21 of them.
    """
    doc = _json(text, what)
    if isinstance(doc, dict) and all(isinstance(v, dict) for v in doc.values()):
        return _kafka_offsets_of(doc, what)
    return None


def _kafka_offsets(text: str, what: str) -> PartitionOffsets:
    try:
        offsets = parse_offsets_json(text, what=what)
    except CheckpointFormatError:
        raise
    except UserError as exc:
        raise CheckpointFormatError(str(exc)) from None
    return _in_range(offsets, what)


def _kafka_offsets_of(doc: Any, what: str) -> PartitionOffsets:
    try:
        offsets = offsets_from_doc(doc, what=what)
    except UserError as exc:
        raise CheckpointFormatError(str(exc)) from None
    return _in_range(offsets, what)


def _in_range(offsets: PartitionOffsets, what: str) -> PartitionOffsets:
    if not offsets or (max(offsets.values()) <= _MAX_LONG and max(map(itemgetter(1), offsets)) <= _MAX_INT):
        return offsets   # the common case in two C-level passes; the loop below names the culprit
    for tp, offset in offsets.items():
        if tp.partition > _MAX_INT or offset > _MAX_LONG:
            raise CheckpointFormatError(f"{what}: {tp} -> {offset} is out of range for Kafka")
    return offsets


def parse_metadata(data: bytes) -> str:
    doc = _json(_decode(data, "metadata").strip(), "metadata")
    if not isinstance(doc, dict):
        raise CheckpointFormatError(f"metadata must be a JSON object like {{\"id\":\"<uuid>\"}}, got "
                                    f"{type(doc).__name__}")
    query_id = doc.get("id")
    if not isinstance(query_id, str) or not query_id.strip():
        raise CheckpointFormatError("metadata has no \"id\" string")
    return query_id
