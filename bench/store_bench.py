"""Bytes through the worker and restore speed, per store (issue 28, round 8).

Two parts, each as installed (``.venv/bin/python``, child processes for the timed local copies):

* ``local``: a checkpoint of ``--size`` bytes in ``--files`` state files (the reference factory's
  checkpoint, padded like ``downtime_bench.pad``), backed up once; then, alternating, ``cp -a`` +
  ``sync`` of the checkpoint (the store's own copy) and the restore copy of the backup
  (``materialize``: every file hashed against its sha256 while copied, then ``syncfs``), and the
  restore copy of the tree at ``--old`` (``git archive`` of that commit, run the same way) once.
  Each row: wall time including a ``sync`` after (``s``), the command alone (``copy_s``), its CPU
  time (user + system, ``cpu_s``); ``sync`` flushes every writer's dirty pages on this shared disk,
  so ``s`` carries other sessions' I/O too.
* ``remote``: the devstack's S3Proxy and HDFS minicluster (started here), a checkpoint of
  ``--remote-files`` state files of ``--remote-file-size`` bytes uploaded to each, S3 both with
  and without a kept SHA-256 (``x-amz-checksum-sha256``, what S3A's
  ``fs.s3a.create.checksum.algorithm`` asks for where Hadoop has it; written here by PutObject); for
  each: the pre-copy of state never backed up, the backup after the stop, the restore copy to the
  same store, each with the bytes its process read and wrote (``_util.fs.TRAFFIC``).
* ``hdfs-small`` (``--only hdfs-small``; issue 28, after round 9): what the backup after a stop puts
  into the window on HDFS. The minicluster, a checkpoint pre-copied once, then per round
  ``--small-files`` new state files of 4-64 KiB (what Spark wrote since the pre-copy: RocksDB SSTs) and the backup
  after the stop; then the restore copy of that backup to the same cluster. Each row: seconds,
  ``verify_s`` (the backup's own), and every WebHDFS request this process sent, by operation
  (``NN:OPEN``; ``DN:*`` the DataNode leg of a redirect) and new TCP connections (keep-alive).
  ``--hdfs-threads 4,8`` alternates ``WebHdfs.parallel_puts`` (and the restore's threads) per round;
  ``--spark-files`` writes the new files with HDFS checksums off (Hadoop's FsShell,
  ``dfs.checksum.type=NULL``), as Spark writes its own: the NameNode has no checksum to prove a blob by.

Every figure is printed with the 1-minute load average at its start. Run:
``.venv/bin/python bench/store_bench.py --size 2G --files 20000 --json .cache/store-bench.json``;
the small-files part: ``.venv/bin/python bench/store_bench.py --only hdfs-small --rounds 4``
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

PY = str(REPO / ".venv" / "bin" / "python")
JOB = "sb"

RESTORE_COPY = """
import sys, time
sys.path.insert(0, sys.argv[5])
from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.ops.backup.catalog import load_backup
from airflow_kafka_spark.ops.backup.store import materialize
m = load_backup(sys.argv[1], sys.argv[2], sys.argv[3])
t = time.monotonic()
materialize(m, sys.argv[1], open_location(sys.argv[4]))
print(time.monotonic() - t)
"""


def load() -> float:
    return round(os.getloadavg()[0], 2)


def size_of(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def make_checkpoint(where: Path, size: int, files: int) -> Path:
    from downtime_bench import pad

    from tests.support.checkpoint_factory import write_checkpoint

    ck = write_checkpoint(where, batches=4, sources=({"t": 2},), state=True).root
    pad(ck, size, files)
    return ck


def timed(cmd: list[str], env: dict | None = None) -> float:
    t = time.monotonic()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.monotonic() - t


def local_part(args: argparse.Namespace, work: Path) -> dict:
    from airflow_kafka_spark.ops.commands import backup_checkpoint

    ck = make_checkpoint(work / "ck", size_of(args.size), args.files)
    root = work / "backups"
    r = backup_checkpoint(str(ck), str(root), job=JOB, settle_s=0)
    out: dict = {"files": r.files, "bytes": r.bytes, "rounds": []}
    old = None
    if args.old:
        old = work / "old-tree"
        old.mkdir()
        subprocess.run(f"git -C {REPO} archive {args.old} airflow_kafka_spark | tar -x -C {old}", shell=True,
                       check=True)
    subprocess.run(["sync"], check=True)

    def child_cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    def restore(tree: Path) -> dict:
        target = work / "restored"
        la, c0 = load(), child_cpu()
        t = time.monotonic()
        subprocess.run([PY, "-c", RESTORE_COPY, str(root), JOB, r.backup_id, str(target), str(tree)], check=True,
                       stdout=subprocess.DEVNULL)
        copied = time.monotonic() - t
        subprocess.run(["sync"], check=True)   # the old tree does not sync: the same flush for both
        row = {"s": round(time.monotonic() - t, 2), "copy_s": round(copied, 2), "cpu_s": round(child_cpu() - c0, 2),
               "load": la}
        shutil.rmtree(target)
        subprocess.run(["sync"], check=True)
        return row

    def cp() -> dict:
        la, c0 = load(), child_cpu()
        t = time.monotonic()
        subprocess.run(["cp", "-a", str(ck), str(work / "cp-copy")], check=True)
        copied = time.monotonic() - t
        subprocess.run(["sync"], check=True)
        row = {"s": round(time.monotonic() - t, 2), "copy_s": round(copied, 2), "cpu_s": round(child_cpu() - c0, 2),
               "load": la}
        shutil.rmtree(work / "cp-copy")
        subprocess.run(["sync"], check=True)
        return row

    for i in range(args.rounds):
        pair = [("cp", cp), ("restore", lambda: restore(REPO))]
        for name, fn in pair if i % 2 == 0 else pair[::-1]:
            row = {"what": name, **fn()}
            out["rounds"].append(row)
            print(f"[local] {json.dumps(row)}", flush=True)
    if old is not None:
        row = {"what": f"restore at {args.old}", **restore(old)}
        out["rounds"].append(row)
        print(f"[local] {json.dumps(row)}", flush=True)
    return out


def upload(tree: Path, url: str, *, sha256: bool) -> int:
    from airflow_kafka_spark._util.fs import open_location

    loc = open_location(url)
    total = 0
    for p in sorted(tree.rglob("*")):
        if not p.is_file():
            continue
        data, path = p.read_bytes(), posixpath.join(loc.path, str(p.relative_to(tree)))
        total += len(data)
        if sha256:   # PutObject with a SHA-256 the store checks and keeps (S3A's checksum option asks for it)
            bucket, key, _ = loc.fs.split_path(path)
            loc.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256")
        else:
            loc.fs.pipe_file(path, data)
    return total


def traffic_of(fn) -> tuple[object, dict]:
    from airflow_kafka_spark._util.fs import TRAFFIC

    la = load()
    r0, w0 = TRAFFIC.totals()
    t = time.monotonic()
    result = fn()
    r1, w1 = TRAFFIC.totals()
    return result, {"s": round(time.monotonic() - t, 2), "read": r1 - r0, "written": w1 - w0, "load": la}


def remote_part(args: argparse.Namespace, work: Path) -> dict:
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
    from airflow_kafka_spark.ops.backup.store import materialize
    from airflow_kafka_spark.ops.commands import backup_checkpoint
    from devstack.hadoop import HadoopCluster
    from devstack.s3 import S3Store

    tree = make_checkpoint(work / "remote-ck", args.remote_files * args.remote_file_size, args.remote_files)
    out: dict = {}
    with HadoopCluster(data_dir=work / "hadoop") as hadoop, S3Store(data_dir=work / "s3") as s3:
        os.environ.update({"HADOOP_CONF_DIR": str(hadoop.conf_dir), "AWS_ACCESS_KEY_ID": s3.access_key,
                           "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_ENDPOINT_URL_S3": s3.endpoint,
                           "AWS_DEFAULT_REGION": "us-east-1"})
        for name, base, sha in (("s3, objects with a kept SHA-256", s3.url(f"b/{uuid.uuid4().hex[:6]}"), True),
                                ("s3, objects without (S3A's default)", s3.url(f"b/{uuid.uuid4().hex[:6]}"), False),
                                ("hdfs", f"{hadoop.default_fs}/b/{uuid.uuid4().hex[:6]}", False)):
            ck, root = f"{base}/{JOB}/ck", f"{base}/backups"
            total = upload(tree, ck, sha256=sha and name.startswith("s3"))
            LifecycleRecord.create(JOB, ck).save()
            pre, pre_t = traffic_of(lambda ck=ck, root=root: precopy_checkpoint(ck, root, job=JOB))
            after, after_t = traffic_of(lambda ck=ck, root=root: backup_checkpoint(ck, root, job=JOB, settle_s=0))
            _, restore_t = traffic_of(lambda root=root, after=after, base=base: materialize(
                after.manifest, root, open_location(f"{base}/restored")))
            row = {"checkpoint_bytes": total, "backup_bytes": after.bytes, "files": after.files,
                   "precopy": {**pre_t, "files_vouched": pre.files_vouched,
                               "bytes_copied_by_store": pre.bytes_copied_by_store, "files_read": pre.files_read},
                   "backup_after_stop": {**after_t, "files_hashed": after.files_hashed},
                   "restore_copy": restore_t}
            out[name] = row
            print(f"[remote] {name}: {json.dumps(row)}", flush=True)
    return out


class Requests:
    """Every HTTP request a ``requests`` session sends (a response hook: redirects' second legs too), by
    operation, and the TCP connections urllib3 opens (``Starting new HTTP connection``)."""

    def __init__(self, session, namenode_port: int) -> None:
        import collections
        import logging
        import threading

        self.ops: collections.Counter = collections.Counter()
        self.connections = 0
        self._lock, self._port = threading.Lock(), namenode_port
        session.hooks["response"].append(self._hook)
        outer = self

        class Count(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "Starting new HTTP" in record.getMessage():
                    with outer._lock:
                        outer.connections += 1

        log = logging.getLogger("urllib3.connectionpool")
        log.setLevel(logging.DEBUG)
        log.addHandler(Count())

    def _hook(self, response, *args, **kwargs) -> None:
        from urllib.parse import parse_qs, urlsplit

        url = urlsplit(response.request.url)
        op = (parse_qs(url.query).get("op") or ["?"])[0]
        with self._lock:
            self.ops[f"{'NN' if url.port == self._port else 'DN'}:{op}"] += 1

    def take(self) -> tuple[dict, int]:
        with self._lock:
            out, conns = dict(sorted(self.ops.items())), self.connections
            self.ops.clear()
            self.connections = 0
        return out, conns


def put_new_files(bodies: dict[str, bytes], url: str, local: Path, hadoop, *, spark: bool) -> None:
    """``bodies`` below ``url``: through WebHDFS, or (``spark``) by Hadoop's FsShell with checksums off,
    as Spark writes its checkpoint files (the NameNode then has no checksum for them)."""
    from airflow_kafka_spark._util.fs import open_location

    loc = open_location(url)
    if not spark:
        for name, body in bodies.items():
            loc.fs.pipe_file(f"{loc.path}/{name}", body)
        return
    from devstack.spark_yarn import local_spark_home

    local.mkdir(parents=True)
    for name, body in bodies.items():
        (local / name).write_bytes(body)
    loc.fs.makedirs(loc.path, exist_ok=True)
    cp = os.pathsep.join([str(hadoop.conf_dir), str(local_spark_home() / "jars" / "*")])
    subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell", "-Ddfs.checksum.type=NULL", "-put", "-f",
                    *sorted(str(p) for p in local.iterdir()), url], check=True, capture_output=True, timeout=600)


def hdfs_small_part(args: argparse.Namespace, work: Path) -> dict:
    import random

    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.ops.backup import kinds, restore_copy
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
    from airflow_kafka_spark.ops.backup.store import materialize
    from airflow_kafka_spark.ops.commands import backup_checkpoint
    from devstack.hadoop import HadoopCluster
    from tests.support.checkpoint_factory import write_checkpoint

    tree = write_checkpoint(work / "small-ck", batches=4, sources=({"t": 2},), state=True).root
    rng = random.Random(28)
    rows: list[dict] = []
    with HadoopCluster(data_dir=work / "hadoop") as hadoop:
        os.environ["HADOOP_CONF_DIR"] = str(hadoop.conf_dir)
        base = f"{hadoop.default_fs}/b/{uuid.uuid4().hex[:6]}"
        ck, root = f"{base}/{JOB}/ck", f"{base}/backups"
        upload(tree, ck, sha256=False)
        LifecycleRecord.create(JOB, ck).save()
        loc = open_location(ck)
        counter = Requests(loc.fs.session, int(loc.fs.url.rsplit(":", 1)[1].split("/")[0]))
        precopy_checkpoint(ck, root, job=JOB)
        print(f"[hdfs-small] set-up: {json.dumps(counter.take())}", flush=True)
        threads = [int(t) for t in args.hdfs_threads.split(",")]
        for i in range(args.rounds):
            n = threads[i % len(threads)]
            kinds.WebHdfs.parallel_puts = n
            restore_copy._THREADS["webhdfs"] = n
            bodies = {f"{i:02d}-{j:04d}.sst": os.urandom(rng.randint(4 << 10, 64 << 10))
                      for j in range(args.small_files)}   # what Spark wrote since the pre-copy: new SSTs
            put_new_files(bodies, f"{ck}/state/0/0/SSTs", work / f"new-{i}", hadoop, spark=args.spark_files)
            counter.take()
            la, t = load(), time.monotonic()
            r = backup_checkpoint(ck, root, job=JOB, settle_s=0)
            backup_s = time.monotonic() - t
            ops, conns = counter.take()
            row = {"round": i, "threads": n, "load": la, "new_files": r.files_hashed, "backup_s": round(backup_s, 2),
                   "verify_s": round(r.verify_seconds, 2), "requests": sum(ops.values()), "connections": conns,
                   "ops": ops}
            la, t = load(), time.monotonic()
            materialize(r.manifest, root, open_location(f"{base}/restored-{i}"))
            ops, conns = counter.take()
            row["restore"] = {"files": r.files, "s": round(time.monotonic() - t, 2), "load": la,
                              "requests": sum(ops.values()), "connections": conns, "ops": ops}
            rows.append(row)
            print(f"[hdfs-small] {json.dumps(row)}", flush=True)
    return {"rounds": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="2G")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", default="6698750", help="a commit whose restore copy is measured once beside")
    ap.add_argument("--remote-files", type=int, default=200)
    ap.add_argument("--remote-file-size", type=int, default=128 << 10)
    ap.add_argument("--small-files", type=int, default=80, help="hdfs-small: new state files per round")
    ap.add_argument("--spark-files", action="store_true",
                    help="hdfs-small: new files written with HDFS checksums off, as Spark writes them")
    ap.add_argument("--hdfs-threads", default="4", help="hdfs-small: WebHdfs.parallel_puts per round, e.g. 4,8")
    ap.add_argument("--only", choices=("local", "remote", "hdfs-small"))
    ap.add_argument("--json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="store-bench-", dir=str(REPO / ".cache")))
    results: dict = {"started_load": load()}
    try:
        if args.only == "hdfs-small":
            results["hdfs-small"] = hdfs_small_part(args, work)
        if args.only in (None, "remote"):
            results["remote"] = remote_part(args, work)
        if args.only in (None, "local"):
            results["local"] = local_part(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
