"""How long the stream stands still through a checkpoint-breaking change: the safe restart (``auto`` →
reset ``preserve``) against a bare restart of the same change (issue 28).

Each restart deploys the other of two builds of the reference job whose stateful stages Spark cannot
carry across (``--stateful dedup`` ↔ ``--stateful count_by_key``: a deduplication's state and an
aggregation's under the same operator), with the registry's ``compatibility_version`` bumped, so the
safe-restart DAG's ``auto`` decides a reset with ``preserve``.

* **safe**: what the DAG runs, as its tasks run it (``dags/streaming_safe_restart.py``). Before the
  stop, outside the window: the plan (``runtime.safe_restart.decide`` on the lifecycle record's last
  good application, as ``SafeRestartPlanOperator`` does), ``validate_before`` (``aks validate --job``),
  the approval's plan (``aks reset --job --mode preserve``, plans only: 0 records skipped, so no pause)
  and the stop task's pre-copy passes (``runtime.stop_precopy``, more passes beside the stop's wait).
  In the window: the stop (``start_stop.stop_job``), the verified backup (``aks backup --job``), the
  reset (``aks reset --job --mode preserve --execute``: plan again against Kafka, adopt that backup
  when the checkpoint is unchanged since (``ops/backup/adopt.py``), journal, move the checkpoint
  aside, ``sources/0/0`` at the committed offsets), ``validate_after`` (``aks validate --job``) and
  the submit (``start_stop.submit_job``, which hands the recorded starting offsets to the job).
* **bare**: what a team does without the product: the same stop, the checkpoint folder renamed away
  (a fresh checkpoint), the new build submitted the same way with Spark's own default for a new
  streaming query, ``startingOffsets=latest``.
* **exact** (``bench/downtime_dag.py --kinds`` only): a careful team without the product: as ``bare``, but
  ``startingOffsets`` is the old checkpoint's last committed end offsets as JSON, read after the stop, so
  the new query loses nothing and its first batch reads the same backlog as the safe restart's (the
  ``bare`` row's first batch skips it: the comparison of the window's Spark phases is then like for like).

After each restart the new application is promoted as the health gate does (``promote_submitted``),
so the next ``auto`` compares against it. **Lost / replayed** per restart: the new query's start
offsets (``sources/0/0``) against the old query's last committed end offsets, per partition; one
offset is one record the feed produced (no transactions, one producer).

**State.** Before every restart (both kinds) the running checkpoint is padded to the size of the
point with files of random bytes in ``state/9/<p>/SSTs/`` (``downtime_bench.pad``, as round 7): the
safe restart's backups copy them like any state file; Spark never opens them. The new query of
either restart starts on an empty state, so padding measures what the safe restart pays for the
old checkpoint's bytes and files, and nothing else.

Run: ``.venv/bin/python bench/downtime_preserve.py --sizes 10M,2G --rounds 2 --json .cache/downtime-preserve.json``
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from downtime_bench import (
    AKS,
    JOB,
    PY,
    REPO,
    Bench,
    backup_summary,
    du,
    interleaved,
    load_1m,
    pad,
    size_of,
    started_feed,
)

BASE = ["--shuffle-partitions", "4", "--trigger", "processing:1s"]
BUILDS = (["--stateful", "dedup", *BASE], ["--stateful", "count_by_key", *BASE])
DECIDE = """
import json, sys
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.runtime import safe_restart
from airflow_kafka_spark.runtime.app_versions import last_good_app
spec = load_registry(sys.argv[1]).get(sys.argv[2])
record = LifecycleRecord.load(spec.checkpoint)
good = last_good_app(record)
recorded = (good or {}).get("compatibility_version") or (record.compatibility_version if record else None)
print(json.dumps(safe_restart.decide("auto", registry_compat=spec.compatibility_version,
                                     recorded_compat=recorded).to_dict()))
"""


def committed_offsets(ck: str) -> dict:
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint

    st = read_checkpoint(ck)
    return dict(st.latest_committed.kafka_offsets) if st.latest_committed is not None else {}


def spark_offsets(offsets: dict) -> str:
    """``offsets`` as the Kafka source's ``startingOffsets`` JSON, as an operator passes them by hand: with no
    ``}}`` in it, which a YARN NodeManager deletes from a container's command line (Hadoop's ``{{``/``}}``
    parameter expansion), so that a driver in cluster mode gets the JSON whole."""
    out: dict = {}
    for tp, o in sorted(offsets.items()):
        out.setdefault(tp.topic, {})[str(tp.partition)] = o
    return json.dumps(out, separators=(",", ":")).replace("}}", "} }")


def start_offsets(ck: str) -> dict:
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint

    out: dict = {}
    for offs in read_checkpoint(ck).initial_offsets.values():
        out.update(offs)
    return out


def account(old: dict, new: dict, ends: dict) -> dict:
    """Records lost (the new query starts past the old one's committed end) and replayed (before it)."""
    lost = sum(max(0, new.get(tp, 0) - o) for tp, o in old.items())
    replayed = sum(max(0, o - new.get(tp, o)) for tp, o in old.items())
    produced = sum(max(0, ends.get(tp.partition, 0) - o) for tp, o in old.items())
    return {"records_lost": lost, "records_replayed": replayed, "produced_after_last_commit": produced,
            "starting_offsets": {f"{tp.topic}-{tp.partition}": o for tp, o in sorted(new.items())}}


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "downtime-bench-ends"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
    finally:
        c.close()


def remove(url: str) -> None:
    if "://" not in url:
        shutil.rmtree(url, ignore_errors=True)
        return
    from airflow_kafka_spark._util.fs import open_location

    loc = open_location(url)
    with contextlib.suppress(FileNotFoundError):
        loc.fs.rm(loc.path, recursive=True)


def rename(url: str, to: str) -> None:
    if "://" not in url:
        Path(url).rename(to)
        return
    from airflow_kafka_spark._util.fs import open_location

    src, dst = open_location(url), open_location(to)
    src.fs.mv(src.path, dst.path)


def promote(b: Bench) -> None:
    """What a passed health gate does: the submitted application is the last good one; the recorded
    starting offsets are used up (``sensors/health.py``)."""
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.runtime.app_versions import promote_submitted

    record = LifecycleRecord.load(b.ck)
    if record.next_starting_offsets:
        record.take_next_starting_offsets(actor="bench")
    promote_submitted(record, actor="bench")
    record.save()


def restart_preserve(b: Bench, kind: str, n: int, pad_to: tuple[int, int], hdfs_padding=None) -> dict:
    """The ``n``-th checkpoint-breaking restart of the running job, ``kind`` bare or safe; ``hdfs_padding``
    (``downtime_yarn.HdfsPadding``) moves a padding written once into the checkpoint instead."""
    if hdfs_padding is not None:
        hdfs_padding.into(b.ck)
    elif pad_to[0]:
        pad(b.ck, *pad_to)
    files, size = du(b.ck)
    build = BUILDS[(n + 1) % 2]
    b.write_registry(build, compat=str(n + 2))
    row: dict = {"kind": kind, "mode": "preserve", "load_1m": load_1m(), "build": build[1],
                 "checkpoint_files": files, "checkpoint_bytes": size}
    kafka = ["--bootstrap-servers", b.bootstrap]
    if kind == "safe":   # the plan, validate_before, approve and the stop's pre-copy: before the stop
        row["plan"] = json.loads(b.command(row, "plan", [PY, "-c", DECIDE, str(b.registry), JOB]))
        if (row["plan"]["action"], row["plan"]["reset_mode"]) != ("reset", "preserve"):
            raise RuntimeError(f"auto did not decide reset preserve: {row['plan']}")
        b.command(row, "validate_before", [AKS, "validate", "--job", JOB, *kafka, "--json"], ok=(0, 3))
        approve = json.loads(b.command(row, "approve_plan", [AKS, "reset", "--job", JOB, "--mode", "preserve",
                                                             *kafka, "--json"]))
        row["approve_skipped"] = approve["plan"]["totals"]["skipped"]
    last, last_mtime = b.stop_precopying(row) if kind == "safe" else b.stop(row)
    old = committed_offsets(b.ck)
    aside = f"{b.ck}.bare-{n}"
    if kind == "safe":
        row["backup"] = backup_summary(json.loads(b.command(row, "backup", [AKS, "backup", "--job", JOB, "--json",
                                                                            "--progress"])))
        reset = json.loads(b.command(row, "reset", [AKS, "reset", "--job", JOB, "--mode", "preserve", *kafka,
                                                    "--execute", "--json", "--progress"]))
        aside = reset["aside_location"]
        row["reset_backup_id"] = reset["backup_id"]
        row["reset_backup_adopted"] = reset.get("backup_adopted")   # the backup task's, unchanged since
        verdict = json.loads(b.command(row, "validate", [AKS, "validate", "--job", JOB, *kafka, "--json"], ok=(0, 3)))
        row["validate_verdict"] = verdict.get("verdict") or verdict.get("severity")
        spec = None
    else:
        t = time.monotonic()
        rename(b.ck, aside)                      # a fresh checkpoint: the old one renamed away
        row["reset_s"] = round(time.monotonic() - t, 3)
        # application_args are in the registry's placeholder syntax: a literal brace is written twice
        by_hand = "latest" if kind == "bare" else spark_offsets(old).replace("{", "{{").replace("}", "}}")
        spec = dataclasses.replace(b.spec, application_args=(*b.spec.application_args, "--starting-offsets", by_hand))
    row["last_batch"] = last
    b.submit_and_wait(row, last_mtime, -1, spec)
    row.update(account(old, start_offsets(b.ck), end_offsets(b.bootstrap, b.topic)))
    promote(b)
    if hdfs_padding is not None:
        hdfs_padding.back_from(aside)
    remove(aside)
    return row


def one_size(work: Path, bootstrap: str, text: str, files_per_gb: int, rounds: int, burst: int,
             bench_kw: dict | None = None, hdfs_padding=None) -> dict:
    from devstack.topics import create_topic

    pad_bytes = size_of(text)
    topic = f"dtp{pad_bytes}"
    create_topic(bootstrap, topic, partitions=4)
    b = Bench(work, bootstrap, topic, **(bench_kw or {}))
    b.write_registry(BUILDS[0], compat="1")
    feed = started_feed(bootstrap, topic, burst)
    n_files = max(1, round(files_per_gb * pad_bytes / (1 << 30))) if pad_bytes else 0
    try:
        b.submit()
        b.running_with_batches(3)
        promote(b)
        count = iter(range(2 * rounds))
        rows = interleaved(b, rounds, lambda kind: restart_preserve(b, kind, next(count), (pad_bytes, n_files),
                                                                       hdfs_padding))
        b.stop()
        return {"size": text, "pad_bytes": pad_bytes, "pad_files": n_files, "restarts": rows}
    finally:
        feed.stop.set()
        with contextlib.suppress(Exception):
            b.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10M")
    ap.add_argument("--files-per-gb", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2, help="bare/safe pairs per size")
    ap.add_argument("--burst", type=int, default=20000, help="records produced before the first start")
    ap.add_argument("--json", type=Path, default=REPO / ".cache" / "downtime-preserve.json")
    args = ap.parse_args()
    from states import compile_package

    compile_package()   # task processes and commands load the package as an installed wheel does
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a kill still stops the drivers and the broker
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("airflow_kafka_spark").setLevel(logging.WARNING)
    from devstack.broker import LocalBroker

    results = []
    with tempfile.TemporaryDirectory(prefix="downtime-p-", dir=str(REPO / ".cache")) as tmp, \
            LocalBroker(Path(tmp) / "broker") as broker:
        for text in args.sizes.split(","):
            work = Path(tmp) / f"run-{text}"
            work.mkdir()
            results.append(one_size(work, broker.bootstrap_servers, text, args.files_per_gb, args.rounds,
                                    args.burst))
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1, default=str))
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
