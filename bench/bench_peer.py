"""``aks`` against Kafka's own ``kafka-consumer-groups --describe`` at the sizes users have (issue 15).

Run: ``.venv/bin/python bench/bench_peer.py [--repeat 5] [--json FILE] [--plot]`` (≈15–30 min on 2 cores).
A broker is started (``devstack.broker``) unless ``--bootstrap`` names one; topics ``t<N>`` get N
partitions with 4 records each; checkpoints are written in Spark's format by :mod:`states`; a
consumer group is committed at the same position for the peer. Every comparison is interleaved in
one loop (ours, peer, ours, peer, … with the order swapped every round) and repeated; the table
gives min/median/max seconds, the median CPU seconds (user + system; ``process_time`` in process),
peak RSS (GNU time) and the ratios peer/ours of the medians (wall and CPU), with the 1-minute load
average when each row was measured (the machine is shared: compare CPU across rounds).

Cases (``--only`` picks some):

* ``partitions``: validate (lifecycle record present / first run without one) and lag (caught up /
  2 records behind on every partition) at 100 … 10,000 partitions, 100 batches, vs the peer;
* ``inprocess``: the same validate and lag through ``cli.main`` in this process (no start-up);
* ``batches``: validate and lag at 1,000 partitions with 10 … 10,000 batches of history;
* ``memory``: every command's peak RSS at 5,000 partitions × 10,000 batches;
* ``backup``: first backup of a 40,000-file checkpoint vs ``cp -a && sync``; unchanged re-backup;
* ``audit``: ``aks audit`` of 50 registered jobs × 200 partitions;
* ``spark``: validate, lag and backup of a checkpoint written by real Spark (``backup_bench.real_spark``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import states  # noqa: E402

from airflow_kafka_spark.kafka.offsets import TopicPartition  # noqa: E402

CASES = ("partitions", "inprocess", "batches", "memory", "backup", "audit", "spark")


def load() -> float:
    return os.getloadavg()[0]


def stats(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []
        states.compile_package()
        self.broker = None
        self.bootstrap = args.bootstrap
        if not self.bootstrap:
            # A new broker: checkpoints built for an earlier one's topics (and their lifecycle records,
            # bound to its cluster id; records produced after their batches) would be judged TOPIC_RESET.
            for old in [*self.work.glob("cp-*"), *self.work.glob("fleet")]:
                shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()
            self.broker = states.broker(self.work / "broker")
            self.bootstrap = self.broker.bootstrap_servers

    def close(self) -> None:
        if self.broker is not None:
            self.broker.stop()

    # ---- states ------------------------------------------------------------------------------

    def topic(self, n: int) -> dict:
        from confluent_kafka.admin import AdminClient

        name = f"t{n}"
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        md = admin.list_topics(timeout=30)
        if name in md.topics and len(md.topics[name].partitions) == n:
            ends = {TopicPartition(name, p): 4 for p in range(n)}
        else:
            ends = states.make_topic(self.bootstrap, name, n, 4)
        # Committed (and read back) every time: cheap, and a fresh broker's coordinator may still be loading.
        states.commit_group(self.bootstrap, f"g{n}", ends)
        states.commit_group(self.bootstrap, f"g{n}-behind", {tp: o - 2 for tp, o in ends.items()})
        return ends

    def checkpoint(self, n: int, batches: int, kind: str = "") -> str:
        """``kind``: "" (caught up, record written once), "behind", "first" (never gets a record)."""
        path = self.work / f"cp-{n}-{batches}{'-' + kind if kind else ''}"
        if not (path / "commits" / str(batches - 1)).exists():
            shutil.rmtree(path, ignore_errors=True)
            ends = {TopicPartition(f"t{n}", p): 4 for p in range(n)}
            states.build_checkpoint(path, ends, batches=batches, behind=2 if kind == "behind" else 0)
        if kind != "first" and not Path(f"{path}.lifecycle.json").exists():
            self.whole("validate", str(path))  # writes the lifecycle record beside it
        return str(path)

    # ---- runners ------------------------------------------------------------------------------

    def whole(self, command: str, checkpoint: str, *extra: str) -> tuple[float, int, float]:
        return states.run_timed(states.aks_command(command, "--checkpoint", checkpoint,
                                                   "--bootstrap-servers", self.bootstrap, *extra)).wrc

    def peer(self, group: str) -> tuple[float, int, float]:
        run = states.run_timed(states.peer_command(self.bootstrap, group))
        if "LAG" not in run.out:
            raise RuntimeError(f"kafka-consumer-groups printed no table for {group}: {run.out[:300]}")
        return run.wrc

    def inproc(self, command: str, checkpoint: str, *extra: str) -> tuple[float, int, float]:
        """Wall and CPU seconds (``process_time``: this process, librdkafka's threads included)."""
        from airflow_kafka_spark.cli import main

        argv = [command, "--checkpoint", checkpoint, "--bootstrap-servers", self.bootstrap, *extra]
        with contextlib.redirect_stdout(io.StringIO()):
            t0, c0 = time.perf_counter(), time.process_time()
            main(argv)
            return time.perf_counter() - t0, 0, time.process_time() - c0

    def interleave(self, what: str, ours, peer, **keys) -> None:
        """Run ``ours`` and ``peer`` (callables returning (s, rss KiB, CPU s)) alternately, ``repeat`` times."""
        o_t, o_m, o_c, p_t, p_m, p_c, loads = [], [], [], [], [], [], []
        for r in range(self.args.repeat):
            pair = [(ours, o_t, o_m, o_c), (peer, p_t, p_m, p_c)] if peer else [(ours, o_t, o_m, o_c)]
            for fn, ts, ms, cs in (pair if r % 2 == 0 else pair[::-1]):
                loads.append(load())
                t, m, c = fn()
                ts.append(t)
                ms.append(m)
                cs.append(c)
        row = {"what": what, **keys, "ours": stats(o_t), "ours_cpu": stats(o_c), "ours_rss_kib": max(o_m),
               "load": stats(loads)}
        if peer:
            row.update(peer=stats(p_t), peer_cpu=stats(p_c), peer_rss_kib=max(p_m))
            row["ratio"] = round(row["peer"]["median"] / row["ours"]["median"], 2)
            row["cpu_ratio"] = round(row["peer_cpu"]["median"] / max(row["ours_cpu"]["median"], 1e-9), 2)
        self.emit(row)

    def emit(self, row: dict) -> None:
        self.rows.append(row)
        if self.args.json:   # after every row: an interrupted run keeps what it measured
            Path(self.args.json).write_text(json.dumps(self.rows, indent=1))
        o = row["ours"]
        oc = row.get("ours_cpu", {}).get("median", float("nan"))
        line = (f"{row['what']:<34} {json.dumps({k: v for k, v in row.items() if k in ('partitions', 'batches')}):<36}"
                f" ours {o['min']:.3f}/{o['median']:.3f}/{o['max']:.3f} s (CPU {oc:.3f} s)"
                f" {row.get('ours_rss_kib', 0) // 1024} MiB")
        if "peer" in row:
            p = row["peer"]
            line += (f" | peer {p['min']:.3f}/{p['median']:.3f}/{p['max']:.3f} s"
                     f" (CPU {row['peer_cpu']['median']:.3f} s)  ratio {row['ratio']}× (CPU {row['cpu_ratio']}×)")
        line += f"  (load {row['load']['median']:.1f})"
        print(line, flush=True)

    # ---- cases --------------------------------------------------------------------------------

    def partitions(self) -> None:
        for n in self.args.partitions:
            self.topic(n)
            ck, behind, first = (self.checkpoint(n, 100, k) for k in ("", "behind", "first"))
            self.interleave("validate (record present)", lambda ck=ck: self.whole("validate", ck),
                            lambda n=n: self.peer(f"g{n}"), partitions=n, batches=100)
            self.interleave("validate (first run, no record)",
                            lambda first=first: self.whole("validate", first, "--no-record"),
                            lambda n=n: self.peer(f"g{n}"), partitions=n, batches=100)
            self.interleave("lag (caught up)", lambda ck=ck: self.whole("lag", ck),
                            lambda n=n: self.peer(f"g{n}"), partitions=n, batches=100)
            self.interleave("lag (2 behind per partition)", lambda b=behind: self.whole("lag", b),
                            lambda n=n: self.peer(f"g{n}-behind"), partitions=n, batches=100)

    def inprocess(self) -> None:
        for n in self.args.partitions:
            self.topic(n)
            ck, behind, first = (self.checkpoint(n, 100, k) for k in ("", "behind", "first"))
            for what, command, path, extra in (("in-process validate", "validate", ck, ()),
                                               ("in-process validate (first run)", "validate", first,
                                                ("--no-record",)),
                                               ("in-process lag (caught up)", "lag", ck, ()),
                                               ("in-process lag (2 behind)", "lag", behind, ())):
                self.inproc(command, path, *extra)  # warm: imports, first connection
                self.interleave(what, lambda c=command, p=path, e=extra: self.inproc(c, p, *e), None,
                                partitions=n, batches=100)

    def batches(self) -> None:
        """Every history length in one round-robin loop per command: this machine's CPU speed drifts
        by up to half within minutes, so lengths measured one after the other are not comparable."""
        n = 1000
        self.topic(n)
        cks = {b: (self.checkpoint(n, b), self.checkpoint(n, b, "behind")) for b in self.args.batches}
        self.inproc("validate", cks[self.args.batches[0]][0])   # imports paid before the first timed call
        for what, command, kind, run in (("validate vs history", "validate", 0, self.whole),
                                         ("lag vs history (2 behind)", "lag", 1, self.whole),
                                         ("in-process validate vs history", "validate", 0, self.inproc),
                                         ("in-process lag vs history", "lag", 1, self.inproc)):
            self.interleave_across(what, {b: (lambda c=command, ck=pair[kind], r=run: r(c, ck))
                                          for b, pair in cks.items()}, "batches", partitions=n)
        self.interleave("peer at 1,000 partitions", lambda: self.peer("g1000-behind"), None, partitions=n)

    def interleave_across(self, what: str, runs: dict, key: str, **keys) -> None:
        """One row per ``runs`` entry (``key`` = its label), all run in turn ``repeat`` times, the
        starting entry rotating so none always runs first."""
        labels = list(runs)
        samples: dict = {label: ([], [], [], []) for label in labels}
        for r in range(self.args.repeat):
            for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                ts, ms, cs, loads = samples[label]
                loads.append(load())
                t, m, c = runs[label]()
                ts.append(t)
                ms.append(m)
                cs.append(c)
        for label in labels:
            ts, ms, cs, loads = samples[label]
            self.emit({"what": what, **keys, key: label, "ours": stats(ts), "ours_cpu": stats(cs),
                       "ours_rss_kib": max(ms), "load": stats(loads)})

    def memory(self) -> None:
        n, b = 5000, 10_000
        self.topic(n)
        ck, behind = self.checkpoint(n, b), self.checkpoint(n, b, "behind")
        root = self.work / "bk-mem"
        shutil.rmtree(root, ignore_errors=True)
        for what, fn in (("memory: validate", lambda: self.whole("validate", ck)),
                         ("memory: validate (first run)", lambda: self.whole("validate", behind, "--no-record")),
                         ("memory: lag (2 behind)", lambda: self.whole("lag", behind)),
                         ("memory: backup", lambda: states.run_timed(states.aks_command(
                             "backup", "--checkpoint", ck, "--backup-root", str(root), "--job", Path(ck).name)).wrc)):
            loads = [load()]
            t, rss, cpu = fn()
            self.emit({"what": what, "partitions": n, "batches": b, "ours": stats([t]), "ours_cpu": stats([cpu]),
                       "ours_rss_kib": rss, "load": stats(loads)})

    def backup(self) -> None:
        src = self.work / "ck40k"
        if not (src / "state").exists():
            states.build_state_checkpoint(src)
        dest, root = self.work / "cp-a", self.work / "bk40k"

        def cp() -> tuple[float, int, float]:
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            return states.run_timed(["sh", "-c", f"cp -a {src} {dest} && sync"]).wrc

        def first() -> tuple[float, int, float]:
            shutil.rmtree(root, ignore_errors=True)
            subprocess.run(["sync"], check=True)
            return states.run_timed(states.aks_command("backup", "--checkpoint", str(src), "--backup-root",
                                                       str(root), "--job", "b40k")).wrc

        def again() -> tuple[float, int, float]:
            return states.run_timed(states.aks_command("backup", "--checkpoint", str(src), "--backup-root",
                                                       str(root), "--job", "b40k")).wrc

        self.interleave("backup, first copy (vs cp -a && sync)", first, cp, files=40_406)
        first()
        self.interleave("backup, unchanged re-backup", again, None, files=40_406)
        shutil.rmtree(dest, ignore_errors=True)

    def audit(self) -> None:
        n, jobs = 200, 50
        self.topic(n)
        base = self.work / "fleet"
        reg = base / "reg.yaml"
        if not reg.exists():
            base.mkdir(parents=True, exist_ok=True)
            ends = {TopicPartition(f"t{n}", p): 4 for p in range(n)}
            for j in range(jobs):
                states.build_checkpoint(base / "ck" / f"job{j:02d}", ends, batches=100, behind=j % 3)
            (base / "app.py").write_text("")
            lines = ["version: 1", f"allowed_roots: [{base}]", "defaults:", f"  application: {base}/app.py",
                     f"  backup_root: {base}/backups", f"  checkpoint: {base}/ck/{{name}}", "jobs:"]
            lines += [f"  - {{name: job{j:02d}, topics: [t{n}]}}" for j in range(jobs)]
            reg.write_text("\n".join(lines) + "\n")
        cmd = states.aks_command("audit", "--registry", str(reg), "--out", str(base / "out"),
                                 "--bootstrap-servers", self.bootstrap)
        self.interleave("audit, 50 jobs × 200 partitions", lambda: states.run_timed(cmd).wrc, None,
                        partitions=n, jobs=jobs)

    def spark(self) -> None:
        """validate, lag and backup of a checkpoint Spark wrote, against the peer on a group at its position."""
        from airflow_kafka_spark.checkpoint.reader import read_checkpoint

        ck, topic = states.spark_checkpoint(self.bootstrap, self.work / "spark")
        state = read_checkpoint(str(ck))
        group = f"g-{topic}"
        states.commit_group(self.bootstrap, group, state.latest_committed.kafka_offsets)
        path = str(ck)
        self.whole("validate", path)
        files = sum(len(f) for _, _, f in os.walk(ck))
        self.interleave("spark-written: validate", lambda: self.whole("validate", path),
                        lambda: self.peer(group), partitions=len(state.latest_committed.kafka_offsets),
                        batches=len(state.offset_batch_ids), files=files)
        self.interleave("spark-written: lag", lambda: self.whole("lag", path), lambda: self.peer(group),
                        partitions=len(state.latest_committed.kafka_offsets), batches=len(state.offset_batch_ids))
        root = self.work / "bk-spark"
        dest = self.work / "cp-spark"

        def first() -> tuple[float, int, float]:
            shutil.rmtree(root, ignore_errors=True)
            return states.run_timed(states.aks_command("backup", "--checkpoint", path, "--backup-root",
                                                       str(root), "--job", "spark")).wrc

        def cp() -> tuple[float, int, float]:
            shutil.rmtree(dest, ignore_errors=True)
            return states.run_timed(["sh", "-c", f"cp -a {ck} {dest} && sync"]).wrc

        self.interleave("spark-written: backup (vs cp -a && sync)", first, cp, files=files)

    # ---- output -------------------------------------------------------------------------------


def plot(rows: list[dict], out_dir: Path) -> list[Path]:
    """Time against partitions and against batches of history, ours beside the peer's (PNG files)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    part_rows = [r for r in rows if r["what"] in ("validate (record present)", "lag (2 behind per partition)")]
    if part_rows:
        fig, ax = plt.subplots(figsize=(7, 4))
        for what, style in (("validate (record present)", "o-"), ("lag (2 behind per partition)", "s-")):
            line = sorted((r for r in part_rows if r["what"] == what), key=lambda r: r["partitions"])
            xs = [r["partitions"] for r in line]
            ax.plot(xs, [r["ours"]["median"] for r in line], style, label=f"aks {what.split(' ')[0]}")
            ax.plot(xs, [r["peer"]["median"] for r in line], "k^--" if what.startswith("lag") else "kv:",
                    label="kafka-consumer-groups --describe" + (" (2 behind)" if what.startswith("lag") else ""))
        ax.set_xscale("log")
        ax.set_xlabel("partitions (100 batches of history)")
        ax.set_ylabel("seconds, whole process (median)")
        ax.legend()
        ax.grid(True, alpha=0.3)
        path = out_dir / "bench-partitions.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        made.append(path)
    hist = [r for r in rows if r["what"] in ("validate vs history", "lag vs history (2 behind)")]
    if hist:
        fig, ax = plt.subplots(figsize=(7, 4))
        for what, style in (("validate vs history", "o-"), ("lag vs history (2 behind)", "s-")):
            line = sorted((r for r in hist if r["what"] == what), key=lambda r: r["batches"])
            ax.plot([r["batches"] for r in line], [r["ours"]["median"] for r in line], style,
                    label=f"aks {what.split(' ')[0]}")
        peer = [r for r in rows if r["what"] == "peer at 1,000 partitions"]
        if peer:
            ax.axhline(peer[0]["ours"]["median"], color="k", linestyle="--",
                       label="kafka-consumer-groups --describe (no history)")
        ax.set_xscale("log")
        ax.set_xlabel("batches of history (1,000 partitions)")
        ax.set_ylabel("seconds, whole process (median)")
        ax.set_ylim(bottom=0)
        ax.legend()
        ax.grid(True, alpha=0.3)
        path = out_dir / "bench-batches.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        made.append(path)
    return made


def markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table (seconds min / median / max, peak RSS, ratio, load)."""
    out = ["| what | size | aks s (min / med / max) | aks CPU s (med) | aks RSS | peer s (min / med / max) | "
           "peer CPU s (med) | peer ÷ aks (wall / CPU) | load |",
           "|---|---|---|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        size = ", ".join(f"{r[k]:,} {k}" for k in ("partitions", "batches", "files", "jobs") if k in r)
        o = r["ours"]
        p = r.get("peer")
        peer = f"{p['min']:.2f} / **{p['median']:.2f}** / {p['max']:.2f}" if p else "—"
        rss = f"{r['ours_rss_kib'] / 1024:.0f} MiB" if r.get("ours_rss_kib") else "—"
        cpu = f"{r['ours_cpu']['median']:.3f}" if "ours_cpu" in r else "—"
        peer_cpu = f"{r['peer_cpu']['median']:.2f}" if "peer_cpu" in r else "—"
        ratio = f"{r['ratio']}× / {r['cpu_ratio']}×" if "cpu_ratio" in r else f"{r['ratio']}×" if "ratio" in r else "—"
        out.append(f"| {r['what']} | {size} | {o['min']:.3f} / **{o['median']:.3f}** / {o['max']:.3f} | {cpu} | "
                   f"{rss} | {peer} | {peer_cpu} | {ratio} | {r['load']['median']:.1f} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bootstrap", help="use this broker instead of starting one")
    p.add_argument("--work", default=str(HERE.parent / ".cache" / "bench"), help="where states are built")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--partitions", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000, 5000, 10000])
    p.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[10, 100, 1000, 10000])
    p.add_argument("--only", default=",".join(c for c in CASES if c != "spark"),
                   help=f"comma-separated cases of {', '.join(CASES)}")
    p.add_argument("--json", help="write every row to this file")
    p.add_argument("--plot", action="store_true", help="save docs/img/bench-*.png")
    p.add_argument("--markdown", metavar="JSON[,JSON]",
                   help="print the rows of earlier --json runs as a table (and plot them with --plot)")
    args = p.parse_args()
    if args.markdown:
        rows = [r for f in args.markdown.split(",") for r in json.loads(Path(f).read_text())]
        print(markdown(rows))
        if args.plot:
            for path in plot(rows, HERE.parent / "docs" / "img"):
                print("plot:", path)
        return 0
    bench = Bench(args)
    try:
        for case in args.only.split(","):
            getattr(bench, case)()
    finally:
        bench.close()
        if args.json:
            Path(args.json).write_text(json.dumps(bench.rows, indent=1))
        if args.plot:
            for path in plot(bench.rows, HERE.parent / "docs" / "img"):
                print("plot:", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
