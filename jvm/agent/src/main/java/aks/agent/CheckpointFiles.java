package aks.agent;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Reads back what the checkpoint says, through Hadoop's FileSystem: the report's boundary claim
 * comes from the files Spark will resume from, not from what the agent believes it did.
 */
final class CheckpointFiles {
  private CheckpointFiles() {}

  /** Newest numeric file name in {@code <root>/<log>}, -1 if none, null if it cannot be read. */
  static Long newest(String root, String log) {
    try {
      Path dir = new Path(root, log);
      FileSystem fs = dir.getFileSystem(Report.hadoopConf());
      if (!fs.exists(dir)) {
        return -1L;
      }
      long newest = -1;
      for (FileStatus st : fs.listStatus(dir)) {
        newest = Math.max(newest, Gate.batchId(st.getPath()));
      }
      return newest;
    } catch (IOException | RuntimeException e) {
      Log.warn("could not list " + root + "/" + log, e);
      return null;
    }
  }

  /** {offsets, commits, on_boundary} of a checkpoint as its files say now. */
  static Map<String, Object> boundary(String root) {
    Map<String, Object> out = new LinkedHashMap<>();
    Long offsets = newest(root, "offsets");
    Long commits = newest(root, "commits");
    out.put("last_offsets_batch", offsets == null || offsets < 0 ? null : offsets);
    out.put("last_committed_batch", commits == null || commits < 0 ? null : commits);
    boolean known = offsets != null && commits != null;
    out.put("on_boundary", known ? offsets.longValue() == commits.longValue() : null);
    out.put("cut_batch", known && offsets > commits ? offsets : null);
    return out;
  }

  /**
   * The initial offsets each source folder holds ({@code <root>/sources/<i>/0}), as JSON: where
   * batch 0 of a fresh checkpoint started. Spark's Kafka source writes a zero byte and a version
   * line before the JSON; both are skipped.
   */
  static Map<String, Object> initialOffsets(String root) {
    Map<String, Object> out = new LinkedHashMap<>();
    try {
      Path dir = new Path(root, "sources");
      FileSystem fs = dir.getFileSystem(Report.hadoopConf());
      if (!fs.exists(dir)) {
        return out;
      }
      for (FileStatus src : fs.listStatus(dir)) {
        Path zero = new Path(src.getPath(), "0");
        if (!src.isDirectory() || !fs.exists(zero)) {
          continue;
        }
        String text;
        try (InputStream in = fs.open(zero)) {
          ByteArrayOutputStream buf = new ByteArrayOutputStream();
          in.transferTo(buf);
          text = new String(buf.toByteArray(), StandardCharsets.UTF_8);
        }
        int brace = text.indexOf('{');
        out.put(src.getPath().getName(), brace >= 0 ? Json.raw(text.substring(brace)) : text.trim());
      }
    } catch (IOException | RuntimeException e) {
      Log.warn("could not read the initial offsets under " + root, e);
    }
    return out;
  }
}
