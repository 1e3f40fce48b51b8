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
to its ``commits/`` file); the pre-copy's passes before the stop (not downtime) are reported beside
them, and those beside the stop's wait (``runtime.stop_precopy``, as the stop task runs them).

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


def child_rss_mib(cmd: list[str], env: dict, ok: tuple[int, ...] = (0,),
                  stamps: list | None = None) -> tuple[float, int, str]:
    """(seconds, peak RSS in MiB, stdout) of a command, the RSS as ``/usr/bin/time`` reports it.

    Not ``wait4``'s rusage: Linux keeps the RSS high-water mark of the process that forked across
    ``exec``, so every child of this (Airflow-importing) bench would report the bench's own RSS.
    ``stamps``: each stderr line (a command's ``--progress`` steps) with its second since the start.
    """
    with tempfile.NamedTemporaryFile("r") as rss, tempfile.TemporaryFile("w+") as out:
        t = time.monotonic()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd], env=env, stdout=out,
                             stderr=subprocess.PIPE, text=True)
        err = []
        for line in p.stderr:
            err.append(line)
            if stamps is not None:
                stamps.append((round(time.monotonic() - t, 3), line.strip()[:160]))
        p.wait()
        seconds = time.monotonic() - t
        if p.returncode not in ok:
            raise RuntimeError(f"{cmd[:3]} exited {p.returncode}: {''.join(err)[-800:]}")
        out.seek(0)
        return seconds, int(rss.read().split()[-1]) // 1024, out.read()


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


def log_files(ck: Path | str, log: str = "commits") -> dict[int, float]:
    """batch id -> mtime of the files of ``offsets/`` or ``commits/`` (a local path, or a store URL: HDFS)."""
    if "://" not in str(ck):
        d = Path(ck) / log
        return {int(p.name): p.stat().st_mtime for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else {}
    from airflow_kafka_spark._util.fs import open_location

    loc = open_location(f"{str(ck).rstrip('/')}/{log}")
    try:
        found = loc.fs.ls(loc.path, detail=True)
    except FileNotFoundError:
        return {}
    out = {}
    for f in found:
        name = str(f["name"]).rstrip("/").rsplit("/", 1)[-1]
        if name.isdigit():
            out[int(name)] = float(f.get("modificationTime", 0)) / 1000.0 if "modificationTime" in f \
                else float(f.get("mtime") or 0)
    return out


def wait_for(what: str, check, timeout: float = 240.0, poll: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got is not None and got is not False:   # batch 0 is an answer
            return got
        time.sleep(poll)
    raise TimeoutError(what)


def pad(ck: Path | str, total: int, files: int) -> None:
    """``files`` files of random bytes, ``total`` bytes in all, below ``state/9/<p>/SSTs/``."""
    each = max(1, total // max(1, files))
    block = os.urandom(1 << 20)
    for i in range(files):
        folder = Path(ck) / "state" / "9" / str(i % 4) / "SSTs"
        folder.mkdir(parents=True, exist_ok=True)
        body = i.to_bytes(8, "big") + block[: max(0, each - 8)]
        if len(body) < each:
            body += os.urandom(each - len(body))
        (folder / f"{i:06d}-pad.sst").write_bytes(body)
    os.sync()   # the kernel's write-back of the padding belongs before a restart, not inside its window


def du(path: Path | str) -> tuple[int, int]:
    """(files, bytes) below a local folder or a store URL."""
    if "://" in str(path):
        from airflow_kafka_spark._util.fs import open_location

        loc = open_location(str(path))
        found = loc.fs.find(loc.path, detail=True)
        return len(found), sum(int(f.get("size") or 0) for f in found.values())
    n = b = 0
    for p in Path(path).rglob("*"):
        if p.is_file():
            n += 1
            b += p.stat().st_size
    return n, b


BUILD = ["--stateful", "dedup", "--shuffle-partitions", "4", "--trigger", "processing:1s"]


def load_1m() -> float:
    return round(os.getloadavg()[0], 1)


def warm(b: Bench, below: float = 2.5, timeout: float = 600.0) -> dict:
    """Before the first restart of a padded run: one pre-copy of the running job (a job in production has
    had one before its next deploy: its state is old), then wait for the 1-minute load to fall below
    ``below``. Without it the first restart ran right after gigabytes were padded and read (load 8),
    and the first ``cli`` row paid the whole first pre-copy just before its stop (round 14)."""
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint

    t = time.monotonic()
    r = precopy_checkpoint(b.ck, b.spec.backup_root, job=JOB)
    out = {"warm_precopy_s": round(time.monotonic() - t, 1), "warm_precopy_files_read": r.files_read}
    t = time.monotonic()
    while load_1m() >= below and time.monotonic() - t < timeout:
        time.sleep(5)
    out.update(settle_s=round(time.monotonic() - t, 1), load_1m_at_start=load_1m())
    log.info("warm: %s", out)
    return out


def asked_phases(alignment: dict | None, last_mtime: float) -> dict:
    """Where the end of the stop's wait for a commit fell (``runtime/stop_align.py``; only a stop that kills
    at once waits since ``e925d6d``; round 21's rows waited before every marker): the alignment, and that
    second after the last commit (this machine's clock against the store's mtime; one machine here)."""
    if not alignment:
        return {}
    return {"stop_alignment": alignment, "asked_after_last_commit_s": round(alignment["asked_at"] - last_mtime, 3)}


class Bench:
    """One job ``dt`` in a registry of its own; ``data`` is where its checkpoint, sink and backups live
    (a local folder, or an ``hdfs://`` URL for the YARN runs); ``job`` adds registry keys to the entry."""

    def __init__(self, work: Path, bootstrap: str, topic: str, *, data: str | None = None,
                 job: dict | None = None, env: dict | None = None, spark_conn: dict | None = None) -> None:
        self.work, self.bootstrap, self.topic = work, bootstrap, topic
        self.job_extra = dict(job or {})
        self.env = {**os.environ, "AKS_DATA_DIR": data or str(work / "data"), "AIRFLOW_HOME": str(work / "airflow"),
                    "AIRFLOW__KAFKA_SPARK__JOB_REGISTRY": str(work / "jobs.yaml"),
                    "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark_conn or {"conn_type": "spark", "host": "local[2]"}),
                    **(env or {})}
        os.environ.update(self.env)
        self.registry = work / "jobs.yaml"
        self.poll = 0.05 if data is None else 0.25
        self.write_registry(BUILD)

    def write_registry(self, args: list[str], compat: str = "1") -> None:
        """The job's entry with ``args`` as the application's arguments and ``compat`` as its compatibility version."""
        import yaml

        from airflow_kafka_spark.registry.loader import load_registry

        extra = dict(self.job_extra)
        conf = {"spark.sql.streaming.stateStore.providerClass": ROCKSDB, "spark.driver.memory": "768m",
                **extra.pop("spark_conf", {})}
        doc = {"version": 1, "vars": {"data": "${AKS_DATA_DIR}"},
               "allowed_roots": ["${data}", "${AKS_PACKAGE_DIR}/jobs"],
               "defaults": {"application": "${AKS_PACKAGE_DIR}/jobs/reference_job.py", "integration": "reference",
                            "checkpoint": "${data}/checkpoints/{name}", "output": "${data}/sinks/{name}",
                            "backup_root": "${data}/backups", "stop_timeout_s": 240},
               "jobs": [{"name": JOB, "topics": [self.topic], "sink": "idempotent", "compatibility_version": compat,
                         "application_args": list(args), "spark_conf": conf, **extra}]}
        self.registry.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.spec = load_registry(self.registry).get(JOB)
        self.ck = self.spec.checkpoint

    def submit(self, spec=None) -> dict:
        from airflow_kafka_spark.airflow_glue.spark import spark_target
        from airflow_kafka_spark.runtime import start_stop

        spec = spec or self.spec
        return start_stop.submit_job(spec, kafka_config={"bootstrap.servers": self.bootstrap},
                                     target=spark_target(spec),
                                     by=start_stop.Submitter(actor="bench", holder="bench"), log=log)

    def stop(self, row: dict | None = None) -> tuple[int, float]:
        """Stop the job as both restarts do; (last committed batch, its ``commits/`` file's mtime)."""
        row = {} if row is None else row
        from airflow_kafka_spark.airflow_glue.spark import spark_target
        from airflow_kafka_spark.runtime import start_stop

        t = time.monotonic()
        out = start_stop.stop_job(self.spec, target=lambda: spark_target(self.spec), actor="bench", log=log)
        returned = time.time()
        row["stop_s"], row["stop_outcome"] = round(time.monotonic() - t, 3), out["outcome"]
        if out["outcome"] not in ("STOPPED", "STOPPED_MID_BATCH"):
            raise RuntimeError(f"stop: {out}")
        commits = log_files(self.ck)
        row["stop_after_last_commit_s"] = round(returned - commits[max(commits)], 3)
        row.update(asked_phases(out.get("alignment"), commits[max(commits)]))
        return max(commits), commits[max(commits)]

    def command(self, row: dict, name: str, argv: list[str], ok: tuple[int, ...] = (0,)) -> str:
        """Run a product command as a task process would; its wall time and peak RSS go into ``row``, and
        the steps it reports with ``--progress`` (with their second since its start) into ``<name>_steps``."""
        stamps: list = []
        secs, rss, out = child_rss_mib(argv, self.env, ok=ok, stamps=stamps)
        row[f"{name}_s"], row[f"{name}_rss_mib"] = round(secs, 3), rss
        if "--progress" in argv:
            row[f"{name}_steps"] = stamps
        return out

    def running_with_batches(self, n: int = 3) -> None:
        """Wait until the running query committed ``n`` batches since now."""
        start = max(log_files(self.ck), default=-1)
        wait_for(f"{n} new batches", lambda: max(log_files(self.ck), default=-1) >= start + n, poll=self.poll)

    def submit_and_wait(self, row: dict, last_mtime: float, after: int, spec=None) -> None:
        """Submit; the phases up to the new query's first batch after batch ``after`` (-1: a new checkpoint)."""
        t = time.monotonic()
        out = self.submit(spec)
        submitted = time.time()
        row["submit_s"] = round(time.monotonic() - t, 3)
        row["launch_s"] = out.get("launch_s")   # spark-submit's part of submit_s (launch_phases)
        first = wait_for("the new query's first batch planned", lambda: min(
            (b for b in log_files(self.ck, "offsets") if b > after), default=None), timeout=600, poll=self.poll)
        committed = wait_for("the new query's first batch committed", lambda: log_files(self.ck).get(first),
                             timeout=600, poll=self.poll)
        planned_at = log_files(self.ck, "offsets")[first]
        row["driver_start_s"] = round(planned_at - submitted, 3)
        row["first_batch_s"] = round(committed - planned_at, 3)
        row["downtime_s"] = round(committed - last_mtime, 3)
        row["first_new_batch"] = first
        row["load_1m_end"] = load_1m()
        if row.get("launch_s") is not None and "stop_after_last_commit_s" in row:
            row.update(launch_phases(last_mtime + row["stop_after_last_commit_s"], out["submitted_at_ms"] / 1000,
                                     row["launch_s"], planned_at))

    def restart(self, kind: str) -> dict:
        """One ``keep`` restart of the running job; returns its phases in seconds."""
        row: dict = {"kind": kind, "mode": "keep", "load_1m": load_1m()}
        if kind == "safe":
            last, last_mtime = self.stop_precopying(row)
        else:
            last, last_mtime = self.stop(row)
        if kind == "safe":
            b = json.loads(self.command(row, "backup", [AKS, "backup", "--job", JOB, "--json"]))
            row["backup"] = backup_summary(b)
            self.command(row, "validate", [AKS, "validate", "--job", JOB, "--bootstrap-servers", self.bootstrap,
                                           "--json"])
        row["last_batch"] = last
        self.submit_and_wait(row, last_mtime, last)
        return row


    def stop_precopying(self, row: dict) -> tuple[int, float]:
        """The stop task's stop (``runtime.stop_precopy``): the passes before it in a child process (``precopy_s``
        and ``precopy_rss_mib``), the passes beside its wait in this one; ``precopy`` is the stop XCom's dict
        (``passes``, ``passes_during_stop``, ``join_seconds``: the stop's return to the last pass's end)."""
        from airflow_kafka_spark.airflow_glue.spark import spark_target
        from airflow_kafka_spark.lifecycle.record import LifecycleRecord
        from airflow_kafka_spark.ops.backup.precopy import PrecopyResult, precopy_checkpoint
        from airflow_kafka_spark.runtime import start_stop
        from airflow_kafka_spark.runtime.stop_precopy import beside_rule, stop_with_precopy

        def before() -> list[PrecopyResult]:
            doc = json.loads(self.command(row, "precopy", [PY, "-c", PRECOPY, self.ck, self.spec.backup_root, JOB]))
            return [PrecopyResult(**p) for p in doc["passes"]]

        done = stop_with_precopy(
            lambda: self.stop(row), job=JOB, log=log, before=before,
            one_pass=lambda abandon: precopy_checkpoint(self.ck, self.spec.backup_root, job=JOB, abandon=abandon),
            still_running=lambda: start_stop.driver_alive(LifecycleRecord.load(self.ck),
                                                          lambda: spark_target(self.spec)),
            beside=beside_rule(self.ck))   # as the stop task decides
        row["precopy"] = done.precopy.to_dict() if done.precopy is not None else None
        return done.stop


def launch_phases(stopped: float, submitted: float, launch_s: float, planned_at: float) -> dict:
    """The same split of every row's window, bare, cli or dag, around the one command they all run.

    ``stopped``: the stop's return (a bare or cli row) or the stop task's end (dag); ``submitted``: when
    the submit recorded the driver (its ``submitted_at_ms``), ``launch_s`` before it (the submit's own
    figure: spark-submit up to the driver's id, and its checks). ``to_launch_s`` is what a row spends
    between the stop and spark-submit (the dag's: Airflow, the task's start, the validation; a bare
    row's: reading the record and the checkpoint); ``launch_to_plan_s`` is spark-submit's return to the
    first planned batch (the cluster allocating, the driver starting), the same work in every row.
    """
    from cpu_share import during

    return {"submitted_at": round(submitted, 3), "to_launch_s": round(submitted - launch_s - stopped, 3),
            "launch_s": launch_s,
            "launch_to_plan_s": round(planned_at - submitted, 3), **during(submitted - launch_s, planned_at,
                                                                            "launch_to_plan")}


def backup_summary(b: dict) -> dict:
    return {k: b.get(k) for k in ("files", "bytes", "files_hashed", "bytes_hashed", "blobs_written", "bytes_written",
                                  "files_from_previous", "files_from_precopy", "seconds", "verify_seconds")}


# The pre-copy the stop task runs before its stop (runtime/stop_precopy.py): passes until one is quick; the
# last pass's figures, and every pass's figures (``Bench.stop_precopying`` rebuilds them as PrecopyResult).
PRECOPY = """
import json, sys
from airflow_kafka_spark.ops.backup.precopy import precopy_until_quiet
passes = precopy_until_quiet(sys.argv[1], sys.argv[2], job=sys.argv[3])
print(json.dumps({**passes[-1].to_dict(), "passes": [p.to_dict() for p in passes]}))
"""


def started_feed(bootstrap: str, topic: str, burst: int) -> Feed:
    """200 records/s from now on, after ``burst`` records at once (each a new dedup key: real RocksDB state)."""
    feed = Feed(bootstrap, topic, rate=200)
    if burst:
        feed.burst(burst)
    feed.thread.start()
    return feed


def interleaved(b: Bench, rounds: int, restart) -> list[dict]:
    """``rounds`` pairs of restarts, bare and safe alternating (bare, safe, safe, bare ...) so the machine's
    drift falls on both; ``restart(kind)`` makes one once the job has two new batches, and returns its row."""
    rows = []
    for i in range(rounds):
        for kind in (("bare", "safe") if i % 2 == 0 else ("safe", "bare")):
            b.running_with_batches(2)
            row = restart(kind)
            log.info("%s", json.dumps(row))
            rows.append(row)
    return rows

def one_size(work: Path, bootstrap: str, pad_bytes: int, files_per_gb: int, rounds: int, burst: int) -> dict:
    from devstack.topics import create_topic

    topic = f"dt{pad_bytes}"
    create_topic(bootstrap, topic, partitions=4)
    b = Bench(work, bootstrap, topic)
    feed = started_feed(bootstrap, topic, burst)
    try:
        b.submit()
        b.running_with_batches(3)
        b.stop()
        n_files = max(1, round(files_per_gb * pad_bytes / (1 << 30))) if pad_bytes else 0
        if pad_bytes:
            pad(b.ck, pad_bytes, n_files)
        files, size = du(b.ck)
        state0 = du(Path(b.ck) / "state" / "0")
        out: dict = {"pad_bytes": pad_bytes, "pad_files": n_files, "checkpoint_files": files,
                     "checkpoint_bytes": size, "spark_state_files": state0[0], "spark_state_bytes": state0[1]}
        from downtime_stopped import stopped_copies

        out.update(stopped_copies(b))
        b.submit()
        b.running_with_batches(2)
        rows = interleaved(b, rounds, b.restart)
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
    from states import compile_package

    compile_package()   # task processes and commands load the package as an installed wheel does
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
    from downtime_report import markdown, plot

    print(markdown(results))
    if args.plot:
        plot(results, args.json.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
