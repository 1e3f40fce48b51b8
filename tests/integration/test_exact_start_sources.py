"""Which ``sources/<id>`` is which Kafka source, on real Spark 4.2.0: two Kafka sources in one query,
and Spark 4.2's named sources (``DataStreamReader.name``). Queries built here, not the reference job
(it has one source), on the warm session of tests/support/spark_session.py, a memory sink, availableNow.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.initial_offsets import read_initial_offsets, write_initial_offsets
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import topics
from devstack.produce import produce
from devstack.spark_worker import error_text
from tests.support import spark_session

pytestmark = pytest.mark.integration


def _kafka(spark, bootstrap: str, topic: str, starting: str, name: str | None = None):
    reader = spark.readStream.format("kafka")
    if name is not None:
        reader = reader.name(name)
    return (reader.option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", starting).load().selectExpr("topic", "partition", "offset"))


def _run(df, checkpoint: Path) -> tuple[set[tuple[str, int, int]], str | None]:
    """Run ``df`` once (availableNow) into a memory table; (rows, error)."""
    spark = spark_session.session()
    table = f"t_{uuid.uuid4().hex[:8]}"
    try:
        q = (df.writeStream.format("memory").queryName(table).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        exc = q.exception()
        if exc is not None:
            return set(), error_text(exc)
    except Exception as exc:  # refused at start: the text is the evidence
        return set(), error_text(exc)
    rows = spark.sql(f"select * from {table}").collect()
    return {(r.topic, int(r.partition), int(r.offset)) for r in rows}, None


def _two_topics(broker, name: str) -> tuple[str, str]:
    a, b = f"{name}-a", f"{name}-b"
    for t in (a, b):
        topics.create_topic(broker.bootstrap_servers, t, 1)
        produce(broker.bootstrap_servers, t, 10, partitions=1)
    return a, b


def test_two_kafka_sources_get_ids_in_plan_order_and_each_starts_at_its_file(broker, tmp_path, topic_name):
    spark = spark_session.session()
    bs = broker.bootstrap_servers
    a, b = _two_topics(broker, topic_name)

    # Without our files: which id does Spark give which source? a.union(b): a is 0, b is 1.
    plain = tmp_path / "plain"
    rows, err = _run(_kafka(spark, bs, a, "earliest").union(_kafka(spark, bs, b, "earliest")), plain)
    assert err is None, err
    ids = {sid: sorted({tp.topic for tp in read_initial_offsets(str(plain), sid) or {}}) for sid in ("0", "1")}
    assert ids == {"0": [a], "1": [b]}, ids

    # With our files (a at 3, b at 8), the application asking for latest: 7 + 2 records.
    ours = tmp_path / "ours"
    write_initial_offsets(str(ours), "0", {TopicPartition(a, 0): 3})
    write_initial_offsets(str(ours), "1", {TopicPartition(b, 0): 8})
    rows, err = _run(_kafka(spark, bs, a, "latest").union(_kafka(spark, bs, b, "latest")), ours)
    assert err is None, err
    want = {(a, 0, o) for o in range(3, 10)} | {(b, 0, o) for o in range(8, 10)}
    print("EXACT_START " + json.dumps({"case": "two sources", "spark": spark.version, "ids": ids,
                                       "expected": len(want), "got": len(rows)}))
    assert rows == want


def test_named_kafka_source(broker, tmp_path, topic_name):
    """pyspark 4.2.0 has ``DataStreamReader.name``: refused unless source evolution is on; with it on, the
    source's log is ``sources/<name>/0`` (the offsets log stays v1, positional ids) and our file there wins."""
    spark = spark_session.session()
    bs = broker.bootstrap_servers
    a, _ = _two_topics(broker, topic_name)
    seen: dict[str, object] = {}
    for evolution in ("false", "true"):
        spark.conf.set("spark.sql.streaming.queryEvolution.enableSourceEvolution", evolution)
        try:
            ck = tmp_path / f"named-{evolution}"
            try:
                _, err = _run(_kafka(spark, bs, a, "earliest", name="orders_src"), ck)
            except Exception as exc:  # the reader refuses the name itself
                err = error_text(exc)
            dirs = sorted(p.name for p in (ck / "sources").iterdir()) if (ck / "sources").exists() else []
            offsets_head = (ck / "offsets/0").read_text().splitlines()[0] if (ck / "offsets/0").exists() else None
            seen[evolution] = {"error": err and err[:300], "sources": dirs, "offsets_version": offsets_head}
            if err is None and dirs:
                ours = tmp_path / f"named-ours-{evolution}"
                write_initial_offsets(str(ours), dirs[0], {TopicPartition(a, 0): 6})
                rows, err2 = _run(_kafka(spark, bs, a, "earliest", name="orders_src"), ours)
                seen[evolution]["ours_rows"] = len(rows)   # type: ignore[index]
                seen[evolution]["ours_error"] = err2 and err2[:300]   # type: ignore[index]
        finally:
            spark.conf.unset("spark.sql.streaming.queryEvolution.enableSourceEvolution")
    print("EXACT_START " + json.dumps({"case": "named source", "spark": spark.version, **seen}))
    off, on = seen["false"], seen["true"]
    assert "SOURCE_NAMING_NOT_SUPPORTED" in (off["error"] or ""), off   # type: ignore[index]
    # Named: the source's log is sources/<name>/0 (the offsets log stays v1, positional), and our file there wins.
    assert on["error"] is None and on["sources"] == ["orders_src"], on   # type: ignore[index]
    assert on["ours_rows"] == 4 and on["ours_error"] is None, on   # type: ignore[index]


def test_the_reference_job_reads_its_starting_offsets_file_without_a_spark_job(tmp_path):
    """The recorded starting offsets reach the bundled job as a file; reading it must not run a Spark job
    (that waited for an executor inside a restart's downtime: docs/benchmarks.md, round 10)."""
    from airflow_kafka_spark.jobs import reference_job

    spark = spark_session.session()
    path = tmp_path / "starting.json"
    path.write_text('{"orders":{"0":42,"1":7}}\n')
    tracker = spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))
    assert json.loads(reference_job._read_small_file(spark, str(path))) == {"orders": {"0": 42, "1": 7}}
    assert set(tracker.getJobIdsForGroup(None)) == jobs_before
