package com.example.payments;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.spark.SparkConf;
import org.apache.spark.TaskContext;
import org.apache.spark.streaming.Durations;
import org.apache.spark.streaming.api.java.JavaInputDStream;
import org.apache.spark.streaming.api.java.JavaStreamingContext;
import org.apache.spark.streaming.kafka010.CanCommitOffsets;
import org.apache.spark.streaming.kafka010.ConsumerStrategies;
import org.apache.spark.streaming.kafka010.HasOffsetRanges;
import org.apache.spark.streaming.kafka010.KafkaUtils;
import org.apache.spark.streaming.kafka010.LocationStrategies;
import org.apache.spark.streaming.kafka010.OffsetRange;

/**
 * A user's Spark Streaming application: Kafka payments to text files, written the way the Kafka
 * integration guide recommends (direct stream, its own consumer group, offsets committed with
 * {@code commitAsync} after the output is stored).
 *
 * <p>One positional argument, a {@code .properties} file with {@code bootstrap.servers},
 * {@code topics} (comma-separated), {@code group.id}, {@code output} and optionally
 * {@code batch.seconds}. A new group starts from {@code earliest}. Each batch writes, per Kafka
 * partition, one file {@code <output>/<topic>-<partition>-<from>-<until>.tsv} (one line per record:
 * topic, partition, offset, value), atomically (temporary name, then rename). The output is keyed by
 * the Kafka position: a record read again has the same (topic, partition, offset) key, so readers
 * take each key once. It knows nothing of any stop protocol: it waits for its context to end.
 */
public final class PaymentsStream {
  private PaymentsStream() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: PaymentsStream <payments.properties>");
      System.exit(2);
    }
    Properties p = new Properties();
    try (InputStream in = new FileInputStream(args[0])) {
      p.load(in);
    }
    String output = require(p, "output");
    SparkConf conf = new SparkConf().setAppName("payments-dstream");
    JavaStreamingContext ssc = new JavaStreamingContext(conf,
        Durations.seconds(Long.parseLong(p.getProperty("batch.seconds", "2"))));
    Map<String, Object> kafka = new HashMap<>();
    kafka.put("bootstrap.servers", require(p, "bootstrap.servers"));
    kafka.put("group.id", require(p, "group.id"));
    kafka.put("auto.offset.reset", "earliest");
    kafka.put("enable.auto.commit", false);
    kafka.put("key.deserializer", StringDeserializer.class);
    kafka.put("value.deserializer", StringDeserializer.class);
    JavaInputDStream<ConsumerRecord<String, String>> stream = KafkaUtils.createDirectStream(ssc,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.<String, String>Subscribe(Arrays.asList(require(p, "topics").split(",")), kafka));
    stream.foreachRDD(rdd -> {
      OffsetRange[] ranges = ((HasOffsetRanges) rdd.rdd()).offsetRanges();
      rdd.foreachPartition(records -> write(records, ranges[TaskContext.get().partitionId()], output));
      ((CanCommitOffsets) stream.inputDStream()).commitAsync(ranges);
    });
    ssc.start();
    ssc.awaitTermination();
    System.out.println("payments stream: context ended, leaving");
  }

  static void write(Iterator<ConsumerRecord<String, String>> records, OffsetRange range, String output)
      throws IOException {
    if (range.fromOffset() == range.untilOffset()) {
      return;
    }
    Path dir = Paths.get(output);
    Files.createDirectories(dir);
    String name = range.topic() + "-" + range.partition() + "-" + range.fromOffset() + "-" + range.untilOffset();
    Path tmp = dir.resolve("." + name + ".tmp");
    try (Writer out = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8)) {
      while (records.hasNext()) {
        ConsumerRecord<String, String> r = records.next();
        out.write(r.topic() + "\t" + r.partition() + "\t" + r.offset() + "\t" + r.value() + "\n");
      }
    }
    Files.move(tmp, dir.resolve(name + ".tsv"), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
  }

  private static String require(Properties p, String key) {
    String v = p.getProperty(key);
    if (v == null || v.trim().isEmpty()) {
      throw new IllegalArgumentException("missing " + key + " in the properties file");
    }
    return v.trim();
  }
}
