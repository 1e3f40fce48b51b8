package aks.dstream;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.Iterator;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.streaming.kafka010.OffsetRange;

/** The two sinks, written on the executors (one task per Kafka partition per batch). */
final class Sinks {
  private Sinks() {}

  static void write(JavaRDD<ConsumerRecord<String, String>> rdd, String sinkDir) {
    rdd.foreachPartition(records -> writePartition(records, sinkDir));
  }

  static void writePartition(Iterator<ConsumerRecord<String, String>> records, String sinkDir) throws IOException {
    Path idem = Paths.get(sinkDir, "idempotent");
    Path append = Paths.get(sinkDir, "append");
    Files.createDirectories(idem);
    Files.createDirectories(append);
    Writer out = null;
    try {
      while (records.hasNext()) {
        ConsumerRecord<String, String> r = records.next();
        String key = r.topic() + "-" + r.partition() + "-" + r.offset();
        String line = r.topic() + "\t" + r.partition() + "\t" + r.offset() + "\t" + r.value() + "\n";
        Path tmp = idem.resolve("." + key + ".tmp");
        Files.writeString(tmp, line);
        Files.move(tmp, idem.resolve(key), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        if (out == null) {
          Path log = append.resolve(r.topic() + "-" + r.partition() + ".log");
          boolean torn = endsTorn(log);
          out = new OutputStreamWriter(new FileOutputStream(log.toFile(), true), StandardCharsets.UTF_8);
          if (torn) {
            out.write("\n"); // a killed run left half a line: end it, so this record starts clean
          }
        }
        out.write(line);
      }
    } finally {
      if (out != null) {
        out.close();
      }
    }
  }

  static boolean endsTorn(Path log) throws IOException {
    if (!Files.exists(log) || Files.size(log) == 0) {
      return false;
    }
    try (java.io.RandomAccessFile f = new java.io.RandomAccessFile(log.toFile(), "r")) {
      f.seek(f.length() - 1);
      return f.read() != '\n';
    }
  }

  static String rangesJson(OffsetRange[] ranges) {
    StringBuilder b = new StringBuilder("[");
    for (int i = 0; i < ranges.length; i++) {
      OffsetRange o = ranges[i];
      b.append(i == 0 ? "" : ",").append("{\"topic\":\"").append(o.topic()).append("\",\"partition\":")
          .append(o.partition()).append(",\"from\":").append(o.fromOffset()).append(",\"until\":")
          .append(o.untilOffset()).append('}');
    }
    return b.append(']').toString();
  }
}
