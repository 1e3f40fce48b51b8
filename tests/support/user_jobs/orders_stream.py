"""A user's PySpark streaming job, as users write them: it has never heard of airflow-kafka-spark.

Reads one Kafka topic from ``earliest`` and writes every micro-batch's rows as JSON lines per Kafka
partition to ``<out>/topic=<t>/partition=<p>/from=<first offset>/``, overwriting that folder: keyed
by the Kafka position, not the batch id, so a replayed batch (same range) rewrites the same rows
and a new checkpoint (batch ids from 0 again) never overwrites an older query's output. Its own argparse, no
``parse_known_args``: an unknown argument fails it, which is why the product may only talk to it
through Spark confs (the agent). Tests reuse it as "the unchanged user job" (tests/agent/).

    spark-submit --packages ... orders_stream.py --brokers B --topic T --checkpoint C --out O
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="orders stream: Kafka -> JSON files per micro-batch")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--trigger-seconds", type=float, default=1.0)
    return p.parse_args(argv)


def rows(df: DataFrame) -> DataFrame:
    """The columns the sink keeps (a breaking v2 of this job changes this function)."""
    return df.selectExpr(
        "topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"
    )


def main(argv: list[str] | None = None, transform: Callable[[DataFrame], DataFrame] = rows) -> None:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("orders-stream").getOrCreate()
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.brokers)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    out = args.out.rstrip("/")

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            starts = batch.groupBy("topic", "partition").agg(F.min("offset").alias("first")).collect()
            for r in starts:
                part = batch.where((F.col("topic") == r["topic"]) & (F.col("partition") == r["partition"]))
                part.write.mode("overwrite").json(f"{out}/topic={r['topic']}/partition={r['partition']}/from={r['first']}")
        finally:
            batch.unpersist()

    query = (
        transform(source)
        .writeStream.queryName("orders")
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .foreachBatch(write_batch)
        .start()
    )
    query.awaitTermination()
    print("orders stream: query ended, leaving", flush=True)


if __name__ == "__main__":
    main()
