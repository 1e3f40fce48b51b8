"""The stop task's tail on HDFS: the last pre-copy pass and the backup after the stop, with the pass's
entries written to ``precopy.json`` and read back (``file``) or handed on in memory (``memory``,
``ops.backup.precopy.PassChain``, what the safe-restart DAG's stop task does).

Why apart from the downtime benches: the difference is a second or less inside a window whose rounds
vary by ten (docs/benchmarks.md, round 18), so it is measured here on its own, interleaved on one
checkpoint of ``--files`` state files on the HDFS minicluster, each round as the stop task runs it:

1. a pass before the stop (writes ``precopy.json``; not timed);
2. 6 new state files, then the **pass beside the wait** (timed): ``file`` writes ``precopy.json``,
   ``memory`` keeps it; this is the pass in flight when the stop returns, which the stop task joins;
3. 2 more new files, the stop recorded in the lifecycle record, then the **backup after the stop**
   (timed): ``file`` reads ``precopy.json`` back, ``memory`` is handed the pass's entries.

The state files are small (``--bytes`` in all): the tail's cost is entries and round trips, not bytes
(0 new blobs in the DAG's 2 GB rounds). Run:
``.venv/bin/python bench/stop_tail.py --files 20000 --rounds 6 --json docs/img/stop-tail-round19.json``
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from downtime_bench import pad  # noqa: E402
from restore_hdfs import fsshell  # noqa: E402
from store_bench import JOB, upload  # noqa: E402


def new_files(ck: str, tag: str, n: int) -> None:
    from airflow_kafka_spark._util.fs import open_location

    for i in range(n):
        loc = open_location(f"{ck}/state/9/{i % 4}/SSTs/new-{tag}-{i}.sst")
        loc.fs.pipe_file(loc.path, os.urandom(4096))


def one_round(ck: str, root: str, variant: str, n: int) -> dict:
    from airflow_kafka_spark.lifecycle.events import LifecycleEvent
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.ops.backup.precopy import PassChain, never_abandon, precopy_checkpoint
    from airflow_kafka_spark.ops.commands import BackupRequest, RunOptions, backup_as_requested

    chain = PassChain(ck, root, job=JOB)
    chain.before()
    new_files(ck, f"{n}a", 6)
    t = time.monotonic()
    p = chain.beside(never_abandon) if variant == "memory" else precopy_checkpoint(ck, root, job=JOB)
    pass_s = time.monotonic() - t
    new_files(ck, f"{n}b", 2)
    rec = LifecycleRecord.load(ck)
    rec.add_event(LifecycleEvent.DRIVER_STOPPED, actor="bench", outcome="STOPPED", graceful=True, killed=False,
                  last_committed=3, replay_batch=None)
    rec.save()
    t = time.monotonic()
    request = BackupRequest(job=JOB, precopy=chain.newest if variant == "memory" else None)
    b = backup_as_requested(ck, root, request, run=RunOptions(backup_settle_s=0))
    backup_s = time.monotonic() - t
    assert b.files_hashed == 2, b.to_dict()   # only the 2 files written after the pass
    return {"variant": variant, "pass_s": round(pass_s, 3), "pass_after_reads_s": round(p.seconds - p.read_seconds, 3),
            "pass_files_read": p.files_read, "backup_s": round(backup_s, 3), "tail_s": round(pass_s + backup_s, 3),
            "files": b.files, "backup_files_hashed": b.files_hashed, "files_from_precopy": b.files_from_precopy}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--bytes", type=int, default=20000 * 4096)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.ops.commands import backup_checkpoint
    from devstack.hadoop import HadoopCluster
    from tests.support.checkpoint_factory import write_checkpoint

    rows = []
    with tempfile.TemporaryDirectory(prefix="stoptail-", dir=str(REPO / ".cache")) as tmp, \
            HadoopCluster(data_dir=Path(tmp) / "hadoop") as hadoop:
        os.environ["HADOOP_CONF_DIR"] = str(hadoop.conf_dir)
        tree = write_checkpoint(Path(tmp) / "ck", batches=4, sources=({"t": 2},), state=True).root
        pad(Path(tmp) / "pad", args.bytes, args.files)
        ck = f"{hadoop.default_fs}/r/{uuid.uuid4().hex[:6]}/{JOB}/ck"
        upload(tree, ck, sha256=False)
        t = time.monotonic()
        fsshell(hadoop, "-put", "-f", "-t", "16", str(Path(tmp) / "pad" / "state" / "9"), f"{ck}/state/")
        print(f"put {args.files} files in {time.monotonic() - t:.0f}s", flush=True)
        LifecycleRecord.create(JOB, ck).save()
        root = f"{hadoop.default_fs}/r/backups"
        backup_checkpoint(ck, root, job=JOB, settle_s=0)   # the job's previous backup, as every restart has
        for n in range(args.rounds * 2):
            variant = ("file", "memory")[(n + n // 2) % 2]   # file, memory, memory, file, file, memory...
            rows.append(one_round(ck, root, variant, n))
            print(json.dumps(rows[-1]), flush=True)
    summary = {v: {k: statistics.median(r[k] for r in rows if r["variant"] == v)
                   for k in ("pass_s", "pass_after_reads_s", "backup_s", "tail_s")} for v in ("file", "memory")}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"files": args.files, "rows": rows, "medians": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
