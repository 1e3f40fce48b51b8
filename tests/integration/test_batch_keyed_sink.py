"""A sink keyed by batch id alone (``sink: batch-keyed``) and a reset: Spark shows the collision, the
reset refuses it with the fix, and the fix works (issue 25 item 6; ops/reset_plan.py ``_batch_ids``).

The application writes each batch with its own ``foreachBatch`` as ``<out>/batch=<id>`` (overwrite),
as production jobs do to be idempotent on replay. Real Spark 4.2.0 (the tests' warm session), the
real broker, the product's real reset.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import OperationBlocked
from airflow_kafka_spark.ops.commands import reset_checkpoint
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from devstack import topics
from devstack.produce import produce
from tests.support import spark_session

pytestmark = pytest.mark.integration


def _run(bootstrap: str, topic: str, ck: Path, out: Path) -> None:
    """The user's query: earliest, 40 records a batch, each batch overwriting ``<out>/batch=<id>``."""
    spark = spark_session.session()

    def write(df, batch_id: int) -> None:
        rows = df.selectExpr("CAST(partition AS INT) AS p", "offset")
        rows.write.mode("overwrite").parquet(f"{out}/batch={batch_id}")

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 40).load())
    spark_session.drain(stream.writeStream.foreachBatch(write).option("checkpointLocation", str(ck))
                        .trigger(availableNow=True).start())


def _records(*outs: Path) -> list[tuple[int, int]]:
    spark = spark_session.session()
    rows: list[tuple[int, int]] = []
    for out in outs:
        if out.exists():
            rows += [(r.p, r.offset) for r in spark.read.parquet(str(out)).collect()]
    return rows


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_batch_keyed_sink_refuses_a_reset_that_spark_would_overwrite_and_its_fix_is_exact(
        broker, tmp_path, topic_name):
    bs = broker.bootstrap_servers
    topics.create_topic(bs, topic_name, 2)
    produced = produce(bs, topic_name, 120, partitions=2)
    ck, out = tmp_path / "ck", tmp_path / "out"
    _run(bs, topic_name, ck, out)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("batch=")) == ["batch=0", "batch=1", "batch=2"]
    produced += produce(bs, topic_name, 60, partitions=2, start_id=1_000)
    kafka = {"bootstrap.servers": bs}

    def reset(ckpt: Path, output: Path, batch_keyed: bool, dry_run: bool = False):
        request = ResetRequest(mode="preserve", topics=(topic_name,), sink_output=str(output),
                               batch_keyed_sink=batch_keyed)
        return reset_checkpoint(str(ckpt), str(tmp_path / "backups"), kafka, request, job="keyed", dry_run=dry_run)

    # The product: the output holds the old query's batches, so the reset refuses and changes nothing.
    before = _digest(tmp_path)
    plan = reset(ck, out, batch_keyed=True, dry_run=True).plan
    collide = [f for f in plan.findings if f.code == "BATCH_IDS_COLLIDE"]
    assert plan.blocked and collide and "batches 0-2" in collide[0].message and "{output}" in collide[0].fix
    with pytest.raises(OperationBlocked):
        reset(ck, out, batch_keyed=True)
    assert _digest(tmp_path) == before, "a refused reset changed files"

    # Spark as the oracle: what the reset would have done to that sink (on copies): the new query's
    # batches 0 and 1 overwrite the old query's, and 80 records are gone from the sink.
    shutil.copytree(ck, tmp_path / "ck-copy")
    shutil.copytree(out, tmp_path / "out-copy")
    reset(tmp_path / "ck-copy", tmp_path / "out-copy", batch_keyed=False)
    _run(bs, topic_name, tmp_path / "ck-copy", tmp_path / "out-copy")
    kept = _records(tmp_path / "out-copy")
    assert len(kept) == len(set(kept)) == 100, len(kept)      # 180 produced: 40 + 40 of batches 0-1 overwritten

    # The fix the refusal names: the new query gets its own (empty) output; the reset goes ahead and the
    # two outputs together hold every record once.
    fixed = reset(ck, tmp_path / "out-v2", batch_keyed=True)
    assert not fixed.plan.blocked and "BATCH_KEYED_OUTPUT_EMPTY" in {f.code for f in fixed.plan.findings}
    _run(bs, topic_name, ck, tmp_path / "out-v2")
    both = _records(out, tmp_path / "out-v2")
    assert len(both) == len(set(both)) == 180
    assert set(both) == {(r.partition, r.offset) for r in produced}
