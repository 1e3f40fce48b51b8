package aks.agent;

import java.lang.reflect.Method;
import java.util.List;
import java.util.Map;
import org.apache.spark.streaming.StreamingContext;
import scala.Option;

/**
 * Stops a DStream application gracefully when the stop marker appears, with no code in the job:
 * the stop loop ({@link Stopper}) calls {@link #poll} every {@code pollMs}; this finds the active
 * {@code StreamingContext} ({@code StreamingContext.getActive()}, Spark's own registry of the one
 * active context per JVM) and, once the marker exists, stops it on a thread of its own.
 *
 * <p>The boundary Spark gives a DStream: {@code stop(stopSparkContext, stopGracefully = true)} stops
 * the batch timer after one more tick and waits until every generated batch has been processed
 * (JobGenerator waits up to {@code spark.streaming.gracefulStopTimeout}, default ten batch intervals,
 * for the last batch's completion; the job executor then runs every queued batch to its end). A
 * batch is therefore never cut by the graceful stop itself; the outcome is still read back, not
 * assumed: every batch seen submitted must have been seen completed, and Spark's own
 * {@code JobGenerator.lastProcessedBatch} (read by reflection: not public API) must be the last
 * submitted batch. The stop is done as its two halves, {@code stop(false, true)} then
 * {@code sparkContext.stop()} (what {@code stop(true, true)} does), so the outcome is recorded while
 * the listener bus still delivers.
 *
 * <p>The thread is not a daemon: the user's {@code awaitTermination()} returns as soon as the
 * streaming half ended, and the JVM must not exit before the outcome is written and the
 * SparkContext stopped.
 */
final class DStreamStopper {
  /** How long to wait, after the graceful stop returned, for the last batch's completion event. */
  private static final long EVENTS_WAIT_MS = 10_000;
  private static StreamingContext seen;
  private static Thread stopping;

  private DStreamStopper() {}

  static synchronized void poll(boolean stopRequested, long requestedAtMs) {
    Option<StreamingContext> active = StreamingContext.getActive();
    if (!active.isDefined()) {
      return;
    }
    StreamingContext ssc = active.get();
    if (ssc != seen) {
      seen = ssc;
      DStreamState.contextFound(batchDurationMs(ssc));
      try {
        ssc.addStreamingListener(DStreamBatches.listener());
      } catch (RuntimeException e) {
        Log.warn("could not add the streaming listener", e);
      }
      Log.info("found an active StreamingContext (batch " + batchDurationMs(ssc) + " ms)");
      Report.write();
    }
    if (stopRequested && stopping == null) {
      stopping = new Thread(() -> stop(ssc, requestedAtMs), "aks-agent-dstream-stop");
      stopping.setDaemon(false);
      stopping.start();
    }
  }

  /** Waits up to {@code waitMs} for a stop in progress (the plugin's shutdown: the outcome must be written). */
  static void awaitStop(long waitMs) {
    Thread t;
    synchronized (DStreamStopper.class) {
      t = stopping;
    }
    if (t != null && t != Thread.currentThread()) {
      try {
        t.join(waitMs);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static void stop(StreamingContext ssc, long requestedAtMs) {
    long t0 = System.currentTimeMillis();
    DStreamState.putStop("requested_at", java.time.Instant.ofEpochMilli(requestedAtMs).toString());
    DStreamState.putStop("how", "graceful");
    DStreamState.putStop("started_at", Report.now());
    DStreamState.putStop("finished_at", null);
    DStreamState.putStop("stopped_on_boundary", null);
    Log.info("stop marker found: stopping the StreamingContext gracefully (every generated batch completes)");
    Report.write();
    String error = null;
    try {
      ssc.stop(false, true);
    } catch (RuntimeException e) {
      error = e.toString();
      Log.warn("the graceful stop failed", e);
    }
    long stopMs = System.currentTimeMillis() - t0;
    Long lastProcessed = lastProcessedBatch(ssc);
    long deadline = System.currentTimeMillis() + EVENTS_WAIT_MS;
    while (!DStreamState.openBatches().isEmpty() && System.currentTimeMillis() < deadline) {
      if (lastProcessed != null && DStreamState.lastCompletedTime() >= lastProcessed) {
        break; // every batch Spark processed was seen; what is still open was never processed
      }
      sleep(50);
    }
    List<Long> open = DStreamState.openBatches();
    long lastSubmitted = DStreamState.lastSubmittedTime();
    long lastCompleted = DStreamState.lastCompletedTime();
    boolean sparkSaysAllDone = lastProcessed == null || lastSubmitted == Long.MIN_VALUE || lastProcessed >= lastSubmitted;
    boolean onBoundary = error == null && open.isEmpty() && sparkSaysAllDone;
    DStreamState.putStop("graceful_stop_returned", error == null);
    DStreamState.putStop("stop_error", error);
    DStreamState.putStop("stop_call_ms", stopMs);
    DStreamState.putStop("spark_last_processed_batch_ms", lastProcessed);
    DStreamState.putStop("last_submitted_batch_ms", lastSubmitted == Long.MIN_VALUE ? null : lastSubmitted);
    DStreamState.putStop("last_completed_batch_ms", lastCompleted == Long.MIN_VALUE ? null : lastCompleted);
    DStreamState.putStop("batches_not_completed", open);
    DStreamState.putStop("stopped_on_boundary", onBoundary);
    DStreamState.putStop("finished_at", Report.now());
    synchronized (Report.class) {
      Map<String, Object> s = Report.stop();
      s.put("dstream_contexts_stopped", 1);
      s.put("stopped_on_boundary", onBoundary);
      s.put("last_completed_batch_ms", lastCompleted == Long.MIN_VALUE ? null : lastCompleted);
      s.put("finished_at", Report.now());
      s.put("duration_ms", System.currentTimeMillis() - requestedAtMs);
    }
    Log.info("StreamingContext stopped (graceful " + (error == null) + ", " + stopMs + " ms, on boundary "
        + onBoundary + ", last completed batch " + lastCompleted + ", not completed " + open + ")");
    Report.write();
    try {
      ssc.sparkContext().stop(); // the stopSparkContext half of stop(true, true): the application ends
    } catch (RuntimeException e) {
      Log.warn("stopping the SparkContext", e);
    }
    DStreamState.putStop("spark_context_stopped_at", Report.now());
    Report.write();
  }

  private static long batchDurationMs(StreamingContext ssc) {
    try {
      return ssc.graph().batchDuration().milliseconds();
    } catch (RuntimeException | LinkageError e) {
      return -1;
    }
  }

  /** Spark's {@code JobGenerator.lastProcessedBatch} (the last batch fully processed), or null if hidden. */
  static Long lastProcessedBatch(StreamingContext ssc) {
    try {
      Object generator = call(ssc.scheduler(), "jobGenerator");
      Object time = generator == null ? null : call(generator, "lastProcessedBatch");
      Object ms = time == null ? null : call(time, "milliseconds");
      return ms instanceof Number ? ((Number) ms).longValue() : null;
    } catch (RuntimeException | LinkageError e) {
      return null;
    }
  }

  private static Object call(Object target, String name) {
    try {
      Method m = target.getClass().getMethod(name);
      return m.invoke(target);
    } catch (ReflectiveOperationException | RuntimeException e) {
      return null;
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
