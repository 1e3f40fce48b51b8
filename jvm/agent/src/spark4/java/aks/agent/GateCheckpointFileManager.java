package aks.agent;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream;

/**
 * Spark 4.1+ line (CheckpointFileManager moved to {@code ...streaming.checkpointing}): the file
 * manager Spark builds for every metadata log when {@code spark.sql.streaming.checkpointFileManagerClass}
 * names it. Every call goes to the manager Spark would have built without it (see {@link Delegate});
 * only the offset and commit logs' writes are watched, for the {@link Gate}.
 */
public final class GateCheckpointFileManager implements CheckpointFileManager {
  private final CheckpointFileManager delegate;
  private final Configuration conf;

  public GateCheckpointFileManager(Path path, Configuration conf) {
    this.conf = conf;
    Configuration copy = Delegate.confWithoutAgent(conf);
    this.delegate = CheckpointFileManager.create(path, copy);
    Delegate.seen(delegate.getClass().getName());
    Delegate.observeLog(path, delegate::exists, p -> delegate.list(p));
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    refuseOutsideProbe("createAtomic", path);
    String log = Gate.logOf(path);
    if ("offsets".equals(log)) {
      Delegate.beforeOffsets(path);
    }
    CancellableFSDataOutputStream out = delegate.createAtomic(path, overwriteIfPossible);
    return "commits".equals(log) ? new CommitStream(out, path) : out;
  }

  /** Tells the gate that batch N is committed once its commit file is in place (close returned). */
  private static final class CommitStream extends CancellableFSDataOutputStream {
    private final CancellableFSDataOutputStream inner;
    private final Path path;

    CommitStream(CancellableFSDataOutputStream inner, Path path) {
      super(inner);
      this.inner = inner;
      this.path = path;
    }

    @Override
    public void cancel() {
      inner.cancel();
    }

    @Override
    public void close() throws IOException {
      inner.close();
      Gate.committed(path);
    }
  }

  /** In a probe run only the probe's own folder may change (docs/probe.md): anything else throws. */
  private void refuseOutsideProbe(String op, Path path) {
    if (!Probe.allowWrite(path, conf)) {
      Probe.refusedWrite(op, path);
      throw new IllegalStateException("[AKS_PROBE_WRITE_REFUSED] the probe refuses to " + op + " " + path
          + ": outside the probe's folder");
    }
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public FileStatus[] list(Path path) {
    return delegate.list(path);
  }

  @Override
  public void mkdirs(Path path) {
    if (!Probe.allowWrite(path, conf)) {
      // A file sink's metadata log is built (and its folder made) in start(), before the probe's
      // rule replaces the sink: skip the folder, nothing will be written into it.
      Probe.refusedWrite("mkdirs", path);
      return;
    }
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    refuseOutsideProbe("delete", path);
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }
}
