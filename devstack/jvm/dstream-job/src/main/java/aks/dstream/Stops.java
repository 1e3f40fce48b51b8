package aks.dstream;

import org.apache.spark.streaming.api.java.JavaStreamingContext;

/** The driver-side stop control: a daemon thread polls the marker; a batch may ask to stop now. */
final class Stops {
  private static volatile JavaStreamingContext context;
  private static volatile boolean stopping;

  private Stops() {}

  static void watch(JavaStreamingContext ssc, String markerPath) {
    context = ssc;
    Thread t = new Thread(() -> {
      while (!stopping) {
        String m = DStreamJob.marker(markerPath);
        if (!m.isEmpty() && !m.equals("after-data")) { // any other text (e.g. the product's note): graceful
          stop(!m.equals("now"));
          return;
        }
        try {
          Thread.sleep(100);
        } catch (InterruptedException e) {
          return;
        }
      }
    }, "stop-marker");
    t.setDaemon(true);
    t.start();
  }

  /** Stops from another thread: a batch's own thread must not wait for itself to finish. */
  static synchronized void stop(boolean graceful) {
    if (stopping) {
      return;
    }
    stopping = true;
    Status.print("stopping", "\"graceful\":" + graceful);
    Thread t = new Thread(() -> context.stop(true, graceful), "stop");
    t.start();
  }
}
