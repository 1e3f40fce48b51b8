package aks.agent;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.streaming.WriteToStream;

/** Spark 3.5 line: {@code WriteToStream} has 8 fields (no {@code sinkName}). */
final class ProbeRewrite {
  private ProbeRewrite() {}

  static LogicalPlan rewrite(LogicalPlan plan, Configuration hadoop) {
    if (!(plan instanceof WriteToStream)) {
      return plan;
    }
    WriteToStream w = (WriteToStream) plan;
    if (Probe.isNoop(w.sink())) {
      return plan;
    }
    String checkpoint = Probe.checkpointFor(w.name(), w.resolvedCheckpointLocation(), hadoop);
    Probe.rewritten(w.name(), w.sink().getClass().getName(), w.resolvedCheckpointLocation(), checkpoint);
    return w.copy(w.name(), checkpoint, ProbeExtension.noop(), w.outputMode(),
        w.deleteCheckpointOnStop(), w.inputQuery(), w.catalogAndIdent(), w.catalogTable());
  }
}
