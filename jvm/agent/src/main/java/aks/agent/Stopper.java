package aks.agent;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.streaming.StreamingQuery;

/**
 * The driver-side loop: looks for the stop marker, and once it exists closes the {@link Gate} and
 * stops every active query when it is between batches (or held at the gate), then records the
 * outcome read back from the checkpoint's files.
 *
 * <p>It keeps running after the first stop: a query the application starts later (or that was
 * still initializing when the marker appeared) meets the closed gate and is stopped as well, so
 * the user's {@code awaitTermination()} returns and the application ends by itself.
 */
final class Stopper implements Runnable {
  private final Path marker;
  private final long pollMs;
  private final long timeoutMs;
  private final long testDelayMs;
  private final Set<String> handled = new HashSet<>();
  private volatile boolean running = true;
  /** Held while a query is being stopped and its outcome recorded: the driver's shutdown waits for it. */
  private final java.util.concurrent.locks.ReentrantLock inFlight = new java.util.concurrent.locks.ReentrantLock();
  private long requestedAt = -1;

  Stopper(Path marker, long pollMs, long timeoutMs, long testDelayMs) {
    this.marker = marker;
    this.pollMs = pollMs;
    this.timeoutMs = timeoutMs;
    this.testDelayMs = testDelayMs;
  }

  /**
   * Stops the loop, first letting a stop in progress record its outcome. Why wait: the user's
   * {@code awaitTermination()} returns as soon as the query ended, so the application may already
   * be shutting down while this thread (a daemon, killed at JVM exit) reads the checkpoint back.
   */
  void shutdown(long waitMs) {
    running = false;
    try {
      if (inFlight.tryLock(waitMs, java.util.concurrent.TimeUnit.MILLISECONDS)) {
        inFlight.unlock();
      } else {
        Log.warn("shutdown: a stop still in progress after " + waitMs + " ms; its outcome may be missing");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void run() {
    while (running) {
      try {
        if (requestedAt < 0 && markerExists()) {
          requestedAt = System.currentTimeMillis();
          Gate.requestStop();
          synchronized (Report.class) {
            Map<String, Object> s = Report.stop();
            s.put("marker", marker.toString());
            s.put("requested_at", Report.now());
            s.put("finished_at", null);
            s.put("duration_ms", null);
            s.put("queries_stopped", 0);
            s.put("stopped_on_boundary", null);
          }
          Log.info("stop marker " + marker + " found: no new batch is planned from now on");
          Report.write();
        }
        if (requestedAt >= 0) {
          stopActiveQueries();
        }
        DStreams.poll(requestedAt >= 0, requestedAt); // a DStream application's StreamingContext, if any
        Thread.sleep(pollMs);
      } catch (InterruptedException e) {
        return;
      } catch (RuntimeException | LinkageError e) {
        Log.warn("stop loop", e);
      }
    }
  }

  private boolean markerExists() {
    try {
      FileSystem fs = marker.getFileSystem(Report.hadoopConf());
      return fs.exists(marker);
    } catch (Exception e) {
      Log.warn("could not look for the stop marker " + marker, e);
      return false;
    }
  }

  private void stopActiveQueries() throws InterruptedException {
    List<StreamingQuery> queries = Queries.active();
    for (StreamingQuery q : queries) {
      String runId = q.runId().toString();
      if (handled.add(runId)) {
        inFlight.lock();
        try {
          stopOne(q, runId);
        } finally {
          inFlight.unlock();
        }
      }
    }
  }

  private void stopOne(StreamingQuery q, String runId) throws InterruptedException {
    long t0 = System.currentTimeMillis();
    String root = Queries.checkpointRoot(q);
    long left = Math.max(1, requestedAt + timeoutMs - t0);
    String how;
    if (root != null && Gate.knows(root)) {
      boolean quiet = Gate.awaitQuiet(root, left, q::isActive);
      if (quiet && testDelayMs > 0) {
        Thread.sleep(testDelayMs); // AgentConf.TEST_DELAY_STOP_MS: let the stream thread reach the gate
      }
      long[] g = Gate.snapshot(root);
      how = !quiet ? (q.isActive() ? "timeout" : "ended_while_waiting")
          : (g != null && g[2] >= 0 ? "held_at_gate" : "between_batches");
    } else {
      how = awaitFilesQuiet(root, left) ? "not_gated_files_quiet" : "not_gated_timeout";
    }
    long waited = System.currentTimeMillis() - t0;
    long s0 = System.currentTimeMillis();
    String error = null;
    try {
      q.stop();
    } catch (Exception e) {
      error = e.toString();
      Log.warn("query " + runId + " did not stop cleanly", e);
    }
    long stopMs = System.currentTimeMillis() - s0;
    Map<String, Object> outcome = root == null ? null : CheckpointFiles.boundary(root);
    boolean failed = q.exception().isDefined();
    boolean onBoundary = outcome != null && Boolean.TRUE.equals(outcome.get("on_boundary")) && error == null && !failed;
    long[] g = root == null ? null : Gate.snapshot(root);
    Log.info("query " + runId + " stopped (" + how + ", waited " + waited + " ms, stop " + stopMs + " ms): "
        + outcome);
    synchronized (Report.class) {
      Map<String, Object> rec = Report.query(runId);
      rec.putIfAbsent("id", q.id().toString());
      rec.putIfAbsent("name", q.name());
      if (rec.get("checkpoint") == null) {
        rec.put("checkpoint", root);
      }
      rec.put("status", "stopped_by_agent");
      Map<String, Object> st = new java.util.LinkedHashMap<>();
      st.put("how", how);
      st.put("waited_for_batch_ms", waited);
      st.put("stop_call_ms", stopMs);
      st.put("stop_error", error);
      st.put("query_failed", failed);
      st.put("held_before_batch", g == null || g[2] < 0 ? null : g[2]);
      if (outcome != null) {
        st.putAll(outcome);
      }
      st.put("stopped_on_boundary", onBoundary);
      rec.put("stop", st);
      Map<String, Object> s = Report.stop();
      int n = ((Number) s.getOrDefault("queries_stopped", 0)).intValue() + 1;
      s.put("queries_stopped", n);
      Object before = s.get("stopped_on_boundary");
      boolean all = (before == null || Boolean.TRUE.equals(before)) && Boolean.TRUE.equals(st.get("stopped_on_boundary"));
      s.put("stopped_on_boundary", all);
      s.put("last_committed_batch", outcome == null ? null : outcome.get("last_committed_batch"));
      s.put("finished_at", Report.now());
      s.put("duration_ms", System.currentTimeMillis() - requestedAt);
    }
    Report.write();
  }

  /** Without the gate only the files can tell: wait until every planned batch has its commit. */
  private boolean awaitFilesQuiet(String root, long timeoutMs) throws InterruptedException {
    if (root == null) {
      return false;
    }
    long deadline = System.currentTimeMillis() + timeoutMs;
    while (System.currentTimeMillis() < deadline) {
      Map<String, Object> b = CheckpointFiles.boundary(root);
      if (Boolean.TRUE.equals(b.get("on_boundary"))) {
        return true;
      }
      Thread.sleep(Math.min(pollMs, 200));
    }
    return false;
  }
}
