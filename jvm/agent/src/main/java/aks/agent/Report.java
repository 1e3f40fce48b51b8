package aks.agent;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * What the agent observed, kept in memory and written as one small JSON file through Hadoop's
 * FileSystem (so beside a checkpoint on HDFS or S3 as well as on local disk).
 *
 * <p>Why the whole document every time: a reader (the product's stop step and health gate) must
 * never see half a report, and the last write must contain everything: the file is written to a
 * temporary name and renamed over the previous one. The report only states what happened: a stop's
 * boundary claim is read back from the checkpoint's own files after the query ended.
 */
final class Report {
  static final int SCHEMA = 1;
  private static final Map<String, Object> APP = new LinkedHashMap<>();
  private static final Map<String, Map<String, Object>> QUERIES = new LinkedHashMap<>();
  private static Map<String, Object> stop;
  private static Path path;
  private static Configuration hadoopConf;
  private static org.apache.spark.SparkContext context;

  private Report() {}

  /** The application id is assigned after plugins start: it is read from the context when written. */
  static synchronized void configure(
      String reportPath, Configuration conf, Map<String, Object> app, org.apache.spark.SparkContext sc) {
    context = sc;
    path = reportPath == null || reportPath.trim().isEmpty() ? null : new Path(reportPath.trim());
    hadoopConf = conf;
    APP.putAll(app);
  }

  static synchronized Configuration hadoopConf() {
    return hadoopConf != null ? hadoopConf : new Configuration();
  }

  /** The record of one query run, created on first sight. */
  static synchronized Map<String, Object> query(String runId) {
    return QUERIES.computeIfAbsent(runId, k -> {
      Map<String, Object> q = new LinkedHashMap<>();
      q.put("run_id", k);
      return q;
    });
  }

  static synchronized Map<String, Object> stop() {
    if (stop == null) {
      stop = new LinkedHashMap<>();
    }
    return stop;
  }

  static synchronized boolean hasStop() {
    return stop != null;
  }

  static String now() {
    return Instant.now().toString();
  }

  static synchronized String render() {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("schema", SCHEMA);
    doc.put("agent", "aks-agent");
    doc.putAll(APP);
    if (doc.get("application_id") == null && context != null) {
      try {
        doc.put("application_id", context.applicationId());
      } catch (RuntimeException e) {
        // not assigned yet
      }
    }
    doc.put("file_manager_delegate", Delegate.seenClass());
    doc.put("updated_at", now());
    List<Object> queries = new ArrayList<>(QUERIES.values());
    doc.put("queries", queries);
    doc.put("stop", stop == null ? null : new LinkedHashMap<>(stop));
    Map<String, Object> mirror = ShadowGroupMirror.section();
    if (mirror != null) {
      doc.put("mirror", mirror);
    }
    Map<String, Object> dstream = DStreams.section();
    if (dstream != null) {
      doc.put("dstream", dstream);
    }
    Map<String, Object> probe = Probe.section();
    if (probe != null) {
      doc.put("probe", probe);
    }
    return Json.write(doc);
  }

  /** Writes the report (best effort: a report that cannot be written never fails the job). */
  static void write() {
    Path target;
    Configuration conf;
    String text;
    synchronized (Report.class) {
      target = path;
      conf = hadoopConf();
      text = render();
      if (target == null) {
        return;
      }
      try {
        writeAtomically(target, conf, text.getBytes(StandardCharsets.UTF_8));
      } catch (IOException | RuntimeException e) {
        Log.warn("could not write the report " + target, e);
      }
    }
  }

  private static void writeAtomically(Path target, Configuration conf, byte[] bytes) throws IOException {
    FileSystem fs = target.getFileSystem(conf);
    if (fs instanceof LocalFileSystem) {
      fs = ((LocalFileSystem) fs).getRaw(); // no .crc files beside the checkpoint
    }
    Path parent = target.getParent();
    if (parent != null) {
      fs.mkdirs(parent);
    }
    Path tmp = new Path(parent, "." + target.getName() + "." + UUID.randomUUID() + ".tmp");
    try (OutputStream out = fs.create(tmp, true)) {
      out.write(bytes);
    }
    if (!fs.rename(tmp, target)) { // HDFS refuses to rename over a file: replace it
      fs.delete(target, false);
      if (!fs.rename(tmp, target)) {
        fs.delete(tmp, false);
        throw new IOException("rename " + tmp + " -> " + target + " failed");
      }
    }
  }
}
