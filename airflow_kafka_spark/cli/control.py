"""``aks status`` and ``aks stop``: a registry job's driver, application and lag at a glance, and its graceful stop.

Why here: an operator paged at night wants one line per job (is the driver up, which build runs,
how far behind, how long until retention deletes unread records) and a stop that cannot corrupt
anything, without opening Airflow. Both read through the core the Airflow layer uses: the driver
through :mod:`airflow_kafka_spark.runtime.start_stop` (a local pid on the submitting host, a cluster
driver through its manager's REST API from anywhere), the lag through
:func:`airflow_kafka_spark.watch.observe.observe_job`, and ``stop`` is
:func:`~airflow_kafka_spark.runtime.start_stop.stop_job`, the body of ``StopStreamingJobOperator``
(stop marker, wait for the batch boundary, kill only after the timeout).

``stop`` prints what it would do unless ``--execute`` is given, like the other commands that change
something. Exit codes: ``status`` 0 (``--check``: 3 when a driver is down or a job has an alert),
4 when Kafka did not answer; ``stop`` 0 once stopped (or nothing ran).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, UsageError, add_json_argument, add_kafka_arguments, positive_float
from airflow_kafka_spark.cli._job import (
    add_execute_argument,
    add_registry_argument,
    executes,
    kafka_config_for,
    load_registry,
)
from airflow_kafka_spark.errors import ExitCode

if TYPE_CHECKING:
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.registry.model import JobSpec
    from airflow_kafka_spark.runtime.submit import SparkTarget

RUNNING, NOT_RUNNING, NO_DRIVER, UNKNOWN = "RUNNING", "NOT_RUNNING", "NONE", "UNKNOWN"


def _no_target(spec: JobSpec) -> SparkTarget:
    """A cluster driver recorded without its endpoint: only Airflow's Spark connection could name it."""
    raise UsageError(f"job {spec.name}: the recorded driver has no cluster endpoint; submit it again through "
                     "SubmitStreamingJobOperator (it records the endpoint) or look in the cluster manager")


def driver_state(spec: JobSpec, record: LifecycleRecord | None) -> dict[str, Any]:
    """The recorded driver and whether it runs: RUNNING, NOT_RUNNING, NONE (never submitted) or UNKNOWN (+ why)."""
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.runtime import app_versions, start_stop

    drv = record.driver if record is not None else None
    sub = app_versions.submitted_app(record) or {}
    app = dict(sub.get("app") or {})
    out: dict[str, Any] = {
        "driver": None, "state": NO_DRIVER, "detail": "no driver recorded",
        "application": app.get("application"), "compatibility_version": app.get("compatibility_version"),
        "submitted_at_ms": sub.get("submitted_at_ms"), "rollback": bool(sub.get("rollback")),
        "last_good": (app_versions.last_good_app(record) or {}).get("application"),
    }
    if drv is None:
        return out
    out["driver"] = {"kind": drv.kind, "id": drv.id, "host": drv.host, "started_at_ms": drv.started_at}
    try:
        ctl = start_stop.driver_control(drv, lambda: _no_target(spec), sub or None)
        alive = ctl.is_alive()
        out["state"] = RUNNING if alive else NOT_RUNNING
        out["detail"] = ctl.describe() or f"{drv.kind} {drv.id}"
    except UserError as exc:   # another host's local driver, an unreachable cluster manager
        out["state"], out["detail"] = UNKNOWN, str(exc)
    return out


# --------------------------------------------------------------------------------------------------
# status
# --------------------------------------------------------------------------------------------------


def _status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", metavar="NAME", action="append", default=[],
                   help="a registry job (repeatable; default: every job of the registry)")
    add_registry_argument(p)
    add_kafka_arguments(p)
    p.add_argument("--no-lag", action="store_true", help="the driver only: do not ask Kafka")
    p.add_argument("--check", action="store_true",
                   help="exit 3 when a job's driver is not running or the job has an alert")
    add_json_argument(p)


def _status_of(spec: JobSpec, args: argparse.Namespace) -> dict[str, Any]:
    from airflow_kafka_spark.errors import Unreachable, UserError
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.watch.observe import observe_job

    doc: dict[str, Any] = {"job": spec.name, "checkpoint": spec.checkpoint, "error": None, "unreachable": False,
                           "observation": None, "alerts": []}
    try:
        record = LifecycleRecord.load(spec.checkpoint)
        doc.update(driver_state(spec, record))
        if not args.no_lag:
            obs = observe_job(spec, kafka_config_for(args, spec), timeout=args.timeout)
            doc["observation"] = obs.summary()
            doc["alerts"] = [a.to_dict() for a in obs.alerts(min_headroom_s=spec.min_headroom_s)]
    except Unreachable as exc:
        doc["error"], doc["unreachable"] = str(exc), True
    except UsageError:
        raise
    except UserError as exc:   # e.g. a job whose checkpoint does not exist yet: its row says so
        doc["error"] = str(exc)
    return doc


def _status_row(d: dict[str, Any]) -> list[Any]:
    from airflow_kafka_spark._util.text import fmt_duration

    o = d.get("observation") or {}
    drv = d.get("driver") or {}
    headroom = "∞" if o.get("headroom_infinite") else fmt_duration(o.get("headroom_s")) if o else "-"
    note = d["error"] or "; ".join(f"{a['code']}: {a['message']}" for a in d["alerts"]) or ""
    return [d["job"], f"{drv.get('kind')} {drv.get('id')}" if drv else "-", d.get("state", UNKNOWN),
            d.get("compatibility_version") or "-", o.get("last_committed_batch"), o.get("lag_records"),
            fmt_duration(o.get("lag_seconds")) if o else "-", o.get("status", "-"), headroom, note]


def _status(args: argparse.Namespace) -> int:
    registry = load_registry(args)
    specs = [registry.get(name) for name in args.job] if args.job else list(registry)
    if not specs:
        raise UsageError(f"the registry {registry.path} has no jobs")
    docs = [_status_of(spec, args) for spec in specs]
    if args.json:
        report.emit(report.dump_json({"jobs": docs}))
    else:
        report.emit(report.render_table(
            ("JOB", "DRIVER", "STATE", "APP", "BATCH", "LAG", "LAG (TIME)", "STATUS", "HEADROOM", "NOTE"),
            [_status_row(d) for d in docs], right=(4, 5, 6, 8)))
    if any(d["unreachable"] for d in docs):
        report.emit(report.error_line(next(d["error"] for d in docs if d["unreachable"])), sys.stderr)
        return ExitCode.UNREACHABLE
    if args.check and any(d.get("state") != RUNNING or d["alerts"] or d["error"] for d in docs):
        return ExitCode.BLOCKED
    return ExitCode.OK


# --------------------------------------------------------------------------------------------------
# stop
# --------------------------------------------------------------------------------------------------


class _StderrLog:
    """The ``log`` stop_job writes its progress to (a logger in Airflow): one line each on stderr."""

    def info(self, msg: str, *args: Any) -> None:
        report.emit(f"stop: {msg % args if args else msg}", sys.stderr)

    warning = info


def _stop_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--job", metavar="NAME", required=True, help="the registry job to stop")
    add_registry_argument(p)
    p.add_argument("--wait", metavar="SECONDS", type=positive_float,
                   help="how long to wait for the batch boundary before killing (default: the registry's "
                        "stop_timeout_s)")
    p.add_argument("--actor", metavar="NAME", help="who stops (lifecycle record; default: the login name)")
    p.add_argument("--at-once", action="store_true",
                   help="a job that watches no stop marker is killed at once, not just after its next commit "
                        "(that wait is at most 1.5 of its recent batch gaps, 30s at most)")
    add_execute_argument(p, "write the stop marker, wait for the batch boundary, kill after --wait", old_dry_run=False)
    add_json_argument(p)


def _stop(args: argparse.Namespace) -> int:
    import getpass

    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.runtime import start_stop

    execute = executes(args)
    spec = load_registry(args).get(args.job)
    wait = args.wait if args.wait is not None else spec.stop_timeout_s
    if not execute:
        state = driver_state(spec, LifecycleRecord.load(spec.checkpoint))
        would = (f"write {spec.stop_marker}, wait up to {wait:.0f}s for the job to end on a batch boundary, "
                 "then kill it" if state["state"] == RUNNING else
                 f"do nothing: the driver is {state['state']} ({state['detail']})")
        doc = {"job": spec.name, "outcome": "PLAN", **state, "would": would}
        if args.json:
            report.emit(report.dump_json(doc))
        else:
            report.emit(f"job {spec.name}: driver {state['state']} ({state['detail']})\nwould {would}\n"
                        "plan only: nothing was done; pass --execute to stop")
        return ExitCode.OK
    out = start_stop.stop_job(spec, target=lambda: _no_target(spec), actor=args.actor or getpass.getuser(),
                              log=_StderrLog(), timeout_s=wait, align=not args.at_once)
    if args.json:
        report.emit(report.dump_json(out))
    else:
        report.emit(f"job {spec.name}: {out['outcome']} — {out['message']}")   # the message says how it ended
    return ExitCode.OK


COMMANDS = (
    Command("status", "a registry job's driver, application, lag, status and retention headroom",
            _status_arguments, _status),
    Command("stop", "stop a registry job on a batch boundary (plans unless --execute)", _stop_arguments, _stop),
)
