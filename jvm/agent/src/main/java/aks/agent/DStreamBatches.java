package aks.agent;

import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.streaming.scheduler.BatchInfo;
import org.apache.spark.streaming.scheduler.StreamInputInfo;
import org.apache.spark.streaming.scheduler.StreamingListener;
import org.apache.spark.streaming.scheduler.StreamingListenerBatchCompleted;
import org.apache.spark.streaming.scheduler.StreamingListenerBatchSubmitted;
import scala.Option;

/**
 * Reads Spark's streaming events into {@link DStreamState}; loaded only when spark-streaming is
 * on the classpath ({@link DStreams#available()}).
 *
 * <p>Where the offsets come from: Spark's Kafka direct stream ({@code DirectKafkaInputDStream.compute},
 * spark-streaming-kafka-0-10) reports each batch to the input info tracker with the metadata
 * {@code "offsets" -> offsetRanges.toList} (a list of {@code OffsetRange}) and a text description;
 * the scheduler copies it into {@code BatchInfo.streamIdToInputInfo} of the batch's submitted,
 * started and completed events. {@code OffsetRange} lives in the connector (the user's jar or
 * {@code --jars}), so it is read by its public accessors through reflection: the agent does not
 * depend on the connector. Other input streams (sockets, queues, receivers) report no ranges: their
 * batches are counted, without offsets.
 */
final class DStreamBatches {
  private DStreamBatches() {}

  /** One streaming scheduler event (any {@code StreamingListenerEvent}); ``via`` names the listener. */
  static void onEvent(Object event, String via) {
    if (event instanceof StreamingListenerBatchSubmitted) {
      BatchInfo b = ((StreamingListenerBatchSubmitted) event).batchInfo();
      if (DStreamState.submitted(b.batchTime().milliseconds(), b.numRecords(), ranges(b), via)) {
        Report.write(); // once per batch event, whichever listener delivered it first
      }
    } else if (event instanceof StreamingListenerBatchCompleted) {
      BatchInfo b = ((StreamingListenerBatchCompleted) event).batchInfo();
      Option<Object> end = b.processingEndTime();
      Long endMs = end.isDefined() ? (Long) end.get() : null;
      if (DStreamState.completed(b.batchTime().milliseconds(), b.numRecords(), ranges(b), endMs, via)) {
        Report.write();
      }
    }
  }

  /** The public route: a listener on the StreamingContext itself (see DStreamEvents for why both). */
  static StreamingListener listener() {
    return new StreamingListener() {
      @Override
      public void onBatchSubmitted(StreamingListenerBatchSubmitted event) {
        onEvent(event, "streaming_listener");
      }

      @Override
      public void onBatchCompleted(StreamingListenerBatchCompleted event) {
        onEvent(event, "streaming_listener");
      }
    };
  }

  static List<Map<String, Object>> ranges(BatchInfo b) {
    List<Map<String, Object>> out = new ArrayList<>();
    scala.collection.Iterator<StreamInputInfo> infos = b.streamIdToInputInfo().values().iterator();
    while (infos.hasNext()) {
      StreamInputInfo info = infos.next();
      Option<Object> offsets = info.metadata().get("offsets");
      if (!offsets.isDefined() || !(offsets.get() instanceof scala.collection.Iterable)) {
        continue;
      }
      scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) offsets.get()).iterator();
      while (it.hasNext()) {
        Map<String, Object> r = range(it.next());
        if (r != null) {
          out.add(r);
        }
      }
    }
    return out;
  }

  private static Map<String, Object> range(Object o) {
    try {
      Class<?> c = o.getClass();
      Method topic = c.getMethod("topic");
      Method partition = c.getMethod("partition");
      Method from = c.getMethod("fromOffset");
      Method until = c.getMethod("untilOffset");
      return DStreamState.range(String.valueOf(topic.invoke(o)), ((Number) partition.invoke(o)).intValue(),
          ((Number) from.invoke(o)).longValue(), ((Number) until.invoke(o)).longValue());
    } catch (ReflectiveOperationException | RuntimeException e) {
      Log.warn("not an offset range: " + o.getClass().getName(), e);
      return null;
    }
  }
}
