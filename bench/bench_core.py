"""Speed and memory of the core paths a deploy and an hourly audit take, on realistic sizes.

Run: ``.venv/bin/python bench/bench_core.py [--json]``. Results go to stdout (a table) and are
copied by hand into docs/benchmarks.md. Nothing here is asserted in tests: timings on a shared
2-core machine are not a pass/fail signal.

What is measured:
* reading a checkpoint (newest files only) and its whole ~100-batch history, for 3..1000 partitions;
* evaluating a verdict (pure function) for the same sizes;
* the ``aks`` command line's start (``aks --help``), which must not import Airflow or PySpark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_kafka_spark.checkpoint.reader import read_checkpoint  # noqa: E402
from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo  # noqa: E402
from airflow_kafka_spark.kafka.offsets import TopicPartition  # noqa: E402
from airflow_kafka_spark.verdict.evaluate import evaluate  # noqa: E402
from airflow_kafka_spark.verdict.options import DeployOptions  # noqa: E402
from tests.support.checkpoint_factory import write_checkpoint  # noqa: E402


def timed(fn, repeat: int = 7) -> tuple[float, float, int]:
    """(median ms, p90 ms, peak traced KiB) of ``fn()``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    times.sort()
    return statistics.median(times), times[int(0.9 * (len(times) - 1))], peak // 1024


def bench_checkpoint(partitions: int, batches: int = 100) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"orders": partitions}
        ck = write_checkpoint(Path(tmp) / "cp", batches=batches, sources=(spec,), records_per_batch=50)
        med, p90, peak = timed(lambda: read_checkpoint(ck.location))
        rows.append({"what": "read_checkpoint (newest files)", "partitions": partitions, "batches": batches,
                     "median_ms": round(med, 1), "p90_ms": round(p90, 1), "peak_kib": peak})
        med, p90, peak = timed(lambda: read_checkpoint(ck.location, read_history=True), repeat=3)
        rows.append({"what": "read_checkpoint (history)", "partitions": partitions, "batches": batches,
                     "median_ms": round(med, 1), "p90_ms": round(p90, 1), "peak_kib": peak})
        state = read_checkpoint(ck.location)
        end = state.latest_committed.kafka_offsets
        broker = BrokerState(
            bootstrap_servers="bench", cluster_id="c1",
            topics={"orders": TopicInfo("orders", "tid", partitions, 604800000, -1, "delete")},
            missing_topics=[], earliest={TopicPartition("orders", p): 0 for p in range(partitions)},
            latest={tp: o + 100 for tp, o in end.items()}, sampled_at_ms=int(time.time() * 1000))
        med, p90, peak = timed(lambda: evaluate(state, broker, None, DeployOptions()))
        rows.append({"what": "verdict.evaluate", "partitions": partitions, "batches": batches,
                     "median_ms": round(med, 2), "p90_ms": round(p90, 2), "peak_kib": peak})
    return rows


def bench_cli_start() -> dict:
    aks = ROOT / ".venv" / "bin" / "aks"
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([str(aks), "--help"], capture_output=True, check=True)
        times.append((time.perf_counter() - t0) * 1000)
    probe = subprocess.run([sys.executable, "-c", "import sys, airflow_kafka_spark.cli as c; "
                            "print(int(any(m.split('.')[0] in ('airflow','pyspark') for m in sys.modules)))"],
                           capture_output=True, text=True, check=True)
    return {"what": "aks --help (process start to exit)", "median_ms": round(statistics.median(times)),
            "imports_airflow_or_pyspark": probe.stdout.strip() == "1"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows: list[dict] = []
    for parts in (3, 48, 300, 1000):
        rows += bench_checkpoint(parts)
    cli = bench_cli_start()
    if args.json:
        print(json.dumps({"checkpoint": rows, "cli": cli}, indent=1))
        return 0
    print(f"{'what':<34} {'partitions':>10} {'batches':>8} {'median ms':>10} {'p90 ms':>8} {'peak KiB':>9}")
    for r in rows:
        print(f"{r['what']:<34} {r['partitions']:>10} {r['batches']:>8} {r['median_ms']:>10} {r['p90_ms']:>8} "
              f"{r['peak_kib']:>9}")
    print(f"{cli['what']:<34} median {cli['median_ms']} ms; "
          f"imports Airflow/PySpark: {cli['imports_airflow_or_pyspark']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
