package aks.agent;

import java.lang.reflect.Method;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * A Spark listener (core API, added by the plugin before any StreamingContext exists) that reads the
 * streaming scheduler's events off Spark's own listener bus.
 *
 * <p>Why not only {@code ssc.addStreamingListener}: the streaming listener bus posts every
 * {@code StreamingListenerEvent} to the SparkContext's bus wrapped in
 * {@code StreamingListenerBus.WrappedStreamingListenerEvent}, and it removes itself from that bus
 * when the graceful stop ends (JobScheduler.stop), possibly before the last batch's completion was
 * delivered; a listener on the Spark bus keeps receiving until the SparkContext stops, and it is
 * there from the context's first batch on (a StreamingContext can only be found once started). The
 * wrapper is Spark-internal, so it is recognised by name and unwrapped by reflection; if a future
 * Spark changes it, the public listener {@link DStreamStopper} adds is the fallback (both feed the
 * same per-batch record, keyed by batch time, so a batch seen twice counts once).
 */
final class DStreamEvents extends SparkListener {
  private static final String WRAPPED = "WrappedStreamingListenerEvent";
  private volatile Method unwrap;

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (!event.getClass().getName().endsWith(WRAPPED) || !DStreams.available()) {
      return;
    }
    try {
      Method m = unwrap;
      if (m == null) {
        m = event.getClass().getMethod("streamingListenerEvent");
        unwrap = m;
      }
      DStreamBatches.onEvent(m.invoke(event), "spark_listener_bus");
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      Log.warn("could not read a streaming event", e);
    }
  }
}
