"""The audit report as data (the JSON document) and for people (Markdown): pure, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow_kafka_spark._util.text import fmt_duration, utc_display
from airflow_kafka_spark.watch.audit.job import FORMAT_VERSION, JobAudit


def report_document(audits: Sequence[JobAudit], generated_at_ms: int) -> dict[str, Any]:
    failed = [a for a in audits if a.failed]
    counts: dict[str, int] = {}
    for a in audits:
        counts[a.status] = counts.get(a.status, 0) + 1
    return {"format": FORMAT_VERSION, "kind": "airflow-kafka-spark streaming audit",
            "generated_at_ms": generated_at_ms, "generated_at": utc_display(generated_at_ms),
            "summary": {"jobs": len(audits), "failed": len(failed), "statuses": counts,
                        "failed_jobs": {a.job: [x["code"] for x in a.alerts] for a in failed}},
            "jobs": [a.to_dict() for a in audits]}


def _n(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _signed(n: int | None, fmt: Callable[[int], str] = _n) -> str:
    if n is None:
        return ""
    return f" ({'+' if n >= 0 else '−'}{fmt(abs(n))})"


def _headroom_cell(a: JobAudit) -> str:
    obs = a.observation or {}
    if obs.get("lost_records"):
        return f"LOST {obs['lost_records']:,}"
    if obs.get("headroom_infinite"):
        return "∞"
    return fmt_duration(obs.get("headroom_s")) if obs.get("headroom_s") is not None else "?"


def render_markdown(audits: Sequence[JobAudit], generated_at_ms: int, *, chart_name: str | None = None) -> str:
    """The report for people: one table, then the alerts, the warnings and per-partition details."""
    failed = [a for a in audits if a.failed]
    lines = [f"# Streaming audit — {utc_display(generated_at_ms)}", ""]
    if failed:
        lines.append(f"**{len(failed)} of {len(audits)} jobs need attention:** "
                     + ", ".join(f"`{a.job}` ({', '.join(x['code'] for x in a.alerts)})" for a in failed) + ".")
    else:
        lines.append(f"All {len(audits)} jobs are fine.")
    lines += ["", "| Job | Result | Status | Lag (records) | Lag (time) | Headroom | Min headroom | Catch-up | "
                  "Pre-deploy | Checkpoint size | Files | Stale .tmp | Latest backup |",
              "|---|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|"]
    for a in audits:
        obs = a.observation or {}
        ck = a.checkpoint
        catch = obs.get("catch_up") or {}
        catch_cell = "never" if catch.get("never") else fmt_duration(catch.get("seconds"))
        lines.append("| " + " | ".join([
            f"`{a.job}`", "**FAIL**" if a.failed else "ok", a.status, _n(a.lag_records),
            fmt_duration(a.lag_seconds), _headroom_cell(a), fmt_duration(a.thresholds.get("min_headroom_s")),
            catch_cell, ck.get("verdict", "-"),
            _bytes(ck.get("bytes")) + _signed(ck.get("bytes_growth"), _bytes),
            _n(ck.get("files")) + _signed(ck.get("files_growth")), _n(len(ck.get("stale_tmp_files") or [])),
            fmt_duration(a.backup.get("latest_age_s")) if a.backup.get("latest_age_s") is not None else "none",
        ]) + " |")
    if chart_name:
        lines += ["", f"![lag and retention headroom per job over the last runs]({chart_name})"]
    if failed:
        lines += ["", "## Alerts", ""]
        for a in failed:
            for alert in a.alerts:
                lines.append(f"- `{a.job}` **{alert['code']}**: {alert['message']}")
    warned = [a for a in audits if a.warnings]
    if warned:
        lines += ["", "## Warnings", ""]
        for a in warned:
            for w in a.warnings:
                lines.append(f"- `{a.job}`: {w}")
    lines += ["", "## Jobs", ""]
    for a in audits:
        obs = a.observation or {}
        lines.append(f"### `{a.job}` — {a.status}")
        lines.append("")
        if a.error:
            lines += [f"Could not be observed: {a.error}", ""]
            continue
        last_age = obs.get("last_batch_age_s")
        lines.append(f"{obs.get('reason', '')}  ")
        lines.append(f"Checkpoint `{obs.get('subject')}`: last committed batch {_n(obs.get('last_committed_batch'))}"
                     f", planned {fmt_duration(last_age)} ago. Pre-deploy check: {a.checkpoint.get('headline', '-')}.")
        lines.append("")
        lines += ["| Partition | Position | Log start | Log end | Lag | Lag (time) | Method | Headroom | By |",
                  "|---|--:|--:|--:|--:|--:|---|--:|---|"]
        head = {(p["topic"], p["partition"]): p for p in (obs.get("headroom") or {}).get("partitions", [])}
        for p in (obs.get("lag") or {}).get("partitions", []):
            h = head.get((p["topic"], p["partition"]), {})
            h_cell = "∞" if h.get("infinite") else fmt_duration(h.get("seconds")) if h.get("seconds") is not None \
                else ("?" if h else "-")
            lines.append("| " + " | ".join([
                f"{p['topic']}-{p['partition']}", _n(p["position"]), _n(p["log_start"]), _n(p["log_end"]),
                _n(p["records"]), fmt_duration(p["seconds"]), p["method"] or "-", h_cell,
                h.get("limited_by") or "-"]) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"
