package aks.agent;

import java.util.Map;

/**
 * The agent's settings: {@code spark.aks.agent.*} confs, the only way the product talks to it.
 *
 * <p>Read from the SparkConf (driver plugin, listener) or from the Hadoop configuration the
 * checkpoint file manager is built with (Spark copies every SQL conf into it), so one set of keys
 * serves all three hooks. The Python side ({@code airflow_kafka_spark.agent}) names the same keys.
 */
public final class AgentConf {
  public static final String PREFIX = "spark.aks.agent.";
  /** A Hadoop path (any file system the driver reaches); its existence asks for a stop. */
  public static final String STOP_MARKER = PREFIX + "stopMarker";
  /** Where the JSON report is written (Hadoop path), e.g. {@code <checkpoint>.agent.json}. */
  public static final String REPORT = PREFIX + "report";
  /** The checkpoint the product manages (informational: the report names it). */
  public static final String CHECKPOINT = PREFIX + "checkpoint";
  /** How often the marker is looked for, in milliseconds (default 500). */
  public static final String POLL_MS = PREFIX + "pollMs";
  /** How long a running batch may take to commit after a stop request before it is cut anyway. */
  public static final String STOP_TIMEOUT_MS = PREFIX + "stopTimeoutMs";
  /**
   * Test hook, never set by the product: after a query is found between batches, wait this long
   * before {@code stop()}, so its stream thread reaches the closed gate first. It makes the
   * "held at the gate, released by the interrupt" path deterministic for the tests; without it that
   * path is a race the stop thread usually wins.
   */
  public static final String TEST_DELAY_STOP_MS = PREFIX + "testDelayStopMs";
  /** The user's own checkpoint file manager class, which the agent's manager then wraps. */
  public static final String DELEGATE_FILE_MANAGER = PREFIX + "delegateCheckpointFileManagerClass";
  /** Spark's (internal) key naming the checkpoint file manager class. */
  public static final String SPARK_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass";

  public static final long DEFAULT_POLL_MS = 500;
  public static final long DEFAULT_STOP_TIMEOUT_MS = 15 * 60 * 1000L;

  private AgentConf() {}

  static long millis(Map<String, String> conf, String key, long dflt) {
    String v = conf.get(key);
    if (v == null || v.trim().isEmpty()) {
      return dflt;
    }
    try {
      return Math.max(1, Long.parseLong(v.trim()));
    } catch (NumberFormatException e) {
      Log.warn(key + "=" + v + " is not a number of milliseconds; using " + dflt);
      return dflt;
    }
  }
}
