package aks.agent;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.SparkContext;

/**
 * The agent's DStream side, reached from the plugin and the stop loop without naming a single
 * {@code org.apache.spark.streaming} class: spark-streaming is 'provided' and a Structured
 * Streaming application (or a runtime) without it on the classpath must never load
 * {@link DStreamStopper} or {@link DStreamBatches}. Everything here is plain Java; the streaming
 * classes are touched only after {@link #available()} found them, and any linkage error only turns
 * the DStream side off (logged once).
 *
 * <p>What it gives a DStream application (no code in the job): a graceful stop on the stop marker
 * ({@code StreamingContext.stop(stopSparkContext = true, stopGracefully = true)}, done as its two
 * halves so the outcome is written while the context is still up), and the report's {@code dstream}
 * section: every batch's time, record count and Kafka offset ranges as Spark's direct stream reports
 * them ({@code BatchInfo.streamIdToInputInfo} metadata {@code "offsets"}), the last completed batch,
 * the processed end per partition, and how the stop ended.
 */
final class DStreams {
  private static final String CONTEXT_CLASS = "org.apache.spark.streaming.StreamingContext";
  private static volatile Boolean available;
  private static volatile boolean disabled;

  private DStreams() {}

  /** True when spark-streaming is on the driver's classpath (checked once, without initializing it). */
  static boolean available() {
    Boolean a = available;
    if (a == null) {
      try {
        ClassLoader cl = Thread.currentThread().getContextClassLoader();
        Class.forName(CONTEXT_CLASS, false, cl != null ? cl : DStreams.class.getClassLoader());
        a = Boolean.TRUE;
      } catch (ClassNotFoundException | LinkageError e) {
        a = Boolean.FALSE;
      }
      available = a;
    }
    return a && !disabled;
  }

  /** From the plugin's init: a Spark listener that unwraps the streaming scheduler's events (see DStreamEvents). */
  static void install(SparkContext sc) {
    if (!available()) {
      return; // a Structured Streaming runtime without spark-streaming: nothing to listen for
    }
    try {
      sc.addSparkListener(new DStreamEvents());
    } catch (RuntimeException | LinkageError e) {
      Log.warn("could not add the DStream batch listener", e);
    }
  }

  /**
   * From the stop loop, every poll: finds a newly active StreamingContext (adds the public
   * StreamingListener to it) and, once the stop was requested, stops it gracefully (once).
   */
  static void poll(boolean stopRequested, long requestedAtMs) {
    if (!available()) {
      return;
    }
    try {
      DStreamStopper.poll(stopRequested, requestedAtMs);
    } catch (LinkageError e) {
      disabled = true;
      Log.warn("the DStream side is off (spark-streaming classes do not link)", e);
    }
  }

  /** Waits (bounded) for a DStream stop in progress to record its outcome: the driver's shutdown calls it. */
  static void awaitStop(long waitMs) {
    if (available()) {
      try {
        DStreamStopper.awaitStop(waitMs);
      } catch (LinkageError e) {
        // nothing was started
      }
    }
  }

  /** The report's {@code dstream} section, or null while no DStream batch or context was seen. */
  static Map<String, Object> section() {
    Map<String, Object> s = DStreamState.snapshot();
    return s == null ? null : new LinkedHashMap<>(s);
  }
}
