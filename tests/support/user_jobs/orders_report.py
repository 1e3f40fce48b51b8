"""A user's PySpark reporting job whose releases change its query: it has never heard of airflow-kafka-spark.

Each release of this job is one ``--release`` value (its own flag, as a team would ship a config
switch); the compatibility probe's tests deploy one release over another's checkpoint:

* ``base``: the Kafka coordinates, key and value (stateless);
* ``projection``: ``base`` plus a computed column (stateless);
* ``dedup`` / ``dedup_key2``: ``base`` deduplicated on (topic, partition, offset) / on (key, partition);
* ``agg`` / ``agg_sum``: records per partition / and the sum of the value lengths (update mode);
* ``window``: ``base`` plus a 10-second tumbling-window count per key with a watermark;
* ``two_sources``: ``base`` unioned with a second topic (``--second-topic``);
* ``state`` / ``state_v2``: records per key kept in ``applyInPandasWithState``'s own state, whose
  schema is ``records long`` / ``records long, bytes long`` (a changed state schema, update mode).

Its output is written by its own code: ``foreachBatch`` writing JSON to ``<out>/batch=<id>/``
(``--sink foreach``), or Spark's parquet file sink at ``<out>`` (``--sink parquet``). With
``--totals`` it runs a second query (records per partition) on ``<checkpoint>-totals`` into
``<out>-totals``. ``--available-now`` reads what Kafka has and ends (a backfill run).

    spark-submit --packages ... orders_report.py --brokers B --topic T --checkpoint C --out O --release R
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

RELEASES = ("base", "projection", "dedup", "dedup_key2", "agg", "agg_sum", "window", "two_sources", "state",
            "state_v2")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="orders report: Kafka -> JSON or parquet")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--second-topic")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--release", choices=RELEASES, default="base")
    p.add_argument("--sink", choices=("foreach", "parquet"), default="foreach")
    p.add_argument("--totals", action="store_true")
    p.add_argument("--available-now", action="store_true")
    return p.parse_args(argv)


def kafka(spark: SparkSession, brokers: str, topic: str) -> DataFrame:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", brokers)
            .option("subscribe", topic).option("startingOffsets", "earliest").load())


def shape(df: DataFrame, release: str, second: DataFrame | None) -> tuple[DataFrame, str]:
    """The release's query and its output mode."""
    rows = df.selectExpr("topic", "partition", "offset", "timestamp", "CAST(key AS STRING) AS key",
                         "CAST(value AS STRING) AS value")
    if release == "projection":
        return rows.withColumn("value_length", F.length("value")), "append"
    if release == "dedup":
        return rows.dropDuplicates(["topic", "partition", "offset"]), "append"
    if release == "dedup_key2":
        return rows.dropDuplicates(["key", "partition"]), "append"
    if release == "agg":
        return rows.groupBy("partition").agg(F.count("*").alias("records")), "update"
    if release == "agg_sum":
        return (rows.groupBy("partition").agg(F.count("*").alias("records"),
                                              F.sum(F.length("value")).alias("bytes")), "update")
    if release == "window":
        return (rows.withWatermark("timestamp", "30 seconds")
                .groupBy(F.window("timestamp", "10 seconds"), "key").count(), "append")
    if release in ("state", "state_v2"):
        return per_key_state(rows, release == "state_v2"), "update"
    if release == "two_sources":
        if second is None:
            raise SystemExit("--release two_sources needs --second-topic")
        other = second.selectExpr("topic", "partition", "offset", "timestamp", "CAST(key AS STRING) AS key",
                                  "CAST(value AS STRING) AS value")
        return rows.unionByName(other), "append"
    return rows, "append"


def per_key_state(rows: DataFrame, with_bytes: bool) -> DataFrame:
    """Records (and, in ``state_v2``, value bytes) per key, kept in the group state by the job's own function."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key, frames, state):
        import pandas as pd

        old = state.get if state.exists else (0, 0)
        records, size = old[0], (old[1] if with_bytes else 0)
        for pdf in frames:
            records += len(pdf)
            size += int(pdf["value"].fillna("").str.len().sum())
        state.update((records, size) if with_bytes else (records,))
        yield pd.DataFrame({"key": [key[0]], "records": [records]})

    schema = "records long, bytes long" if with_bytes else "records long"
    return rows.groupBy("key").applyInPandasWithState(count, "key string, records long", schema, "update",
                                                      GroupStateTimeout.NoTimeout)


def start(df: DataFrame, mode: str, name: str, checkpoint: str, out: str, sink: str, available_now: bool):
    writer = df.writeStream.queryName(name).outputMode(mode).option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="1 second")
    if sink == "parquet":
        return writer.format("parquet").option("path", out).start()

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").json(f"{out}/batch={batch_id}")

    return writer.foreachBatch(write_batch).start()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("orders-report").getOrCreate()
    second = kafka(spark, args.brokers, args.second_topic) if args.second_topic else None
    df, mode = shape(kafka(spark, args.brokers, args.topic), args.release, second)
    out, ck = args.out.rstrip("/"), args.checkpoint.rstrip("/")
    queries = [start(df, mode, "orders", ck, out, args.sink, args.available_now)]
    if args.totals:
        totals = kafka(spark, args.brokers, args.topic).groupBy("partition").count()
        queries.append(start(totals, "update", "totals", ck + "-totals", out + "-totals", "foreach",
                             args.available_now))
    for q in queries:
        q.awaitTermination()
    print("orders report: queries ended, leaving", flush=True)


if __name__ == "__main__":
    main()
