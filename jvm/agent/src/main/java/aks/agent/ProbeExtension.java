package aks.agent;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.execution.datasources.noop.NoopDataSource;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=aks.agent.ProbeExtension}: a post-hoc resolution rule that swaps every
 * streaming query's sink for Spark's {@code noop} sink and its checkpoint for the probe's copy.
 *
 * <p>Why there: {@code DataStreamWriter.start()} builds the sink object (a {@code ForeachBatchSink}
 * for {@code foreachBatch}, a file sink, a v2 table) and hands it, inside a
 * {@code WriteToStreamStatement}, to the session's analyzer; Spark's {@code ResolveWriteToStream}
 * turns that into {@code WriteToStream(name, checkpoint, sink, ...)}, and the micro-batch engine takes
 * its sink and checkpoint from that node only (3.5.1 and 4.2.0 alike, checked in their jars). The
 * post-hoc rules run once after resolution, so the node is final when the rule sees it. The user's
 * sink object is never called afterwards: {@code foreachBatch} code never runs. Without
 * {@code spark.aks.agent.probe.copy} the rule changes nothing.
 */
public final class ProbeExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions ext) {
    ext.injectPostHocResolutionRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new SinkRule();
      }
    });
    return BoxedUnit.UNIT;
  }

  static Table noop() {
    return new NoopDataSource().getTable(CaseInsensitiveStringMap.empty());
  }

  /** The rule; the node's shape differs per Spark line, so {@link ProbeRewrite} (one per line) copies it. */
  static final class SinkRule extends Rule<LogicalPlan> {
    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (!Probe.on() || Probe.skipRewrite()) {
        return plan;
      }
      return ProbeRewrite.rewrite(plan, Report.hadoopConf());
    }
  }
}
