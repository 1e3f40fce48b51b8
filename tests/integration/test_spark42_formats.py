"""Spark 4.2's newest checkpoint formats, written by real Spark 4.2, through the product (issue 27).

Spark 4.2 can name a streaming source (``DataStreamReader.name``, with
``spark.sql.streaming.queryEvolution.enableSourceEvolution``) and key the offsets log by those
names (``spark.sql.streaming.offsetLog.formatVersion=2``: a ``v2`` file whose lines read
``<name>:<offset>``); Kafka's initial offsets then live in ``sources/<name>/0``. A Kafka query
written that way is read (offsets by name, the initial offsets from the named folder), judged
against the real broker, backed up, deleted and restored, its lag counted, and restarted by Spark
from the restored copy: it must read exactly the records produced after the backup, no more, no
less, and the lag then be 0.
"""

from __future__ import annotations

import shutil

import pytest

from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from airflow_kafka_spark.watch.observe import ObserveTarget, observe
from devstack import topics
from devstack.produce import produce
from tests.support import spark_session

pytestmark = pytest.mark.integration

CONFS = {"spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
         "spark.sql.streaming.offsetLog.formatVersion": "2"}


@pytest.fixture
def named_sources():
    spark = spark_session.session()
    saved = {k: spark.conf.get(k, None) for k in CONFS}
    for k, v in CONFS.items():
        spark.conf.set(k, v)
    yield spark
    for k, v in saved.items():
        if v is None:
            spark.conf.unset(k)
        else:
            spark.conf.set(k, v)


def run_named(spark, bootstrap: str, topic: str, checkpoint) -> int:
    """One availableNow run of a Kafka query whose source is named ``orders``; the records it read."""
    seen: list[int] = []
    df = (spark.readStream.format("kafka").name("orders").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("startingOffsets", "earliest").load())
    q = (df.writeStream.foreachBatch(lambda batch, _id: seen.append(batch.count()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    spark_session.drain(q)
    return sum(seen)


def test_named_kafka_source_with_offsets_v2_round_trips_through_backup_and_restore(broker, tmp_path, topic_name,
                                                                                   named_sources):
    bootstrap = broker.bootstrap_servers
    topics.create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 30, partitions=2)
    ck = tmp_path / "ck"
    assert run_named(named_sources, bootstrap, topic_name, ck) == 30

    offsets0 = (ck / "offsets" / "0").read_text()
    assert offsets0.startswith("v2\n") and "\norders:{" in offsets0, "Spark 4.2 keyed the offsets log by name"
    assert (ck / "sources" / "orders" / "0").is_file()
    state = read_checkpoint(str(ck))
    assert not state.problems
    assert state.latest_committed.version == 2 and set(state.latest_committed.sources) == {"orders"}
    ends = state.latest_committed.kafka_offsets
    assert sum(ends.values()) == 30 and set(ends) == {TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)}
    assert state.initial_offsets == {"orders": dict.fromkeys(ends, 0)}
    assert resume_position(state).start == ends

    kafka = {"bootstrap.servers": bootstrap}
    verdict = validate(str(ck), kafka_config=kafka, options=DeployOptions(idempotent_sink=True), record_identity=False)
    assert verdict.severity.value == "PASS", [(f.code, f.message) for f in verdict.findings]

    m = backup_checkpoint(str(ck), str(tmp_path / "backups"), job="named", settle_s=0).manifest
    assert m.selection["mode"] == "version" and m.committed_offsets == ends
    assert "sources/orders/0" in {f.path for f in m.files}
    shutil.rmtree(ck)
    restore_checkpoint(str(ck), str(tmp_path / "backups"), m.backup_id, kafka, job="named",
                       run=RunOptions(backup_settle_s=0))

    produce(bootstrap, topic_name, 12, partitions=2, start_id=30)
    lag = observe(ObserveTarget(checkpoint=str(ck)), kafka).lag        # the restored copy, by source name
    assert lag.records == 12, lag
    assert run_named(named_sources, bootstrap, topic_name, ck) == 12   # exactly what came after the backup
    assert observe(ObserveTarget(checkpoint=str(ck)), kafka).lag.records == 0
