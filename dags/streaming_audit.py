"""``streaming_audit``: every hour, look at every registered streaming job and fail for the ones in trouble.

For each job of the registry (``streaming_jobs.yaml`` beside this file, or ``[kafka_spark] job_registry``):
lag in records and seconds, Burrow-style status, retention headroom (time to data loss), catch-up
estimate, checkpoint health (the pre-deploy verdict, stale ``.tmp`` files, size and file-count
growth since the previous report) and the age of the latest backup. See
:mod:`airflow_kafka_spark.watch.audit.job` for what each number means and what fails a job.

Shape::

    observe_<job> ...  ─▶  report  ─▶  check_<job> ...

* ``observe_<job>`` (one per job) reads the checkpoint, the broker and the backup catalog and
  returns the job's audit as XCom. It never fails for the job's own problems — an unreachable
  cluster or a missing checkpoint is itself a finding — so one broken job cannot hide the others.
  Its lag, status and headroom also go to Airflow's metrics (``Stats``: StatsD / OpenTelemetry,
  when ``[metrics]`` turns them on; names in docs/metrics.md).
* ``report`` (runs whatever happened upstream) writes ``audit-<UTC>.json / .md / .png``,
  ``latest.*`` and the small ``audit-history.json`` into the audit folder, which is
  ``[kafka_spark] audit_dir`` or ``<first allowed root of the registry>/audit`` (or the ``out_dir`` param,
  which must lie under the registry's ``allowed_roots``).
* ``check_<job>`` fails exactly for the jobs that need a person now: STALLED, STOPPED, REWIND,
  records already lost, headroom below ``min_headroom_s``, a checkpoint that would not restart,
  or a job that could not be audited. Each failure fires the task's ``on_failure_callback``
  (:func:`alert_job`: an ERROR log line and an entry in ``alerts.jsonl`` beside the reports;
  replace or extend ``ALERT_CALLBACKS`` with a notifier such as Slack or PagerDuty), and the failed
  run fires the DAG's ``on_failure_callback`` with the list of jobs.

Why a task per job rather than one task: the grid then shows *which* job is in trouble at a glance,
alerts and retries are per job, and a clear run means every job passed. Tasks are built from the
registry at parse time (only the YAML is read, no Kafka); a broken registry gives a DAG with a single
failing task that carries the registry error instead of an import error.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, TriggerRule, task
from airflow.sdk.exceptions import AirflowFailException

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.operators.links import AuditReportLink
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import Registry

DAG_ID = "streaming_audit"
DAGS_FOLDER = Path(__file__).resolve().parent
ALERTS_FILE = "alerts.jsonl"
MAX_ALERT_LINES = 5000

log = logging.getLogger(__name__)


def _load() -> tuple[Registry | None, str | None]:
    try:
        return load_registry(dags_folder=DAGS_FOLDER), None
    except UserError as exc:
        return None, str(exc)


def _out_dir(registry: Registry, params: dict[str, Any]) -> str:
    """The audit folder: the run's ``out_dir`` param, else the default; always under allowed_roots."""
    from airflow_kafka_spark.watch.audit.report import default_audit_dir

    chosen = params.get("out_dir") or default_audit_dir(registry)
    return registry.check_location(str(chosen), what="audit folder (out_dir)")


# --------------------------------------------------------------------------------------------------
# alert callbacks
# --------------------------------------------------------------------------------------------------


def alert_job(context: dict[str, Any]) -> None:
    """Default alert for a failed ``check_<job>``: one ERROR line, and a line in ``alerts.jsonl``.

    The file is the minimum that works with no notifier configured and leaves an audit trail; a
    notifier callback added to ``ALERT_CALLBACKS`` is where pages and chat messages belong.
    """
    ti = context.get("ti") or context.get("task_instance")
    job = str(getattr(ti, "task_id", "?")).removeprefix("check_")
    message = str(context.get("exception") or "failed the audit")
    run_id = getattr(ti, "run_id", None) or str(context.get("run_id"))
    log.error("STREAMING AUDIT ALERT job=%s run=%s: %s", job, run_id, message)
    try:
        from airflow_kafka_spark._util.fs import open_location, read_bytes, write_atomic

        report = ti.xcom_pull(task_ids="report") if ti is not None else None
        out = (report or {}).get("out_dir")
        if not out:
            return
        loc = open_location(out, what="audit folder").child(ALERTS_FILE)
        old = (read_bytes(loc) or b"").decode().splitlines()[-(MAX_ALERT_LINES - 1):]
        line = json.dumps({"at_ms": int(time.time() * 1000), "dag_id": DAG_ID, "run_id": run_id, "job": job,
                           "alerts": (report.get("failed") or {}).get(job, []), "message": message})
        write_atomic(loc, ("\n".join([*old, line]) + "\n").encode())
    except Exception as exc:  # an alert callback must never raise: the failure is already recorded
        log.warning("could not append the alert to %s: %s", ALERTS_FILE, exc)


def alert_run(context: dict[str, Any]) -> None:
    """DAG-level failure callback: one line naming every job that failed this run.

    The names come from the run's report (``latest.json``), not from the task instances: this
    callback may run outside a worker (DAG processor), where only the run's context is at hand.
    """
    run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", "?")
    failed = "(see the report task)"
    try:
        from airflow_kafka_spark._util.fs import open_location, read_bytes

        registry = load_registry(dags_folder=DAGS_FOLDER)
        out = _out_dir(registry, dict(context.get("params") or {}))
        raw = read_bytes(open_location(out, what="audit folder").child("latest.json"))
        if raw:
            failed = ", ".join(sorted(json.loads(raw)["summary"]["failed_jobs"])) or failed
    except Exception as exc:  # a callback must never raise
        log.warning("could not read the audit report for the failure summary: %s", exc)
    log.error("STREAMING AUDIT run %s failed (%s); jobs needing attention: %s", run_id,
              context.get("reason", "task failed"), failed)


#: Called for each failed ``check_<job>``. Add a notifier here (e.g. SlackNotifier(...)).
ALERT_CALLBACKS: list[Any] = [alert_job]


# --------------------------------------------------------------------------------------------------
# tasks
# --------------------------------------------------------------------------------------------------


@task(show_return_value_in_logs=False)   # the XCom holds every partition; the log gets one summary line
def observe(job: str, **context: Any) -> dict[str, Any]:
    """Audit one job; the result (never an exception for the job's own problems) is the XCom."""
    from airflow_kafka_spark.airflow_glue.stats import emit_observation
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
    from airflow_kafka_spark.watch.audit.history import AuditHistory
    from airflow_kafka_spark.watch.audit.job import AuditChecks, audit_job, thresholds_of
    from airflow_kafka_spark.watch.metrics import group_label
    from airflow_kafka_spark.watch.observation import Alert

    registry = load_registry(dags_folder=DAGS_FOLDER)
    spec = registry.get(job)
    history = AuditHistory.load(_out_dir(registry, context["params"]))
    try:
        config = StreamingKafkaHook(spec.kafka_conn_id).kafka_config()
    except UserError as exc:
        from airflow_kafka_spark.watch.audit.job import JobAudit

        return JobAudit(job=job, audited_at_ms=int(time.time() * 1000), thresholds=thresholds_of(spec),
                        error=str(exc), alerts=[Alert("AUDIT_ERROR", str(exc)).to_dict()]).to_dict()
    audit = audit_job(spec, config, samples=history.samples_for(job),
                      checks=AuditChecks(verdict=bool(context["params"].get("check_verdict", True))),
                      on_observation=lambda obs: emit_observation(obs, group=group_label(spec)))
    log.info("job %s: %s; lag %s records, %s s; headroom %s s; alerts: %s", job, audit.status, audit.lag_records,
             audit.lag_seconds, audit.headroom_s, [a["code"] for a in audit.alerts] or "none")
    return audit.to_dict()


@task(trigger_rule=TriggerRule.ALL_DONE)
def report(jobs: list[str], **context: Any) -> dict[str, Any]:
    """Combine the per-job audits, compare with history, write JSON/Markdown/PNG; return where and who failed."""
    from airflow_kafka_spark.watch.audit.job import JobAudit, thresholds_of
    from airflow_kafka_spark.watch.audit.report import write_report
    from airflow_kafka_spark.watch.observation import Alert

    registry = load_registry(dags_folder=DAGS_FOLDER)
    out = _out_dir(registry, context["params"])
    ti = context["ti"]
    audits = []
    for job in jobs:
        doc = ti.xcom_pull(task_ids=f"observe_{job}")
        if doc:
            audits.append(JobAudit.from_dict(doc))
            continue
        thresholds = thresholds_of(registry.get(job)) if job in registry else {}
        audits.append(JobAudit(job=job, audited_at_ms=int(time.time() * 1000), thresholds=thresholds,
                               error=f"task observe_{job} produced no result (see its log)",
                               alerts=[Alert("AUDIT_ERROR", f"task observe_{job} produced no result").to_dict()]))
    result = write_report(audits, out)
    log.info("audit report: %s (chart %s); failing: %s", result.paths.get("markdown"), result.paths.get("png"),
             ", ".join(result.failed) or "none")
    return {**result.to_dict(), "out_dir": out}


@task
def check(job: str, **context: Any) -> str:
    """Fail (no retry) when the report lists alerts for ``job``."""
    rep = context["ti"].xcom_pull(task_ids="report")
    if not rep:
        raise AirflowFailException(f"job {job}: no audit report (the report task failed)")
    alerts = (rep.get("failed") or {}).get(job)
    if alerts:
        raise AirflowFailException(f"job {job}: " + "; ".join(f"{a['code']}: {a['message']}" for a in alerts))
    return "ok"


@task
def registry_error(message: str) -> None:
    raise AirflowFailException(f"the job registry cannot be loaded: {message}")


with DAG(
    dag_id=DAG_ID,
    description="Hourly lag, stall, retention-headroom and checkpoint audit of every registered streaming job",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["streaming", "kafka", "spark", "audit"],
    on_failure_callback=alert_run,
    params={
        "out_dir": Param(None, type=["null", "string"],
                         description="audit folder (default [kafka_spark] audit_dir, else <first allowed root>/audit); "
                                     "must lie under the registry's allowed_roots"),
        "check_verdict": Param(True, type="boolean",
                               description="also run the pre-deploy check of each checkpoint"),
    },
    doc_md=__doc__,
) as dag:
    _registry, _error = _load()
    if _registry is None:
        registry_error(_error or "unknown error")
    else:
        _names = _registry.names()
        _observed = [observe.override(task_id=f"observe_{name}")(job=name) for name in _names]
        _report = report(jobs=_names)
        _report.operator.operator_extra_links = (AuditReportLink(),)   # "Audit report" on the task page
        for _obs in _observed:
            _obs >> _report
        for _name in _names:
            _report >> check.override(task_id=f"check_{_name}", on_failure_callback=ALERT_CALLBACKS)(job=_name)
