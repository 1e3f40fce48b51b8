package aks.dstream;

/** One JSON line per event on stdout, prefixed so the tests and the runtime can pick them out. */
final class Status {
  static final String PREFIX = "DSTREAM_JOB_STATUS ";
  static volatile boolean restored = true;

  private Status() {}

  static synchronized void print(String event, String fields) {
    System.out.println(PREFIX + "{\"event\":\"" + event + "\"" + (fields.isEmpty() ? "" : "," + fields) + "}");
    System.out.flush();
  }
}
