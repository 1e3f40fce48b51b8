"""What one write of a job's lifecycle record costs on HDFS, and how much of it is the DataNode's close wait (issue 28).

Why: the safe restart's submit task writes the record (lease, starting offsets) inside the downtime
window, and a bare restart writes nothing of its own. A WebHDFS ``CREATE`` is written by the DataNode's
HDFS client, which on close waits ``dfs.client.block.write.locateFollowingBlock.initial.delay.ms``
(400 ms by default) when the NameNode has not had the block report yet (docs/benchmarks.md, round 23).
This starts the devstack's minicluster (as ``tests/cluster/conftest.py`` does), optionally with
``--set key=value`` cluster properties, and times the record's operations against ``hdfs://``.

Run: ``.venv/bin/python bench/hdfs_record_writes.py`` and again with
``--set dfs.client.block.write.locateFollowingBlock.initial.delay.ms=20``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devstack.hadoop import HadoopCluster

OPERATIONS = ("load", "acquire_lease", "save", "release_lease", "small_create")


def measure(cluster: HadoopCluster, rounds: int) -> dict[str, list[float]]:
    """Seconds of each operation per round, on a fresh record each round (the first two are warm-up)."""
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark._util.stores import webhdfs_write
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord

    out: dict[str, list[float]] = {k: [] for k in OPERATIONS}
    for _ in range(rounds + 2):
        ck = f"{cluster.default_fs}/record-writes/{uuid.uuid4().hex[:8]}/ck"
        LifecycleRecord.load_or_create("job", ck).save()
        steps = {}
        t = time.perf_counter()
        record = LifecycleRecord.load_or_create("job", ck)
        steps["load"] = time.perf_counter() - t
        for name, step, arg in (("acquire_lease", record.acquire_lease, ("bench", 600)), ("save", record.save, ()),
                                ("release_lease", record.release_lease, ("bench",))):
            t = time.perf_counter()
            step(*arg)
            steps[name] = time.perf_counter() - t
        loc = open_location(ck + ".small")
        t = time.perf_counter()
        webhdfs_write(loc.fs, loc.path, b"{}" * 100, overwrite=True)
        steps["small_create"] = time.perf_counter() - t
        for name, seconds in steps.items():
            out[name].append(seconds)
    return {k: v[2:] for k, v in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for the minicluster (NameNode and DataNode share it)")
    parser.add_argument("--json")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    if extra:
        base = HadoopCluster._cluster_properties
        HadoopCluster._cluster_properties = lambda self: {**base(self), **extra}
    with HadoopCluster(data_dir=Path(tempfile.mkdtemp(prefix="record-writes-"))) as cluster:
        os.environ["HADOOP_CONF_DIR"] = str(cluster.conf_dir)
        times = measure(cluster, args.rounds)
    summary = {k: {"median_ms": round(statistics.median(v) * 1000, 1), "min_ms": round(min(v) * 1000, 1),
                   "max_ms": round(max(v) * 1000, 1)} for k, v in times.items()}
    for name, row in summary.items():
        print(f"{name:14s} median {row['median_ms']:7.1f} ms  min {row['min_ms']:7.1f}  max {row['max_ms']:7.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"properties": extra, "rounds": args.rounds, "ms": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
