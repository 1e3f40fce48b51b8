"""read_sink_log: the file sink's ``_spark_metadata`` log (committed files; S20's batch ids)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from urllib.parse import unquote

import pytest

from airflow_kafka_spark.checkpoint.formats import UnsupportedLogVersionError
from airflow_kafka_spark.checkpoint.sink_log import SinkFileEntry, parse_sink_log_file, read_sink_log
from airflow_kafka_spark.errors import CheckpointFormatError, UserError
from tests.support.sink_log_factory import SINK_LOG_DIR, sink_entry, sink_log_file, write_sink_log

DATA = Path(__file__).parent / "data"


def local(uri: str) -> str:
    return unquote(uri.removeprefix("file://"))


def all_files(added: dict[int, list[str]]) -> list[str]:
    return [local(uri) for batch in sorted(added) for uri in added[batch]]


def tree(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns,
                                       hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "")
            for p in [root, *root.rglob("*")]}


def test_compacted_log_lists_every_committed_file_once(tmp_path):
    added = write_sink_log(tmp_path / "out", 8, compact_interval=3)
    log = read_sink_log(str(tmp_path / "out"))
    assert log.exists and log.latest_batch_id == 7
    assert log.batch_ids == list(range(8)) and log.compact_batch_ids == [2, 5]
    assert log.files() == all_files(added)


def test_log_without_compaction(tmp_path):
    added = write_sink_log(tmp_path / "out", 4)
    log = read_sink_log(str(tmp_path / "out"))
    assert log.compact_batch_ids == [] and log.files() == all_files(added)


def test_latest_batch_is_a_compaction(tmp_path):
    added = write_sink_log(tmp_path / "out", 6, compact_interval=3)
    log = read_sink_log(str(tmp_path / "out"))
    assert log.latest_batch_id == 5 and log.files() == all_files(added)


def test_expired_log_files_are_covered_by_the_compaction(tmp_path):
    added = write_sink_log(tmp_path / "out", 12, compact_interval=3, expire_before=5)
    log = read_sink_log(str(tmp_path / "out"))
    assert log.batch_ids == list(range(5, 12)) and log.compact_batch_ids == [5, 8, 11]
    assert log.files() == all_files(added)


def test_latest_batch_id_needs_no_file_reads(tmp_path, monkeypatch):
    """S20 only needs the newest batch id: listing suffices, however large the compact files are."""
    import fsspec.implementations.local as fs_local

    write_sink_log(tmp_path / "out", 25, compact_interval=10)

    def refuse(*_a, **_k):
        raise AssertionError("read_sink_log opened a file")

    monkeypatch.setattr(fs_local.LocalFileSystem, "_open", refuse)
    assert read_sink_log(str(tmp_path / "out")).latest_batch_id == 24


def test_legacy_delete_action_removes_the_path(tmp_path):
    log_dir = tmp_path / "out" / SINK_LOG_DIR
    log_dir.mkdir(parents=True)
    (log_dir / "0").write_bytes(sink_log_file([sink_entry("file:///o/a.parquet"), sink_entry("file:///o/b.parquet")]))
    (log_dir / "1").write_bytes(sink_log_file([sink_entry("file:///o/a.parquet", action="delete"),
                                               sink_entry("file:///o/c.parquet")]))
    assert read_sink_log(str(tmp_path / "out")).files() == ["/o/b.parquet", "/o/c.parquet"]


def test_directories_are_entries_but_not_files(tmp_path):
    log_dir = tmp_path / "out" / SINK_LOG_DIR
    log_dir.mkdir(parents=True)
    (log_dir / "0").write_bytes(sink_log_file([sink_entry("file:///o/d", is_dir=True), sink_entry("file:///o/x")]))
    log = read_sink_log(str(tmp_path / "out"))
    assert len(log.entries()) == 2 and log.files() == ["/o/x"]


@pytest.mark.parametrize(("uri", "path"), [
    ("file:///tmp/out/part-0.parquet", "/tmp/out/part-0.parquet"),
    ("file:/tmp/out/part-0.parquet", "/tmp/out/part-0.parquet"),
    ("file:///tmp/a%20b/p%25.parquet", "/tmp/a b/p%.parquet"),
    ("s3a://bucket/out/k%3Dv/part-0.parquet", "s3a://bucket/out/k=v/part-0.parquet"),
    ("/plain/path.parquet", "/plain/path.parquet"),
])
def test_fs_path_decodes_spark_uris(uri, path):
    entry = SinkFileEntry(uri, 1, False, 0, 1, 1, "add")
    assert entry.fs_path == path


def test_percent_encoded_output_path_round_trips(tmp_path):
    out = tmp_path / "with space" / "out"
    added = write_sink_log(out, 3, create_data_files=True)
    files = read_sink_log(str(out)).files()
    assert files == all_files(added) and all(os.path.exists(f) for f in files)
    assert "%20" in added[0][0]


def test_missing_output_or_log_is_not_an_error(tmp_path):
    assert read_sink_log(str(tmp_path / "nope")).exists is False
    (tmp_path / "out").mkdir()
    log = read_sink_log(str(tmp_path / "out"))
    assert log.exists is False and log.latest_batch_id is None and log.files() == []


def test_empty_log_directory(tmp_path):
    (tmp_path / "out" / SINK_LOG_DIR).mkdir(parents=True)
    log = read_sink_log(str(tmp_path / "out"))
    assert log.exists and log.latest_batch_id is None and log.files() == []


def test_output_that_is_a_file_is_a_user_error(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        read_sink_log(str(tmp_path / "out"))


def test_log_directory_itself_and_file_urls_are_accepted(tmp_path):
    added = write_sink_log(tmp_path / "out", 4, compact_interval=3)
    by_dir = read_sink_log(str(tmp_path / "out" / SINK_LOG_DIR))
    by_url = read_sink_log(f"file://{tmp_path / 'out'}")
    assert by_dir.files() == by_url.files() == all_files(added)


def test_temp_crc_and_foreign_names_are_ignored(tmp_path):
    added = write_sink_log(tmp_path / "out", 4, compact_interval=3)
    log_dir = tmp_path / "out" / SINK_LOG_DIR
    (log_dir / ".4.8d1e.tmp").write_bytes(b"v1\n{")
    (log_dir / "notes.txt").write_text("hello")
    (log_dir / "5.compact.bak").write_text("x")
    log = read_sink_log(str(tmp_path / "out"))
    assert log.batch_ids == [0, 1, 2, 3] and log.stray_files == [f"{SINK_LOG_DIR}/.4.8d1e.tmp"]
    assert log.files() == all_files(added)


def test_missing_batch_file_raises_instead_of_dropping_files(tmp_path):
    write_sink_log(tmp_path / "out", 8, compact_interval=3)
    (tmp_path / "out" / SINK_LOG_DIR / "6").unlink()
    log = read_sink_log(str(tmp_path / "out"))
    with pytest.raises(CheckpointFormatError, match=r"6 is missing \(latest batch 7, last compaction 5"):
        log.files()


def test_absurd_batch_id_does_not_enumerate_the_range(tmp_path):
    write_sink_log(tmp_path / "out", 2)
    (tmp_path / "out" / SINK_LOG_DIR / "9223372036854775807").write_bytes(sink_log_file([]))
    log = read_sink_log(str(tmp_path / "out"))
    t0 = time.perf_counter()
    with pytest.raises(CheckpointFormatError, match="_spark_metadata/2 is missing"):
        log.files()
    assert time.perf_counter() - t0 < 10      # enumerating 2**63 ids would never end; a look-up is instant


@pytest.mark.parametrize(("data", "error"), [
    (b"", CheckpointFormatError),
    (b"v2\n{}", UnsupportedLogVersionError),
    (b"V1", CheckpointFormatError),
    (b'v1\n{"path":"file:///a"', CheckpointFormatError),
    (b"v1\n[]", CheckpointFormatError),
    (b'v1\n{"size":1,"action":"add"}', CheckpointFormatError),
    (b'v1\n{"path":"file:///a","action":"rename"}', CheckpointFormatError),
    (b'v1\n{"path":"file:///a","action":"add","size":"1"}', CheckpointFormatError),
    (b'v1\n{"path":"file:///a","action":"add","isDir":"no"}', CheckpointFormatError),
    (b'v1\n{"path":"file:///a","action":"add"}\n\n', CheckpointFormatError),  # an empty entry line
    (b"v1\n\xff", CheckpointFormatError),
])
def test_malformed_sink_log_files(data, error):
    with pytest.raises(error) as err:
        parse_sink_log_file(data, what="_spark_metadata/0")
    assert "\n" not in str(err.value)


def test_header_only_file_is_an_empty_batch():
    assert parse_sink_log_file(b"v1") == []
    assert parse_sink_log_file(b'v1\r\n{"path":"file:///a","action":"add"}\r\n')[0].fs_path == "/a"


def test_reading_never_writes(tmp_path):
    write_sink_log(tmp_path / "out", 8, compact_interval=3)
    before = tree(tmp_path)
    read_sink_log(str(tmp_path / "out")).files()
    read_sink_log(str(tmp_path / "missing"))
    assert tree(tmp_path) == before


def test_real_spark_400_parquet_sink_log():
    log = read_sink_log(str(DATA / "spark400_parquet_sink"))
    assert log.batch_ids == list(range(8)) and log.compact_batch_ids == [2, 5]
    files = log.files()
    assert len(files) == len(set(files)) == 15  # batch 0: one part file, batches 1-7: two each
    assert all(f.startswith("/tmp/ckgen/out/sink/part-") and f.endswith(".snappy.parquet") for f in files)
    entry = log.entries()[0]
    assert entry.path.startswith("file:///") and entry.action == "add" and entry.block_size == 33554432


@pytest.mark.integration
def test_live_parquet_sink_matches_what_spark_reads(tmp_path):
    """Spark's own batch reader of a file-sink output uses this log: both lists must be equal."""
    from tests.support import spark_session

    spark = spark_session.session()
    out, cp = tmp_path / "out", tmp_path / "cp"
    key = "spark.sql.streaming.fileSink.log.compactInterval"
    spark.conf.set(key, "3")
    try:
        df = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
        query = (df.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(cp)).trigger(processingTime="200 milliseconds").start())
        try:
            deadline = time.monotonic() + 120
            while (query.lastProgress or {}).get("batchId", -1) < 6:
                assert time.monotonic() < deadline, "parquet query made no progress"
                time.sleep(0.2)
        finally:
            query.stop()
    finally:
        spark.conf.unset(key)
    log = read_sink_log(str(out))
    assert log.compact_batch_ids and log.latest_batch_id >= 6
    spark_files = {SinkFileEntry(f, 0, False, 0, 0, 0, "add").fs_path
                   for f in spark.read.parquet(str(out)).inputFiles()}
    assert set(log.files()) == spark_files
    rows = sum(spark.read.parquet(f).count() for f in log.files())
    assert rows == spark.read.parquet(str(out)).count()
