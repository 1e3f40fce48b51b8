"""Does the agent add time to a batch? Batch durations of the same user job with and without it.

The job is ``bench/noop_stream.py`` (a PySpark job that never heard of this product: Kafka to Spark's
``noop`` sink), on a local master with a producer writing continuously, its trigger as fast as Spark
goes: the lightest batch there is, so a fixed cost per batch would show most here. Rounds alternate
(with, without, with, ...) so that the machine's drift hits both sides alike; each round runs a
fresh checkpoint until it has committed ``--batches`` batches.

A batch's duration is read from Spark's own files, the same way for both sides: the modification
time of ``commits/N`` minus that of ``offsets/N`` (planned → committed; the agent's work sits
exactly inside that window: its gate on the ``offsets/N`` write and its bookkeeping on the
``commits/N`` close). Batch 0 (connector start-up) is left out.

Run: ``.venv/bin/python bench/agent_bench.py --rounds 8 --batches 130 [--json .cache/agent-bench.json]``
(starts its own broker).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_kafka_spark import agent  # noqa: E402
from devstack import spark_runtimes, topics  # noqa: E402
from devstack.broker import LocalBroker  # noqa: E402
from tests.support.agent_harness import ContinuousProducer, submit  # noqa: E402

JOB = Path(__file__).with_name("noop_stream.py")


def durations_ms(ck: Path) -> list[float]:
    out = []
    for f in (ck / "commits").iterdir():
        if f.name.isdigit() and int(f.name) > 0 and (ck / "offsets" / f.name).exists():
            out.append((f.stat().st_mtime_ns - (ck / "offsets" / f.name).stat().st_mtime_ns) / 1e6)
    return out


def committed(ck: Path) -> int:
    """The newest committed batch id + 1 (Spark purges old log files, so counting files undercounts)."""
    d = ck / "commits"
    return max((int(f.name) + 1 for f in d.iterdir() if f.name.isdigit()), default=0) if d.is_dir() else 0


def one_round(rt, work: Path, bootstrap: str, topic: str, *, with_agent: bool, batches: int) -> list[float]:
    ck = work / "ck"
    # Both sides keep every batch's log files (Spark purges all but the newest 100 by default).
    conf = {"spark.sql.streaming.minBatchesToRetain": str(batches + 50)}
    if with_agent:
        conf.update(agent.agent_conf(str(work / "ck.stop"), str(ck), agent.report_path(str(ck)), rt.version, {}))
    args = ["--brokers", bootstrap, "--topic", topic, "--checkpoint", str(ck)]
    drv = submit(rt, JOB, args, work / "driver.log", conf=conf)
    try:
        deadline = time.monotonic() + 900
        while committed(ck) < batches + 1:
            if drv.wait(0.5) is not None:
                raise SystemExit(f"the driver exited: {drv.text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit("no progress in 15 minutes")
    finally:
        drv.kill()
    return sorted(durations_ms(ck))[: batches]  # every committed batch but 0, oldest ids first is not needed


def summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=20)
    return {"batches": len(values), "median_ms": round(statistics.median(values), 1),
            "mean_ms": round(statistics.fmean(values), 1), "p10_ms": round(q[1], 1), "p90_ms": round(q[17], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="rounds in all, alternating with/without the agent")
    p.add_argument("--batches", type=int, default=130, help="committed batches per round (batch 0 not counted)")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    rt = spark_runtimes.runtime("default")
    results: dict[str, list[float]] = {"with": [], "without": []}
    per_round = []
    with tempfile.TemporaryDirectory(prefix="aks-agent-bench-") as tmp:
        broker = LocalBroker(data_dir=Path(tmp) / "kafka")
        broker.start()
        try:
            for i in range(a.rounds):
                side = "with" if i % 2 == 0 else "without"
                topic = f"bench-{i}"
                topics.create_topic(broker.bootstrap_servers, topic, 3)
                feed = ContinuousProducer(broker.bootstrap_servers, topic, 3, rate=300).start()
                try:
                    d = one_round(rt, Path(tmp) / f"r{i}", broker.bootstrap_servers, topic, with_agent=side == "with",
                                  batches=a.batches)
                finally:
                    feed.stop()
                results[side] += d
                per_round.append({"round": i, "agent": side == "with", **summary(d), "load": os.getloadavg()[0]})
                print(json.dumps(per_round[-1]), flush=True)
        finally:
            broker.stop()
    doc = {"spark": rt.version, "rounds": per_round, "with": summary(results["with"]),
           "without": summary(results["without"])}
    doc["median_ratio"] = round(doc["with"]["median_ms"] / doc["without"]["median_ms"], 3)
    print(json.dumps(doc, indent=2))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
