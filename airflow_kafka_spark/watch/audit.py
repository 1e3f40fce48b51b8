"""The fleet audit: every registered job's lag, status, retention headroom, checkpoint health and
backup age, written as JSON + Markdown + a PNG chart, with a small history for trends.

Why a scheduled audit when :mod:`watch` exists: nobody watches a dashboard for the job that has
been down since Friday. Burrow, kafka-lag-exporter and KMinion are always-on exporters that need a
consumer group (which Structured Streaming does not have, S23) and know nothing of checkpoints or
retention. The audit runs over the registry on a schedule (``dags/streaming_audit.py``, hourly),
answers "which job needs a person now, and why" in one report, and fails exactly for those jobs.

What fails a job (``JobAudit.alerts``): STALLED / STOPPED / REWIND status, records already lost
to retention, headroom below the registry's ``min_headroom_s``, a checkpoint whose pre-deploy
verdict is BLOCK (it would not restart cleanly), or a job that could not be audited at all (an
audit that cannot see a job must not report it healthy). Everything else worth knowing — WARN
status, stale ``.tmp`` files, checkpoint growth, no recent backup — is a warning in the report.

Layout of the output folder (any fsspec URL)::

    audit-<UTC stamp>.json / .md / .png   one set per run (the newest ``keep_runs`` are kept)
    latest.json / latest.md / latest.png  the newest run, at a stable address for links
    audit-history.json                    the last ``keep_runs`` runs, a few numbers per job

The history file is small on purpose (no partitions, no findings): it carries what the next run
needs — the broker sample for the status trend (so a rate-limited job falling behind is seen,
:mod:`status`), checkpoint size and file count for growth, and the series the chart draws.

Split for Airflow: :func:`audit_job` does one job's I/O and returns a JSON-able :class:`JobAudit`
(an XCom), :func:`write_report` is the pure-ish "combine, compare with history, render, write"
step. :func:`run_audit` chains them for the command line.
"""

from __future__ import annotations

import io
import json
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark._util.fs import (
    Location,
    exists,
    list_files,
    mtime_of,
    open_location,
    os_reason,
    read_bytes,
    remove_file,
    write_atomic,
)
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.watch.observe import Alert, Sample, fmt_duration, observe_job

if TYPE_CHECKING:
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.registry.model import JobSpec, Registry

FORMAT_VERSION = 1
HISTORY_FILE = "audit-history.json"
LATEST = "latest"
KEEP_RUNS = 48                      # two days of hourly runs
STALE_TMP_AFTER_S = 15 * 60.0       # Spark renames its temp files within milliseconds
MAX_CHART_JOBS = 12

STATUS_COLORS = {
    "OK": "#2e7d32", "IDLE": "#78909c", "UNKNOWN": "#9e9e9e", "WARN": "#ef6c00",
    "STALLED": "#e53935", "STOPPED": "#6d0000", "REWIND": "#8e24aa", "ERROR": "#212121",
}


# --------------------------------------------------------------------------------------------------
# one job
# --------------------------------------------------------------------------------------------------


@dataclass
class JobAudit:
    """What the audit found for one job. JSON-able (``to_dict``/``from_dict``): it travels as an XCom."""

    job: str
    audited_at_ms: int
    thresholds: dict[str, Any]
    observation: dict[str, Any] | None = None     # watch.Observation.to_dict(); None when it failed
    checkpoint: dict[str, Any] = field(default_factory=dict)
    backup: dict[str, Any] = field(default_factory=dict)
    alerts: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    # -- the numbers everyone asks for ----------------------------------------------------------

    def _obs(self, key: str) -> Any:
        return (self.observation or {}).get(key)

    @property
    def status(self) -> str:
        return "ERROR" if self.observation is None else str(self._obs("status"))

    @property
    def failed(self) -> bool:
        return bool(self.alerts)

    @property
    def lag_records(self) -> int | None:
        return self._obs("lag_records_effective")

    @property
    def lag_seconds(self) -> float | None:
        return self._obs("lag_seconds")

    @property
    def headroom_s(self) -> float | None:
        return self._obs("headroom_s")

    @property
    def sample(self) -> Sample | None:
        doc = self._obs("sample")
        return Sample.from_dict(doc) if doc else None

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "audited_at_ms": self.audited_at_ms, "failed": self.failed,
                "status": self.status, "alerts": list(self.alerts), "warnings": list(self.warnings),
                "error": self.error, "thresholds": dict(self.thresholds), "checkpoint": dict(self.checkpoint),
                "backup": dict(self.backup), "observation": self.observation}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> JobAudit:
        return cls(job=str(doc["job"]), audited_at_ms=int(doc["audited_at_ms"]),
                   thresholds=dict(doc.get("thresholds") or {}), observation=doc.get("observation"),
                   checkpoint=dict(doc.get("checkpoint") or {}), backup=dict(doc.get("backup") or {}),
                   alerts=[dict(a) for a in doc.get("alerts") or []], warnings=list(doc.get("warnings") or []),
                   error=doc.get("error"))

    def history_entry(self) -> dict[str, Any]:
        """The few numbers the next run and the chart need (see the module docstring)."""
        obs = self.observation or {}
        return {
            "status": self.status, "failed": self.failed, "alerts": [a["code"] for a in self.alerts],
            "lag_records": obs.get("lag_records_effective"), "lag_seconds": obs.get("lag_seconds"),
            "headroom_s": obs.get("headroom_s"), "headroom_infinite": obs.get("headroom_infinite"),
            "min_headroom_s": self.thresholds.get("min_headroom_s"),
            "checkpoint_bytes": self.checkpoint.get("bytes"), "checkpoint_files": self.checkpoint.get("files"),
            "sample": obs.get("sample"),
        }


def thresholds_of(spec: JobSpec) -> dict[str, Any]:
    return {"max_lag_records": spec.max_lag_records, "max_lag_seconds": spec.max_lag_seconds,
            "min_headroom_s": spec.min_headroom_s, "stall_after_s": spec.stall_after_s}


def scan_checkpoint(location: str, *, now_ms: int, storage_options: dict | None = None,
                    stale_tmp_after_s: float = STALE_TMP_AFTER_S) -> dict[str, Any]:
    """Size, file count and stale temp files of a checkpoint, from one recursive listing.

    A ``.tmp`` file younger than ``stale_tmp_after_s`` is a write in progress, not a leftover: Spark
    writes ``.<name>.<uuid>.tmp`` and renames it within milliseconds, so only old ones are reported.
    """
    loc = open_location(location, storage_options, what="checkpoint")
    files = list_files(loc)
    stale: list[dict[str, Any]] = []
    for rel, info in sorted(files.items()):
        if not posixpath.basename(rel).endswith(".tmp"):
            continue
        mtime = mtime_of(info)
        age = None if mtime is None else max(0.0, now_ms / 1000.0 - mtime)
        if age is None or age >= stale_tmp_after_s:
            stale.append({"path": rel, "age_s": None if age is None else round(age, 1),
                          "bytes": int(info.get("size") or 0)})
    return {"exists": bool(files) or exists(loc), "bytes": sum(int(i.get("size") or 0) for i in files.values()),
            "files": len(files), "stale_tmp_files": stale}


def _checkpoint_verdict(spec: JobSpec, view: KafkaView, storage_options: dict | None) -> dict[str, Any]:
    """The pre-deploy verdict for restarting this job now, read-only (the lifecycle record is not written)."""
    from airflow_kafka_spark.verdict.options import DeployOptions
    from airflow_kafka_spark.verdict.validate import validate

    options = DeployOptions.for_job(spec)
    verdict = validate(checkpoint_location=spec.checkpoint, view=view, options=options,
                       storage_options=storage_options, record_identity=False, job_name=spec.name,
                       probe_budget_s=5.0)
    notable = [f for f in verdict.findings if f.code != "OK"]
    return {"verdict": str(verdict.severity), "headline": verdict.headline, "fix": verdict.fix,
            "findings": [{"code": f.code, "severity": str(f.severity), "where": f.where, "message": f.message}
                         for f in notable]}


def _backup_info(spec: JobSpec, now_ms: int, storage_options: dict | None) -> dict[str, Any]:
    from airflow_kafka_spark.ops.backup.manifest import list_backups

    catalog = list_backups(spec.backup_root, spec.name, storage_options=storage_options)
    newest = catalog.newest
    return {"count": len(catalog.backups), "invalid": len(catalog.invalid),
            "latest_id": newest.backup_id if newest else None,
            "latest_created_at_ms": newest.created_at_ms if newest else None,
            "latest_age_s": round((now_ms - newest.created_at_ms) / 1000.0, 1) if newest else None}


def audit_job(spec: JobSpec, kafka_config: Mapping[str, Any] | None = None, *, view: KafkaView | None = None,
              samples: Sequence[Sample] = (), now_ms: int | None = None, storage_options: dict | None = None,
              backup_storage_options: dict | None = None, check_verdict: bool = True,
              stale_tmp_after_s: float = STALE_TMP_AFTER_S, timeout: float = 10.0) -> JobAudit:
    """Audit one job. Never raises for the job's own problems: they become alerts in the result.

    An audit must report every job, so a failure to read one (unreachable cluster, missing
    checkpoint, even a bug) is caught and turned into an ``AUDIT_ERROR`` alert for that job.
    """
    from airflow_kafka_spark.kafka.view import KafkaView

    started = int(time.time() * 1000) if now_ms is None else int(now_ms)
    audit = JobAudit(job=spec.name, audited_at_ms=started, thresholds=thresholds_of(spec))
    own_view = view is None
    kafka: KafkaView | None = view
    try:
        if kafka is None:
            kafka = KafkaView(dict(kafka_config or {}), timeout=timeout)
        obs = observe_job(spec, view=kafka, samples=samples, storage_options=storage_options, timeout=timeout,
                          now_ms=now_ms)
        audit.observation = obs.to_dict()
        audit.alerts.extend(a.to_dict() for a in obs.alerts(min_headroom_s=spec.min_headroom_s))
        if obs.status.status.value == "WARN":
            audit.warnings.append(obs.status.reason)
        for part in obs.headroom.partitions:
            if part.unknown:
                audit.warnings.append(f"retention headroom of {part.tp} not computable: {part.unknown}")
        audit.warnings.extend(obs.notes)
    except Exception as exc:  # see the docstring: every job gets a line in the report
        audit.error = _one_line(exc)
        audit.alerts.append(Alert("AUDIT_ERROR", f"could not observe the job: {audit.error}").to_dict())

    now = audit.observation["observed_at_ms"] if audit.observation else started
    try:
        audit.checkpoint.update(scan_checkpoint(spec.checkpoint, now_ms=now, storage_options=storage_options,
                                                stale_tmp_after_s=stale_tmp_after_s))
        for tmp in audit.checkpoint["stale_tmp_files"]:
            audit.warnings.append(f"stale temp file {tmp['path']} ({fmt_duration(tmp['age_s'])} old): left by an "
                                  "interrupted write; delete it while the query is stopped")
    except Exception as exc:
        audit.checkpoint["scan_error"] = _one_line(exc)
        audit.warnings.append(f"checkpoint listing failed: {audit.checkpoint['scan_error']}")
    if check_verdict and kafka is not None and audit.observation is not None:
        try:
            audit.checkpoint.update(_checkpoint_verdict(spec, kafka, storage_options))
            if audit.checkpoint["verdict"] == "BLOCK":
                audit.alerts.append(Alert("CHECKPOINT_BLOCKED", f"a restart now would be refused: "
                                                                f"{audit.checkpoint['headline']}").to_dict())
            elif audit.checkpoint["verdict"] == "WARN":
                audit.warnings.append(f"pre-deploy check: {audit.checkpoint['headline']}")
        except Exception as exc:
            audit.checkpoint["verdict_error"] = _one_line(exc)
            audit.warnings.append(f"pre-deploy check failed: {audit.checkpoint['verdict_error']}")
    try:
        audit.backup.update(_backup_info(spec, now, backup_storage_options))
        if not audit.backup["count"]:
            audit.warnings.append(f"no backup of this job under {spec.backup_root}")
    except Exception as exc:
        audit.backup["error"] = _one_line(exc)
        audit.warnings.append(f"backup catalog unreadable: {audit.backup['error']}")
    if own_view and kafka is not None:
        kafka.close()
    return audit


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, UserError) else f"{type(exc).__name__}: {text}"


# --------------------------------------------------------------------------------------------------
# history
# --------------------------------------------------------------------------------------------------


@dataclass
class AuditHistory:
    """The last runs, oldest first: ``{"at_ms": ..., "jobs": {name: history_entry}}`` each."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, out_dir: str, storage_options: dict | None = None) -> AuditHistory:
        """The history beside the reports; a missing file is an empty history, a damaged one too
        (with the damage reported by the caller's next write replacing it) — trends restart, the
        audit itself must not stop because last hour's file was cut short."""
        loc = open_location(out_dir, storage_options, what="audit folder").child(HISTORY_FILE)
        raw = read_bytes(loc)
        if not raw:
            return cls()
        try:
            doc = load_json(raw, what="audit history")
            runs = [r for r in doc.get("runs", []) if isinstance(r, dict) and "at_ms" in r]
        except (ValueError, AttributeError):
            return cls()
        return cls(sorted(runs, key=lambda r: r["at_ms"]))

    def samples_for(self, job: str) -> list[Sample]:
        out = []
        for run in self.runs:
            doc = (run.get("jobs", {}).get(job) or {}).get("sample")
            if doc:
                try:
                    out.append(Sample.from_dict(doc))
                except (KeyError, TypeError, ValueError):
                    continue
        return out

    def previous(self, job: str) -> dict[str, Any] | None:
        for run in reversed(self.runs):
            if job in run.get("jobs", {}):
                return run["jobs"][job]
        return None

    def append(self, at_ms: int, audits: Sequence[JobAudit], *, keep: int = KEEP_RUNS) -> None:
        self.runs.append({"at_ms": at_ms, "jobs": {a.job: a.history_entry() for a in audits}})
        self.runs = sorted(self.runs, key=lambda r: r["at_ms"])[-keep:]

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT_VERSION, "runs": self.runs}, indent=1, default=str).encode()


def with_growth(audit: JobAudit, previous: Mapping[str, Any] | None) -> JobAudit:
    """Add checkpoint size and file-count growth since the previous report to ``audit.checkpoint``."""
    if previous is None:
        return audit
    for key, prev_key in (("bytes", "checkpoint_bytes"), ("files", "checkpoint_files")):
        now, before = audit.checkpoint.get(key), previous.get(prev_key)
        if isinstance(now, int) and isinstance(before, int):
            audit.checkpoint[f"{key}_growth"] = now - before
    return audit


# --------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditReport:
    generated_at_ms: int
    audits: list[JobAudit]
    paths: dict[str, str]               # kind -> URL of this run's file ("json", "markdown", "png", ...)

    @property
    def failed(self) -> dict[str, list[dict[str, str]]]:
        return {a.job: a.alerts for a in self.audits if a.failed}

    def to_dict(self) -> dict[str, Any]:
        return {"generated_at_ms": self.generated_at_ms, "paths": dict(self.paths),
                "failed": self.failed, "jobs": [a.job for a in self.audits]}


def _stamp(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y%m%dT%H%M%S") + f"{dt.microsecond // 1000:03d}Z"


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def report_document(audits: Sequence[JobAudit], generated_at_ms: int) -> dict[str, Any]:
    failed = [a for a in audits if a.failed]
    counts: dict[str, int] = {}
    for a in audits:
        counts[a.status] = counts.get(a.status, 0) + 1
    return {"format": FORMAT_VERSION, "kind": "airflow-kafka-spark streaming audit",
            "generated_at_ms": generated_at_ms, "generated_at": _iso(generated_at_ms),
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
    lines = [f"# Streaming audit — {_iso(generated_at_ms)}", ""]
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


_UNITS = (("s", 1.0), ("min", 60.0), ("h", 3600.0), ("d", 86400.0))


def _duration_unit(values: Sequence[float]) -> tuple[str, float]:
    """The unit that keeps the largest value between 1 and ~100: readable ticks (5 min, not 300 s)."""
    top = max((v for v in values if v is not None), default=0.0)
    for name, size in reversed(_UNITS):
        if top >= 2 * size:
            return name, size
    return "s", 1.0


def render_chart(runs: Sequence[Mapping[str, Any]], *, title: str | None = None) -> bytes:
    """PNG of lag (records, seconds) and retention headroom per job over ``runs`` (oldest first).

    One row per job (failing jobs first, at most :data:`MAX_CHART_JOBS`), three panels per row.
    Points are coloured by the status of that run; the headroom panel shades the zone below the
    job's ``min_headroom_s``. Infinite headroom (nothing retention could delete) is written, not
    drawn. Each duration panel picks its own unit so the ticks are round numbers.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    runs = sorted(runs, key=lambda r: r["at_ms"])
    last = runs[-1]["jobs"] if runs else {}
    jobs = sorted({j for r in runs for j in r.get("jobs", {})},
                  key=lambda j: (not (last.get(j) or {}).get("failed", False), j))
    shown = jobs[:MAX_CHART_JOBS]
    rows = max(1, len(shown))
    fig, axes = plt.subplots(rows, 3, figsize=(14, 1.3 + 2.2 * rows), squeeze=False, sharex=True)
    panels = (("lag_records", "lag (records)"), ("lag_seconds", "lag (age of the oldest unread record)"),
              ("headroom_s", "retention headroom (time to data loss)"))

    row_labels: list[tuple[Any, str, str]] = []
    for row, job in enumerate(shown):
        entry = last.get(job) or {}
        status = str(entry.get("status", "?"))
        failed = bool(entry.get("failed"))
        label = f"{job}\n{status}"
        if failed:
            label += "\nFAIL:\n" + "\n".join(entry.get("alerts") or [])
        for col, (key, name) in enumerate(panels):
            ax = axes[row][col]
            pts: list[tuple[datetime, float, str, bool]] = []
            for r in runs:
                e = r.get("jobs", {}).get(job)
                if e is not None and e.get(key) is not None:
                    pts.append((datetime.fromtimestamp(r["at_ms"] / 1000, tz=UTC), float(e[key]),
                                STATUS_COLORS.get(str(e.get("status")), "#616161"), bool(e.get("failed"))))
            limit = entry.get("min_headroom_s") if key == "headroom_s" else None
            unit, size = ("", 1.0) if key == "lag_records" else _duration_unit(
                [p[1] for p in pts] + ([float(limit)] if limit else []))
            ys = [p[1] / size for p in pts]
            if pts:
                ax.plot([p[0] for p in pts], ys, color="#90a4ae", linewidth=1.2, zorder=1)
                ax.scatter([p[0] for p in pts], ys, c=[p[2] for p in pts], s=30, zorder=2, clip_on=False)
                bad = [(p[0], y) for p, y in zip(pts, ys, strict=True) if p[3]]
                if bad:   # runs in which this job failed the audit: a red ring
                    ax.scatter([b[0] for b in bad], [b[1] for b in bad], s=90, facecolors="none",
                               edgecolors="#c62828", linewidths=1.4, zorder=3, clip_on=False)
            top = max([*ys, (float(limit) / size) if limit else 0.0, 1e-9])
            ax.set_ylim(0, top * 1.18 if top > 1e-9 else 1)
            if limit:
                ax.axhline(limit / size, color="#c62828", linestyle="--", linewidth=1)
                ax.axhspan(0, limit / size, color="#ffcdd2", alpha=0.5, zorder=0)
                ax.text(0.01, limit / size, f" min {fmt_duration(limit)}", transform=ax.get_yaxis_transform(),
                        color="#c62828", fontsize=7, va="bottom")
            if key == "headroom_s" and entry.get("headroom_infinite") and not pts:
                ax.text(0.5, 0.5, "∞  retention cannot delete unread records", transform=ax.transAxes,
                        ha="center", va="center", fontsize=9, color="#455a64")
            elif not pts:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", fontsize=9,
                        color="#9e9e9e")
            ax.yaxis.set_major_locator(MaxNLocator(nbins=4, integer=key == "lag_records"))
            if unit:
                ax.set_ylabel(unit, fontsize=8)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
            if row == 0:
                ax.set_title(name, fontsize=10)
        row_labels.append((axes[row][0], label, "#c62828" if failed else STATUS_COLORS.get(status, "#212121")))
    if not shown:
        for ax in axes[0]:
            ax.text(0.5, 0.5, "no jobs", transform=ax.transAxes, ha="center", va="center")
    if runs:   # one time axis for every panel, even those without points (infinite headroom)
        first = datetime.fromtimestamp(runs[0]["at_ms"] / 1000, tz=UTC)
        newest = datetime.fromtimestamp(runs[-1]["at_ms"] / 1000, tz=UTC)
        span = newest - first
        pad = span * 0.05 if span > timedelta(0) else timedelta(minutes=30)   # one run: an hour around it
        axes[0][0].set_xlim(first - pad, newest + pad)
    locator = mdates.AutoDateLocator(minticks=2, maxticks=7, tz=UTC)
    for ax in axes[-1]:
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))
    hidden = len(jobs) - len(shown)
    heading = title or "Streaming audit"
    if runs:
        failing = sum(1 for e in last.values() if e.get("failed"))
        heading += (f" — {_iso(runs[-1]['at_ms'])} — {len(last)} job(s), {failing} failing — "
                    f"last {len(runs)} run(s), times in UTC")
    if hidden:
        heading += f" (+{hidden} more jobs in the report)"
    fig.suptitle(heading, fontsize=11)
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=s)
               for s, c in STATUS_COLORS.items() if s != "UNKNOWN"]
    handles.append(plt.Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="#c62828",
                              markersize=9, label="run in which the job failed the audit"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False,
               title="status of the job at each run", title_fontsize=8, bbox_to_anchor=(0.5, 0.0))
    # Fixed margins (in inches, turned into fractions) instead of tight_layout: same result for this
    # regular grid, and tight_layout alone took seconds per chart on a small worker.
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.15, right=0.985, top=1 - 0.75 / height, bottom=1.0 / height, hspace=0.18,
                        wspace=0.2)
    for ax, text, color in row_labels:   # job names in the left margin, after the layout is fixed
        box = ax.get_position()
        fig.text(0.008, (box.y0 + box.y1) / 2, text, ha="left", va="center", fontsize=9, fontweight="bold",
                 color=color)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def write_report(audits: Sequence[JobAudit], out_dir: str, *, now_ms: int | None = None,
                 history: AuditHistory | None = None, keep_runs: int = KEEP_RUNS,
                 storage_options: dict | None = None, chart: bool = True) -> AuditReport:
    """Compare with the previous run, then write this run's JSON, Markdown and PNG and the history.

    Files are written whole (one atomic write each) so a reader — or the next run — never sees a
    half report. Per-run files beyond the newest ``keep_runs`` are deleted with the history.
    """
    generated = int(time.time() * 1000) if now_ms is None else int(now_ms)
    root = open_location(out_dir, storage_options, what="audit folder")
    if history is None:
        history = AuditHistory.load(out_dir, storage_options)
    audits = [with_growth(a, history.previous(a.job)) for a in sorted(audits, key=lambda a: a.job)]
    history.append(generated, audits, keep=keep_runs)

    stamp = _stamp(generated)
    base = f"audit-{stamp}"
    files: dict[str, tuple[str, bytes]] = {}
    if chart:
        files["png"] = (f"{base}.png", render_chart(history.runs))
    files["json"] = (f"{base}.json", json.dumps(report_document(audits, generated), indent=1,
                                                 ensure_ascii=False, default=str).encode())
    files["markdown"] = (f"{base}.md", render_markdown(audits, generated,
                                                       chart_name=files["png"][0] if chart else None).encode())
    try:
        root.fs.makedirs(root.path, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the audit folder {out_dir}: {os_reason(exc)}") from None
    paths: dict[str, str] = {}
    for kind, (name, data) in files.items():
        write_atomic(root.child(name), data)
        paths[kind] = root.child(name).url
    for kind, (name, data) in files.items():
        ext = name.rsplit(".", 1)[1]
        latest_data = data
        if kind == "markdown" and chart:   # the latest page links the latest chart
            latest_data = render_markdown(audits, generated, chart_name=f"{LATEST}.png").encode()
        write_atomic(root.child(f"{LATEST}.{ext}"), latest_data)
    write_atomic(root.child(HISTORY_FILE), history.to_json())
    paths["history"] = root.child(HISTORY_FILE).url
    _prune(root, keep_runs)
    return AuditReport(generated, audits, paths)


def _prune(root: Location, keep_runs: int) -> None:
    listing = list_files(root)
    stamps = sorted({rel.rsplit(".", 1)[0] for rel in listing if "/" not in rel and rel.startswith("audit-")
                     and rel.rsplit(".", 1)[-1] in ("json", "md", "png") and rel != HISTORY_FILE})
    for old in stamps[:-keep_runs] if keep_runs > 0 else []:
        for ext in ("json", "md", "png"):
            if f"{old}.{ext}" in listing:
                remove_file(root.child(f"{old}.{ext}"))


# --------------------------------------------------------------------------------------------------
# all together (the command line)
# --------------------------------------------------------------------------------------------------


def default_audit_dir(registry: Registry) -> str:
    """``$AKS_AUDIT_DIR``, else ``<first allowed root>/audit``: beside the data the registry manages."""
    import os

    env = os.environ.get("AKS_AUDIT_DIR")
    if env:
        return env
    if not registry.allowed_roots:
        raise UserError(f"registry {registry.path} has no allowed_roots to put the audit in; pass an output folder")
    return registry.allowed_roots[0].rstrip("/") + "/audit"


def run_audit(registry: Registry, out_dir: str, kafka_config_for: Callable[[JobSpec], Mapping[str, Any]], *,
              jobs: Sequence[str] | None = None, keep_runs: int = KEEP_RUNS, storage_options: dict | None = None,
              check_verdict: bool = True, timeout: float = 10.0) -> AuditReport:
    """Audit ``jobs`` (default: every job of the registry) one after the other and write the report."""
    history = AuditHistory.load(out_dir, storage_options)
    specs = [registry.get(name) for name in jobs] if jobs else list(registry)
    audits: list[JobAudit] = []
    for spec in specs:
        try:
            config = kafka_config_for(spec)
        except UserError as exc:
            audits.append(JobAudit(job=spec.name, audited_at_ms=int(time.time() * 1000),
                                   thresholds=thresholds_of(spec), error=str(exc),
                                   alerts=[Alert("AUDIT_ERROR", str(exc)).to_dict()]))
            continue
        audits.append(audit_job(spec, config, samples=history.samples_for(spec.name), check_verdict=check_verdict,
                                timeout=timeout))
    return write_report(audits, out_dir, history=history, keep_runs=keep_runs, storage_options=storage_options)


__all__ = [
    "HISTORY_FILE",
    "AuditHistory",
    "AuditReport",
    "JobAudit",
    "audit_job",
    "default_audit_dir",
    "render_chart",
    "render_markdown",
    "report_document",
    "run_audit",
    "scan_checkpoint",
    "with_growth",
    "write_report",
]
