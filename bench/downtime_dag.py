"""How long the stream stands still when Airflow runs the safe restart: the DAG against the commands (issue 28).

``downtime_bench.py`` runs the product's steps after the stop as commands, one after another, the
way the DAG's tasks call them. A user of the ``streaming_safe_restart`` DAG also waits for Airflow:
after each task the scheduler must see it finish, queue the next one, and the LocalExecutor start a
task process that parses the DAG file. This bench measures that, with Airflow's own components
(``airflow api-server``, ``scheduler`` with the LocalExecutor, ``triggerer``; SQLite) and the DAG
from ``dags/``, triggered through the REST API as the UI does (``mode=keep``; ``auto`` for ``--mode preserve``).

Three restarts of the same running job alternate (bare, cli, dag; then rotated; ``--kinds`` picks
fewer), each once the job has two new batches:

* **bare**: stop on a batch boundary and ``spark-submit`` the same build (``Bench.restart("bare")``);
* **exact** (``--mode preserve`` only): the bare restart of a careful team, the new checkpoint started at
  the old one's committed offsets by hand (``downtime_preserve.py``): the same records as the DAG's;
* **cli**: the same stop with the pre-copy, ``aks backup`` and ``aks validate``, then the submit
  (``Bench.restart("safe")``, as in ``downtime_bench.py``);
* **dag**: a DAG run. Its phases come from the task instances the REST API reports: each task's
  run time and start, and ``airflow_idle_s``, the time after the stop task during which no task of
  the run was running (Airflow's share).

**Downtime** = the old query's last ``commits/N`` mtime to the new query's first new ``commits/``
file's mtime, as in the other downtime benches. The last batch of the old query is the stop task's
``last_committed`` (its XCom). The job is the reference job with ``--stateful dedup`` on RocksDB;
``--pad`` adds padding state files as ``downtime_bench.py`` does.

``--mode preserve``: each restart deploys the other build of ``downtime_preserve.py`` with the next
``compatibility_version`` (a checkpoint-breaking change), as that bench does for ``bare`` and ``cli``;
the DAG run is ``mode=auto``, which resets ``preserve`` (stop and backup; reset and submit), and the
window ends at the new query's first batch (batch 0 of the fresh checkpoint).

With ``--yarn`` the job runs in YARN cluster mode on the devstack's minicluster, its checkpoint,
backups and sink on HDFS, as in ``downtime_yarn.py``; no padding unless ``--pad`` is given (Hadoop's
FsShell puts it below ``<ck>/state/9``, ``--files-per-gb`` files a GB; in ``preserve`` it is written once
and renamed into each new checkpoint, ``downtime_yarn.HdfsPadding``).

Run: ``.venv/bin/python bench/downtime_dag.py --rounds 2 --json .cache/downtime-dag.json`` (add ``--yarn``)
(starts its own broker and Airflow; nothing of the developer's ``~/airflow`` is read).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

DAG_ID = "streaming_safe_restart"
log = logging.getLogger("downtime")


def airflow_env(home: Path, bootstrap: str) -> dict[str, str]:
    """Airflow on a fresh SQLite DB in ``home``, the repository's DAGs, and the job's connections.

    The health gate keeps its production poll (15 s): a shorter one puts its first looks inside the
    window, beside the new driver's start, which no user's gate does."""
    return {"AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka",
                                                      "extra": {"bootstrap.servers": bootstrap}})}


def epoch(iso: str | None) -> float | None:
    return None if not iso else dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class DagRestarts:
    """Triggers runs through the REST API and turns their task instances into phases."""

    def __init__(self, services, bench) -> None:
        self.services, self.b = services, bench
        self.padding = None   # downtime_yarn.HdfsPadding of a YARN preserve run with --pad
        self.client = services.client()
        r = self.client.patch(f"/api/v2/dags/{DAG_ID}", json={"is_paused": False})
        if r.status_code != 200:
            raise RuntimeError(f"unpause: {r.status_code} {r.text}")

    def run(self, row: dict, mode: str) -> str:
        conf = {"job": "dt", "mode": mode, "backup_id": None, "datetime": None, "dry_run": False,
                "accept_data_loss": False, "reason": "downtime bench"}
        r = self.client.post(f"/api/v2/dags/{DAG_ID}/dagRuns", json={"logical_date": None, "conf": conf})
        if r.status_code != 200:
            raise RuntimeError(f"trigger: {r.status_code} {r.text}")
        run_id = r.json()["dag_run_id"]
        row["run_state"] = self.services.wait_for_run(self.client, DAG_ID, run_id, timeout=600, poll=1)
        return run_id

    def task_instances(self, run_id: str) -> dict[str, dict]:
        got = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances", params={"limit": 100})
        return {t["task_id"]: t for t in got.json()["task_instances"]}

    def xcom(self, run_id: str, task_id: str, key: str = "return_value") -> dict:
        got = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}",
                              params={"deserialize": True})
        if got.status_code != 200:
            raise RuntimeError(f"xcom {task_id}: {got.status_code} {got.text}")
        value = got.json()["value"]
        return json.loads(value) if isinstance(value, str) else value

    def restart(self, mode: str = "keep") -> dict:
        """One DAG restart of the running job, ``keep``, or ``preserve`` (``mode=auto`` after the registry's
        build and ``compatibility_version`` changed); its downtime and phases in seconds."""
        from downtime_bench import load_1m, log_files, wait_for
        from downtime_preserve import account, committed_offsets, end_offsets, remove, start_offsets

        row: dict = {"kind": "dag", "mode": mode, "load_1m": load_1m()}
        run_id = self.run(row, "keep" if mode == "keep" else "auto")
        if row["run_state"] != "success":
            raise RuntimeError(f"run {run_id}: {row['run_state']}\n{self.services.tail('scheduler')}")
        tis = self.task_instances(run_id)
        stop = self.xcom(run_id, "stop")
        last, old, after = int(stop["last_committed"]), self.b.ck, int(stop["last_committed"])
        if mode != "keep":   # the old query's files are where the reset moved them; the new query starts at 0
            reset = self.xcom(run_id, "submit", "reset")
            old, after = reset["aside_location"], -1
            row["reset_backup_adopted"] = reset.get("backup_adopted")
        last_mtime = log_files(old)[last]
        offsets = log_files(self.b.ck, "offsets")
        first = min(b for b in offsets if b > after)
        committed = wait_for("the new query's first batch committed", lambda: log_files(self.b.ck).get(first))
        from downtime_bench import asked_phases, launch_phases

        submitted = self.xcom(run_id, "submit")
        row.update(self.phases(tis, last_mtime, offsets[first], committed))
        if submitted.get("launch_s") is not None:
            row.update(launch_phases(epoch(tis["stop"]["end_date"]), submitted["submitted_at_ms"] / 1000,
                                     submitted["launch_s"], offsets[first]))
        backup = self.xcom(run_id, "stop", "backup")   # the backup inside the stop task, after the driver's exit
        row.update(asked_phases(stop.get("alignment"), last_mtime))
        row.update(last_batch=last, first_new_batch=first, stop_outcome=stop.get("outcome"),
                   backup_s=backup.get("seconds"), backup_files=backup.get("files"),
                   precopy=stop.get("precopy"), load_1m_end=load_1m())
        if old != self.b.ck:
            # Records lost or read twice across the reset: the old query's committed end against the new start.
            row.update(account(committed_offsets(old), start_offsets(self.b.ck), end_offsets(self.b.bootstrap,
                                                                                            self.b.topic)))
            if self.padding is not None:
                self.padding.back_from(old)
            remove(old)
        return row

    @staticmethod
    def phases(tis: dict[str, dict], last_mtime: float, planned_at: float, committed: float) -> dict:
        """The window split at the task instances' starts and ends.

        ``stop_task_s`` and ``submit_s`` are the two tasks' runs (the submit task resets first in
        ``preserve``); ``airflow_idle_s`` is from the stop task's end to the submit task's start, when
        no task of the run was running (Airflow's share: the scheduler seeing a task end, queueing the
        next, the executor starting its process). ``health_gate_at_s``: the gate task's start after the
        submit task's end, inside the window when it comes before the first batch's commit. With a local
        driver the submit task ends after the first commit (``first_batch_wait_s``), so ``driver_start_s``
        from its end is negative there. ``launch_phases`` splits the same window as a bare row's.
        """
        out: dict = {"downtime_s": round(committed - last_mtime, 3)}
        stop_end = epoch(tis["stop"]["end_date"])
        out["stop_after_last_commit_s"] = round(stop_end - last_mtime, 3)
        out["stop_task_s"] = round(stop_end - epoch(tis["stop"]["start_date"]), 3)
        submit_start, submit_end = epoch(tis["submit"]["start_date"]), epoch(tis["submit"]["end_date"])
        out["submit_s"] = round(submit_end - submit_start, 3)
        out["airflow_idle_s"] = round(submit_start - stop_end, 3)
        gate = tis.get("health_gate") or {}
        if gate.get("start_date"):
            out["health_gate_at_s"] = round(epoch(gate["start_date"]) - submit_end, 3)
        out["driver_start_s"] = round(planned_at - submit_end, 3)
        out["first_batch_s"] = round(committed - planned_at, 3)
        return out


def summary(rows: list[dict]) -> dict:
    """Medians per kind, and each safe kind's median over the bare median."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["kind"], []).append(r)
    med = {k: statistics.median(r["downtime_s"] for r in v) for k, v in by.items()}
    out = {"median_downtime_s": med}
    rounds: dict = {}
    for r in rows:
        if "round" in r:
            rounds.setdefault(r["round"], {})[r["kind"]] = r["downtime_s"]
    for base in ("bare", "exact"):
        if base not in med:
            continue
        suffix = "" if base == "bare" else "_exact"
        out[f"ratio_to_{base}"] = {k: round(v / med[base], 3) for k, v in med.items() if k != base}
        # each round's safe window over the bare one beside it: the machine's drift falls on both
        out[f"ratio_per_round{suffix}"] = {k: [round(rd[k] / rd[base], 3) for _, rd in sorted(rounds.items())
                                               if k in rd and base in rd] for k in med if k != base}
    if "dag" in by:
        keys = [k for k in by["dag"][0] if k.endswith("_s") and k != "downtime_s"
                and isinstance(by["dag"][0][k], int | float)]
        out["dag_median_phases_s"] = {k: statistics.median(r[k] for r in by["dag"] if k in r) for k in keys}
    common = ("asked_after_last_commit_s", "stop_after_last_commit_s", "to_launch_s", "launch_s", "launch_to_plan_s",
              "first_batch_s", "launch_to_plan_airflow_cpu_s", "launch_to_plan_machine_busy")
    for kind, rows_k in by.items():   # the window of every kind split the same way (launch_phases)
        rows_k = [r for r in rows_k if "to_launch_s" in r]
        if rows_k:
            out[f"{kind}_median_common_phases_s"] = {k: statistics.median(r[k] for r in rows_k if k in r)
                                                     for k in common if any(k in r for r in rows_k)}
    return out


#: the restarts a round can hold; ``exact`` (``--mode preserve`` only) is ``downtime_preserve.py``'s.
KINDS = ("bare", "exact", "cli", "dag")


def kinds_arg(text: str) -> str:
    kinds = [k.strip() for k in text.split(",")]
    if not kinds or any(k not in KINDS for k in kinds) or len(set(kinds)) != len(kinds):
        raise argparse.ArgumentTypeError(f"{text!r}: give distinct kinds of {', '.join(KINDS)}, e.g. bare,dag")
    return ",".join(kinds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="bare/cli/dag triples")
    ap.add_argument("--pad", default=None, help="padding state (0, 10M, 2G ...; default 10M locally, 0 on YARN)")
    ap.add_argument("--files-per-gb", type=int, default=10000)
    ap.add_argument("--burst", type=int, default=50000, help="records produced before the first start")
    ap.add_argument("--kinds", default="bare,cli,dag", type=kinds_arg,
                    help="the restarts of a round, rotated each round (bare,dag: more pairs in the same time)")
    ap.add_argument("--mode", choices=("keep", "preserve"), default="keep")
    ap.add_argument("--yarn", action="store_true", help="the job on the devstack's YARN, its checkpoint on HDFS")
    ap.add_argument("--snapshottable", action="store_true",
                    help="with --yarn: make the checkpoints' folder snapshottable first, as docs/deployment.md asks of "
                         "an administrator (every backup is then an HDFS snapshot: no state byte through the worker)")
    ap.add_argument("--json", type=Path, default=REPO / ".cache" / "downtime-dag.json")
    ap.add_argument("--logs", type=Path, default=None, help="keep Airflow's task logs here (the run's own are deleted)")
    args = ap.parse_args()
    if args.snapshottable and not args.yarn:
        ap.error("--snapshottable: only with --yarn (snapshots are HDFS's)")
    if "exact" in args.kinds.split(",") and args.mode != "preserve":
        ap.error("--kinds exact: only with --mode preserve (a keep restart's bare row already starts where the old "
                 "query stopped)")
    import cpu_share

    cpu_share.start()   # Airflow's CPU while each row's driver starts (the cluster shares these cores here)
    from states import compile_package

    compile_package()   # task processes and commands load the package as an installed wheel does
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("airflow_kafka_spark").setLevel(logging.WARNING)
    from devstack.broker import LocalBroker

    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="downtime-dag-", dir=str(REPO / ".cache")))
        broker = stack.enter_context(LocalBroker(Path(tmp) / "broker"))
        work = Path(tmp) / "run"
        work.mkdir()
        bench_kw, hadoop = yarn_bench_kw(stack, Path(tmp)) if args.yarn else ({}, None)
        if args.snapshottable:
            from downtime_yarn import allow_snapshots

            allow_snapshots(hadoop, "/dtdag/checkpoints")   # bench_kw's data root: <fs>/dtdag
        args.pad = args.pad or ("0" if args.yarn else "10M")
        os.environ.update(airflow_env(work / "airflow", broker.bootstrap_servers))
        try:
            result = one_run(work, broker.bootstrap_servers, args, bench_kw, hadoop)
        finally:
            if args.logs is not None and (work / "airflow" / "logs").is_dir():
                import shutil

                shutil.copytree(work / "airflow" / "logs", args.logs, dirs_exist_ok=True)
            if args.logs is not None and hadoop is not None:   # where each driver's start went (yarn_timeline)
                import yarn_timeline

                yarn_timeline.save(hadoop, args.logs)
        result["where"] = ("yarn+hdfs" + (", snapshottable" if args.snapshottable else "")) if args.yarn else "local"
        # A deployment's scheduler setting (Airflow's default 1 s), when the caller's environment sets it.
        result["scheduler_idle_sleep_time"] = os.environ.get("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "1")
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=1))
    return 0


def yarn_bench_kw(stack: contextlib.ExitStack, tmp: Path) -> tuple[dict, object]:
    """The devstack's HDFS + YARN minicluster for the job (``--master yarn --deploy-mode cluster``) and its
    checkpoint, as ``downtime_yarn.py`` runs it; the Airflow components inherit its environment. Also the
    cluster itself, which pads the checkpoint on HDFS."""
    from downtime_yarn import SPARK_YARN

    from devstack.hadoop import HadoopCluster
    from devstack.spark_yarn import prepare

    hadoop = stack.enter_context(HadoopCluster(data_dir=tmp / "hadoop"))
    ys = prepare(hadoop)
    env = {k: ys.env[k] for k in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_ARCHIVES_PATH")}
    os.environ.update(env)
    job = {"deploy_mode": "cluster", "spark_conf": {**ys.conf, "spark.jars": ",".join(ys.jars)}}
    return {"data": f"{hadoop.default_fs}/dtdag", "job": job, "env": env, "spark_conn": SPARK_YARN}, hadoop


def one_run(work: Path, bootstrap: str, args, bench_kw: dict, hadoop=None) -> dict:
    import subprocess

    from downtime_bench import Bench, du, pad, size_of, started_feed, warm

    from devstack.airflow_services import AirflowServices, sync_dags_folder
    from devstack.topics import create_topic

    create_topic(bootstrap, "dtdag", partitions=4)
    b = Bench(work, bootstrap, "dtdag", **bench_kw)    # writes the registry the DAG's form is parsed from
    subprocess.run([str(Path(sys.executable).with_name("airflow")), "db", "migrate"], check=True,
                   capture_output=True, env=os.environ)
    sync_dags_folder(DAG_ID)
    feed = started_feed(bootstrap, "dtdag", args.burst)
    services = AirflowServices(work / "airflow", work)
    rows: list[dict] = []
    try:
        services.start_api_server()
        services.start("scheduler")
        services.start("triggerer")
        dag = DagRestarts(services, b)
        b.submit()
        b.running_with_batches(3)
        pad_to = (size_of(args.pad), max(1, round(args.files_per_gb * size_of(args.pad) / (1 << 30)))) \
            if size_of(args.pad) else (0, 0)
        warmed = None
        if args.mode == "keep" and pad_to[0]:
            b.stop()
            if hadoop is None:
                pad(b.ck, *pad_to)
            else:   # Hadoop's own FsShell puts the padding below <ck>/state/9, as downtime_yarn.py does
                from downtime_yarn import blob_store, pad_on_hdfs

                pad_on_hdfs(b.ck, pad_to[0], pad_to[1], work / "padding", hadoop, blob_store=blob_store(bench_kw))
            b.submit()
            b.running_with_batches(2)
            warmed = warm(b)
        files, size = du(b.ck)
        if args.mode == "keep":
            restart = keep_restart(b, dag)
        else:   # on HDFS, a padding written once by FsShell and renamed into each new checkpoint
            from downtime_yarn import HdfsPadding

            dag.padding = HdfsPadding(bench_kw["data"], *pad_to, work, hadoop) \
                if hadoop is not None and pad_to[0] else None
            restart = preserve_restart(b, dag, pad_to)
        kinds = tuple(args.kinds.split(","))
        for i in range(args.rounds):
            for kind in kinds[i % len(kinds):] + kinds[:i % len(kinds)]:
                b.running_with_batches(2)
                row = restart(kind)
                row["kind"], row["round"] = kind, i
                log.info("%s", json.dumps(row))
                rows.append(row)
                # so far, kept if a later restart fails the run (round 25 lost a run's rows that way)
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.with_suffix(".partial.json").write_text(json.dumps(
                    {"mode": args.mode, "pad": args.pad, "restarts": rows, "summary": summary(rows)}, indent=1))
        b.stop()
    finally:
        feed.stop.set()
        with contextlib.suppress(Exception):
            b.stop()
        services.stop()
    return {"mode": args.mode, "pad": args.pad, "checkpoint_files": files, "checkpoint_bytes": size,
            "warm": warmed, "restarts": rows, "summary": summary(rows)}


def keep_restart(b, dag: DagRestarts):
    return lambda kind: dag.restart() if kind == "dag" else b.restart("safe" if kind == "cli" else "bare")


def preserve_restart(b, dag: DagRestarts, pad_to: tuple[int, int]):
    """Each restart deploys the other build with the next ``compatibility_version`` (``downtime_preserve.py``'s
    builds): ``bare`` and ``cli`` as that bench makes them, ``dag`` as a ``mode=auto`` run (reset ``preserve``)."""
    from downtime_bench import pad
    from downtime_preserve import BUILDS, promote, restart_preserve

    b.write_registry(BUILDS[0], compat="1")
    promote(b)   # the running build passed its gate: auto compares the registry with it
    count = iter(range(10**6))

    def restart(kind: str) -> dict:
        n = next(count)
        if kind != "dag":
            return restart_preserve(b, "safe" if kind == "cli" else kind, n, pad_to, hdfs_padding=dag.padding)
        if dag.padding is not None:
            dag.padding.into(b.ck)
        elif pad_to[0]:
            pad(b.ck, *pad_to)
        b.write_registry(BUILDS[(n + 1) % 2], compat=str(n + 2))
        return dag.restart("preserve")

    return restart


if __name__ == "__main__":
    raise SystemExit(main())
