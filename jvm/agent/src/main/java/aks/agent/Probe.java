package aks.agent;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The compatibility probe's side of the agent (docs/probe.md): switched on by
 * {@code spark.aks.agent.probe.copy} alone, it lets a user's unchanged application run one batch on
 * a staged copy of its checkpoint without reaching anything real.
 *
 * <p>Why three guards and not one: the sink swap ({@link ProbeExtension}) is what makes the run
 * harmless, but a swap that silently did not happen (a Spark line whose plan has another shape, a
 * session built without the extension) would run the user's real sink. So every query start is
 * checked on the stream thread, before its first batch, and a query whose sink is not Spark's
 * {@code noop} halts the driver ({@link #checkStarted}); and the checkpoint file manager refuses
 * every write outside the probe's scratch folder ({@link #allowWrite}), which also covers an
 * application that hard-codes another checkpoint. The checkpoint the registry names is redirected
 * to the copy in the plan itself, so an application reading its checkpoint from its own config file
 * needs no change either.
 */
public final class Probe {
  public static final String COPY = AgentConf.PREFIX + "probe.copy";
  public static final String ROOT = AgentConf.PREFIX + "probe.root";
  /** Tests only: leave the plan alone, so the start check must catch the unreplaced sink. */
  public static final String TEST_SKIP_REWRITE = AgentConf.PREFIX + "probe.testSkipRewrite";
  static final int HALT_CODE = 86;
  private static final String NOOP_PACKAGE = "org.apache.spark.sql.execution.datasources.noop.";

  private static final List<Object> QUERIES = new ArrayList<>();
  private static final List<Object> REFUSED = new ArrayList<>();
  private static volatile Map<String, String> conf;

  private Probe() {}

  /** Called by the driver plugin with the agent's confs; probe mode when the copy is named. */
  static synchronized void configure(Map<String, String> all) {
    conf = blank(all.get(COPY)) ? null : all;
  }

  static boolean on() {
    return conf != null;
  }

  static boolean skipRewrite() {
    return on() && "true".equalsIgnoreCase(String.valueOf(conf.get(TEST_SKIP_REWRITE)));
  }

  static boolean isNoop(Object sink) {
    return sink != null && sink.getClass().getName().startsWith(NOOP_PACKAGE);
  }

  /**
   * The checkpoint a probed query must use instead of {@code resolved} (Spark's qualified path):
   * the registry's checkpoint becomes the copy; a path under the scratch folder stays; anything else
   * is refused, because the probe cannot know it is not some real query's checkpoint.
   */
  static String checkpointFor(String queryName, String resolved, Configuration hadoop) {
    Map<String, String> c = conf;
    String real = qualify(c.get(AgentConf.CHECKPOINT), hadoop);
    String copy = qualify(c.get(COPY), hadoop);
    String root = qualify(c.get(ROOT), hadoop);
    String given = qualifyOn(resolved, c.get(AgentConf.CHECKPOINT), hadoop);
    if (given != null && given.equals(real)) {
      return copy;
    }
    String inRoot = qualifyOn(resolved, c.get(ROOT), hadoop);
    if (inRoot != null && root != null && under(inRoot, root)) {
      return qualify(resolved, hadoop);
    }
    throw new IllegalStateException("[AKS_PROBE_CHECKPOINT_REFUSED] the probe refuses query " + queryName
        + ": its checkpoint " + resolved + " is neither the job's checkpoint (" + c.get(AgentConf.CHECKPOINT)
        + ") nor inside the probe's folder (" + c.get(ROOT) + ")");
  }

  /** Records one rewritten query for the report (what its sink was, which checkpoint it got). */
  static synchronized void rewritten(String name, String sinkWas, String checkpointGiven, String checkpointUsed) {
    Map<String, Object> q = new LinkedHashMap<>();
    q.put("name", name);
    q.put("sink_was", sinkWas);
    q.put("sink", "noop");
    q.put("checkpoint_given", checkpointGiven);
    q.put("checkpoint_used", checkpointUsed);
    QUERIES.add(q);
    Log.info("probe: query " + name + ": sink " + sinkWas + " -> noop, checkpoint " + checkpointUsed);
  }

  /**
   * On the stream thread, before the query's first batch (Spark posts QueryStartedEvent
   * synchronously): a query whose sink is not {@code noop} must not run a batch, so the driver halts
   * (exit {@value #HALT_CODE}) once the report says why. Halting, not failing the query: the
   * application may catch a failure and go on; it cannot go on from a halted JVM.
   */
  static void checkStarted(String runId, String name, Object sink, String root) {
    if (!on()) {
      return;
    }
    boolean noop = isNoop(sink);
    synchronized (Report.class) {
      Map<String, Object> q = Report.query(runId);
      q.put("probe_sink", sink == null ? null : sink.getClass().getName());
      q.put("probe_sink_replaced", noop);
    }
    if (!noop) {
      Log.warn("probe: query " + name + " (checkpoint " + root + ") would write its own sink "
          + (sink == null ? "(unknown)" : sink.getClass().getName()) + ": halting before its first batch");
      synchronized (Probe.class) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("what", "sink_not_replaced");
        r.put("query", name);
        r.put("sink", sink == null ? null : sink.getClass().getName());
        REFUSED.add(r);
      }
      Report.write();
      Runtime.getRuntime().halt(HALT_CODE);
    }
  }

  /**
   * Whether the checkpoint file manager may write {@code path} (create, rename, delete): only inside
   * the scratch folder. Read from the file manager's Hadoop conf, so the executors' state-store
   * writes are judged too. Outside paths throw: the write does not happen.
   */
  static boolean allowWrite(Path path, Configuration hadoop) {
    String copy = hadoop.get(COPY);
    if (blank(copy)) {
      return true;
    }
    String root = qualify(hadoop.get(ROOT), hadoop);
    String p = qualifyOn(path.toString(), hadoop.get(ROOT), hadoop);
    return root != null && p != null && under(p, root);
  }

  static synchronized void refusedWrite(String op, Path path) {
    Map<String, Object> r = new LinkedHashMap<>();
    r.put("what", op);
    r.put("path", path.toString());
    REFUSED.add(r);
    Log.warn("probe: refused " + op + " " + path + " (outside the probe's folder)");
  }

  static synchronized Map<String, Object> section() {
    if (!on()) {
      return null;
    }
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("copy", conf.get(COPY));
    m.put("root", conf.get(ROOT));
    m.put("rewritten", new ArrayList<>(QUERIES));
    m.put("refused", new ArrayList<>(REFUSED));
    return m;
  }

  /** {@code p} as its own file system qualifies it, without a trailing slash; public for the tests. */
  public static String qualify(String p, Configuration hadoop) {
    if (blank(p)) {
      return null;
    }
    try {
      Path path = new Path(p.trim());
      FileSystem fs = path.getFileSystem(hadoop);
      return fs.makeQualified(path).toString().replaceAll("/+$", "");
    } catch (java.io.IOException | RuntimeException e) {
      return null;
    }
  }

  /**
   * {@code p} qualified and spelled on the file system of {@code ref} when Hadoop says it is that file
   * system, else {@link #qualify}: {@code FileSystem.makeQualified} runs {@code checkPath}, which
   * compares the scheme and the authority canonicalized (the default port added, the host name
   * resolved), so {@code hdfs://nn/ck} and {@code hdfs://nn:8020/ck}, or {@code localhost} and
   * {@code 127.0.0.1}, name one place; another file system throws "Wrong FS". Why: a registry entry
   * and the application may spell the same checkpoint differently, and a string compare would
   * refuse the query (never a write, but an {@code unknown} answer). Public for the tests.
   */
  public static String qualifyOn(String p, String ref, Configuration hadoop) {
    String own = qualify(p, hadoop);   // a path without a scheme is the default file system's, as for Spark
    if (own == null || blank(ref)) {
      return own;
    }
    try {
      FileSystem fs = new Path(ref.trim()).getFileSystem(hadoop);
      Path q = fs.makeQualified(new Path(own));
      java.net.URI u = fs.getUri();
      return new Path(u.getScheme(), u.getAuthority(), q.toUri().getPath()).toString().replaceAll("/+$", "");
    } catch (java.io.IOException | RuntimeException e) {
      return own;   // another file system (Hadoop's "Wrong FS"): compared as it qualifies itself
    }
  }

  private static boolean under(String p, String root) {
    return p.equals(root) || p.startsWith(root + "/");
  }

  private static boolean blank(String s) {
    return s == null || s.trim().isEmpty();
  }
}
