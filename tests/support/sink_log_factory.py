"""Write a file sink's ``_spark_metadata`` log as Spark 4.0 does, for tests.

Checked against a parquet sink written by pyspark 4.0.0 with ``compactInterval=3``: ``v1`` then one
compact-JSON ``SinkFileStatus`` per line (fields in Spark's order, path as a ``file://`` URI), no
trailing newline, ``<N>.compact`` files at every ``(N + 1) % compactInterval == 0`` holding all
entries so far, and Hadoop ``.<name>.crc`` side files.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from tests.support.checkpoint_factory import START_TIMESTAMP_MS, hadoop_crc

SINK_LOG_DIR = "_spark_metadata"


def sink_entry(path: str, *, size: int = 780, modification_time: int = START_TIMESTAMP_MS,
               action: str = "add", is_dir: bool = False) -> dict:
    """One ``SinkFileStatus`` with the field order Spark's json4s writes."""
    return {"path": path, "size": size, "isDir": is_dir, "modificationTime": modification_time,
            "blockReplication": 1, "blockSize": 33554432, "action": action}


def sink_log_file(entries: list[dict]) -> bytes:
    return "\n".join(["v1", *(json.dumps(e, separators=(",", ":")) for e in entries)]).encode()


def file_uri(path: Path) -> str:
    """How Spark records a local output file: ``file://`` + the percent-encoded absolute path."""
    return "file://" + quote(str(path.resolve()), safe="/")


def write_sink_log(output: Path, batches: int, *, files_per_batch: int = 2, compact_interval: int = 10,
                   expire_before: int = 0, crc: bool = True, create_data_files: bool = False
                   ) -> dict[int, list[str]]:
    """Log ``batches`` committed batches (0..batches-1); returns batch -> the file URIs it added.

    ``expire_before`` (a compaction batch id) leaves out every log file below it, as Spark's
    ``deleteExpiredLog`` does; ``create_data_files`` also writes (dummy) part files.
    """
    assert expire_before == 0 or (expire_before + 1) % compact_interval == 0, "expire at a compaction"
    log_dir = output / SINK_LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    added: dict[int, list[str]] = {}
    everything: list[dict] = []
    for batch_id in range(batches):
        entries = []
        for n in range(files_per_batch):
            part = output / f"part-{n:05d}-b{batch_id:04d}-0000-c000.snappy.parquet"
            if create_data_files:
                part.write_bytes(b"PAR1")
            entries.append(sink_entry(file_uri(part), modification_time=START_TIMESTAMP_MS + batch_id))
        added[batch_id] = [e["path"] for e in entries]
        everything.extend(entries)
        compact = (batch_id + 1) % compact_interval == 0
        name = f"{batch_id}.compact" if compact else str(batch_id)
        if batch_id < expire_before:
            continue
        data = sink_log_file(everything if compact else entries)
        (log_dir / name).write_bytes(data)
        if crc:
            (log_dir / f".{name}.crc").write_bytes(hadoop_crc(data))
    return added
