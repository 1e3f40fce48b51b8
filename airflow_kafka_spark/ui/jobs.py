"""What the streaming-jobs page shows for a job, gathered from the core: no second implementation.

Every number comes from the function the rest of the product uses: lag, status and headroom from
:func:`~airflow_kafka_spark.watch.observe.observe_job` (what ``aks lag --job`` and the lag sensor call),
the driver and the last safe restart from the lifecycle record, the last pre-deploy verdict and the
history chart from the audit's folder (``latest.json`` and ``audit-history.json`` that
:mod:`~airflow_kafka_spark.watch.audit.report` writes). The Kafka settings come from the job's
``kafka_conn_id`` through the same hook the operators use; they are used, never shown.

A job that cannot be observed (broker down, no checkpoint yet) is a row with its error, never a
failed page: the page exists to show the job nobody can see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import JobSpec, Registry
from airflow_kafka_spark.watch.audit.history import AuditHistory
from airflow_kafka_spark.watch.audit.job import JobAudit
from airflow_kafka_spark.watch.audit.report import LATEST, default_audit_dir
from airflow_kafka_spark.watch.observation import Alert, Observation
from airflow_kafka_spark.watch.observe import observe_job

KafkaConfigFor = Callable[[JobSpec], Mapping[str, Any]]


@dataclass(frozen=True)
class SafeRestart:
    """The newest ``safe_restart`` audit entry of the job's lifecycle record."""

    entry_id: str
    at_ms: int
    actor: str | None
    outcome: str | None
    mode: str | None
    reason: str | None
    run: str | None
    verdict_after: str | None

    @classmethod
    def newest(cls, history: list[dict[str, Any]]) -> SafeRestart | None:
        for entry in reversed(history):
            if entry.get("event") == LifecycleEvent.SAFE_RESTART:
                d = entry.get("details") or {}
                after = d.get("verdict_after") or d.get("verdict_before") or {}
                return cls(entry_id=str(entry.get("id") or ""), at_ms=int(entry.get("at_ms") or 0),
                           actor=entry.get("actor"), outcome=d.get("outcome"), mode=d.get("mode"),
                           reason=d.get("reason"), run=d.get("run"),
                           verdict_after=after.get("verdict") if isinstance(after, Mapping) else None)
        return None


@dataclass(frozen=True)
class Verdict:
    """The pre-deploy verdict the last audit found for the job (read-only validate of its checkpoint)."""

    severity: str
    headline: str | None
    at_ms: int


@dataclass(frozen=True)
class HistoryPoint:
    """One audit run's numbers for the chart (``audit-history.json``), or the live observation."""

    at_ms: int
    status: str
    lag_records: int | None
    lag_seconds: float | None
    headroom_s: float | None
    headroom_infinite: bool


@dataclass(frozen=True)
class JobView:
    """One job as the page shows it."""

    spec: JobSpec
    observation: Observation | None
    error: str | None
    alerts: list[Alert]
    driver: DriverInfo | None
    last_restart: SafeRestart | None
    verdict: Verdict | None
    history: list[HistoryPoint] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "ERROR" if self.observation is None else str(self.observation.status.status)


def kafka_config_from_connection(spec: JobSpec) -> dict[str, Any]:
    """The job's librdkafka config from its ``kafka_conn_id`` (the operators' hook: secrets masked in logs)."""
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    return StreamingKafkaHook(spec.kafka_conn_id).kafka_config()


def registry() -> Registry:
    """The registry the DAGs use: ``[kafka_spark] job_registry``, else ``[core] dags_folder``/streaming_jobs.yaml."""
    from airflow.configuration import conf

    import airflow_kafka_spark.airflow_glue  # noqa: F401  (reads the [kafka_spark] options through Airflow's config)

    return load_registry(dags_folder=conf.get("core", "dags_folder"))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, UserError) else f"{type(exc).__name__}: {text}"


def _audit_dir(reg: Registry) -> str | None:
    try:
        return default_audit_dir(reg)
    except UserError:
        return None


def latest_audits(reg: Registry) -> dict[str, JobAudit]:
    """The newest audit report's per-job results (``latest.json``); empty when no audit ran yet."""
    out_dir = _audit_dir(reg)
    if out_dir is None:
        return {}
    try:
        raw = read_bytes(open_location(out_dir, None, what="audit folder").child(f"{LATEST}.json"))
        doc = load_json(raw, what="audit report") if raw else {}
        return {a.job: a for a in (JobAudit.from_dict(j) for j in doc.get("jobs") or [])}
    except (UserError, ValueError, KeyError, TypeError, AttributeError):
        return {}   # a damaged report hides the verdict column, it never breaks the page


def audit_history(reg: Registry, job: str) -> list[HistoryPoint]:
    """The job's numbers over the audit's last runs (oldest first), as the audit's chart draws them."""
    out_dir = _audit_dir(reg)
    if out_dir is None:
        return []
    try:
        runs = AuditHistory.load(out_dir).runs
    except UserError:
        return []
    points = []
    for run in runs:
        e = (run.get("jobs") or {}).get(job)
        if e:
            points.append(HistoryPoint(at_ms=int(run["at_ms"]), status=str(e.get("status")),
                                       lag_records=e.get("lag_records"), lag_seconds=e.get("lag_seconds"),
                                       headroom_s=e.get("headroom_s"),
                                       headroom_infinite=bool(e.get("headroom_infinite"))))
    return points


def job_view(spec: JobSpec, audits: Mapping[str, JobAudit], kafka_config_for: KafkaConfigFor, *,
             views: dict[tuple, KafkaView] | None = None, timeout: float = 10.0) -> JobView:
    """Observe one job now and read what the record and the last audit remember about it.

    ``views``: Kafka clients by config, shared by the jobs of one page (one connection per cluster).
    """
    obs: Observation | None = None
    error = None
    try:
        config = dict(kafka_config_for(spec))
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        if views is None or key not in views:
            view = KafkaView(config, timeout=timeout)
            if views is not None:
                views[key] = view
        else:
            view = views[key]
        try:
            obs = observe_job(spec, view=view, timeout=timeout)
        finally:
            if views is None:
                view.close()
    except Exception as exc:  # see the module docstring: a row with the error, not a broken page
        error = _one_line(exc)
    driver = restart = None
    try:
        record = LifecycleRecord.load(spec.checkpoint)
        if record is not None:
            driver, restart = record.driver, SafeRestart.newest(record.history)
    except UserError as exc:
        error = error or _one_line(exc)
    audit = audits.get(spec.name)
    verdict = None
    if audit is not None and audit.checkpoint.get("verdict"):
        verdict = Verdict(str(audit.checkpoint["verdict"]), audit.checkpoint.get("headline"), audit.audited_at_ms)
    alerts = obs.alerts(min_headroom_s=spec.min_headroom_s) if obs is not None else [
        Alert("AUDIT_ERROR", f"could not observe the job: {error}")]
    return JobView(spec=spec, observation=obs, error=error, alerts=alerts, driver=driver, last_restart=restart,
                   verdict=verdict)


def all_jobs(reg: Registry, kafka_config_for: KafkaConfigFor = kafka_config_from_connection) -> list[JobView]:
    """Every registry job, in name order."""
    audits = latest_audits(reg)
    views: dict[tuple, KafkaView] = {}
    try:
        return [job_view(reg.jobs[name], audits, kafka_config_for, views=views) for name in reg.names()]
    finally:
        for view in views.values():
            view.close()


def one_job(reg: Registry, name: str, kafka_config_for: KafkaConfigFor = kafka_config_from_connection) -> JobView:
    """One job (``name`` checked against the registry: a :class:`UserError` for an unknown one) with its history.

    The live observation is the chart's last point, so a job the audit has not seen yet still has one.
    """
    spec = reg.get(name)
    view = job_view(spec, latest_audits(reg), kafka_config_for)
    points = audit_history(reg, spec.name)
    obs = view.observation
    if obs is not None:
        points.append(HistoryPoint(at_ms=obs.observed_at_ms, status=view.status,
                                   lag_records=obs.lag.records_effective, lag_seconds=obs.lag.seconds,
                                   headroom_s=obs.headroom.seconds, headroom_infinite=obs.headroom.infinite))
    return replace(view, history=points)
