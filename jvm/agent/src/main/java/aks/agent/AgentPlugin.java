package aks.agent;

import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.hadoop.fs.Path;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import scala.Tuple2;

/**
 * The agent's entry point, named in {@code spark.plugins}: on the driver it reads the
 * {@code spark.aks.agent.*} confs, starts the {@link Stopper}'s daemon thread (a daemon: it must
 * never keep the user's application alive) and writes the first report. Nothing runs on executors.
 */
public final class AgentPlugin implements SparkPlugin {
  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return null;
  }

  static final class Driver implements DriverPlugin {
    private static final long SHUTDOWN_WAIT_MS = 20_000;
    private Stopper stopper;
    private Thread thread;

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext ctx) {
      SparkConf conf = sc.getConf();
      Map<String, String> all = new HashMap<>();
      for (Tuple2<String, String> kv : conf.getAllWithPrefix(AgentConf.PREFIX)) {
        all.put(AgentConf.PREFIX + kv._1(), kv._2());
      }
      Map<String, Object> app = new LinkedHashMap<>();
      app.put("application_id", sc.applicationId());
      app.put("application_name", sc.appName());
      app.put("spark_version", sc.version());
      app.put("checkpoint", all.get(AgentConf.CHECKPOINT));
      app.put("stop_marker", all.get(AgentConf.STOP_MARKER));
      app.put("file_manager", conf.get(AgentConf.SPARK_FILE_MANAGER, null));
      app.put("started_at", Report.now());
      Report.configure(all.get(AgentConf.REPORT), sc.hadoopConfiguration(), app, sc);
      Probe.configure(all);
      DStreams.install(sc);
      String marker = all.get(AgentConf.STOP_MARKER);
      if (marker == null || marker.trim().isEmpty()) {
        Log.warn(AgentConf.STOP_MARKER + " is not set: the agent only reports, it cannot stop");
      } else {
        long poll = AgentConf.millis(all, AgentConf.POLL_MS, AgentConf.DEFAULT_POLL_MS);
        long timeout = AgentConf.millis(all, AgentConf.STOP_TIMEOUT_MS, AgentConf.DEFAULT_STOP_TIMEOUT_MS);
        String delay = all.get(AgentConf.TEST_DELAY_STOP_MS);
        long testDelay = delay == null ? 0 : AgentConf.millis(all, AgentConf.TEST_DELAY_STOP_MS, 0);
        stopper = new Stopper(new Path(marker.trim()), poll, timeout, testDelay);
        thread = new Thread(stopper, "aks-agent-stop-watcher");
        thread.setDaemon(true);
        thread.start();
        Log.info("watching " + marker.trim() + " every " + poll + " ms");
      }
      Report.write();
      return Collections.emptyMap();
    }

    @Override
    public void shutdown() {
      if (stopper != null) {
        stopper.shutdown(SHUTDOWN_WAIT_MS);
        DStreams.awaitStop(SHUTDOWN_WAIT_MS);
        thread.interrupt();
      }
      Report.write();
    }
  }
}
