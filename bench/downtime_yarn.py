"""The downtime of a restart with the job in YARN cluster mode and its checkpoint on HDFS (issue 28).

The same restarts as ``downtime_bench.py`` (``keep``) and ``downtime_preserve.py`` (``auto`` → reset
``preserve``), bare and safe interleaved, on the devstack's HDFS + YARN minicluster (Hadoop 3.4.1,
one NodeManager, started here as ``tests/cluster/conftest.py`` starts it): the reference job is
submitted by the product's ``start_stop.submit_job`` to ``--master yarn --deploy-mode cluster``
(``devstack.spark_yarn.prepare``: Spark's jars, PySpark and the Kafka connector on HDFS, as
``tests/cluster/test_safe_restart_yarn.py`` does), its checkpoint, stop marker, sink and backups
live on HDFS, and every product command reaches HDFS through WebHDFS. Downtime is measured from
the NameNode's modification times of ``commits/`` and ``offsets/`` (the same clock as this host).

State: Spark's own RocksDB state, from ``--burst`` records (every one a new dedup key) read by the
first batch; ``keep`` carries it through every restart. No padding on HDFS (see docs/benchmarks.md,
round 9, for why not).

Run: ``.venv/bin/python bench/downtime_yarn.py --modes keep,preserve --rounds 2 --json .cache/downtime-yarn.json``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import downtime_preserve
from downtime_bench import JOB, REPO, Bench, du, interleaved, load_1m, log, pad, size_of, started_feed

SPARK_YARN = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}


def pad_on_hdfs(ck: str, total: int, files: int, local: Path, hadoop, blob_store: str | None = None) -> float:
    """``downtime_bench.pad``'s files written locally, then put below ``<ck>/state/9`` by Hadoop's own
    FsShell (WebHDFS through fsspec writes ~15 MB/s here); the seconds it took.

    ``blob_store`` (the job's ``<backup_root>/<job>``): the same bodies also put there as the blobs the
    product's first pre-copy would store (``blobs/<aa>/<sha256>``), so that pre-copy reads and hashes every
    file but writes none. Why: its blob writes go one WebHDFS ``CREATE`` each, and a closed file waits
    for its block report (400 ms at a time, the DataNode's ``locateFollowingBlock`` back-off): 12-17
    files/s here whatever the worker's parallelism, 27 minutes for 20,000 files, all of it before the
    first stop and none of it in a downtime window (docs/benchmarks.md, round 14)."""
    import subprocess

    from devstack.spark_yarn import local_spark_home

    t = time.monotonic()
    pad(local, total, files)
    cp = os.pathsep.join([str(hadoop.conf_dir), str(local_spark_home() / "jars" / "*")])
    if blob_store is not None:
        blobs = _blob_tree(local / "state" / "9", local / "blobs")
        subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", f"{blob_store}/blobs"],
                       check=True, capture_output=True, timeout=300)
        subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell",
                        "-Ddfs.client.block.write.locateFollowingBlock.initial.delay.ms=10", "-put", "-f", "-t", "16",
                        *map(str, blobs), f"{blob_store}/blobs/"], check=True, capture_output=True, timeout=1800)
    # -Ddfs.checksum.type=NULL: as Spark writes its checkpoint files (checksums off), so the cluster has no
    # checksum of the padding either and a snapshot backup reads it as it reads Spark's own state files
    # -t 16 and a 10 ms first wait for a closed file's block: one file at a time, each close waited 0.3 s
    # for the DataNode's block report here (~3.5 files/s, 95 minutes for 20,000 files)
    subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell", "-Ddfs.checksum.type=NULL",
                    "-Ddfs.client.block.write.locateFollowingBlock.initial.delay.ms=10", "-put", "-f", "-t", "16",
                    str(local / "state" / "9"),
                    f"{ck}/state/"], check=True, capture_output=True, timeout=1800)
    seconds = round(time.monotonic() - t, 1)
    log.info("padded %s/state/9 in %.1fs; the cluster keeps a checksum of its files: %s", ck, seconds,
             cluster_checksum_of(f"{ck}/state/9/0/SSTs/000000-pad.sst") is not None)
    return seconds


def _blob_tree(padding: Path, into: Path) -> list[Path]:
    """Hard links ``<into>/<aa>/<sha256>`` to every padding file (the blob store's layout); the ``<aa>`` folders."""
    import hashlib

    for f in padding.rglob("*.sst"):
        sha = hashlib.sha256(f.read_bytes()).hexdigest()
        (into / sha[:2]).mkdir(parents=True, exist_ok=True)
        if not (into / sha[:2] / sha).exists():
            os.link(f, into / sha[:2] / sha)
    return sorted(p for p in into.iterdir() if p.is_dir())


def cluster_checksum_of(url: str) -> str | None:
    """The NameNode's checksum of a file, or None where it keeps none (Spark's files, the padding)."""
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark._util.stores import webhdfs_file_checksum

    loc = open_location(url)
    try:
        return webhdfs_file_checksum(loc.fs, loc.path)
    except RuntimeError:
        return None


def blob_store(bench_kw: dict) -> str:
    """The bench job's blob store: ``Bench``'s registry puts backups in ``${data}/backups``."""
    return f"{bench_kw['data']}/backups/{JOB}"


def allow_snapshots(hadoop, folder: str) -> None:
    """What an administrator's ``hdfs dfsadmin -allowSnapshot <folder>`` does (the minicluster's user is
    its superuser): ``folder`` (the registry's ``checkpoints/`` folder, a parent of the checkpoint, as
    docs/deployment.md tells) becomes snapshottable, so the product's backups there are HDFS snapshots."""
    import fsspec

    fs = fsspec.filesystem("webhdfs", skip_instance_cache=True, **hadoop.fsspec_options())
    fs.makedirs(folder, exist_ok=True)
    fs._call("ALLOWSNAPSHOT", "put", folder)


def keep_run(work: Path, bootstrap: str, rounds: int, burst: int, bench_kw: dict,
             padding: tuple[int, int, object] | None = None) -> dict:
    from devstack.topics import create_topic

    topic = "dtyk"
    create_topic(bootstrap, topic, partitions=4)
    b = Bench(work, bootstrap, topic, **bench_kw)
    feed = started_feed(bootstrap, topic, burst)
    try:
        t = time.monotonic()
        b.submit()
        b.running_with_batches(3)
        first_start = round(time.monotonic() - t, 1)
        pad_s = pad_on_hdfs(b.ck, padding[0], padding[1], work / "pad", padding[2], blob_store=blob_store(bench_kw)) \
            if padding else None
        files, size = du(b.ck)
        def restart(kind: str) -> dict:
            row = b.restart(kind)
            row["checkpoint_files"], row["checkpoint_bytes"] = du(b.ck)
            return row

        rows = interleaved(b, rounds, restart)
        b.stop()
        return {"size": "spark", "mode": "keep", "first_start_s": first_start, "pad_s": pad_s,
                "checkpoint_files": files, "checkpoint_bytes": size, "restarts": rows}
    finally:
        feed.stop.set()
        with contextlib.suppress(Exception):
            b.stop()


class HdfsPadding:
    """``preserve`` on HDFS at a size: the reset moves the whole checkpoint aside, so every restart needs
    the padding again. Written once by FsShell below ``<data>/pad/9``, then *renamed* into the running
    checkpoint's ``state/9`` before each restart and back out of the folder the restart moved aside
    (an HDFS rename keeps each file's mtime and bytes). What that leaves out, and docs/benchmarks.md
    says: after a reset the new query's backups cannot reuse the old query's entries (another query
    id), so every safe restart's pre-copy reads the padding again, as a first backup of a new query
    would; the padding's bodies are in the blob store already, so only reads repeat, not writes."""

    def __init__(self, data: str, total: int, files: int, work: Path, hadoop) -> None:
        from airflow_kafka_spark._util.fs import open_location

        self.home = f"{data}/pad"
        loc = open_location(f"{self.home}/state")
        loc.fs.makedirs(loc.path, exist_ok=True)
        self.seconds = pad_on_hdfs(self.home, total, files, work / "pad", hadoop,   # -> <home>/state/9
                                   blob_store=f"{data}/backups/{JOB}")

    def into(self, ck: str) -> None:
        downtime_preserve.rename(f"{self.home}/state/9", f"{ck}/state/9")

    def back_from(self, aside: str) -> None:
        downtime_preserve.rename(f"{aside}/state/9", f"{self.home}/state/9")


def preserve_run(work: Path, bootstrap: str, rounds: int, burst: int, bench_kw: dict,
                 padding: tuple[int, int, object] | None) -> dict:
    pad_to = HdfsPadding(bench_kw["data"], padding[0], padding[1], work, padding[2]) if padding else None
    res = downtime_preserve.one_size(work, bootstrap, "0", 0, rounds, burst, bench_kw, hdfs_padding=pad_to)
    res["mode"] = "preserve"
    if pad_to is not None:
        res.update(size=f"{padding[0]}", pad_bytes=padding[0], pad_files=padding[1], pad_s=pad_to.seconds)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="keep,preserve")
    ap.add_argument("--rounds", type=int, default=2, help="bare/safe pairs per mode")
    ap.add_argument("--burst", type=int, default=200000, help="records produced before the first start")
    ap.add_argument("--pad", default="0", help="pad the checkpoint on HDFS with this many bytes (2G)")
    ap.add_argument("--pad-files", type=int, default=2000, help="in this many files")
    ap.add_argument("--snapshottable", action="store_true",
                    help="make the checkpoints' parent folder snapshottable first (backups are HDFS snapshots)")
    ap.add_argument("--json", type=Path, default=REPO / ".cache" / "downtime-yarn.json")
    args = ap.parse_args()
    from states import compile_package

    compile_package()   # task processes and commands load the package as an installed wheel does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a kill still stops the drivers and the broker
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("airflow_kafka_spark").setLevel(logging.WARNING)
    from devstack.broker import LocalBroker
    from devstack.hadoop import HadoopCluster
    from devstack.spark_yarn import prepare

    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="downtime-y-", dir=str(REPO / ".cache")) as tmp, \
            LocalBroker(Path(tmp) / "broker") as broker, HadoopCluster(data_dir=Path(tmp) / "hadoop") as hadoop:
        t = time.monotonic()
        ys = prepare(hadoop)
        log.info("minicluster up in %.1fs, Spark's files on HDFS in %.1fs (load %s)", hadoop.start_seconds,
                 time.monotonic() - t, load_1m())
        env = {k: ys.env[k] for k in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_ARCHIVES_PATH")}
        os.environ.update(env)
        job = {"deploy_mode": "cluster", "spark_conf": {**ys.conf, "spark.jars": ",".join(ys.jars)}}
        for mode in args.modes.split(","):
            work = Path(tmp) / f"run-{mode}"
            work.mkdir()
            kw = {"data": f"{hadoop.default_fs}/dt-{mode}", "job": job, "env": env, "spark_conn": SPARK_YARN}
            if args.snapshottable:
                allow_snapshots(hadoop, f"/dt-{mode}/checkpoints")
            padding = (size_of(args.pad), args.pad_files, hadoop) if size_of(args.pad) else None
            if mode == "keep":
                res = keep_run(work, broker.bootstrap_servers, args.rounds, args.burst, kw, padding)
            else:
                res = preserve_run(work, broker.bootstrap_servers, args.rounds, args.burst // 10, kw, padding)
            res["where"] = "yarn+hdfs" + (", snapshottable" if args.snapshottable else "")
            results.append(res)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1, default=str))
    print(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
