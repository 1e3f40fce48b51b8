package aks.agent;

import java.io.InterruptedIOException;
import java.util.function.Function;
import java.util.function.Predicate;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * What both lines' {@code GateCheckpointFileManager} share: choosing the manager Spark would have
 * built without the agent, and telling the {@link Gate} what a log already holds.
 *
 * <p>The delegate is built by Spark's own {@code CheckpointFileManager.create} on a copy of the
 * configuration whose file-manager key is unset (FileContext-based, falling back to
 * FileSystem-based, exactly as Spark decides) or set to the user's own class when the user had one
 * (the product moves it to {@code spark.aks.agent.delegateCheckpointFileManagerClass}).
 */
final class Delegate {
  private static volatile String seenClass;

  private Delegate() {}

  /** The class the checkpoint's files really go through (named in the report). */
  static void seen(String className) {
    seenClass = className;
  }

  static String seenClass() {
    return seenClass;
  }

  static Configuration confWithoutAgent(Configuration conf) {
    Configuration copy = new Configuration(conf);
    String users = conf.get(AgentConf.DELEGATE_FILE_MANAGER);
    if (users != null && !users.trim().isEmpty() && !users.trim().equals(GateCheckpointFileManager.class.getName())) {
      copy.set(AgentConf.SPARK_FILE_MANAGER, users.trim());
    } else {
      copy.unset(AgentConf.SPARK_FILE_MANAGER);
    }
    return copy;
  }

  /** For {@code <root>/offsets} and {@code <root>/commits}: the newest batch id already on disk. */
  static void observeLog(Path dir, Predicate<Path> exists, Function<Path, FileStatus[]> list) {
    String name = dir.getName();
    if (!"offsets".equals(name) && !"commits".equals(name)) {
      return;
    }
    long newest = -1;
    try {
      if (exists.test(dir)) {
        for (FileStatus st : list.apply(dir)) {
          newest = Math.max(newest, Gate.batchId(st.getPath()));
        }
      }
    } catch (RuntimeException e) {
      Log.warn("could not list " + dir + " (the gate starts from nothing for it)", e);
    }
    Gate.observeExisting(dir, newest);
  }

  /** The gate, with its checked interruption thrown through Scala's undeclared signature. */
  static void beforeOffsets(Path file) {
    try {
      Gate.beforeOffsets(file);
    } catch (InterruptedIOException e) {
      Delegate.<RuntimeException>sneaky(e);
    }
  }

  @SuppressWarnings("unchecked")
  private static <E extends Throwable> void sneaky(Throwable e) throws E {
    throw (E) e;
  }
}
