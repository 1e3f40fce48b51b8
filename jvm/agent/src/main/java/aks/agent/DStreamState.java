package aks.agent;

import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * What the agent saw of a DStream application, in plain Java (no streaming class: the report reads
 * it in every application). Batches are keyed by their batch time, so the same batch reported by two
 * listeners counts once; only the open ones (submitted, not completed), the first and the last
 * completed batch are kept, plus the processed end per partition (the highest {@code untilOffset} of
 * any completed batch): what the job has processed, whatever its consumer group says.
 */
final class DStreamState {
  private static final Object LOCK = new Object();
  private static final TreeMap<Long, Map<String, Object>> OPEN = new TreeMap<>();
  private static final Map<String, Map<String, Long>> PROCESSED_END = new TreeMap<>();
  private static Map<String, Object> context;
  private static Map<String, Object> first;
  private static Map<String, Object> lastCompleted;
  private static Map<String, Object> stop;
  private static long lastCompletedTime = Long.MIN_VALUE;
  private static long lastSubmittedTime = Long.MIN_VALUE;
  private static long submitted;
  private static long completed;
  private static final List<String> SOURCES = new ArrayList<>();

  private DStreamState() {}

  /** One offset range of a batch: topic, partition, from, until (Spark's OffsetRange). */
  static Map<String, Object> range(String topic, int partition, long from, long until) {
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("topic", topic);
    r.put("partition", partition);
    r.put("from", from);
    r.put("until", until);
    return r;
  }

  static void contextFound(long batchDurationMs) {
    synchronized (LOCK) {
      if (context == null) {
        context = new LinkedHashMap<>();
        context.put("found_at", Report.now());
        context.put("batch_duration_ms", batchDurationMs);
      }
    }
  }

  /** A batch was submitted (its jobs queued) with what the input streams reported for it; false if known. */
  static boolean submitted(long timeMs, long records, List<Map<String, Object>> ranges, String via) {
    synchronized (LOCK) {
      seen(via);
      if (timeMs <= lastCompletedTime || OPEN.containsKey(timeMs)) {
        return false; // already known (the other listener, or completed first)
      }
      Map<String, Object> b = batch(timeMs, records, ranges);
      b.put("completed", false);
      OPEN.put(timeMs, b);
      submitted++;
      lastSubmittedTime = Math.max(lastSubmittedTime, timeMs);
      if (first == null) {
        first = b;
      }
      return true;
    }
  }

  /** A batch's every output operation finished; false if it was already counted. */
  static boolean completed(long timeMs, long records, List<Map<String, Object>> ranges, Long endMs, String via) {
    synchronized (LOCK) {
      seen(via);
      Map<String, Object> open = OPEN.remove(timeMs);
      if (open == null && timeMs <= lastCompletedTime) {
        return false; // already counted
      }
      if (open == null) {
        submitted++; // its submission was not seen (listener attached late)
        lastSubmittedTime = Math.max(lastSubmittedTime, timeMs);
      }
      Map<String, Object> b = batch(timeMs, records, ranges);
      b.put("completed", true);
      b.put("processing_end", endMs == null ? null : Instant.ofEpochMilli(endMs).toString());
      completed++;
      if (first == null || (open != null && first == open)) {
        first = b;
      }
      if (timeMs > lastCompletedTime) {
        lastCompletedTime = timeMs;
        lastCompleted = b;
      }
      for (Map<String, Object> r : ranges) {
        Map<String, Long> parts = PROCESSED_END.computeIfAbsent((String) r.get("topic"), k -> new TreeMap<>());
        parts.merge(String.valueOf(r.get("partition")), (Long) r.get("until"), Math::max);
      }
      return true;
    }
  }

  /** Times of the batches submitted and not (yet) seen completed. */
  static List<Long> openBatches() {
    synchronized (LOCK) {
      return new ArrayList<>(OPEN.keySet());
    }
  }

  static long lastSubmittedTime() {
    synchronized (LOCK) {
      return lastSubmittedTime;
    }
  }

  static long lastCompletedTime() {
    synchronized (LOCK) {
      return lastCompletedTime;
    }
  }

  /** The stop's record, created on first use. */
  static Map<String, Object> stop() {
    synchronized (LOCK) {
      if (stop == null) {
        stop = new LinkedHashMap<>();
      }
      return stop;
    }
  }

  static void putStop(String key, Object value) {
    synchronized (LOCK) {
      stop().put(key, value);
    }
  }

  static Map<String, Object> snapshot() {
    synchronized (LOCK) {
      if (context == null && submitted == 0 && completed == 0 && stop == null) {
        return null;
      }
      Map<String, Object> s = new LinkedHashMap<>();
      s.put("context", context == null ? null : new LinkedHashMap<>(context));
      s.put("listeners", new ArrayList<>(SOURCES));
      s.put("batches_submitted", submitted);
      s.put("batches_completed", completed);
      s.put("first_batch", first == null ? null : new LinkedHashMap<>(first));
      s.put("last_completed_batch", lastCompleted == null ? null : new LinkedHashMap<>(lastCompleted));
      List<Object> open = new ArrayList<>();
      for (Map<String, Object> b : OPEN.values()) {
        open.add(new LinkedHashMap<>(b));
      }
      s.put("open_batches", open);
      Map<String, Object> end = new LinkedHashMap<>();
      for (Map.Entry<String, Map<String, Long>> e : PROCESSED_END.entrySet()) {
        end.put(e.getKey(), new LinkedHashMap<>(e.getValue()));
      }
      s.put("processed_end", end);
      s.put("stop", stop == null ? null : new LinkedHashMap<>(stop));
      return s;
    }
  }

  private static void seen(String via) {
    if (!SOURCES.contains(via)) {
      SOURCES.add(via);
    }
  }

  private static Map<String, Object> batch(long timeMs, long records, List<Map<String, Object>> ranges) {
    Map<String, Object> b = new LinkedHashMap<>();
    b.put("time_ms", timeMs);
    b.put("time", Instant.ofEpochMilli(timeMs).toString());
    b.put("records", records);
    b.put("offset_ranges", ranges);
    return b;
  }
}
