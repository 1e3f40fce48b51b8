package aks.agent;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.streaming.WriteToStream;

/** Spark 4.1+ line: {@code WriteToStream} has a {@code sinkName} after the query name (9 fields). */
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
    return w.copy(w.name(), w.sinkName(), checkpoint, ProbeExtension.noop(), w.outputMode(),
        w.deleteCheckpointOnStop(), w.inputQuery(), w.catalogAndIdent(), w.catalogTable());
  }
}
