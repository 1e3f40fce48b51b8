package aks.agent;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import scala.Option;

/**
 * Finding the running queries of an application the agent did not write.
 *
 * <p>Public API first: the default session's and the active session's query managers, plus every
 * session the listener saw a query start in. A query started in yet another session (a
 * {@code newSession()} nobody made active) is still found through its stream thread: the listener's
 * start callback runs on that thread, which Spark creates inside the query (its {@code $outer}).
 * The checkpoint root is Spark's {@code resolvedCheckpointRoot}, read by name (it is not public API
 * and the wrapper class moved package in 4.1), so a missing method only costs the report a field.
 */
final class Queries {
  private static final Set<SparkSession> SESSIONS = java.util.Collections.newSetFromMap(new WeakHashMap<>());
  private static final Map<String, StreamingQuery> BY_THREAD = new LinkedHashMap<>();

  private Queries() {}

  /** Called on the stream thread, from the listener's onQueryStarted. */
  static synchronized void rememberStarting(String runId) {
    try {
      Option<SparkSession> active = SparkSession.getActiveSession();
      if (active.isDefined()) {
        SESSIONS.add(active.get());
      }
    } catch (RuntimeException | LinkageError e) {
      Log.warn("could not read the stream thread's active session", e);
    }
    Object outer = outerOf(Thread.currentThread());
    if (outer instanceof StreamingQuery) {
      BY_THREAD.put(runId, (StreamingQuery) outer);
    }
  }

  static synchronized void forget(String runId) {
    BY_THREAD.remove(runId);
  }

  /** Every active query the agent can reach, once each (by run id). */
  static List<StreamingQuery> active() {
    Map<String, StreamingQuery> found = new LinkedHashMap<>();
    List<SparkSession> sessions = new ArrayList<>();
    try {
      addIfDefined(sessions, SparkSession.getDefaultSession());
      addIfDefined(sessions, SparkSession.getActiveSession());
    } catch (RuntimeException | LinkageError e) {
      Log.warn("could not read the default session", e);
    }
    synchronized (Queries.class) {
      sessions.addAll(SESSIONS);
    }
    for (SparkSession s : sessions) {
      try {
        for (StreamingQuery q : s.streams().active()) {
          found.putIfAbsent(q.runId().toString(), q);
        }
      } catch (RuntimeException e) {
        Log.warn("could not list a session's queries", e);
      }
    }
    synchronized (Queries.class) {
      for (Map.Entry<String, StreamingQuery> e : BY_THREAD.entrySet()) {
        if (e.getValue().isActive()) {
          found.putIfAbsent(e.getKey(), e.getValue());
        }
      }
    }
    return new ArrayList<>(found.values());
  }

  /** The query's resolved checkpoint root (qualified path string), or null if Spark hides it. */
  static String checkpointRoot(StreamingQuery q) {
    Object exec = q;
    Object inner = call(q, "streamingQuery");
    if (inner != null) {
      exec = inner;
    }
    Object root = call(exec, "resolvedCheckpointRoot");
    return root == null ? null : Gate.norm(root.toString());
  }

  /** The query's sink object (the probe checks it is Spark's noop sink), or null if Spark hides it. */
  static Object sinkOf(StreamingQuery q) {
    Object inner = call(q, "streamingQuery");
    return call(inner != null ? inner : q, "sink");
  }

  private static void addIfDefined(List<SparkSession> out, Option<SparkSession> s) {
    if (s != null && s.isDefined()) {
      out.add(s.get());
    }
  }

  private static Object call(Object target, String method) {
    for (Class<?> c = target.getClass(); c != null; c = c.getSuperclass()) {
      try {
        Method m = c.getDeclaredMethod(method);
        m.setAccessible(true);
        return m.invoke(target);
      } catch (NoSuchMethodException e) {
        // try the superclass
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }
    return null;
  }

  private static Object outerOf(Thread t) {
    for (Class<?> c = t.getClass(); c != null && c != Thread.class; c = c.getSuperclass()) {
      try {
        Field f = c.getDeclaredField("$outer");
        f.setAccessible(true);
        return f.get(t);
      } catch (NoSuchFieldException e) {
        // not this class
      } catch (ReflectiveOperationException | RuntimeException e) {
        return null;
      }
    }
    return null;
  }
}
