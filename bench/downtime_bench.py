"""How long the stream stands still: a safe restart (``keep``) against a bare restart (issue 28).

Both restarts stop the same way (``runtime.start_stop.stop_job``: stop marker, batch boundary) and
start the same build on the same checkpoint (``start_stop.submit_job``, real ``spark-submit``,
``local[2]``). In between, the safe restart does what the safe-restart DAG does after its stop:
the verified backup (``aks backup --job``, whose pre-copy the stop task took while the driver ran)
and the validate after (``aks validate --job``). The two alternate in one loop (bare, safe, safe,
bare, ...), so the machine's drift falls on both.

**Downtime** = the old query's last ``commits/N`` mtime to the new query's first new ``commits/``
file's mtime: what a user of the sink sees. Phases: stop (the call), backup, validate, submit (the
call), driver start (submit's return to the new query's first ``offsets/`` file), first batch (that
to its ``commits/`` file); the pre-copy (before the stop, not downtime) is reported beside them.

**State.** The job is the reference job with ``--stateful dedup`` (every record a new key) on
RocksDB, so ``state/0`` is real Spark-written RocksDB state (``*.zip``, ``SSTs/*.sst``). To reach
gigabytes in minutes on 2 shared cores, the checkpoint is padded with files of random bytes in
``state/9/<p>/SSTs/`` (an operator id no query has: Spark never opens or deletes them, the backup
copies them like any state file). Padding measures what the backup pays for bytes and files; it
does not make RocksDB load more state, which a real state of that size would make both restarts
pay alike. Also measured per size, with the job stopped: a full first backup into an empty root
(bytes through the worker, time, peak RSS of ``aks backup``), ``cp -a`` of the checkpoint (the
store's own copy) and a restore copy of the backup.

Run: ``.venv/bin/python bench/downtime_bench.py --sizes 10M,500M --rounds 2 --json .cache/downtime.json --plot``
(starts its own broker; ``--files`` sets the padding's file count per GB).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
JOB = "dt"
PY = str(REPO / ".venv" / "bin" / "python")
AKS = str(REPO / ".venv" / "bin" / "aks")
log = logging.getLogger("downtime")


def size_of(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def child_rss_mib(cmd: list[str], env: dict) -> tuple[float, int, str]:
    """(seconds, peak RSS in MiB, stdout) of a command, the RSS as ``/usr/bin/time`` reports it.

    Not ``wait4``'s rusage: Linux keeps the RSS high-water mark of the process that forked across
    ``exec``, so every child of this (Airflow-importing) bench would report the bench's own RSS.
    """
    with tempfile.NamedTemporaryFile("r") as rss:
        t = time.monotonic()
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd], env=env, capture_output=True,
                           text=True)
        seconds = time.monotonic() - t
        if p.returncode != 0:
            raise RuntimeError(f"{cmd[:3]} exited {p.returncode}: {p.stderr[-800:]}")
        return seconds, int(rss.read().split()[-1]) // 1024, p.stdout


class Feed:
    """Records with fresh offsets at a steady rate, so every batch adds state and a new query has data."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
        self.topic, self.rate = topic, rate
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            for _ in range(self.rate // 10):
                self.p.produce(self.topic, key=str(n).encode(), value=f"order-{n}".encode())
                n += 1
            self.p.poll(0)
            time.sleep(0.1)
        self.p.flush(10)

    def burst(self, count: int) -> None:
        for n in range(count):
            while True:
                try:
                    self.p.produce(self.topic, key=f"b{n}".encode(), value=b"x" * 64)
                    break
                except BufferError:   # the client's queue is full: let it send
                    self.p.poll(0.2)
        self.p.flush(60)


def log_files(ck: Path, log: str = "commits") -> dict[int, float]:
    """batch id -> mtime of the files of ``offsets/`` or ``commits/``."""
    d = ck / log
    return {int(p.name): p.stat().st_mtime for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else {}


def wait_for(what: str, check, timeout: float = 240.0, poll: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(poll)
    raise TimeoutError(what)


def pad(ck: Path, total: int, files: int) -> None:
    """``files`` files of random bytes, ``total`` bytes in all, below ``state/9/<p>/SSTs/``."""
    each = max(1, total // max(1, files))
    block = os.urandom(1 << 20)
    for i in range(files):
        folder = ck / "state" / "9" / str(i % 4) / "SSTs"
        folder.mkdir(parents=True, exist_ok=True)
        body = i.to_bytes(8, "big") + block[: max(0, each - 8)]
        if len(body) < each:
            body += os.urandom(each - len(body))
        (folder / f"{i:06d}-pad.sst").write_bytes(body)


def du(path: Path) -> tuple[int, int]:
    n = b = 0
    for p in path.rglob("*"):
        if p.is_file():
            n += 1
            b += p.stat().st_size
    return n, b


class Bench:
    def __init__(self, work: Path, bootstrap: str, topic: str) -> None:
        self.work, self.bootstrap, self.topic = work, bootstrap, topic
        self.env = {**os.environ, "AKS_DATA_DIR": str(work / "data"), "AIRFLOW_HOME": str(work / "airflow"),
                    "AIRFLOW__KAFKA_SPARK__JOB_REGISTRY": str(work / "jobs.yaml"),
                    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"})}
        os.environ.update(self.env)
        self.registry = work / "jobs.yaml"
        self._write_registry()
        from airflow_kafka_spark.registry.loader import load_registry

        self.spec = load_registry(self.registry).get(JOB)
        self.ck = Path(self.spec.checkpoint)

    def _write_registry(self) -> None:
        import yaml

        doc = {"version": 1, "vars": {"data": "${AKS_DATA_DIR}"},
               "allowed_roots": ["${data}", "${AKS_PACKAGE_DIR}/jobs"],
               "defaults": {"application": "${AKS_PACKAGE_DIR}/jobs/reference_job.py", "integration": "reference",
                            "checkpoint": "${data}/checkpoints/{name}", "output": "${data}/sinks/{name}",
                            "backup_root": "${data}/backups", "stop_timeout_s": 120},
               "jobs": [{"name": JOB, "topics": [self.topic], "sink": "idempotent",
                         "application_args": ["--stateful", "dedup", "--shuffle-partitions", "4",
                                              "--trigger", "processing:1s"],
                         "spark_conf": {"spark.sql.streaming.stateStore.providerClass": ROCKSDB,
                                        "spark.driver.memory": "768m"}}]}
        self.registry.write_text(yaml.safe_dump(doc, sort_keys=False))

    def submit(self) -> dict:
        from airflow_kafka_spark.airflow_glue.spark import spark_target
        from airflow_kafka_spark.runtime import start_stop

        return start_stop.submit_job(self.spec, kafka_config={"bootstrap.servers": self.bootstrap},
                                     target=spark_target(self.spec),
                                     by=start_stop.Submitter(actor="bench", holder="bench"), log=log)

    def stop(self) -> dict:
        from airflow_kafka_spark.airflow_glue.spark import spark_target
        from airflow_kafka_spark.runtime import start_stop

        out = start_stop.stop_job(self.spec, target=lambda: spark_target(self.spec), actor="bench", log=log)
        if out["outcome"] != "STOPPED":
            raise RuntimeError(f"stop: {out}")
        return out

    def running_with_batches(self, n: int = 3) -> None:
        """Wait until the running query committed ``n`` batches since now."""
        start = max(log_files(self.ck), default=-1)
        wait_for(f"{n} new batches", lambda: max(log_files(self.ck), default=-1) >= start + n)

    def restart(self, kind: str) -> dict:
        """One restart of the running job; returns its phases in seconds."""
        row: dict = {"kind": kind}
        if kind == "safe":
            t = time.monotonic()
            _, rss, out = child_rss_mib([PY, "-c", PRECOPY, self.spec.checkpoint, self.spec.backup_root, JOB],
                                        self.env)
            row["precopy_s"], row["precopy_rss_mib"] = round(time.monotonic() - t, 3), rss
            row["precopy"] = json.loads(out)
        t = time.monotonic()
        self.stop()
        row["stop_s"] = round(time.monotonic() - t, 3)
        commits = log_files(self.ck)
        last, last_mtime = max(commits), commits[max(commits)]
        if kind == "safe":
            t = time.monotonic()
            _, rss, out = child_rss_mib([AKS, "backup", "--job", JOB, "--json"], self.env)
            row["backup_s"], row["backup_rss_mib"] = round(time.monotonic() - t, 3), rss
            b = json.loads(out)
            row["backup"] = {k: b.get(k) for k in ("files", "bytes", "files_hashed", "bytes_hashed", "blobs_written",
                                                   "bytes_written", "files_from_previous", "files_from_precopy",
                                                   "seconds", "verify_seconds")}
            t = time.monotonic()
            _, rss, _ = child_rss_mib([AKS, "validate", "--job", JOB, "--bootstrap-servers", self.bootstrap,
                                       "--json"], self.env)
            row["validate_s"], row["validate_rss_mib"] = round(time.monotonic() - t, 3), rss
        t = time.monotonic()
        self.submit()
        submitted = time.time()
        row["submit_s"] = round(time.monotonic() - t, 3)
        first_offsets = wait_for("the new query's first batch planned",
                                 lambda: min((b for b in log_files(self.ck, "offsets") if b > last), default=None))
        first_commit = wait_for("the new query's first batch committed",
                                lambda: log_files(self.ck).get(first_offsets))
        planned_at = log_files(self.ck, "offsets")[first_offsets]
        row["driver_start_s"] = round(planned_at - submitted, 3)
        row["first_batch_s"] = round(first_commit - planned_at, 3)
        row["downtime_s"] = round(first_commit - last_mtime, 3)
        row["last_batch"], row["first_new_batch"] = last, first_offsets
        return row


PRECOPY = """
import json, sys
from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
print(json.dumps(precopy_checkpoint(sys.argv[1], sys.argv[2], job=sys.argv[3]).to_dict()))
"""

FULL_BACKUP = """
import json, sys
from airflow_kafka_spark.ops.commands import backup_checkpoint
r = backup_checkpoint(sys.argv[1], sys.argv[2], job=sys.argv[3], settle_s=0)
print(json.dumps({k: v for k, v in r.to_dict().items() if k != "selection"}))
"""

RESTORE_COPY = """
import sys, time
from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.ops.backup.catalog import load_backup
from airflow_kafka_spark.ops.backup.store import materialize
m = load_backup(sys.argv[1], sys.argv[2], sys.argv[3])
materialize(m, sys.argv[1], open_location(sys.argv[4]))
"""


def stopped_copies(b: Bench) -> dict:
    """With the job stopped: a full backup into an empty root, ``cp -a``, and a restore copy of that backup."""
    root = b.work / "full-backups"
    shutil.rmtree(root, ignore_errors=True)
    secs, rss, out = child_rss_mib([PY, "-c", FULL_BACKUP, str(b.ck), str(root), JOB], b.env)
    full = json.loads(out)
    subprocess.run(["sync"], check=True)
    t = time.monotonic()
    subprocess.run(["cp", "-a", str(b.ck), str(b.work / "cp-copy")], check=True)
    subprocess.run(["sync"], check=True)
    cp_s = time.monotonic() - t
    shutil.rmtree(b.work / "cp-copy")
    backup_id = full["backup"]["backup_id"]
    rsecs, rrss, _ = child_rss_mib([PY, "-c", RESTORE_COPY, str(root), JOB, backup_id, str(b.work / "restored")], b.env)
    subprocess.run(["sync"], check=True)
    shutil.rmtree(b.work / "restored")
    shutil.rmtree(root)
    return {"full_backup_s": round(secs, 3), "full_backup_rss_mib": rss, "full_backup_bytes_read": full["bytes_hashed"],
            "full_backup_files": full["files"], "cp_a_sync_s": round(cp_s, 3),
            "restore_copy_s": round(rsecs, 3), "restore_rss_mib": rrss}


def one_size(work: Path, bootstrap: str, pad_bytes: int, files_per_gb: int, rounds: int, burst: int) -> dict:
    from devstack.topics import create_topic

    topic = f"dt{pad_bytes}"
    create_topic(bootstrap, topic, partitions=4)
    b = Bench(work, bootstrap, topic)
    feed = Feed(bootstrap, topic, rate=200)
    if burst:
        feed.burst(burst)               # real RocksDB state: every record a new dedup key
    feed.thread.start()
    try:
        b.submit()
        b.running_with_batches(3)
        b.stop()
        n_files = max(1, round(files_per_gb * pad_bytes / (1 << 30))) if pad_bytes else 0
        if pad_bytes:
            pad(b.ck, pad_bytes, n_files)
        files, size = du(b.ck)
        state0 = du(b.ck / "state" / "0")
        out: dict = {"pad_bytes": pad_bytes, "pad_files": n_files, "checkpoint_files": files,
                     "checkpoint_bytes": size, "spark_state_files": state0[0], "spark_state_bytes": state0[1]}
        out.update(stopped_copies(b))
        b.submit()
        b.running_with_batches(2)
        rows = []
        order = ["bare", "safe"]
        for i in range(rounds):
            for kind in (order if i % 2 == 0 else order[::-1]):
                b.running_with_batches(2)
                row = b.restart(kind)
                log.info("%s", json.dumps(row))
                rows.append(row)
        b.stop()
        out["restarts"] = rows
        return out
    finally:
        feed.stop.set()
        with contextlib.suppress(Exception):
            b.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10M", help="padding per run, comma separated (0, 10M, 1G ...)")
    ap.add_argument("--files-per-gb", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=2, help="bare/safe pairs per size")
    ap.add_argument("--burst", type=int, default=200000, help="records produced before the first start")
    ap.add_argument("--json", type=Path, default=REPO / ".cache" / "downtime.json")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("airflow_kafka_spark").setLevel(logging.WARNING)
    from devstack.broker import LocalBroker

    results = []
    with tempfile.TemporaryDirectory(prefix="downtime-") as tmp, LocalBroker(Path(tmp) / "broker") as broker:
        for text in args.sizes.split(","):
            work = Path(tmp) / f"run-{text}"
            work.mkdir()
            res = one_size(work, broker.bootstrap_servers, size_of(text), args.files_per_gb, args.rounds, args.burst)
            res["size"] = text
            results.append(res)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))
            shutil.rmtree(work, ignore_errors=True)
    print(markdown(results))
    if args.plot:
        plot(results, args.json.with_suffix(".png"))
    return 0


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def markdown(results: list[dict]) -> str:
    lines = ["| checkpoint | restart | downtime s (each) | median | stop | backup | validate | submit | driver start | "
             "first batch | bytes read after stop |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        what = f"{r['checkpoint_bytes'] / 1e6:,.0f} MB, {r['checkpoint_files']:,} files"
        for kind in ("bare", "safe"):
            rows = [x for x in r["restarts"] if x["kind"] == kind]
            med = {k: median([x.get(k, 0) for x in rows]) for k in
                   ("downtime_s", "stop_s", "backup_s", "validate_s", "submit_s", "driver_start_s", "first_batch_s")}
            read = median([x["backup"]["bytes_hashed"] for x in rows]) if kind == "safe" else 0
            lines.append(f"| {what} | {kind} | {' / '.join(str(x['downtime_s']) for x in rows)} | "
                         f"**{med['downtime_s']:.2f}** | {med['stop_s']:.2f} | {med['backup_s']:.2f} | "
                         f"{med['validate_s']:.2f} | {med['submit_s']:.2f} | {med['driver_start_s']:.2f} | "
                         f"{med['first_batch_s']:.2f} | {read / 1e6:.2f} MB |")
    lines += ["", "| checkpoint | full backup s (bytes read) | RSS MiB | backup after the stop s (bytes read) | "
              "RSS MiB | pre-copy s (RSS MiB) | `cp -a` + sync s | restore copy s | restore RSS MiB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        safe = [x for x in r["restarts"] if x["kind"] == "safe"]
        after = " / ".join(str(x["backup_s"]) for x in safe)
        read = " / ".join(f"{x['backup']['bytes_hashed'] / 1e6:.1f}" for x in safe)
        pre = " / ".join(f"{x['precopy_s']:.1f}" for x in safe)
        lines.append(
            f"| {r['checkpoint_bytes'] / 1e6:,.0f} MB | {r['full_backup_s']:.2f} "
            f"({r['full_backup_bytes_read'] / 1e6:,.0f} MB) | {r['full_backup_rss_mib']} | {after} ({read} MB) | "
            f"{max(x['backup_rss_mib'] for x in safe)} | {pre} ({max(x['precopy_rss_mib'] for x in safe)}) | "
            f"{r['cp_a_sync_s']:.2f} | {r['restore_copy_s']:.2f} | {r['restore_rss_mib']} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = sorted(results, key=lambda r: r["checkpoint_bytes"])
    xs = [r["checkpoint_bytes"] / 1e6 for r in results]
    fig, ax = plt.subplots(figsize=(6, 4))
    for kind in ("bare", "safe"):
        ys = [median([x["downtime_s"] for x in r["restarts"] if x["kind"] == kind]) for r in results]
        ax.plot(xs, ys, marker="o", label=f"{kind} restart (median downtime)")
    added = [median([x["backup_s"] + x["validate_s"] for x in r["restarts"] if x["kind"] == "safe"]) for r in results]
    ax.plot(xs, added, marker="s", linestyle="--", label="safe: backup + validate in the window")
    full = [r["full_backup_s"] for r in results]
    ax.plot(xs, full, marker="^", linestyle=":", label="a full backup (before pre-copy)")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint size (MB)")
    ax.set_ylabel("downtime (s), median")
    ax.set_title("Downtime of a restart against state size (local[2])")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    raise SystemExit(main())
