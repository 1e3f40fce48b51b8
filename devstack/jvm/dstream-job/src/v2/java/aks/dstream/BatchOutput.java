package aks.dstream;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.VoidFunction2;
import org.apache.spark.streaming.Time;
import org.apache.spark.streaming.api.java.JavaInputDStream;
import org.apache.spark.streaming.kafka010.CanCommitOffsets;
import org.apache.spark.streaming.kafka010.HasOffsetRanges;
import org.apache.spark.streaming.kafka010.OffsetRange;

/**
 * The job's output operation (v2): write the batch, then commitAsync its ranges (the field reports'
 * order). Serialized into the DStream checkpoint with the graph; no serialVersionUID, like most jobs.
 */
final class BatchOutput implements VoidFunction2<JavaRDD<ConsumerRecord<String, String>>, Time> {
  static final String BUILD = "v2";
  private final JavaInputDStream<ConsumerRecord<String, String>> stream;
  private final String sinkDir;
  private final String stopMarker;
  /** New in v2: one more serialized field, so the checkpointed graph of v1 no longer deserializes. */
  private final String outputFormat = "tsv";

  BatchOutput(JavaInputDStream<ConsumerRecord<String, String>> stream, String sinkDir, String stopMarker) {
    this.stream = stream;
    this.sinkDir = sinkDir;
    this.stopMarker = stopMarker;
  }

  @Override
  public void call(JavaRDD<ConsumerRecord<String, String>> rdd, Time time) {
    OffsetRange[] ranges = ((HasOffsetRanges) rdd.rdd()).offsetRanges();
    long records = 0;
    for (OffsetRange o : ranges) {
      records += o.count();
    }
    if (records > 0) {
      Sinks.write(rdd, sinkDir);
    }
    ((CanCommitOffsets) stream.inputDStream()).commitAsync(ranges);
    Status.print("batch", "\"build\":\"" + BUILD + "\",\"time\":" + time.milliseconds() + ",\"records\":" + records
        + ",\"ranges\":" + Sinks.rangesJson(ranges));
    if (records > 0 && DStreamJob.marker(stopMarker).equals("after-data")) {
      Stops.stop(false);
    }
  }
}
