// Starts Apache Hadoop's MiniDFSCluster (WebHDFS on) and a MiniYARNCluster ResourceManager in one
// JVM for the dev stack, writes the effective client configuration into a HADOOP_CONF_DIR, and
// stops both on SIGTERM. Driven by devstack/hadoop.py; not meant to be run by hand.
//
// The NodeManager runs in a JVM of its own (org.apache.hadoop.yarn.server.nodemanager.NodeManager,
// started by hadoop.py), as on a real cluster: YARN's web apps register with Guice's static
// GuiceFilter, so an RM and an NM in one JVM serve the NM's REST pipeline on the RM's port too and
// /ws/v1/cluster/* answers 404.
//
// Usage: MiniCluster <conf-dir> <nn-rpc-port> <nn-http-port> [key=value ...]
// The working directory is the cluster's data directory (MiniYARNCluster writes under ./target).
// When both clusters are up it writes <conf-dir>/ready (a properties file with the addresses).
//
// Control (for the soak): a file <conf-dir>/control/<command>.cmd holding a downtime in milliseconds
// makes it restart a component in place and then write <command>.done ("ok" or "failed <why>"):
//   restart-nn  stops the NameNode, waits, starts it again on the same ports and storage (the DataNode
//               re-registers; clients see connection refused meanwhile);
//   restart-rm  stops the ResourceManager service, waits, starts a new ResourceManager on the same ports,
//               which recovers running applications from its state store when yarn.resourcemanager.
//               recovery.enabled is set (work-preserving: the NodeManager and the AMs resync).

import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.protocol.HdfsConstants;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public final class MiniCluster {
  private static volatile MiniDFSCluster dfs;
  private static volatile MiniYARNCluster yarn;

  public static void main(String[] args) {
    try {
      run(args);
    } catch (Throwable t) {
      // Exit instead of leaving the JVM up on HDFS's non-daemon threads: the caller sees the exit.
      System.err.println("MINICLUSTER FAILED " + t);
      t.printStackTrace();
      System.exit(1);
    }
  }

  private static void run(String[] args) throws Exception {
    File confDir = new File(args[0]);
    int nnPort = Integer.parseInt(args[1]);
    int nnHttpPort = Integer.parseInt(args[2]);
    Configuration base = new Configuration();
    for (int i = 3; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      base.set(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    base.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File("dfs").getAbsolutePath());
    Runtime.getRuntime().addShutdownHook(new Thread(MiniCluster::stopAll, "minicluster-stop"));

    dfs = new MiniDFSCluster.Builder(base)
        .nameNodePort(nnPort).nameNodeHttpPort(nnHttpPort)
        .numDataNodes(1).format(true).build();
    dfs.waitActive();
    DistributedFileSystem fs = dfs.getFileSystem();
    while (fs.setSafeMode(HdfsConstants.SafeModeAction.SAFEMODE_GET)) {
      Thread.sleep(100);
    }
    Configuration dfsConf = dfs.getConfiguration(0);

    // YARN gets the caller's settings and the filesystem, not HDFS's test-only web filters.
    YarnConfiguration yconf = new YarnConfiguration(base);
    yconf.set("fs.defaultFS", dfsConf.get("fs.defaultFS"));
    yarn = new MiniYARNCluster("devstack", 0, 1, 1);
    yarn.init(yconf);
    yarn.start();
    Configuration effective = yarn.getConfig();

    writeSites(dfsConf, effective, confDir);
    TreeMap<String, String> ready = new TreeMap<>();
    ready.put("fs.defaultFS", effective.get("fs.defaultFS"));
    ready.put("dfs.namenode.http-address", effective.get("dfs.namenode.http-address"));
    ready.put("yarn.resourcemanager.address", effective.get(YarnConfiguration.RM_ADDRESS));
    ready.put("yarn.resourcemanager.webapp.address", effective.get(YarnConfiguration.RM_WEBAPP_ADDRESS));
    StringBuilder sb = new StringBuilder();
    for (Map.Entry<String, String> e : ready.entrySet()) {
      sb.append(e.getKey()).append('=').append(e.getValue()).append('\n');
    }
    File tmp = new File(confDir, "ready.partial");
    Files.write(tmp.toPath(), sb.toString().getBytes(StandardCharsets.UTF_8));
    Files.move(tmp.toPath(), new File(confDir, "ready").toPath(), StandardCopyOption.ATOMIC_MOVE);
    System.out.println("MINICLUSTER READY " + sb.toString().replace('\n', ' '));
    System.out.flush();
    File control = new File(confDir, "control");
    control.mkdirs();
    while (true) {  // until SIGTERM runs the shutdown hook
      File[] commands = control.listFiles((d, n) -> n.endsWith(".cmd"));
      for (File cmd : commands == null ? new File[0] : commands) {
        String name = cmd.getName().substring(0, cmd.getName().length() - 4);
        String result = "ok";
        try {
          long downMs = Long.parseLong(new String(Files.readAllBytes(cmd.toPath()), StandardCharsets.UTF_8).trim());
          Files.delete(cmd.toPath());
          control(name, downMs);
        } catch (Throwable t) {
          t.printStackTrace();
          result = "failed " + t;
        }
        File done = new File(control, name + ".done.partial");
        Files.write(done.toPath(), result.getBytes(StandardCharsets.UTF_8));
        Files.move(done.toPath(), new File(control, name + ".done").toPath(), StandardCopyOption.ATOMIC_MOVE);
      }
      Thread.sleep(200);
    }
  }

  private static void control(String name, long downMs) throws Exception {
    System.out.println("MINICLUSTER " + name + " (down " + downMs + " ms)");
    System.out.flush();
    switch (name) {
      case "restart-nn":
        dfs.shutdownNameNode(0);
        Thread.sleep(downMs);
        dfs.restartNameNode(0, true);
        DistributedFileSystem fs = dfs.getFileSystem();
        while (fs.setSafeMode(HdfsConstants.SafeModeAction.SAFEMODE_GET)) {
          Thread.sleep(100);
        }
        break;
      case "restart-rm":
        yarn.stopResourceManager(0);
        Thread.sleep(downMs);
        yarn.restartResourceManager(0);
        break;
      default:
        throw new IllegalArgumentException("unknown command " + name);
    }
    System.out.println("MINICLUSTER " + name + " done");
    System.out.flush();
  }

  /** Only what differs from Hadoop's *-default.xml: core and hdfs from HDFS, yarn from YARN. */
  private static void writeSites(Configuration dfsConf, Configuration yarnConf, File confDir)
      throws Exception {
    Configuration core = new Configuration(false);
    Configuration hdfs = new Configuration(false);
    Configuration yarnSite = new Configuration(false);
    for (Map.Entry<String, String> e : dfsConf) {
      String key = e.getKey();
      if (fromDefaults(dfsConf, key) || key.startsWith("hdfs.minidfs.") || key.startsWith("rpc.engine.")
          || key.startsWith("yarn.") || key.startsWith("mapreduce.")
          || key.equals("hadoop.http.filter.initializers")
          // MiniDFSCluster's rack mapping is a test class no client (Spark's AM) has.
          || key.equals("net.topology.node.switch.mapping.impl")) {
        continue;
      }
      (key.startsWith("dfs.") ? hdfs : core).set(key, dfsConf.get(key));
    }
    for (Map.Entry<String, String> e : yarnConf) {
      String key = e.getKey();
      if (key.startsWith("yarn.") && !fromDefaults(yarnConf, key)) {
        yarnSite.set(key, yarnConf.get(key));
      }
    }
    confDir.mkdirs();
    write(core, new File(confDir, "core-site.xml"));
    write(hdfs, new File(confDir, "hdfs-site.xml"));
    write(yarnSite, new File(confDir, "yarn-site.xml"));
  }

  private static boolean fromDefaults(Configuration conf, String key) {
    String[] sources = conf.getPropertySources(key);
    return sources != null && sources.length > 0 && sources[sources.length - 1].endsWith("-default.xml");
  }

  private static void write(Configuration c, File f) throws Exception {
    try (OutputStream out = new FileOutputStream(f)) {
      c.writeXml(out);
    }
  }

  private static void stopAll() {
    try {
      if (yarn != null) {
        yarn.stop();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
    try {
      if (dfs != null) {
        dfs.shutdown();
      }
    } catch (Throwable t) {
      t.printStackTrace();
    }
    System.out.println("MINICLUSTER STOPPED");
    System.out.flush();
  }
}
