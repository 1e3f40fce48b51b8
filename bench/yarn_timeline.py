"""Where a YARN driver's start goes, per restart of a downtime bench: the ResourceManager's times and the
driver's own log, so that a dag row's slower "to the first plan" (docs/benchmarks.md, rounds 17-18) can be
put in a step rather than guessed at.

:func:`save` (called by ``downtime_dag.py --yarn --logs DIR`` after the run, while the minicluster still
runs) writes ``DIR/yarn-apps.json`` (the RM's ``/ws/v1/cluster/apps``) and copies each application's
driver ``stderr`` (its first container: in cluster mode the ApplicationMaster runs the driver) to
``DIR/drivers/<application id>.log``, and the RM's own container and application transitions to
``DIR/rm-transitions.log``. :func:`steps` reads them back: for each application, the seconds from the
RM's accepting it to each step the RM (to the millisecond) and the driver (to the second) log. Run on a saved run:
``.venv/bin/python bench/yarn_timeline.py .cache/r19-logs-yp .cache/r19-yarn-preserve-2g.json``
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import urllib.request
from datetime import datetime
from pathlib import Path

#: (step, a regular expression on the driver's log line), in the order a start takes them.
STEPS = (
    ("driver_log_starts", r"."),
    ("am_registered", r"ApplicationMaster: Registering the ApplicationMaster|YarnRMClient: Registering"),
    ("spark_context", r"SparkContext: Running Spark version"),
    ("executors_requested", r"YarnAllocator: Will request \d+ executor container"),
    ("executor_launched", r"YarnAllocator: Launching container"),
    ("executor_registered", r"Registered executor NettyRpcEndpointRef"),
    # the streaming query's plan analysed: Spark 4 warns here that AQE is off for streaming (on by default)
    ("query_resolved", r"ResolveWriteToStream|Starting new streaming query"),
)
_STAMP = re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d(?:[.,]\d{3})?)")
#: The ResourceManager's log lines :func:`save` keeps (``RM_TRANSITIONS``) and :func:`rm_steps` reads.
RM_TRANSITIONS = "rm-transitions.log"
_RM_LINE = re.compile(r"RMAppImpl|RMContainerImpl|RMAppAttemptImpl")
#: (step, container: the AM's ``_000001`` or the first executor's, the transition), from the RM's log.
RM_STEPS = (
    ("am_allocated", "am", "from NEW to ALLOCATED"),
    ("am_running", "am", "from ACQUIRED to RUNNING"),
    ("executor_allocated", "executor", "from NEW to ALLOCATED"),
    ("executor_running", "executor", "from ACQUIRED to RUNNING"),
)
_RM_CONTAINER = re.compile(r"^(\S+ \S+) .*container_(\d+_\d+)_\d+_(\d+) Container Transitioned (from \w+ to \w+)")
_RM_REGISTERED = re.compile(r"^(\S+ \S+) .*application_(\d+_\d+) State change from ACCEPTED to RUNNING")


def save(hadoop, into: Path) -> None:
    """The RM's applications and each one's driver log, into ``into`` (see the module doc)."""
    into.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(f"{hadoop.rm_url}/ws/v1/cluster/apps", timeout=10) as r:
        apps = (json.load(r).get("apps") or {}).get("app") or []
    (into / "yarn-apps.json").write_text(json.dumps(apps, indent=1))
    drivers = into / "drivers"
    drivers.mkdir(exist_ok=True)
    for stderr in (hadoop.data_dir / "nm-logs").glob("application_*/container_*_01_000001/stderr"):
        shutil.copyfile(stderr, drivers / f"{stderr.parent.parent.name}.log")
    rm_log = hadoop.data_dir / "minicluster.log"   # the RM's own transitions, to the millisecond
    if rm_log.is_file():
        with rm_log.open(errors="replace") as src, (into / RM_TRANSITIONS).open("w") as out:
            out.writelines(line for line in src if _RM_LINE.search(line))


def _when(line: str) -> float | None:
    m = _STAMP.match(line)
    if m is None:
        return None
    text = m.group(1).replace(",", ".")
    fmt = "%y/%m/%d %H:%M:%S.%f" if "." in text else "%y/%m/%d %H:%M:%S"
    return datetime.strptime(text, fmt).timestamp()   # the driver logs local time, as this process reads it


def rm_steps(logs: Path) -> dict[str, dict[str, float]]:
    """Application id -> {each :data:`RM_STEPS` step and ``am_registered``: epoch seconds}, from the RM's log
    (local time, as this process reads it); empty when :func:`save` found no RM log."""
    path = logs / RM_TRANSITIONS
    out: dict[str, dict[str, float]] = {}
    if not path.is_file():
        return out

    def at(stamp: str) -> float:
        return datetime.strptime(stamp.replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()

    for line in path.read_text(errors="replace").splitlines():
        if m := _RM_REGISTERED.match(line):
            out.setdefault(f"application_{m.group(2)}", {}).setdefault("am_registered", at(m.group(1)))
        elif m := _RM_CONTAINER.match(line):
            row = out.setdefault(f"application_{m.group(2)}", {})
            which = "am" if int(m.group(3)) == 1 else "executor"
            for name, container, transition in RM_STEPS:
                if container == which and transition == m.group(4):
                    row.setdefault(name, at(m.group(1)))
    return out


def steps(logs: Path) -> dict[str, dict]:
    """Application id -> {name, accepted (epoch s), launched_am_s, and each :data:`STEPS` step's seconds
    after acceptance (the first line that matches)}."""
    out: dict[str, dict] = {}
    rm = rm_steps(logs)
    for app in json.loads((logs / "yarn-apps.json").read_text()):
        accepted = app["startedTime"] / 1000
        row = {"name": app.get("name"), "accepted": accepted,
               "launched_am_s": round(app["launchTime"] / 1000 - accepted, 3) if app.get("launchTime") else None}
        row.update({f"{name}_s": round(t - accepted, 3) for name, t in rm.get(app["id"], {}).items()})
        log = logs / "drivers" / f"{app['id']}.log"
        if log.is_file():
            patterns = [(name, re.compile(rx)) for name, rx in STEPS]
            for line in log.read_text(errors="replace").splitlines():
                for name, rx in patterns:
                    if name not in row and rx.search(line) and (t := _when(line)) is not None:
                        row[name] = round(t - accepted, 3)
        out[app["id"]] = row
    return out


def by_row(logs: Path, result: dict) -> list[dict]:
    """Each restart of a bench result with the application that started within its window (accepted after
    the previous restart's end): the kind, the round, and the application's steps."""
    apps = sorted(steps(logs).items(), key=lambda kv: kv[1]["accepted"])
    rows = []
    for r in result["restarts"]:
        at = r.get("submitted_at")
        match = None
        if at is not None:
            match = min(apps, key=lambda kv: abs(kv[1]["accepted"] - at), default=None)
        row = {"kind": r["kind"], "round": r.get("round"), "launch_to_plan_s": r.get("launch_to_plan_s"),
               "app": match[0] if match else None, **(match[1] if match else {})}
        if match and at is not None and r.get("launch_to_plan_s") is not None:   # offsets/<first>'s mtime
            row["planned"] = round(at + r["launch_to_plan_s"] - match[1]["accepted"], 3)
        rows.append(row)
    return rows


def medians(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per kind, the median seconds of each step after acceptance (docs/benchmarks.md, round 19)."""
    import statistics

    keys = ["launched_am_s", *(f"{name}_s" for name in ("am_allocated", "am_running", "am_registered",
                                                         "executor_allocated", "executor_running")),
            *(name for name, _ in STEPS), "planned"]
    return {kind: {k: statistics.median(r[k] for r in rows if r["kind"] == kind and r.get(k) is not None)
                   for k in keys if any(r["kind"] == kind and r.get(k) is not None for r in rows)}
            for kind in sorted({r["kind"] for r in rows})}


if __name__ == "__main__":
    logs = Path(sys.argv[1])
    if len(sys.argv) > 2:
        matched = by_row(logs, json.loads(Path(sys.argv[2]).read_text()))
        for row in matched:
            print(json.dumps(row))
        print(json.dumps(medians(matched), indent=1))
    else:
        for app, row in sorted(steps(logs).items(), key=lambda kv: kv[1]["accepted"]):
            print(app, json.dumps(row))
