"""A restore on HDFS against the store's own copy of the same files (issue 28: "a restore of a 2 GB state
backup ≤ 1.2× the store's own copy").

On the devstack's HDFS minicluster (started here): the reference factory's checkpoint padded with
``--files`` state files, ``--size`` bytes in all, written as Spark writes its files (Hadoop's FsShell
with ``dfs.checksum.type=NULL``: the NameNode keeps no checksum for them), once into a plain folder
(blob-store backups) and once below a snapshottable one (snapshot backups); each backed up once
(pre-copy, then the backup after the stop). Then, alternating per round:

* **the store's own copy**: ``hdfs dfs -cp`` of the checkpoint folder (Hadoop's FsShell, as an
  administrator runs it: a JVM, the DFS client, no checksum checked against anything), timed as a
  process, and its JVM start alone (``-ls /``) beside it;
* **restore copy from the blob store** (``ops.backup.store.materialize``: every file proven against
  its sha256; 4 at a time through WebHDFS);
* **restore copy from the snapshot** (``ops.backup.snapshot.copy_out``: every file proven, 8 at a time).

Each row: seconds, the 1-minute load at its start, and the bytes this process read and wrote
(``_util.fs.TRAFFIC``); the process's peak RSS at the end. Run:
``.venv/bin/python bench/restore_hdfs.py --size 512M --files 512 --rounds 2 --json .cache/restore-hdfs.json``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from store_bench import JOB, REPO, load, size_of, traffic_of, upload


def fsshell(hadoop, *args: str) -> float:
    """Seconds of one Hadoop FsShell command (a JVM of its own), with checksums off as Spark writes."""
    from devstack.spark_yarn import local_spark_home

    cp = os.pathsep.join([str(hadoop.conf_dir), str(local_spark_home() / "jars" / "*")])
    t = time.monotonic()
    subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell", "-Ddfs.checksum.type=NULL", *args],
                   check=True, capture_output=True, timeout=3600)
    return round(time.monotonic() - t, 2)


def checkpoint(hadoop, url: str, tree: Path, pad: Path) -> None:
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord

    upload(tree, url, sha256=False)
    loc = open_location(f"{url}/state")
    loc.fs.makedirs(loc.path, exist_ok=True)
    fsshell(hadoop, "-put", "-f", str(pad / "state" / "9"), f"{url}/state/")
    LifecycleRecord.create(JOB, url).save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="512M")
    ap.add_argument("--files", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=REPO / ".cache" / "restore-hdfs.json")
    args = ap.parse_args()
    from downtime_bench import pad

    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
    from airflow_kafka_spark.ops.backup.store import materialize
    from airflow_kafka_spark.ops.commands import backup_checkpoint
    from devstack.hadoop import HadoopCluster
    from tests.support.checkpoint_factory import write_checkpoint

    out: dict = {"size": args.size, "files": args.files, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="restore-hdfs-", dir=str(REPO / ".cache")) as tmp, \
            HadoopCluster(data_dir=Path(tmp) / "hadoop") as hadoop:
        os.environ["HADOOP_CONF_DIR"] = str(hadoop.conf_dir)
        tree = write_checkpoint(Path(tmp) / "ck", batches=4, sources=({"t": 2},), state=True).root
        pad(Path(tmp) / "pad", size_of(args.size), args.files)
        base = f"{hadoop.default_fs}/r/{uuid.uuid4().hex[:6]}"
        snap_parent = open_location(f"{base}/snap")
        snap_parent.fs.makedirs(snap_parent.path, exist_ok=True)
        snap_parent.fs._call("ALLOWSNAPSHOT", "put", snap_parent.path)   # as `hdfs dfsadmin -allowSnapshot`
        backups = {}
        for kind, ck in (("blob", f"{base}/blob/{JOB}/ck"), ("snapshot", f"{base}/snap/{JOB}/ck")):
            t = time.monotonic()
            checkpoint(hadoop, ck, tree, Path(tmp) / "pad")
            put_s = time.monotonic() - t
            root = f"{base}/backups-{kind}"
            pre, pre_t = traffic_of(lambda ck=ck, root=root: precopy_checkpoint(ck, root, job=JOB))
            after, after_t = traffic_of(lambda ck=ck, root=root: backup_checkpoint(ck, root, job=JOB, settle_s=0))
            assert bool(after.manifest.snapshot) == (kind == "snapshot"), kind
            backups[kind] = (ck, root, after.manifest)
            row = {"kind": kind, "put_s": round(put_s, 1), "files": after.files, "bytes": after.bytes,
                   "precopy": pre_t, "backup_after_stop": after_t, "precopy_files_read": pre.files_read}
            out[f"set_up_{kind}"] = row
            print(f"[restore-hdfs] set-up {json.dumps(row)}", flush=True)
        for i in range(args.rounds):
            order = ["cp", "blob", "snapshot"] if i % 2 == 0 else ["snapshot", "blob", "cp"]
            row: dict = {"round": i}
            for what in order:
                if what == "cp":
                    ck = backups["blob"][0]
                    row["cp"] = {"load": load(), "s": fsshell(hadoop, "-cp", ck, f"{base}/copy-{i}"),
                                 "jvm_alone_s": fsshell(hadoop, "-ls", "/")}
                    continue
                _, root, m = backups[what]
                dest = open_location(f"{base}/restored-{what}-{i}")
                _, row[what] = traffic_of(lambda m=m, root=root, dest=dest: materialize(m, root, dest))
            out["rounds"].append(row)
            print(f"[restore-hdfs] {json.dumps(row)}", flush=True)
        out["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
