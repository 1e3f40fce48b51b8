"""A minimal streaming job for bench/agent_bench.py: Kafka to Spark's ``noop`` sink, as fast as Spark goes.

It never heard of this product (no import of it, its own argparse). Its batches are as light as a
Kafka batch gets, so a fixed cost the agent added to each batch would show most clearly here.
"""

import argparse

from pyspark.sql import SparkSession

p = argparse.ArgumentParser()
p.add_argument("--brokers", required=True)
p.add_argument("--topic", required=True)
p.add_argument("--checkpoint", required=True)
a = p.parse_args()
spark = SparkSession.builder.appName("noop-stream").getOrCreate()
(spark.readStream.format("kafka").option("kafka.bootstrap.servers", a.brokers).option("subscribe", a.topic)
 .option("startingOffsets", "earliest").load()
 .writeStream.format("noop").option("checkpointLocation", a.checkpoint).trigger(processingTime="0 seconds")
 .start().awaitTermination())
