"""Tables and the plot of the downtime benches (``downtime_bench.py``, ``downtime_preserve.py``, ``downtime_yarn.py``).

``--dag`` (``downtime_dag.py``'s JSONs) plots the DAG's downtime and the bare restart's against the
checkpoint's size: ``--dag docs/img/downtime-round12-dag-*.json --plot docs/img/downtime-vs-state-dag.png``.

Run: ``.venv/bin/python bench/downtime_report.py --keep docs/img/downtime-round7.json
--keep docs/img/downtime-round9-keep.json
--preserve docs/img/downtime-round9-preserve.json
--preserve docs/img/downtime-round9-preserve-b.json --yarn docs/img/downtime-round9-yarn.json
--plot docs/img/downtime-vs-state.png`` (prints the Markdown tables of round 9; docs/benchmarks.md gives
each round's command).
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path


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


PHASES = ("stop_s", "backup_s", "reset_s", "validate_s", "submit_s", "driver_start_s", "first_batch_s")


def stop_in_window(x: dict) -> float:
    """The part of the stop inside the window: the downtime less every later phase (the stop call starts
    before the old query's last commit when the job is inside a batch)."""
    return x["downtime_s"] - sum(x.get(k) or 0 for k in PHASES if k != "stop_s")


def restart_table(results: list[dict], where: str) -> str:
    """Every restart: downtime, its phases, the load at its start and end, what it lost or replayed."""
    lines = ["| where | checkpoint | mode | # | restart | load 1 min (start → end) | downtime s | stop | backup | "
             "reset | validate | submit | driver start | first batch | stop after the last commit | "
             "lost / replayed records |", "|---|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        for i, x in enumerate(r["restarts"]):
            size = x.get("checkpoint_bytes") or r.get("checkpoint_bytes")
            files = x.get("checkpoint_files") or r.get("checkpoint_files")
            what = f"{size / 1e6:,.0f} MB, {files:,} files" if size else r.get("size", "?")
            cells = " | ".join("—" if x.get(k) is None else f"{x[k]:.2f}" for k in PHASES)
            cells += f" | {stop_in_window(x):.2f}"
            loss = "—" if "records_lost" not in x else f"{x['records_lost']:,} / {x['records_replayed']:,}"
            lines.append(f"| {where} | {what} | {x.get('mode', r.get('mode', 'keep'))} | {i + 1} | {x['kind']} | "
                         f"{x.get('load_1m', '?')} → {x.get('load_1m_end', '?')} | **{x['downtime_s']:.1f}** | "
                         f"{cells} | {loss} |")
    return "\n".join(lines)


def summary_table(results: list[dict], where: str) -> str:
    """Per point: median downtime of each kind, the ratio, and what the safe restart put into the window."""
    lines = ["| where | checkpoint | mode | bare downtime s (each) | safe downtime s (each) | median safe ÷ bare | "
             "safe commands in the window s (median) |", "|---|---|---|---|---|---:|---:|"]
    for r in results:
        mode = r["restarts"][0].get("mode", r.get("mode", "keep"))
        bare = [x["downtime_s"] for x in r["restarts"] if x["kind"] == "bare"]
        safe = [x for x in r["restarts"] if x["kind"] == "safe"]
        added = median([sum(x.get(k) or 0 for k in ("backup_s", "reset_s", "validate_s")) for x in safe])
        sizes = [x.get("checkpoint_bytes") or r.get("checkpoint_bytes") or 0 for x in r["restarts"]]
        span = f"{min(sizes) / 1e6:,.1f}–{max(sizes) / 1e6:,.1f} MB" if min(sizes) != max(sizes) \
            else f"{max(sizes) / 1e6:,.1f} MB"
        safe_each = " / ".join(f"{x['downtime_s']:.1f}" for x in safe)
        lines.append(f"| {where} | {span} | {mode} | {' / '.join(f'{v:.1f}' for v in bare)} | "
                     f"{safe_each} | "
                     f"**{median([x['downtime_s'] for x in safe]) / median(bare):.2f}×** | {added:.2f} |")
    return "\n".join(lines)


def rss_table(groups: list[tuple[str, list[dict]]]) -> str:
    """Peak RSS (MiB) of each product command, the largest over the restarts of a point."""
    names = ("plan", "validate_before", "approve_plan", "precopy", "backup", "reset", "validate")
    lines = ["| where | checkpoint | mode | " + " | ".join(names) + " |", "|---|---|---|" + "---:|" * len(names)]
    for where, results in groups:
        for r in results:
            safe = [x for x in r["restarts"] if x["kind"] == "safe"]
            size = max([x.get("checkpoint_bytes") or 0 for x in safe] + [r.get("checkpoint_bytes") or 0])
            cells = [str(max((x[f"{n}_rss_mib"] for x in safe if f"{n}_rss_mib" in x), default="—")) for n in names]
            lines.append(f"| {where} | {size / 1e6:,.0f} MB | {safe[0].get('mode', 'keep')} | " + " | ".join(cells)
                         + " |")
    return "\n".join(lines)


def combined_plot(groups: list[tuple[str, list[dict]]], path: Path,
                  title: str = "Downtime of a restart against state size", safe_label: str = "safe") -> None:
    """Median downtime against the checkpoint's size, bare and safe, one line per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    markers = itertools.cycle("osD^v<>P*X")
    for label, results in groups:
        marker = next(markers)
        pts = []
        for r in results:
            size = max([x.get("checkpoint_bytes") or 0 for x in r["restarts"]] + [r.get("checkpoint_bytes") or 0])
            safe = "dag" if any(x["kind"] == "dag" for x in r["restarts"]) else "safe"   # downtime_dag.py: the DAG
            b = median([x["downtime_s"] for x in r["restarts"] if x["kind"] == "bare"])
            s = median([x["downtime_s"] for x in r["restarts"] if x["kind"] == safe])
            pts.append((size / 1e6, b, s))
        pts.sort()
        xs = [p[0] for p in pts]
        line, = ax.plot(xs, [p[1] for p in pts], marker=marker, linestyle=":", label=f"{label}: bare")
        ax.plot(xs, [p[2] for p in pts], marker=marker, linestyle="-", color=line.get_color(),
                label=f"{label}: {safe_label}")
    ax.set_xscale("log")
    ax.set_xlabel("checkpoint size before the restart (MB)")
    ax.set_ylabel("downtime (s), median of the restarts")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, action="append", default=[],
                    help="downtime_bench.py's JSON (local keep; repeatable: one line each, named by the file)")
    ap.add_argument("--preserve", type=Path, action="append", default=[],
                    help="downtime_preserve.py's JSON (local preserve; repeatable: one line each)")
    ap.add_argument("--yarn", type=Path, action="append", default=[],
                    help="downtime_yarn.py's JSON (repeatable: one line per mode and store set-up)")
    ap.add_argument("--dag", type=Path, action="append", default=[],
                    help="downtime_dag.py's JSON (repeatable: one line per place and mode, a point per file; "
                         "\"safe\" is the DAG run; no tables)")
    ap.add_argument("--plot", type=Path)
    args = ap.parse_args()
    if args.dag:
        dag: dict[str, list[dict]] = {}
        for path in args.dag:
            r = json.loads(path.read_text())
            dag.setdefault(f"{r.get('where', 'local').replace('yarn+hdfs', 'YARN + HDFS')} {r['mode']}", []).append(r)
        if args.plot:
            combined_plot(sorted(dag.items()), args.plot, title="Downtime of the safe-restart DAG and a bare restart",
                          safe_label="DAG")
        return 0
    groups = []
    for path in args.keep:
        groups.append((f"local keep ({path.stem})", json.loads(path.read_text())))
    for n, path in enumerate(args.preserve):
        groups.append((f"local preserve{f' (run {n + 1})' if len(args.preserve) > 1 else ''}",
                       json.loads(path.read_text())))
    yarn: dict[str, list[dict]] = {}
    for path in args.yarn:   # one line per mode and set-up ("snapshottable": the backups are HDFS snapshots)
        for r in json.loads(path.read_text()):
            setup = r.get("where", "yarn+hdfs").replace("yarn+hdfs", "YARN + HDFS")
            rnd = next((part for part in path.stem.split("-") if part.startswith("round")), "")
            yarn.setdefault(f"{setup} {r.get('mode', 'keep')}{f' ({rnd})' if rnd else ''}", []).append(r)
    groups += list(yarn.items())
    for label, results in groups:
        print(f"\n### {label}\n\n{summary_table(results, label)}\n\n{restart_table(results, label)}")
    print("\n" + rss_table([g for g in groups if "round7" not in g[0]]))
    if args.plot:
        combined_plot(groups, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
