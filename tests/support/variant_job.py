"""A Kafka query in several variants, each a kind of change the compatibility probe must judge.

The reference job's own flags plus ``--variant``; the probe side of the contract (``--aks-probe``:
the noop sink, one batch, the ``AKS_PROBE`` lines) is the reference job's, imported, so this file
tests what users' jobs copy. Run under spark-submit (the probe goes through the product's submit
path) or in the tests' warm session (:func:`build_query`, for the first run and Spark's own restart).

Variants (what changes from ``base``):
  * ``base``          Kafka -> projection -> sink (stateless)
  * ``projection``    one more column in the projection (stateless change)
  * ``dedup``         a ``dropDuplicates(key)`` stage (a new stateful operator when coming from base)
  * ``dedup_key2``    ``dropDuplicates(key, partition)`` (a changed dropDuplicates key)
  * ``agg``           ``groupBy(key).count()``
  * ``agg_sum``       ``groupBy(key).agg(count, sum(partition))`` (a new aggregation column)
  * ``two_sources``   the union with a second Kafka source (``--second-topic``)
The sink is the reference job's ``--sink`` (idempotent foreachBatch, append, parquet).
"""

from __future__ import annotations

import sys

from airflow_kafka_spark.jobs import reference_job

VARIANTS = ("base", "projection", "dedup", "dedup_key2", "agg", "agg_sum", "two_sources")
AGGREGATING = ("agg", "agg_sum")


def parse_args(argv: list[str] | None = None):
    argv = list(sys.argv[1:] if argv is None else argv)
    variant, second = "base", None
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--variant":
            variant = next(it)
        elif a == "--second-topic":
            second = next(it)
        else:
            rest.append(a)
    if variant not in VARIANTS:
        raise SystemExit(f"error: --variant must be one of {', '.join(VARIANTS)}")
    args = reference_job.parse_args(rest)
    args.variant, args.second_topic = variant, second
    return args


def _kafka(spark, args, topic: str):
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", args.starting_offsets)
              .option("failOnDataLoss", args.fail_on_data_loss))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    return reader.load().select("topic", "partition", "offset", F.col("key").cast("string").alias("key"),
                                F.col("value").cast("string").alias("value"))


def build_query(spark, args, *, trigger: str | None = None):
    """Start the variant's query (the probe's noop sink when ``args.aks_probe``)."""
    from pyspark.sql import functions as F

    df = _kafka(spark, args, args.topics)
    v = args.variant
    if v == "projection":
        df = df.withColumn("value_length", F.length("value"))
    elif v == "dedup":
        df = df.dropDuplicates(["key"])
    elif v == "dedup_key2":
        df = df.dropDuplicates(["key", "partition"])
    elif v == "agg":
        df = df.groupBy("key").agg(F.count("*").alias("n"))
    elif v == "agg_sum":
        df = df.groupBy("key").agg(F.count("*").alias("n"), F.sum("partition").alias("partition_sum"))
    elif v == "two_sources":
        df = df.unionByName(_kafka(spark, args, args.second_topic))
    mode = "update" if v in AGGREGATING else "append"
    writer = df.writeStream.queryName(args.query_name).option("checkpointLocation", args.checkpoint)
    if args.aks_probe:
        return reference_job.start_probe(writer, mode)
    trig = trigger or args.trigger
    writer = writer.trigger(availableNow=True) if trig == "availableNow" else writer.trigger(processingTime="1 second")
    if args.sink == "parquet":
        return writer.format("parquet").option("path", args.output).outputMode(mode).start()

    def write_batch(batch_df, batch_id: int) -> None:
        batch_df.withColumn("batch_id", F.lit(batch_id)).write.mode("append").json(args.output)

    return writer.foreachBatch(write_batch).outputMode(mode).start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(args.query_name).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if args.aks_probe:
        try:
            query = build_query(spark, args)
        except Exception as exc:  # refused at start: the outcome line carries Spark's error
            reference_job.probe_refused(exc)
            return 1
        return reference_job.run_probe(query)
    build_query(spark, args).awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
