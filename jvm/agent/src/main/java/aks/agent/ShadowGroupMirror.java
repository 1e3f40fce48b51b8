package aks.agent;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.streaming.SourceProgress;
import org.apache.spark.sql.streaming.StreamingQueryProgress;
import scala.Tuple2;

/**
 * The shadow-group mirror: commits each finished batch's Kafka end offsets to a
 * consumer group nobody consumes with, so Kafka's own lag tools (kafka-consumer-groups, Burrow,
 * kafka-lag-exporter) see a Structured Streaming job, which never commits to a group itself. The
 * JVM twin of {@code airflow_kafka_spark.jobs.listener} (PySpark only), with the same rules:
 *
 * <ul>
 *   <li><b>Which offsets</b>: {@code onQueryProgress} is posted after the batch's {@code commits/N}
 *       is written, and each Kafka source's {@code endOffset} in it is that batch's end: the
 *       checkpoint's committed position {@code C}. A query's Kafka sources are merged per
 *       topic-partition (the lower offset when two sources read the same partition).
 *   <li><b>Which queries</b>: those whose checkpoint is {@code spark.aks.agent.checkpoint} (the one
 *       the product manages and measures lag from); other queries of the application are ignored,
 *       logged once. Without that conf every query is mirrored, merged per topic-partition (the
 *       lowest offset: the position every query has passed).
 *   <li><b>Never a risk to the query</b>: the group's offsets are never read; the group is only
 *       described (one with live members is refused: its position belongs to a real consumer) and
 *       committed to. One daemon thread commits, always the <i>latest</i> offsets it was handed
 *       (older ones are dropped, not queued), at most every {@code minIntervalMs}; the listener
 *       bus never waits on Kafka. A failed commit is logged and retried with the next progress; it
 *       never fails the query. On query termination the last offsets are flushed (bounded by
 *       {@code flushTimeoutMs}) before the driver can exit.
 * </ul>
 *
 * <p>Kafka's Java client comes with Spark's Kafka connector; this class names none of its types.
 * {@link KafkaGroupAdmin}, which does, is loaded by name the first time a commit is attempted, so an
 * application without {@code spark.aks.agent.mirror.group} never loads it, and one without
 * kafka-clients on its classpath gets one log line and no mirror.
 *
 * <p>Client settings: {@code spark.aks.agent.mirror.kafka.<key>} (bootstrap servers and the
 * non-secret keys the product forwards), then the properties file
 * {@code spark.aks.agent.mirror.propertiesFile}, if set, for anything secret: a command line's
 * {@code --conf} is visible to every user of the host in {@code ps}.
 */
final class ShadowGroupMirror {
  static final String PREFIX = AgentConf.PREFIX + "mirror.";
  /** The shadow consumer group; setting it switches the mirror on. */
  static final String GROUP = PREFIX + "group";
  /** Kafka admin client settings, {@code spark.aks.agent.mirror.kafka.bootstrap.servers=...}. */
  static final String KAFKA = PREFIX + "kafka.";
  /** A Java properties file (local path or Hadoop path as the driver sees it) with more settings. */
  static final String PROPERTIES_FILE = PREFIX + "propertiesFile";
  static final String MIN_INTERVAL_MS = PREFIX + "minIntervalMs";
  static final String FLUSH_TIMEOUT_MS = PREFIX + "flushTimeoutMs";
  static final String TIMEOUT_MS = PREFIX + "timeoutMs";

  /** What the Kafka side must do; {@link KafkaGroupAdmin} is the one implementation. */
  interface GroupAdmin extends AutoCloseable {
    /** Live members of the group as {@code client@host}; empty for an empty or unknown group. */
    java.util.List<String> members(String group, long timeoutMs) throws Exception;

    void commit(String group, Map<String, Map<Integer, Long>> offsets, long timeoutMs) throws Exception;

    @Override
    void close();
  }

  private static volatile ShadowGroupMirror instance;

  final String group;
  private final Map<String, String> clientConf;
  private final String checkpoint; // qualified, or null: mirror every query
  private final long minIntervalMs;
  private final long flushTimeoutMs;
  private final long timeoutMs;
  private final Object lock = new Object();
  private final Map<String, Map<String, Map<Integer, Long>>> byQuery = new LinkedHashMap<>();
  private final Map<String, String> rootOf = new HashMap<>();
  private final java.util.Set<String> ignored = new java.util.HashSet<>();
  private Map<String, Map<Integer, Long>> pending;
  private long pendingBatch = -1;
  private boolean busy;
  private boolean flushing;
  private long lastCommitNanos;
  private GroupAdmin admin;
  private boolean unavailable;
  // what the report shows
  private Map<String, Map<Integer, Long>> committed;
  private Long committedBatch;
  private String committedAt;
  private long commits;
  private long errors;
  private long refused;
  private String lastProblem;

  private ShadowGroupMirror(String group, Map<String, String> clientConf, String checkpoint, long minIntervalMs,
      long flushTimeoutMs, long timeoutMs) {
    this.group = group;
    this.clientConf = clientConf;
    this.checkpoint = checkpoint;
    this.minIntervalMs = minIntervalMs;
    this.flushTimeoutMs = flushTimeoutMs;
    this.timeoutMs = timeoutMs;
    Thread t = new Thread(this::run, "aks-agent-mirror-" + group);
    t.setDaemon(true); // never keeps the user's application alive
    t.start();
  }

  /** The application's one mirror when {@code spark.aks.agent.mirror.group} is set, else null. */
  static synchronized ShadowGroupMirror forConf(SparkConf conf) {
    if (instance != null || conf == null) {
      return instance;
    }
    String group = conf.get(GROUP, "").trim();
    if (group.isEmpty()) {
      return null;
    }
    Map<String, String> all = new HashMap<>();
    for (Tuple2<String, String> kv : conf.getAllWithPrefix(AgentConf.PREFIX)) {
      all.put(AgentConf.PREFIX + kv._1(), kv._2());
    }
    Map<String, String> client = new TreeMap<>();
    for (Map.Entry<String, String> e : all.entrySet()) {
      if (e.getKey().startsWith(KAFKA)) {
        client.put(e.getKey().substring(KAFKA.length()), e.getValue());
      }
    }
    String file = all.get(PROPERTIES_FILE);
    if (file != null && !file.trim().isEmpty()) {
      try {
        for (Map.Entry<Object, Object> e : readProperties(file.trim()).entrySet()) {
          client.put(e.getKey().toString(), e.getValue().toString());
        }
      } catch (IOException | RuntimeException e) {
        Log.warn("mirror: could not read " + PROPERTIES_FILE + "=" + file + "; group " + group + " is not mirrored", e);
        return null;
      }
    }
    if (client.get("bootstrap.servers") == null) {
      Log.warn("mirror: no " + KAFKA + "bootstrap.servers (nor in the properties file): group " + group
          + " is not mirrored");
      return null;
    }
    instance = new ShadowGroupMirror(group, client, qualified(all.get(AgentConf.CHECKPOINT)),
        AgentConf.millis(all, MIN_INTERVAL_MS, 1000), AgentConf.millis(all, FLUSH_TIMEOUT_MS, 10_000),
        AgentConf.millis(all, TIMEOUT_MS, 10_000));
    Log.info("mirror: committing each batch's Kafka end offsets to group " + group + " ("
        + client.get("bootstrap.servers") + (instance.checkpoint == null ? ", every query" : ", checkpoint "
        + instance.checkpoint) + ")");
    return instance;
  }

  /** The report's {@code mirror} section, or null without a mirror. */
  static Map<String, Object> section() { // not synchronized on the class: Report holds its own lock here
    ShadowGroupMirror m = instance;
    return m == null ? null : m.state();
  }

  // -- from the listener (never blocks on Kafka, except the bounded flush at termination) -------------

  void started(String queryId, String root) {
    synchronized (lock) {
      if (root != null) {
        rootOf.put(queryId, Gate.norm(root));
      }
    }
  }

  void progress(StreamingQueryProgress p) {
    String id = p.id().toString();
    Map<String, Map<Integer, Long>> offsets = new TreeMap<>();
    for (SourceProgress s : p.sources()) {
      String d = s.description();
      if (d == null || !d.startsWith("Kafka") || s.endOffset() == null) {
        continue;
      }
      try {
        KafkaOffsetsJson.mergeMin(offsets, KafkaOffsetsJson.parse(s.endOffset()));
      } catch (RuntimeException e) {
        Log.warn("mirror: skipping an unreadable Kafka endOffset of " + d + ": " + e.getMessage());
      }
    }
    if (offsets.isEmpty()) {
      return;
    }
    synchronized (lock) {
      if (!mine(id, p.name())) {
        return;
      }
      byQuery.put(id, offsets);
      Map<String, Map<Integer, Long>> merged = new TreeMap<>();
      for (Map<String, Map<Integer, Long>> q : byQuery.values()) {
        KafkaOffsetsJson.mergeMin(merged, q);
      }
      pending = merged;
      pendingBatch = p.batchId();
      lock.notifyAll();
    }
  }

  /** The query ended: its last offsets reach Kafka (or the timeout passes) before this returns. */
  void terminated(String queryId) {
    synchronized (lock) {
      if (!byQuery.containsKey(queryId)) {
        return;
      }
    }
    if (!flush(flushTimeoutMs)) {
      Log.warn("mirror: the last offsets did not reach group " + group + " within " + flushTimeoutMs + " ms");
    }
  }

  boolean flush(long timeout) {
    long deadline = System.nanoTime() + timeout * 1_000_000L;
    synchronized (lock) {
      flushing = true; // no throttling for the last word
      lock.notifyAll();
      try {
        while (pending != null || busy) {
          long left = (deadline - System.nanoTime()) / 1_000_000L;
          if (left <= 0) {
            return false;
          }
          lock.wait(left);
        }
        return true;
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      } finally {
        flushing = false;
      }
    }
  }

  private boolean mine(String queryId, String name) {
    if (checkpoint == null) {
      return true;
    }
    String root = rootOf.get(queryId);
    if (root == null || root.equals(checkpoint)) {
      return true; // a checkpoint Spark hides cannot be told apart: mirrored
    }
    if (ignored.add(queryId)) {
      Log.info("mirror: query " + queryId + " (" + name + ", checkpoint " + root + ") is not the job's checkpoint "
          + checkpoint + ": not mirrored to " + group);
    }
    return false;
  }

  // -- the committer thread ------------------------------------------------------------------------------

  private void run() {
    while (true) {
      Map<String, Map<Integer, Long>> offsets;
      long batch;
      synchronized (lock) {
        try {
          while (pending == null) {
            lock.wait();
          }
          long wait = (lastCommitNanos + minIntervalMs * 1_000_000L - System.nanoTime()) / 1_000_000L;
          if (wait > 0 && !flushing && lastCommitNanos != 0) {
            lock.wait(wait); // newer offsets may replace the pending ones meanwhile
            continue;
          }
        } catch (InterruptedException e) {
          return;
        }
        offsets = pending;
        batch = pendingBatch;
        pending = null;
        busy = true;
      }
      try {
        commit(offsets, batch);
      } catch (Throwable t) { // never let mirroring hurt the query (LinkageError included)
        problem("committing batch " + batch + " to group " + group + " failed: " + firstLine(t), true);
      } finally {
        synchronized (lock) {
          busy = false;
          lastCommitNanos = System.nanoTime();
          lock.notifyAll();
        }
      }
    }
  }

  private void commit(Map<String, Map<Integer, Long>> offsets, long batch) throws Exception {
    GroupAdmin a = admin();
    if (a == null) {
      return;
    }
    java.util.List<String> members = a.members(group, timeoutMs);
    if (!members.isEmpty()) {
      synchronized (lock) {
        refused++;
      }
      problem("consumer group " + group + " has " + members.size() + " live member(s) (" + members.get(0)
          + "): it is a real consumer's group, not a mirror; not committed (stop those consumers or pick another "
          + "mirror_group)", false);
      return;
    }
    // Unchanged offsets are committed again on purpose: it keeps the group "alive" for Burrow.
    a.commit(group, offsets, timeoutMs);
    synchronized (lock) {
      committed = offsets;
      committedBatch = batch;
      committedAt = Instant.now().toString();
      commits++;
      if (lastProblem != null) {
        Log.info("mirror: committing to group " + group + " works again (batch " + batch + ")");
      }
      lastProblem = null;
    }
  }

  private GroupAdmin admin() {
    if (admin != null || unavailable) {
      return admin;
    }
    Throwable failure;
    try {
      Class<?> c = Class.forName("aks.agent.KafkaGroupAdmin", true, ShadowGroupMirror.class.getClassLoader());
      admin = (GroupAdmin) c.getDeclaredConstructor(Map.class, long.class).newInstance(clientConf, timeoutMs);
      return admin;
    } catch (java.lang.reflect.InvocationTargetException e) {
      failure = e.getCause() != null ? e.getCause() : e;
    } catch (LinkageError | ReflectiveOperationException | RuntimeException e) {
      failure = e;
    }
    if (failure instanceof LinkageError || failure instanceof ClassNotFoundException) {
      unavailable = true; // not on this classpath now, nor later: no retry per batch
      problem("Kafka's Java client (kafka-clients) is not on the driver's classpath: group " + group
          + " is not mirrored (" + failure + ")", true);
    } else {
      problem("could not create a Kafka admin client for group " + group + ": " + firstLine(failure), true);
    }
    return null;
  }

  /** Logs a problem when it differs from the previous one (a broker down for an hour is one line). */
  private void problem(String text, boolean error) {
    boolean fresh;
    synchronized (lock) {
      if (error) {
        errors++;
      }
      fresh = !text.equals(lastProblem);
      lastProblem = text;
    }
    if (fresh) {
      Log.warn("mirror: " + text);
    }
  }

  private Map<String, Object> state() {
    synchronized (lock) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("group", group);
      m.put("checkpoint", checkpoint);
      m.put("committed", committed == null ? null : new LinkedHashMap<>(committed));
      m.put("committed_batch", committedBatch);
      m.put("committed_at", committedAt);
      m.put("commits", commits);
      m.put("errors", errors);
      m.put("refused", refused);
      m.put("last_problem", lastProblem);
      return m;
    }
  }

  // -- helpers -------------------------------------------------------------------------------------------

  private static String qualified(String checkpoint) {
    if (checkpoint == null || checkpoint.trim().isEmpty()) {
      return null;
    }
    try {
      Path p = new Path(checkpoint.trim());
      return Gate.norm(p.getFileSystem(Report.hadoopConf()).makeQualified(p).toString());
    } catch (IOException | RuntimeException e) {
      return Gate.norm(checkpoint.trim());
    }
  }

  private static Properties readProperties(String location) throws IOException {
    byte[] bytes;
    if (!location.contains(":") && Files.isRegularFile(Paths.get(location))) {
      bytes = Files.readAllBytes(Paths.get(location)); // e.g. shipped with --files into the working directory
    } else {
      Path p = new Path(location);
      FileSystem fs = p.getFileSystem(Report.hadoopConf());
      try (InputStream in = fs.open(p)) {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        in.transferTo(buf);
        bytes = buf.toByteArray();
      }
    }
    Properties props = new Properties();
    props.load(new ByteArrayInputStream(bytes));
    return props;
  }

  static String firstLine(Throwable t) {
    String s = String.valueOf(t.getMessage() == null ? t.toString() : t.getClass().getSimpleName() + ": "
        + t.getMessage());
    int nl = s.indexOf('\n');
    return nl < 0 ? s : s.substring(0, nl);
  }
}
