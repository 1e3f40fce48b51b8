package aks.agent;

import java.util.Map;
import java.util.TreeMap;

/**
 * Spark's Kafka source offsets as JSON ({@code {"topic":{"0":12,"1":34}}}, a progress event's
 * {@code endOffset}) read into topic -> partition -> offset, and merged per topic-partition. The agent
 * carries no JSON library (see {@link Json}); topic names are letters, digits, '.', '_' and '-', so
 * strings without escapes are all this shape needs.
 */
final class KafkaOffsetsJson {
  private KafkaOffsetsJson() {}

  static void mergeMin(Map<String, Map<Integer, Long>> into, Map<String, Map<Integer, Long>> from) {
    for (Map.Entry<String, Map<Integer, Long>> t : from.entrySet()) {
      Map<Integer, Long> parts = into.computeIfAbsent(t.getKey(), k -> new TreeMap<>());
      for (Map.Entry<Integer, Long> p : t.getValue().entrySet()) {
        parts.merge(p.getKey(), p.getValue(), Math::min);
      }
    }
  }

  /** Spark's Kafka offset JSON, {@code {"topic":{"0":12,"1":34}}}; negative (unresolved) offsets refused. */
  static Map<String, Map<Integer, Long>> parse(String json) {
    Scanner s = new Scanner(json);
    Map<String, Map<Integer, Long>> out = new TreeMap<>();
    s.expect('{');
    if (!s.peek('}')) {
      do {
        String topic = s.string();
        s.expect(':');
        s.expect('{');
        Map<Integer, Long> parts = new TreeMap<>();
        if (!s.peek('}')) {
          do {
            int partition = Integer.parseInt(s.string());
            s.expect(':');
            long offset = s.number();
            if (offset < 0) {
              throw new IllegalArgumentException("unresolved offset " + offset + " for " + topic + "-" + partition);
            }
            parts.put(partition, offset);
          } while (s.comma());
        }
        s.expect('}');
        out.put(topic, parts);
      } while (s.comma());
    }
    s.expect('}');
    return out;
  }

  private static final class Scanner {
    private final String text;
    private int i;

    Scanner(String text) {
      this.text = text;
    }

    private void skip() {
      while (i < text.length() && Character.isWhitespace(text.charAt(i))) {
        i++;
      }
    }

    boolean peek(char c) {
      skip();
      return i < text.length() && text.charAt(i) == c;
    }

    void expect(char c) {
      if (!peek(c)) {
        throw new IllegalArgumentException("expected '" + c + "' at " + i + " of " + text);
      }
      i++;
    }

    boolean comma() {
      if (peek(',')) {
        i++;
        return true;
      }
      return false;
    }

    String string() {
      expect('"');
      int end = text.indexOf('"', i);
      if (end < 0 || text.lastIndexOf('\\', end) >= i) {
        throw new IllegalArgumentException("unsupported string at " + i + " of " + text);
      }
      String v = text.substring(i, end);
      i = end + 1;
      return v;
    }

    long number() {
      skip();
      int start = i;
      while (i < text.length() && (text.charAt(i) == '-' || Character.isDigit(text.charAt(i)))) {
        i++;
      }
      return Long.parseLong(text.substring(start, i));
    }
  }
}
