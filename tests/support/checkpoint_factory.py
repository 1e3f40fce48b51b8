"""Write Structured Streaming checkpoints byte for byte as Spark 4.0 does, for tests.

Unit tests need many checkpoints (healthy ones, and each kind of damage) without starting Spark.
Every byte here was checked against checkpoints written by pyspark 4.0.0 with the real Kafka
connector: no trailing newlines, the ``v1`` line, the metadata line with the 11 pinned confs in
Spark's order, positional source lines (``-`` for none), ``{"nextBatchWatermarkMs":0}`` commits,
Kafka's ``sources/<n>/0`` with its leading 0x00 byte, and Hadoop's ``.<name>.crc`` side files.

Offsets are deterministic: a Kafka partition ends batch ``b`` at
``start_offset + (b + 1) * records_per_batch`` and started at ``start_offset``; batch ``b`` was
planned at ``start_timestamp_ms + b * trigger_interval_ms``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition, to_offsets_json

QUERY_ID = "6f1c9b0e-2f4a-4d7e-9a53-0c8f1e2d3b4a"
START_TIMESTAMP_MS = 1_700_000_000_000

# The confs Spark 4.0 pins in every offsets file, in the order it writes them (a HashMap's order).
SPARK_40_CONF: dict[str, str] = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.shuffle.partitions": "200",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}

RATE = "rate"
"""A source spec meaning Spark's ``rate`` source (a non-Kafka source: its offset is a plain number)."""

SourceSpec = dict[str, int] | str  # Kafka: topic -> partition count; or RATE


# --------------------------------------------------------------------------- file contents


def offsets_file(source_lines: Sequence[str | None], *, version: int = 1,
                 batch_timestamp_ms: int | None = None, batch_watermark_ms: int = 0,
                 conf: dict[str, str] | None = None,
                 source_ids: Sequence[str] | None = None) -> bytes:
    """``offsets/<N>``: ``v1``, metadata JSON (empty line when ``batch_timestamp_ms`` is None), one
    line per source (None -> ``-``); v2 prefixes each line with ``<sourceId>:``."""
    meta = "" if batch_timestamp_ms is None else json.dumps(
        {"batchWatermarkMs": batch_watermark_ms, "batchTimestampMs": batch_timestamp_ms,
         "conf": SPARK_40_CONF if conf is None else conf}, separators=(",", ":"))
    lines = [f"v{version}", meta]
    ids = list(source_ids) if source_ids is not None else [str(i) for i in range(len(source_lines))]
    for source_id, text in zip(ids, source_lines, strict=True):
        body = "-" if text is None else text
        lines.append(f"{source_id}:{body}" if version >= 2 else body)
    return "\n".join(lines).encode()


def commit_file(*, version: int = 1, next_batch_watermark_ms: int = 0,
                state_unique_ids: dict[str, list[list[str]]] | None = None) -> bytes:
    """``commits/<N>``: ``v1`` + ``{"nextBatchWatermarkMs":0}`` (v2 may add ``stateUniqueIds``)."""
    doc: dict = {"nextBatchWatermarkMs": next_batch_watermark_ms}
    if state_unique_ids is not None:
        doc["stateUniqueIds"] = state_unique_ids
    return f"v{version}\n{json.dumps(doc, separators=(',', ':'))}".encode()


def kafka_initial_offsets_file(offsets: PartitionOffsets, *, spark_21: bool = False) -> bytes:
    """``sources/<n>/0`` of a Kafka source: 0x00, ``v1\\n``, JSON (Spark 2.1.0: 0x00 then JSON)."""
    body = to_offsets_json(offsets)
    return b"\x00" + (body if spark_21 else f"v1\n{body}").encode()


def rate_initial_offsets_file(start_time_ms: int = START_TIMESTAMP_MS) -> bytes:
    """``sources/<n>/0`` of the rate source: a plain ``v1`` log holding its start time."""
    return f"v1\n{start_time_ms}".encode()


def metadata_file(query_id: str = QUERY_ID) -> bytes:
    return json.dumps({"id": query_id}, separators=(",", ":")).encode()


def hadoop_crc(data: bytes, bytes_per_checksum: int = 512) -> bytes:
    """Hadoop's local-FS ``.<name>.crc``: ``crc\\0``, chunk size, a CRC32 per chunk (big endian)."""
    chunks = (data[i:i + bytes_per_checksum] for i in range(0, len(data), bytes_per_checksum))
    return b"crc\x00" + struct.pack(">i", bytes_per_checksum) + b"".join(
        struct.pack(">I", zlib.crc32(chunk)) for chunk in chunks)


# --------------------------------------------------------------------------- whole checkpoints


@dataclass
class FakeCheckpoint:
    """What :func:`write_checkpoint` wrote, so tests can state expectations without re-deriving."""

    root: Path
    query_id: str
    sources: list[SourceSpec]
    offsets: dict[int, list[PartitionOffsets | int]] = field(default_factory=dict)  # batch -> per source
    commits: list[int] = field(default_factory=list)
    initial: list[PartitionOffsets | int] = field(default_factory=list)
    timestamps: dict[int, int] = field(default_factory=dict)

    @property
    def location(self) -> str:
        return str(self.root)

    @property
    def latest(self) -> int | None:
        return max(self.offsets, default=None)

    @property
    def latest_commit(self) -> int | None:
        return max(self.commits, default=None)

    def kafka_offsets(self, batch_id: int) -> PartitionOffsets:
        """All Kafka partitions of all sources at the end of ``batch_id``."""
        out: PartitionOffsets = {}
        for offs in self.offsets[batch_id]:
            if isinstance(offs, dict):
                out.update(offs)
        return out

    def path(self, rel: str) -> Path:
        return self.root / rel

    def write(self, rel: str, data: bytes | str) -> Path:
        """Overwrite (or create) one file, creating parents: the tool for breaking a checkpoint."""
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
        return target

    def remove(self, rel: str, *, keep_crc: bool = False) -> None:
        """Delete a file the way Hadoop does (with its ``.<name>.crc``), or, with ``keep_crc``, the
        way a hand-run ``rm`` does, leaving the checksum behind."""
        path = self.root / rel
        path.unlink()
        if not keep_crc:
            (path.parent / f".{path.name}.crc").unlink(missing_ok=True)


def write_checkpoint(root: Path | str, *, batches: int = 3, sources: Sequence[SourceSpec] = ({"orders": 2},),
                     records_per_batch: int = 10, start_offset: int = 0, pending: bool = False,
                     first_retained: int = 0, state: bool = False, query_id: str = QUERY_ID,
                     start_timestamp_ms: int = START_TIMESTAMP_MS, trigger_interval_ms: int = 1_000,
                     offsets_version: int = 1, commits_version: int = 1, crc: bool = True,
                     conf: dict[str, str] | None = None) -> FakeCheckpoint:
    """A healthy checkpoint: batches ``0..batches-1`` planned and committed, as Spark leaves it.

    ``pending`` adds ``offsets/<batches>`` without its commit (a stop mid-batch, S07);
    ``first_retained`` drops older files as Spark's purge does (it keeps ~100 batches);
    ``state`` adds a stateful operator's ``state/0/...`` files; ``crc`` writes Hadoop's side files.
    """
    root = Path(root)
    ck = FakeCheckpoint(root=root, query_id=query_id, sources=list(sources))
    planned = batches + (1 if pending else 0)
    for rel in ("offsets", "commits"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    _write(root / "metadata", metadata_file(query_id), crc)

    for index, spec in enumerate(sources):
        if isinstance(spec, dict):
            initial: PartitionOffsets | int = _kafka(spec, start_offset)
            data = kafka_initial_offsets_file(initial)
        else:
            initial = start_timestamp_ms
            data = rate_initial_offsets_file(start_timestamp_ms)
        ck.initial.append(initial)
        if planned:
            _write(root / "sources" / str(index) / "0", data, crc)

    for batch_id in range(planned):
        ends: list[PartitionOffsets | int] = []
        lines: list[str] = []
        for spec in sources:
            if isinstance(spec, dict):
                offs = _kafka(spec, start_offset + (batch_id + 1) * records_per_batch)
                ends.append(offs)
                lines.append(to_offsets_json(offs))
            else:
                ends.append((batch_id + 1) * records_per_batch)
                lines.append(str((batch_id + 1) * records_per_batch))
        ck.offsets[batch_id] = ends
        ck.timestamps[batch_id] = start_timestamp_ms + batch_id * trigger_interval_ms
        if batch_id < first_retained:
            continue
        merged_conf = dict(SPARK_40_CONF if conf is None else conf)
        _write(root / "offsets" / str(batch_id),
               offsets_file(lines, version=offsets_version, batch_timestamp_ms=ck.timestamps[batch_id],
                            conf=merged_conf), crc)
        if batch_id < batches:
            ck.commits.append(batch_id)
            _write(root / "commits" / str(batch_id), commit_file(version=commits_version), crc)
    ck.offsets = {b: o for b, o in ck.offsets.items() if b >= first_retained}
    ck.timestamps = {b: t for b, t in ck.timestamps.items() if b >= first_retained}

    if state:
        _write(root / "state" / "0" / "_metadata" / "metadata",
               b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
               b'"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":2}]}', crc)
        for partition in range(2):
            for version in range(max(first_retained, 0) + 1, batches + 1):
                _write(root / "state" / "0" / str(partition) / f"{version}.delta", b"\x00\x00\x00\x00", crc)
    return ck


def _kafka(spec: dict[str, int], offset: int) -> PartitionOffsets:
    return {TopicPartition(topic, p): offset for topic, count in spec.items() for p in range(count)}


def _write(path: Path, data: bytes, crc: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if crc:
        (path.parent / f".{path.name}.crc").write_bytes(hadoop_crc(data))
