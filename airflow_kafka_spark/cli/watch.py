"""``aks lag``, ``aks mirror`` and ``aks audit``: the watching half of the lifecycle on the command line.

Listed in :data:`COMMANDS`, which :mod:`airflow_kafka_spark.cli` gathers, like the checkpoint
commands. Same conventions: heavy imports inside the run functions, ``--json`` for machines, one
``error:`` line and exit 2 for bad input, 4 when Kafka or the storage does not answer.

Exit codes: ``lag`` exits 0 (with ``--check``: 3 when the job has an alert or its lag is over
the limits given); ``mirror`` 0 (it commits only with ``--execute``); ``audit`` 3 when at least
one job failed the audit (the report is written either way), else 0.

Kafka settings: ``--bootstrap-servers`` / ``--kafka-config`` / ``-X`` when given; otherwise a job
named with ``--job`` uses its registry ``kafka_conn_id`` through Airflow's connections
(``AIRFLOW_CONN_<ID>`` or the metadata DB), so the same command works on an Airflow worker
without repeating credentials on the command line.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import (
    Command,
    add_json_argument,
    add_kafka_arguments,
    key_value,
    positive_float,
    positive_int,
)
from airflow_kafka_spark.cli._job import (
    add_execute_argument,
    add_registry_argument,
    executes,
    kafka_config_for,
    load_registry,
    refuse_conflicts,
)
from airflow_kafka_spark.errors import ExitCode

if TYPE_CHECKING:
    from airflow_kafka_spark.watch.observation import Observation

CLEAR = "\x1b[2J\x1b[H"


# --------------------------------------------------------------------------------------------------
# lag
# --------------------------------------------------------------------------------------------------


def _lag_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("the job (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="PATH", help="Structured Streaming checkpoint (path or fsspec URL)")
    src.add_argument("--group", metavar="ID", help="consumer group of a job that commits to Kafka")
    src.add_argument("--job", metavar="NAME", help="a job of the registry (checkpoint, topics, thresholds from it)")
    add_registry_argument(p)
    p.add_argument("--topics", metavar="A,B", help="subscribed topics (needed for --group)")
    p.add_argument("--basis", choices=("committed", "planned"), default="committed",
                   help="measure from the last committed batch (default) or the last planned one")
    p.add_argument("--storage-option", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="fsspec option for the checkpoint's file system (repeatable)")
    add_kafka_arguments(p)
    t = p.add_argument_group("thresholds (override the registry's)")
    t.add_argument("--max-lag-records", metavar="N", type=positive_int)
    t.add_argument("--max-lag-seconds", metavar="S", type=positive_float)
    t.add_argument("--stall-after", metavar="S", type=positive_float, help="STALLED after S s without a batch")
    t.add_argument("--stopped-after", metavar="S", type=positive_float, help="STOPPED after S s without a batch")
    t.add_argument("--min-headroom", metavar="S", type=positive_float,
                   help="alert when retention deletes unread records within S s")
    w = p.add_argument_group("output")
    add_json_argument(w)
    w.add_argument("--watch", metavar="SECONDS", type=positive_float,
                   help="refresh every SECONDS (the trend improves with every refresh); Ctrl-C ends")
    w.add_argument("--count", metavar="N", type=positive_int, help="with --watch: stop after N refreshes")
    w.add_argument("--check", action="store_true",
                   help="exit 3 when the job has an alert or its lag is over --max-lag-records/--max-lag-seconds")


def render_observation(obs: Observation) -> str:
    """The human layout of one observation: a header, one row per partition, the totals."""
    from airflow_kafka_spark._util.text import fmt_duration

    lines = []
    who = f"job {obs.job} · " if obs.job else ""
    batch = ""
    if obs.source == "checkpoint":
        batch = (f" · batch {report.fmt(obs.last_committed_batch)} committed, last planned "
                 f"{fmt_duration(obs.last_batch_age_s)} ago")
    lines.append(f"{who}{obs.source} {obs.subject}{batch}")
    lines.append(f"status {obs.status.reason}")
    if obs.interrupted is not None:
        lines.append(f"BLOCK {obs.interrupted.code}: {obs.interrupted.message}")
        lines.append(f"  fix: {obs.interrupted.fix}")
    head = obs.headroom.by_tp()
    rows = []
    for p in obs.lag.partitions:
        h = head.get(p.tp)
        if h is None:
            h_cell, by = "-", "-"
        elif h.infinite:
            h_cell, by = "∞", "-"
        else:
            h_cell, by = ("?" if h.seconds is None else fmt_duration(h.seconds)), (h.limited_by or "-")
        rows.append([str(p.tp) + (" (new)" if p.new_partition else ""), p.position, p.log_start, p.log_end,
                     p.records, fmt_duration(p.seconds), p.method or "-", h_cell, by, p.note or ""])
    lines.append(report.render_table(("PARTITION", "POSITION", "LOG START", "LOG END", "LAG", "LAG (TIME)",
                                      "METHOD", "HEADROOM", "BY", "NOTE"), rows, right=(1, 2, 3, 4, 5, 7)))
    h = obs.headroom
    if h.lost_records:
        head_txt = f"{h.lost_records:,} unread records ALREADY LOST to retention"
    elif h.infinite:
        head_txt = "∞ (retention cannot delete unread records)"
    elif h.seconds is None:
        head_txt = "unknown"
    else:
        head_txt = f"{fmt_duration(h.seconds)} (by {h.limited_by}, {h.limiting})"
    c = obs.catch_up
    catch = "never (not faster than the topic grows)" if c.never else fmt_duration(c.seconds)
    lag_s = fmt_duration(obs.lag.seconds) + (f" ({obs.lag.seconds_partition})" if obs.lag.seconds_partition else "")
    lines.append(f"total lag {obs.lag.records:,} records ({obs.lag.records_effective:,} readable), {lag_s} · "
                 f"headroom {head_txt} · catch-up {catch}")
    for f in obs.status.notes:
        lines.append(f"  note: {f}")
    for n in obs.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)


def _lag(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.errors import Unreachable, UserError, is_unreachable
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.watch.observation import keep_recent
    from airflow_kafka_spark.watch.observe import ObserveLimits, ObserveTarget, observe
    from airflow_kafka_spark.watch.status import StatusThresholds

    if args.count and not args.watch:
        raise UserError("--count only makes sense with --watch")
    spec = load_registry(args).get(args.job) if args.job else None
    refuse_conflicts(args, spec)
    if args.group and not args.topics:
        raise UserError("--group needs --topics: a group may hold offsets of topics this job does not read")
    base = {"max_lag_records": spec.max_lag_records, "max_lag_seconds": spec.max_lag_seconds,
            "stall_after_s": spec.stall_after_s} if spec else {}
    overrides = {"max_lag_records": args.max_lag_records, "max_lag_seconds": args.max_lag_seconds,
                 "stall_after_s": args.stall_after, "stopped_after_s": args.stopped_after}
    base.update({k: v for k, v in overrides.items() if v is not None})
    thresholds = StatusThresholds.from_mapping(base)
    min_headroom = args.min_headroom if args.min_headroom is not None else (spec.min_headroom_s if spec else None)
    topics = tuple(args.topics.split(",")) if args.topics else (spec.topics if spec else None)
    config = kafka_config_for(args, spec)
    checkpoint, group = spec.position_source if spec else (args.checkpoint, args.group)

    samples: list = []
    done = 0
    code = ExitCode.OK
    with KafkaView(config, timeout=args.timeout) as view:
        try:
            while True:
                try:
                    obs = observe(ObserveTarget(checkpoint=checkpoint, group_id=group, topics=topics,
                                                job=spec.name if spec else None,
                                                storage_options=dict(args.storage_option) or None, basis=args.basis),
                                  view, thresholds=thresholds, samples=samples,
                                  limits=ObserveLimits(timeout=args.timeout, max_offsets_per_trigger=(
                                      spec.max_offsets_per_trigger if spec else None)))
                except UserError as exc:
                    # A watch outlives a broker restart or a store briefly away: after a first good refresh, a
                    # refresh that got no answer is one line (and one JSON object), and the next one tries again.
                    if not (args.watch and done and (isinstance(exc, Unreachable) or is_unreachable(exc))):
                        raise
                    code = ExitCode.UNREACHABLE
                    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
                    report.emit(report.dump_json({"error": str(exc), "exit_code": int(code)}, compact=True)
                                if args.json else f"\n{stamp} {report.error_line(exc)}")
                    done += 1
                    if args.count and done >= args.count:
                        return code
                    time.sleep(args.watch)
                    continue
                samples = keep_recent(samples, obs.sample)
                alerts = obs.alerts(min_headroom_s=min_headroom)
                code = ExitCode.OK
                if args.check:
                    limits = (thresholds.max_lag_records, thresholds.max_lag_seconds)
                    within = obs.lag_within(*limits)[0] if any(v is not None for v in limits) else True
                    code = ExitCode.BLOCKED if alerts or not within else ExitCode.OK
                if args.json:
                    doc = {**obs.to_dict(), "alerts": [a.to_dict() for a in alerts]}
                    report.emit(report.dump_json(doc, compact=bool(args.watch)))
                else:
                    text = render_observation(obs)
                    if alerts:
                        text += "\n" + "\n".join(f"ALERT {a.code}: {a.message}" for a in alerts)
                    if args.watch:
                        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(obs.observed_at_ms / 1000))
                        prefix = CLEAR if sys.stdout.isatty() else ("\n" if done else "")
                        text = f"{prefix}{stamp} (every {args.watch:g} s, Ctrl-C ends)\n{text}"
                    report.emit(text)
                done += 1
                if not args.watch or (args.count and done >= args.count):
                    return code
                time.sleep(args.watch)
        except KeyboardInterrupt:   # the normal way to leave --watch
            return code


# --------------------------------------------------------------------------------------------------
# mirror
# --------------------------------------------------------------------------------------------------


def _mirror_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("the job (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="PATH", help="Structured Streaming checkpoint (path or fsspec URL)")
    src.add_argument("--job", metavar="NAME", help="a job of the registry (its checkpoint and mirror_group)")
    add_registry_argument(p)
    p.add_argument("--group", metavar="ID",
                   help="the shadow group (default: the registry's mirror_group, else aks-mirror-<job>)")
    p.add_argument("--storage-option", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="fsspec option for the checkpoint's file system (repeatable)")
    add_kafka_arguments(p)
    add_execute_argument(p, "commit the offsets to the shadow group")
    add_json_argument(p)


def _mirror(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.watch.kinds import position_kind
    from airflow_kafka_spark.watch.mirror import default_group, mirror_checkpoint

    execute = executes(args)
    spec = load_registry(args).get(args.job) if args.job else None
    refusal = None if spec is None else position_kind(spec).mirror_refusal(spec)
    if refusal is not None:
        raise UserError(refusal)
    group = args.group or (spec.mirror_group if spec else None) or (default_group(spec.name) if spec else None)
    if not group:
        raise UserError("name the shadow group with --group (e.g. aks-mirror-<job>)")
    config = kafka_config_for(args, spec)
    result = mirror_checkpoint(spec.checkpoint if spec else args.checkpoint, group, config,
                               storage_options=dict(args.storage_option) or None, dry_run=not execute,
                               timeout=args.timeout)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
        return ExitCode.OK
    verb = "committed" if execute else "would commit"
    lines = [f"{verb} batch {report.fmt(result.batch_id)} to shadow group {result.group}:"]
    rows = [[str(tp), result.previous.get(tp), off] for tp, off in sorted(result.offsets.items())]
    if rows:
        lines.append(report.render_table(("PARTITION", "BEFORE", "NOW"), rows, right=(1, 2)))
    lines += [f"warning: {w}" for w in result.warnings]
    if result.moved_back:
        lines.append(f"note: moved back on {', '.join(map(str, result.moved_back))} (checkpoint reset or restore)")
    if not execute:
        lines.append("plan only: nothing was committed; pass --execute to commit")
    report.emit("\n".join(lines))
    return ExitCode.OK


# --------------------------------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------------------------------


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    add_registry_argument(p)
    p.add_argument("--out", metavar="DIR",
                   help="report folder (default: [kafka_spark] audit_dir, else <first allowed root>/audit)")
    p.add_argument("--job", metavar="NAME", action="append", default=[], help="audit only this job (repeatable)")
    p.add_argument("--keep-runs", metavar="N", type=positive_int, default=48,
                   help="runs kept in the history and per-run reports (default 48)")
    p.add_argument("--no-verdict", action="store_true", help="skip the pre-deploy check of each checkpoint")
    add_kafka_arguments(p)
    add_json_argument(p)


def _audit(args: argparse.Namespace) -> int:
    from airflow_kafka_spark._util.text import fmt_duration
    from airflow_kafka_spark.watch.audit.report import default_audit_dir, run_audit

    registry = load_registry(args)
    out = args.out or default_audit_dir(registry)
    result = run_audit(registry, out, lambda spec: kafka_config_for(args, spec), jobs=args.job or None,
                       keep_runs=args.keep_runs, check_verdict=not args.no_verdict, timeout=args.timeout)
    if args.json:
        report.emit(report.dump_json(result.to_dict()))
    else:
        rows = [[a.job, "FAIL" if a.failed else "ok", a.status, a.lag_records, fmt_duration(a.lag_seconds),
                 "∞" if (a.observation or {}).get("headroom_infinite") else fmt_duration(a.headroom_s),
                 "; ".join(f"{x['code']}: {x['message']}" for x in a.alerts) or "-"] for a in result.audits]
        lines = [report.render_table(("JOB", "RESULT", "STATUS", "LAG", "LAG (TIME)", "HEADROOM", "ALERTS"), rows,
                                     right=(3, 4, 5)),
                 f"report: {result.paths.get('markdown')}",
                 f"chart: {result.paths.get('png') or 'none (matplotlib missing: the [chart] extra)'}"]
        report.emit("\n".join(lines))
    return ExitCode.BLOCKED if result.failed else ExitCode.OK


COMMANDS = (
    Command("lag", "lag (records, seconds), status, retention headroom and catch-up of a job", _lag_arguments, _lag),
    Command("mirror", "commit a checkpoint's committed offsets to a shadow consumer group (for Kafka's lag tools)",
            _mirror_arguments, _mirror),
    Command("audit", "audit every job of the registry; write JSON, Markdown and a PNG chart", _audit_arguments,
            _audit),
)
