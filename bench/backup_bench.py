"""What a checkpoint backup costs: first (full) backup, unchanged re-run, incremental after more batches.

Two checkpoints are measured:

* ``spark``: a real one, written by Spark 4.0 (local broker, the reference query with
  ``--stateful dedup``, 4 shuffle partitions, ``maxOffsetsPerTrigger`` small enough for 100
  batches, so ``state/`` holds 100 delta versions and Spark's own snapshots per partition);
* ``synthetic``: the same shape scaled up (8 state partitions, 64 KiB per delta, a snapshot every
  10 versions), written byte-compatibly by the test factory, to show that the incremental cost
  follows the new batches, not the history.

Each is compared with a plain recursive copy (``shutil.copytree``). Results go to
``.cache/backup-bench.json`` and stdout. Run: ``.venv/bin/python bench/backup_bench.py [--synthetic-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_kafka_spark._util.fs import open_location  # noqa: E402
from airflow_kafka_spark.ops.backup.store import materialize, verify_backup  # noqa: E402
from airflow_kafka_spark.ops.commands import backup_checkpoint  # noqa: E402


def du(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def measure(ck: Path, work: Path, grow) -> dict:
    root = work / "backups"
    out: dict = {"checkpoint": dict(zip(("files", "bytes"), du(ck), strict=True))}
    t = time.monotonic()
    shutil.copytree(ck, work / "plain-copy")
    out["plain_copytree_s"] = round(time.monotonic() - t, 3)
    first = backup_checkpoint(str(ck), str(root), job="bench", settle_s=0)
    out["first_backup"] = _row(first)
    again = backup_checkpoint(str(ck), str(root), job="bench", settle_s=0)
    out["unchanged_rerun"] = _row(again)
    added = grow()
    inc = backup_checkpoint(str(ck), str(root), job="bench", settle_s=0)
    out["incremental_after_more_batches"] = {**_row(inc), "batches_added": added}
    t = time.monotonic()
    verify_backup(str(root), "bench", inc.backup_id, deep=True)
    out["deep_verify_s"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    materialize(inc.manifest, str(root), open_location(str(work / "restored")))
    out["restore_copy_s"] = round(time.monotonic() - t, 3)
    out["backup_root_bytes"] = du(root)[1]
    return out


def _row(r) -> dict:
    return {"seconds": round(r.seconds, 3), "files": r.files, "bytes": r.bytes, "files_read": r.files_hashed,
            "bytes_read": r.bytes_hashed, "blobs_written": r.blobs_written, "bytes_written": r.bytes_written,
            "files_unchanged": r.files_from_previous, "verify_s": round(r.verify_seconds, 3)}


# --------------------------------------------------------------------------- synthetic


def synthetic(work: Path) -> dict:
    from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

    ck = write_checkpoint(work / "ck", batches=100, sources=({"orders": 8},), records_per_batch=1000)
    blob = os.urandom(64 * 1024)

    def state(first: int, last: int) -> None:
        for v in range(first, last + 1):
            for p in range(8):
                tag = (v * 8 + p).to_bytes(4, "big")   # every file different: no accidental dedup
                ck.write(f"state/0/{p}/{v}.delta", tag + blob[: 60_000 + v])
                if v % 10 == 0:
                    ck.write(f"state/0/{p}/{v}.snapshot", tag + blob + blob)

    state(1, 100)

    def grow() -> int:
        for b in range(100, 110):
            ends = {"orders": {str(p): (b + 1) * 1000 for p in range(8)}}
            ck.write(f"offsets/{b}", offsets_file([json.dumps(ends, separators=(",", ":"))], batch_timestamp_ms=b))
            ck.write(f"commits/{b}", commit_file())
        state(101, 110)
        return 10

    return measure(ck.root, work, grow)


# --------------------------------------------------------------------------- real Spark


def real_spark(work: Path) -> dict:
    from airflow_kafka_spark.jobs import reference_job
    from devstack import jars, topics
    from devstack.broker import LocalBroker
    from devstack.produce import produce

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)
    from pyspark.sql import SparkSession

    broker = LocalBroker(data_dir=work / "kafka")
    broker.start()
    try:
        spark = (SparkSession.builder.master("local[2]").appName("backup-bench")
                 .config("spark.jars", ",".join(str(j) for j in jars.spark_kafka_jars()))
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        topics.create_topic(broker.bootstrap_servers, "bench", 4)
        ck, out = work / "ck", work / "out"

        def run(n_records: int, start_id: int) -> None:
            produce(broker.bootstrap_servers, "bench", n_records, partitions=4, start_id=start_id)
            args = reference_job.parse_args([
                "--topics", "bench", "--bootstrap-servers", broker.bootstrap_servers, "--checkpoint", str(ck),
                "--output", str(out), "--sink", "idempotent", "--trigger", "availableNow", "--stateful", "dedup",
                "--max-offsets-per-trigger", "200"])
            q = reference_job.build_query(spark, args)
            q.awaitTermination()

        t = time.monotonic()
        run(20_000, 0)   # 100 batches of 200 records
        made = time.monotonic() - t
        result = measure(ck, work, lambda: (run(2_000, 20_000), 10)[1])
        result["spark_seconds_to_write_100_batches"] = round(made, 1)
        spark.stop()
        return result
    finally:
        broker.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--synthetic-only", action="store_true")
    args = p.parse_args()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["synthetic"] = synthetic(Path(tmp) / "synthetic")
        if not args.synthetic_only:
            results["spark"] = real_spark(Path(tmp) / "spark")
    target = REPO / ".cache" / "backup-bench.json"
    target.parent.mkdir(exist_ok=True)
    previous = json.loads(target.read_text()) if target.exists() else {}
    target.write_text(json.dumps({**previous, **results}, indent=2) + "\n")   # --synthetic-only keeps "spark"
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
