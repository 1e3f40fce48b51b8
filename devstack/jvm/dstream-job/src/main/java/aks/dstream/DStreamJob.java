package aks.dstream;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.spark.SparkConf;
import org.apache.spark.streaming.Durations;
import org.apache.spark.streaming.api.java.JavaInputDStream;
import org.apache.spark.streaming.api.java.JavaStreamingContext;
import org.apache.spark.streaming.kafka010.ConsumerStrategies;
import org.apache.spark.streaming.kafka010.KafkaUtils;
import org.apache.spark.streaming.kafka010.LocationStrategies;

/**
 * The DStream reference job: the field reports' Spark Streaming direct-API job. Each batch writes its
 * records to an idempotent sink (one file per topic-partition-offset: a replay overwrites) and an
 * append sink (one line per record: a replay shows as duplicates), then {@code commitAsync}s its offset
 * ranges to the consumer group -- which Spark only queues and sends during the next batch. With
 * {@code --checkpoint} the context is created through {@code getOrCreate}, so a restart deserializes
 * the DStream graph (and fails when the job's classes changed). A stop marker file is polled:
 * {@code now} stops with {@code stop(true, false)}, any other text (the product's "stop requested at ...")
 * with {@code stop(true, true)},
 * {@code after-data} stops right after the next batch that had records (the commit of that batch is lost).
 */
public final class DStreamJob {
  private DStreamJob() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> a = parse(argv);
    String checkpoint = a.get("checkpoint");
    JavaStreamingContext ssc;
    if (checkpoint != null && !checkpoint.isEmpty()) {
      ssc = JavaStreamingContext.getOrCreate(checkpoint, () -> create(a, checkpoint));
    } else {
      ssc = create(a, null);
    }
    Stops.watch(ssc, a.get("stop-marker"));
    Status.print("started", "\"build\":\"" + BatchOutput.BUILD + "\",\"restored\":" + Status.restored);
    ssc.start();
    ssc.awaitTermination();
    Status.print("stopped", "\"build\":\"" + BatchOutput.BUILD + "\"");
  }

  static JavaStreamingContext create(Map<String, String> a, String checkpoint) {
    Status.restored = false;
    SparkConf conf = new SparkConf().setAppName(a.getOrDefault("app-name", "dstream-reference"))
        .set("spark.streaming.stopGracefullyOnShutdown", "true");
    JavaStreamingContext ssc = new JavaStreamingContext(conf,
        Durations.milliseconds(Long.parseLong(a.getOrDefault("batch-ms", "3000"))));
    if (checkpoint != null) {
      ssc.checkpoint(checkpoint);
    }
    Map<String, Object> kafka = new HashMap<>();
    kafka.put("bootstrap.servers", a.get("bootstrap"));
    kafka.put("group.id", a.get("group"));
    kafka.put("auto.offset.reset", a.getOrDefault("auto-offset-reset", "earliest"));
    kafka.put("enable.auto.commit", false);
    kafka.put("key.deserializer", StringDeserializer.class);
    kafka.put("value.deserializer", StringDeserializer.class);
    JavaInputDStream<ConsumerRecord<String, String>> stream = KafkaUtils.createDirectStream(ssc,
        LocationStrategies.PreferConsistent(),
        ConsumerStrategies.<String, String>Subscribe(Arrays.asList(a.get("topic").split(",")), kafka));
    stream.foreachRDD(new BatchOutput(stream, a.get("sink"), a.get("stop-marker")));
    return ssc;
  }

  static Map<String, String> parse(String[] argv) {
    Map<String, String> out = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) {
      if (!argv[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --name value pairs, got " + argv[i]);
      }
      out.put(argv[i].substring(2), argv[i + 1]);
    }
    for (String required : new String[] {"topic", "group", "bootstrap", "sink"}) {
      if (!out.containsKey(required)) {
        throw new IllegalArgumentException("missing --" + required);
      }
    }
    return out;
  }

  /** Reads the stop marker; "" when it is absent. */
  static String marker(String path) {
    if (path == null) {
      return "";
    }
    Path p = Paths.get(path);
    try {
      if (!Files.exists(p)) {
        return "";
      }
      String m = Files.readString(p).trim().toLowerCase();
      return m.isEmpty() ? "graceful" : m;
    } catch (java.io.IOException e) {
      return "";
    }
  }
}
