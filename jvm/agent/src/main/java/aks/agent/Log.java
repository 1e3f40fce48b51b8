package aks.agent;

/**
 * One-line log to the driver's stderr with a fixed prefix, so a test or a person can find what
 * the agent did in a driver log without knowing Spark's logging setup (log4j 1 vs 2 differ between
 * the lines and users' log4j files vary).
 */
final class Log {
  static final String PREFIX = "[aks-agent] ";

  private Log() {}

  static void info(String msg) {
    System.err.println(PREFIX + msg);
  }

  static void warn(String msg) {
    System.err.println(PREFIX + "WARN " + msg);
  }

  static void warn(String msg, Throwable t) {
    System.err.println(PREFIX + "WARN " + msg + ": " + t);
  }
}
