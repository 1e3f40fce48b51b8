package aks.agent;

import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * A minimal JSON writer (maps, lists, strings, numbers, booleans, null and pre-rendered JSON).
 *
 * <p>Why not Jackson: Spark ships one, but its version differs between the lines and users shade
 * their own; the report is small and its shape fixed, so the agent depends on nothing but Spark's
 * public API and Hadoop's FileSystem.
 */
final class Json {
  /** Text that already is JSON (Spark's offsets), written as is. */
  static final class Raw {
    final String json;

    Raw(String json) {
      this.json = json;
    }
  }

  private Json() {}

  /** Spark's offset JSON as is when it looks like JSON, otherwise as a string; null stays null. */
  static Object raw(String json) {
    if (json == null) {
      return null;
    }
    String t = json.trim();
    if (t.startsWith("{") || t.startsWith("[") || t.matches("-?\\d+")) {
      return new Raw(t);
    }
    return t;
  }

  static String write(Object value) {
    StringBuilder sb = new StringBuilder(1024);
    write(sb, value, 0);
    sb.append('\n');
    return sb.toString();
  }

  private static void write(StringBuilder sb, Object v, int indent) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof Raw) {
      sb.append(((Raw) v).json);
    } else if (v instanceof String) {
      quote(sb, (String) v);
    } else if (v instanceof Boolean || v instanceof Integer || v instanceof Long) {
      sb.append(v);
    } else if (v instanceof Number) {
      double d = ((Number) v).doubleValue();
      sb.append(Double.isFinite(d) ? String.valueOf(d) : "null");
    } else if (v instanceof Map) {
      Map<?, ?> m = (Map<?, ?>) v;
      if (m.isEmpty()) {
        sb.append("{}");
        return;
      }
      sb.append("{\n");
      Iterator<? extends Map.Entry<?, ?>> it = m.entrySet().iterator();
      while (it.hasNext()) {
        Map.Entry<?, ?> e = it.next();
        pad(sb, indent + 1);
        quote(sb, String.valueOf(e.getKey()));
        sb.append(": ");
        write(sb, e.getValue(), indent + 1);
        sb.append(it.hasNext() ? ",\n" : "\n");
      }
      pad(sb, indent);
      sb.append('}');
    } else if (v instanceof List) {
      List<?> l = (List<?>) v;
      if (l.isEmpty()) {
        sb.append("[]");
        return;
      }
      sb.append("[\n");
      for (int i = 0; i < l.size(); i++) {
        pad(sb, indent + 1);
        write(sb, l.get(i), indent + 1);
        sb.append(i + 1 < l.size() ? ",\n" : "\n");
      }
      pad(sb, indent);
      sb.append(']');
    } else {
      quote(sb, String.valueOf(v));
    }
  }

  private static void pad(StringBuilder sb, int indent) {
    for (int i = 0; i < indent; i++) {
      sb.append("  ");
    }
  }

  private static void quote(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          sb.append("\\\"");
          break;
        case '\\':
          sb.append("\\\\");
          break;
        case '\n':
          sb.append("\\n");
          break;
        case '\r':
          sb.append("\\r");
          break;
        case '\t':
          sb.append("\\t");
          break;
        default:
          if (c < 0x20) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
      }
    }
    sb.append('"');
  }
}
