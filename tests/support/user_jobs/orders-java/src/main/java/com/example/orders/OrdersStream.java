package com.example.orders;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import java.util.Properties;
import org.apache.spark.api.java.function.VoidFunction2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;

/**
 * A user's streaming application: Kafka topic to JSON lines, one folder per micro-batch.
 *
 * <p>Takes one positional argument, a {@code .properties} file with {@code bootstrap.servers},
 * {@code topic}, {@code checkpoint}, {@code output} (and optionally {@code trigger.seconds}).
 * Starts from {@code earliest}. Each batch's rows are written per Kafka partition to
 * {@code <output>/topic=<t>/partition=<p>/from=<first offset>/} in overwrite mode, keyed by the
 * Kafka position rather than the batch id: a replayed batch covers the same range and rewrites the
 * same folders, and a new checkpoint (whose batch ids start at 0 again) never overwrites an older
 * query's output. It knows nothing of any stop protocol: it waits for its query to end and returns.
 */
public final class OrdersStream {
  private OrdersStream() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: OrdersStream <orders.properties>");
      System.exit(2);
    }
    Properties p = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      p.load(in);
    }
    String output = require(p, "output").replaceAll("/+$", "");
    SparkSession spark = SparkSession.builder().appName("orders-stream-java").getOrCreate();
    Dataset<Row> source = spark.readStream().format("kafka")
        .option("kafka.bootstrap.servers", require(p, "bootstrap.servers"))
        .option("subscribe", require(p, "topic"))
        .option("startingOffsets", "earliest")
        .load();
    VoidFunction2<Dataset<Row>, Long> sink = (batch, id) -> writeByPosition(batch, output);
    StreamingQuery query = Transform.rows(source)
        .writeStream()
        .queryName("orders")
        .option("checkpointLocation", require(p, "checkpoint"))
        .trigger(Trigger.ProcessingTime(p.getProperty("trigger.seconds", "1") + " seconds"))
        .foreachBatch(sink)
        .start();
    query.awaitTermination();
    System.out.println("orders stream: query ended, leaving");
  }

  private static void writeByPosition(Dataset<Row> batch, String output) {
    batch.persist();
    try {
      List<Row> starts = batch.groupBy("topic", "partition").agg(functions.min("offset")).collectAsList();
      for (Row r : starts) {
        String topic = r.getString(0);
        int partition = r.getInt(1);
        batch.where(functions.col("topic").equalTo(topic).and(functions.col("partition").equalTo(partition)))
            .write().mode("overwrite")
            .json(output + "/topic=" + topic + "/partition=" + partition + "/from=" + r.getLong(2));
      }
    } finally {
      batch.unpersist();
    }
  }

  private static String require(Properties p, String key) throws IOException {
    String v = p.getProperty(key);
    if (v == null || v.trim().isEmpty()) {
      throw new IOException("missing property " + key);
    }
    return v.trim();
  }
}
