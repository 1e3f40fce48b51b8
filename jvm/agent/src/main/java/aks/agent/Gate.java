package aks.agent;

import java.io.InterruptedIOException;
import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.fs.Path;

/**
 * The batch gate: what the checkpoint file manager saw of each query's offset and commit logs,
 * and the one place that keeps a new batch from being planned once a stop was asked for.
 *
 * <p>Why here: Spark plans micro-batch N by writing {@code <root>/offsets/N} (the write-ahead log)
 * and ends it by writing {@code <root>/commits/N}. A batch whose offsets file exists is replayed on
 * restart unless its commit file exists too, so "stopped on a boundary" means exactly "no offsets
 * file without its commit file". {@code query.stop()} alone interrupts whatever the stream thread is
 * doing, including a running batch. The gate closes the door before the next offsets file instead:
 * a request and a batch's planning take the same lock, so every batch either passed the gate before
 * the request (and is waited for until its commit file is closed) or never gets its offsets file.
 *
 * <p>One gate per JVM (static): Spark builds a new file manager per log, per query, per session.
 */
public final class Gate {
  private static final Object LOCK = new Object();
  private static final Map<String, RootState> ROOTS = new HashMap<>();
  private static boolean stopRequested;

  /** What one checkpoint root's logs looked like, as the gate saw them. */
  static final class RootState {
    long planned = -1; // newest offsets/N that exists or was allowed
    long committed = -1; // newest commits/N whose file was closed
    long blockedBefore = -1; // the batch that was kept from being planned, or -1
    boolean blocked;

    synchronized String describe() {
      return "planned=" + planned + " committed=" + committed + (blocked ? " blocked before " + blockedBefore : "");
    }
  }

  private Gate() {}

  /** Which log a metadata file belongs to: "offsets", "commits" or null; with its batch id. */
  static String logOf(Path file) {
    Path parent = file.getParent();
    if (parent == null || batchId(file) < 0) {
      return null;
    }
    String name = parent.getName();
    return "offsets".equals(name) || "commits".equals(name) ? name : null;
  }

  static long batchId(Path file) {
    String n = file.getName();
    if (n.isEmpty() || n.length() > 18) {
      return -1;
    }
    for (int i = 0; i < n.length(); i++) {
      if (!Character.isDigit(n.charAt(i))) {
        return -1;
      }
    }
    return Long.parseLong(n);
  }

  /** The checkpoint root of a log folder ({@code <root>/offsets}) or of a file in it. */
  static String rootOfLog(Path logDir) {
    Path p = logDir.getParent();
    return p == null ? logDir.toString() : p.toString();
  }

  /** A log folder was opened by Spark: start from what its files already say (a replayed batch). */
  public static void observeExisting(Path logDir, long newest) {
    String log = logDir.getName();
    synchronized (LOCK) {
      RootState s = state(rootOfLog(logDir));
      if ("offsets".equals(log)) {
        s.planned = Math.max(s.planned, newest);
      } else if ("commits".equals(log)) {
        s.committed = Math.max(s.committed, newest);
      }
      LOCK.notifyAll();
    }
  }

  /**
   * Called before Spark creates {@code <root>/offsets/N}: lets it through, or, once a stop was
   * requested, parks the stream thread until {@code query.stop()} interrupts it. The interruption
   * surfaces as {@link InterruptedIOException}, which Spark's stream thread treats as "stopped by
   * stop()" (StreamExecution.isInterruptionException), so the query ends without an error.
   */
  public static void beforeOffsets(Path file) throws InterruptedIOException {
    long batch = batchId(file);
    String root = rootOfLog(file.getParent());
    synchronized (LOCK) {
      RootState s = state(root);
      if (!stopRequested) {
        s.planned = Math.max(s.planned, batch);
        return;
      }
      s.blocked = true;
      s.blockedBefore = batch;
      LOCK.notifyAll();
      Log.info("stop requested: batch " + batch + " of " + root + " is not planned (offsets file not written)");
      try {
        while (true) {
          LOCK.wait();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        InterruptedIOException io =
            new InterruptedIOException("aks agent: stopped before batch " + batch + " was planned");
        io.initCause(e);
        throw io;
      }
    }
  }

  /** Called once {@code <root>/commits/N} was closed without error: batch N is committed. */
  public static void committed(Path file) {
    long batch = batchId(file);
    synchronized (LOCK) {
      RootState s = state(rootOfLog(file.getParent()));
      s.committed = Math.max(s.committed, batch);
      LOCK.notifyAll();
    }
  }

  /** From now on no batch gets its offsets file in this JVM. */
  public static void requestStop() {
    synchronized (LOCK) {
      stopRequested = true;
      LOCK.notifyAll();
    }
  }

  public static boolean stopRequested() {
    synchronized (LOCK) {
      return stopRequested;
    }
  }

  /** Whether the gate ever saw this root (the agent's file manager is in use for it). */
  public static boolean knows(String root) {
    synchronized (LOCK) {
      return ROOTS.containsKey(norm(root));
    }
  }

  /**
   * Waits until the root is between batches (every planned batch committed) or its next batch is
   * held at the gate; false on timeout or when the query ended meanwhile. Only meaningful after
   * {@link #requestStop()}.
   */
  public static boolean awaitQuiet(String root, long timeoutMs, java.util.function.BooleanSupplier alive)
      throws InterruptedException {
    long deadline = System.currentTimeMillis() + timeoutMs;
    synchronized (LOCK) {
      RootState s = state(root);
      while (!(s.blocked || s.planned <= s.committed)) {
        if (!alive.getAsBoolean()) {
          return false; // the query ended on its own (failed, or the application is stopping)
        }
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) {
          return false;
        }
        LOCK.wait(Math.min(left, 200));
      }
      return true;
    }
  }

  /** A snapshot of a root's state: {planned, committed, blockedBefore or -1}. */
  public static long[] snapshot(String root) {
    synchronized (LOCK) {
      RootState s = ROOTS.get(norm(root));
      if (s == null) {
        return null;
      }
      return new long[] {s.planned, s.committed, s.blocked ? s.blockedBefore : -1};
    }
  }

  private static RootState state(String root) {
    return ROOTS.computeIfAbsent(norm(root), k -> new RootState());
  }

  static String norm(String root) {
    return new Path(root).toString();
  }
}
