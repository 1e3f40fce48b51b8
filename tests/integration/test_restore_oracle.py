"""A restored backup restarts in Spark exactly as the original does: Spark is the oracle (issue 27).

Checkpoints real Spark 4.2 writes (file sources, so the same new input reaches both restarts): a
RocksDB aggregation in checkpoint format v2 (``stateUniqueIds`` in the commit log,
``<version>_<uuid>`` state files), a stream-stream join (four state stores per partition), session
windows (an open session kept in state, closed after the restart), ``applyInPandasWithState``
(PySpark's flatMapGroupsWithState), and a checkpoint without a commit log (the layout Spark 2.1
wrote, made here by removing ``commits/``; Spark restarts it by re-running its newest batch). Each
is backed up, the folder deleted and the backup restored with ``restore_checkpoint`` in its place; a
plain copy of the original restarts beside it on the same new input. The two restarts must give the
same rows, and rows that only the restored state can produce. The control: a copy holding only
``metadata`` — what backups kept of a checkpoint without commit log before this fix — gives
different rows.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from tests.support import spark_session

pytestmark = pytest.mark.integration

JOB = "oracle"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def write_input(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(folder / f"{name}.json")


def run(build, checkpoint: Path, mode: str) -> list[tuple]:
    """Run the query once (availableNow) on ``checkpoint``; the (batch id, row...) its sink received.

    ``foreachBatch``, not the memory sink: the memory sink refuses to recover from a checkpoint
    outside complete mode, and a restart is the point here.
    """
    rows: list[tuple] = []

    def sink(df, batch_id):
        rows.extend((batch_id, *r) for r in df.collect())

    q = (build(spark_session.session()).writeStream.foreachBatch(sink).outputMode(mode)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    spark_session.drain(q)
    return sorted(rows)


@pytest.fixture
def confs():
    spark = spark_session.session()
    keys = ["spark.sql.streaming.stateStore.providerClass", "spark.sql.streaming.stateStore.checkpointFormatVersion"]
    saved = {k: spark.conf.get(k, None) for k in keys}
    yield spark.conf
    for k, v in saved.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def restored_twin(ck: Path, tmp_path: Path, broker) -> tuple[Path, dict]:
    """Back ``ck`` up, keep a plain copy of it (the original), delete it and restore the backup there."""
    twin = tmp_path / "original"
    shutil.copytree(ck, twin)
    m = backup_checkpoint(str(ck), str(tmp_path / "backups"), job=JOB, settle_s=0).manifest
    shutil.rmtree(ck)
    restore_checkpoint(str(ck), str(tmp_path / "backups"), m.backup_id, {"bootstrap.servers": broker.bootstrap_servers},
                       job=JOB, run=RunOptions(backup_settle_s=0))
    return twin, m.selection


def test_rocksdb_checkpoint_format_v2_restores_to_the_same_restart(broker, tmp_path, confs):
    confs.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    confs.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    inp, ck = tmp_path / "in", tmp_path / "ck"

    def build(spark):
        from pyspark.sql import functions as F
        return (spark.readStream.schema("k string, v long").json(str(inp))
                .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s")))

    write_input(inp, "1", [{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    run(build, ck, "update")
    write_input(inp, "2", [{"k": "a", "v": 10}])
    run(build, ck, "update")
    commit = (ck / "commits" / "1").read_text()
    assert commit.startswith("v2") and "stateUniqueIds" in commit, "Spark 4.2 wrote checkpoint format v2"
    assert list((ck / "state").rglob("*_*.zip")) or list((ck / "state").rglob("*_*.changelog"))
    twin, selection = restored_twin(ck, tmp_path, broker)
    assert selection["mode"] == "version"

    write_input(inp, "3", [{"k": "a", "v": 100}, {"k": "c", "v": 5}])
    from_original, from_restored = run(build, twin, "update"), run(build, ck, "update")
    assert from_restored == from_original == [(2, "a", 3, 111), (2, "c", 1, 5)]


def test_stream_stream_join_restores_to_the_same_restart(broker, tmp_path, confs):
    left, right, ck = tmp_path / "left", tmp_path / "right", tmp_path / "ck"

    def build(spark):
        lhs = spark.readStream.schema("k string, l long").json(str(left))
        rhs = spark.readStream.schema("k string, r long").json(str(right))
        return lhs.join(rhs, "k")

    write_input(left, "1", [{"k": "a", "l": 1}, {"k": "b", "l": 2}])
    write_input(right, "1", [{"k": "a", "r": 10}])
    assert run(build, ck, "append") == [(0, "a", 1, 10)]
    twin, _ = restored_twin(ck, tmp_path, broker)

    write_input(right, "2", [{"k": "b", "r": 20}])     # joins only with the left row kept in state
    from_original, from_restored = run(build, twin, "append"), run(build, ck, "append")
    assert from_restored == from_original == [(1, "b", 2, 20)]


def test_checkpoint_without_commit_log_restores_to_the_same_restart(broker, tmp_path, confs):
    inp, ck = tmp_path / "in", tmp_path / "ck"

    def build(spark):
        return spark.readStream.schema("k string, v long").json(str(inp)).groupBy("k").count()

    write_input(inp, "1", [{"k": "a", "v": 1}])
    run(build, ck, "update")
    write_input(inp, "2", [{"k": "a", "v": 2}, {"k": "b", "v": 3}])
    run(build, ck, "update")
    shutil.rmtree(ck / "commits")   # Spark 2.1's layout: offsets/0-1, state, no commit log
    bare = tmp_path / "metadata-only"
    bare.mkdir()
    shutil.copy(ck / "metadata", bare / "metadata")
    twin, selection = restored_twin(ck, tmp_path, broker)
    assert selection["mode"] == "whole" and "no commit log" in selection["why"]

    write_input(inp, "3", [{"k": "b", "v": 4}])
    from_original, from_restored = run(build, twin, "update"), run(build, ck, "update")
    assert from_restored == from_original
    assert (2, "b", 2) in from_original                # the restored state counted b's first record
    assert run(build, bare, "update") != from_original  # what a metadata-only backup restarted to


def test_session_windows_restore_to_the_same_restart(broker, tmp_path, confs):
    inp, ck = tmp_path / "in", tmp_path / "ck"

    def build(spark):
        from pyspark.sql import functions as F
        events = spark.readStream.schema("k string, t timestamp").json(str(inp)).withWatermark("t", "1 hour")
        return (events.groupBy("k", F.session_window("t", "10 minutes")).count()
                .select("k", F.col("session_window.start").cast("string"), "count"))

    write_input(inp, "1", [{"k": "a", "t": "2026-01-01T00:00:00"}, {"k": "a", "t": "2026-01-01T00:05:00"}])
    assert run(build, ck, "append") == []                              # the session is still open
    twin, _ = restored_twin(ck, tmp_path, broker)

    # One event extends the open session kept in state, a later one moves the watermark past it.
    write_input(inp, "2", [{"k": "a", "t": "2026-01-01T00:12:00"}, {"k": "z", "t": "2026-01-01T05:00:00"}])
    from_original, from_restored = run(build, twin, "append"), run(build, ck, "append")
    assert from_restored == from_original
    assert any(row[1:] == ("a", "2026-01-01 00:00:00", 3) for row in from_original), from_original


def test_grouped_state_in_pandas_restores_to_the_same_restart(broker, tmp_path, confs):
    """applyInPandasWithState: PySpark's flatMapGroupsWithState (arbitrary state per key)."""
    inp, ck = tmp_path / "in", tmp_path / "ck"

    def count_per_key(key, frames, state):
        import pandas as pd

        seen = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
        state.update((seen,))
        yield pd.DataFrame({"k": [key[0]], "seen": [seen]})

    def build(spark):
        return (spark.readStream.schema("k string").json(str(inp)).groupBy("k")
                .applyInPandasWithState(count_per_key, "k string, seen long", "seen long", "Update", "NoTimeout"))

    write_input(inp, "1", [{"k": "a"}, {"k": "a"}, {"k": "b"}])
    run(build, ck, "update")
    twin, _ = restored_twin(ck, tmp_path, broker)

    write_input(inp, "2", [{"k": "a"}])
    from_original, from_restored = run(build, twin, "update"), run(build, ck, "update")
    assert from_restored == from_original == [(1, "a", 3)]
