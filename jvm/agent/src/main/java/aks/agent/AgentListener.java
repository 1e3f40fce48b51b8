package aks.agent;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.streaming.SourceProgress;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * Registered through {@code spark.sql.streaming.streamingQueryListeners} (Spark builds one per
 * session's query manager): records each query run's identity, checkpoint and progress into the
 * {@link Report}, including batch 0's source offsets, kept apart because the product's health gate
 * checks that a reset's first batch started where the plan said.
 */
public final class AgentListener extends StreamingQueryListener {
  /** The shadow-group mirror, null unless {@code spark.aks.agent.mirror.group} is set. */
  private final ShadowGroupMirror mirror;

  public AgentListener() {
    this(org.apache.spark.SparkEnv.get() == null ? null : org.apache.spark.SparkEnv.get().conf());
  }

  public AgentListener(SparkConf conf) {
    mirror = ShadowGroupMirror.forConf(conf);
  }

  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    String runId = event.runId().toString();
    Queries.rememberStarting(runId); // on the stream thread: its session and its query are at hand
    String root = null;
    Object sink = null;
    for (StreamingQuery q : Queries.active()) {
      if (q.runId().equals(event.runId())) {
        root = Queries.checkpointRoot(q);
        sink = Queries.sinkOf(q);
      }
    }
    synchronized (Report.class) {
      Map<String, Object> q = Report.query(runId);
      q.put("id", event.id().toString());
      q.put("name", event.name());
      q.put("checkpoint", root);
      q.put("status", "active");
      q.put("started_at", Report.now());
      q.put("last_batch_id", null);
    }
    if (mirror != null) {
      mirror.started(event.id().toString(), root);
    }
    Report.write();
    Probe.checkStarted(runId, event.name(), sink, root);
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    StreamingQueryProgress p = event.progress();
    if (mirror != null) {
      mirror.progress(p); // hands the offsets to the mirror's thread; never waits on Kafka
    }
    Map<String, Object> progress = progress(p);
    synchronized (Report.class) {
      Map<String, Object> q = Report.query(p.runId().toString());
      q.putIfAbsent("id", p.id().toString());
      q.put("last_batch_id", p.batchId());
      q.put("last_progress", progress);
      q.putIfAbsent("first_progress", progress);
      if (p.batchId() == 0 && !q.containsKey("batch0")) {
        Map<String, Object> b0 = new LinkedHashMap<>(progress);
        Object root = q.get("checkpoint");
        b0.put("initial_offsets", root == null ? null : CheckpointFiles.initialOffsets(root.toString()));
        q.put("batch0", b0);
      }
    }
    Report.write();
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {
    String runId = event.runId().toString();
    Queries.forget(runId);
    if (mirror != null) {
      mirror.terminated(event.id().toString()); // the final position reaches the group before the driver exits
    }
    synchronized (Report.class) {
      Map<String, Object> q = Report.query(runId);
      q.put("terminated_at", Report.now());
      q.put("exception", event.exception().isDefined() ? firstLine(event.exception().get()) : null);
      if (!"stopped_by_agent".equals(q.get("status"))) {
        q.put("status", event.exception().isDefined() ? "failed" : "terminated");
      }
      Object root = q.get("checkpoint");
      if (root != null) {
        q.put("at_end", CheckpointFiles.boundary(root.toString()));
      }
    }
    Report.write();
  }

  static Map<String, Object> progress(StreamingQueryProgress p) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("batch_id", p.batchId());
    m.put("timestamp", p.timestamp());
    m.put("num_input_rows", p.numInputRows());
    List<Object> sources = new ArrayList<>();
    for (SourceProgress s : p.sources()) {
      Map<String, Object> src = new LinkedHashMap<>();
      src.put("description", s.description());
      src.put("start_offset", Json.raw(s.startOffset()));
      src.put("end_offset", Json.raw(s.endOffset()));
      src.put("num_input_rows", s.numInputRows());
      sources.add(src);
    }
    m.put("sources", sources);
    return m;
  }

  private static String firstLine(String s) {
    int nl = s.indexOf('\n');
    return nl < 0 ? s : s.substring(0, nl);
  }
}
