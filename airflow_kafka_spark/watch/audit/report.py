"""Write the audit (JSON, Markdown, PNG, history) into its folder, and audit a whole registry.

Layout of the output folder (any fsspec URL)::

    audit-<UTC stamp>.json / .md / .png   one set per run (the newest ``keep_runs`` are kept)
    latest.json / latest.md / latest.png  the newest run, at a stable address for links
    audit-history.json                    the last ``keep_runs`` runs, a few numbers per job

:func:`write_report` is the "combine, compare with history, render, write" step the DAG runs after
the per-job audits; :func:`run_audit` chains audit and write for the command line.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark import settings
from airflow_kafka_spark._util.fs import Location, list_files, open_location, os_reason, remove_file, write_atomic
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.watch.audit.chart import CHART_MISSING, chart_available, render_chart, warm_up
from airflow_kafka_spark.watch.audit.fleet import FleetView, cluster_key, run_parallel
from airflow_kafka_spark.watch.audit.history import HISTORY_FILE, KEEP_RUNS, AuditHistory, with_growth
from airflow_kafka_spark.watch.audit.job import AuditChecks, JobAudit, audit_job, thresholds_of
from airflow_kafka_spark.watch.audit.render import render_markdown, report_document
from airflow_kafka_spark.watch.observation import Alert

if TYPE_CHECKING:
    from airflow_kafka_spark.registry.model import JobSpec, Registry

LATEST = "latest"
log = logging.getLogger(__name__)


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


def write_report(audits: Sequence[JobAudit], out_dir: str, *, now_ms: int | None = None,
                 history: AuditHistory | None = None, keep_runs: int = KEEP_RUNS,
                 storage_options: dict | None = None, chart: bool = True) -> AuditReport:
    """Compare with the previous run, then write this run's JSON, Markdown and PNG and the history.

    Files are written whole (one atomic write each) so a reader — or the next run — never sees a
    half report. Per-run files beyond the newest ``keep_runs`` are deleted with the history.
    Without matplotlib (the ``[chart]`` extra) the report is written without its PNG, with one warning.
    """
    generated = int(time.time() * 1000) if now_ms is None else int(now_ms)
    root = open_location(out_dir, storage_options, what="audit folder")
    if history is None:
        history = AuditHistory.load(out_dir, storage_options)
    audits = [with_growth(a, history.previous(a.job)) for a in sorted(audits, key=lambda a: a.job)]
    history.append(generated, audits, keep=keep_runs)

    if chart and not chart_available():
        log.warning(CHART_MISSING)
        chart = False
    stamp = _stamp(generated)
    base = f"audit-{stamp}"
    files: dict[str, tuple[str, bytes]] = {}
    if chart:
        files["png"] = (f"{base}.png", render_chart(history.runs))
    # Compact: ``indent`` makes json use its pure-Python encoder (0.5 s of CPU for 50 jobs × 200 partitions).
    files["json"] = (f"{base}.json", json.dumps(report_document(audits, generated), separators=(",", ":"),
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


def default_audit_dir(registry: Registry) -> str:
    """``[kafka_spark] audit_dir``, else ``<first allowed root>/audit``: beside the data the registry manages."""
    env = settings.value("audit_dir")
    if env:
        return env
    if not registry.allowed_roots:
        raise UserError(f"registry {registry.path} has no allowed_roots to put the audit in; pass an output folder")
    return registry.allowed_roots[0].rstrip("/") + "/audit"


def run_audit(registry: Registry, out_dir: str, kafka_config_for: Callable[[JobSpec], Mapping[str, Any]], *,
              jobs: Sequence[str] | None = None, keep_runs: int = KEEP_RUNS, storage_options: dict | None = None,
              check_verdict: bool = True, timeout: float = 10.0) -> AuditReport:
    """Audit ``jobs`` (default: every job of the registry) and write the report.

    Jobs run in threads and the jobs of one cluster share a view and its broker samples
    (:mod:`~airflow_kafka_spark.watch.audit.fleet`); the report lists them in registry order as before.
    """
    history = AuditHistory.load(out_dir, storage_options)
    specs = [registry.get(name) for name in jobs] if jobs else list(registry)
    configs: dict[str, Mapping[str, Any] | UserError] = {}
    views: dict[str, FleetView | None] = {}
    for spec in specs:
        try:
            config = kafka_config_for(spec)
        except UserError as exc:
            configs[spec.name] = exc
            continue
        configs[spec.name] = config
        key = cluster_key(config)
        if key not in views:
            try:
                views[key] = FleetView(dict(config), timeout=timeout)
            except UserError:   # e.g. no bootstrap.servers: each job's own view reports it, as before
                views[key] = None
        view = views[key]
        if view is not None:
            view.want(spec.topics or ())

    def one(spec: JobSpec) -> JobAudit:
        config = configs[spec.name]
        if isinstance(config, UserError):
            return JobAudit(job=spec.name, audited_at_ms=int(time.time() * 1000), thresholds=thresholds_of(spec),
                            error=str(config), alerts=[Alert("AUDIT_ERROR", str(config)).to_dict()])
        return audit_job(spec, config, view=views.get(cluster_key(config)), samples=history.samples_for(spec.name),
                         run=RunOptions(kafka_timeout=timeout), checks=AuditChecks(verdict=check_verdict))

    warm_up()   # the chart's imports, behind the jobs' Kafka waits
    try:
        audits = run_parallel(specs, one)
    finally:
        for view in views.values():
            if view is not None:
                view.close()
    return write_report(audits, out_dir, history=history, keep_runs=keep_runs, storage_options=storage_options)
