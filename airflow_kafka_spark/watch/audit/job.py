"""One job's audit: lag, status, retention headroom, checkpoint health, pre-deploy verdict and backup age.

Why a scheduled audit when ``aks lag`` exists: nobody watches a dashboard for the job that has
been down since Friday. Burrow, kafka-lag-exporter and KMinion are always-on exporters that need a
consumer group (which Structured Streaming does not have, S23) and know nothing of checkpoints or
retention. The audit runs over the registry on a schedule (``dags/streaming_audit.py``, hourly),
answers "which job needs a person now, and why" in one report, and fails exactly for those jobs.

What fails a job (``JobAudit.alerts``): STALLED / STOPPED / REWIND status, records already lost
to retention, headroom below the registry's ``min_headroom_s``, an interrupted reset/restore, a
checkpoint whose pre-deploy verdict is BLOCK (it would not restart cleanly), or a job that could
not be audited at all (an audit that cannot see a job must not report it healthy). Everything else
worth knowing (WARN status, stale ``.tmp`` files, checkpoint growth, no recent backup) is a warning
in the report.

Split for Airflow: :func:`audit_job` does one job's I/O and returns a JSON-able :class:`JobAudit`
(an XCom); :mod:`.history` keeps the trend, :mod:`.render` and :mod:`.chart` draw the report,
:mod:`.report` writes it and chains everything for the command line.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark._util.fs import exists, list_files, mtime_of, open_location
from airflow_kafka_spark._util.text import fmt_duration
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops.options import DEFAULT_RUN, RunOptions
from airflow_kafka_spark.watch.kinds import position_kind
from airflow_kafka_spark.watch.observation import Alert, Sample
from airflow_kafka_spark.watch.observe import observe_job

if TYPE_CHECKING:
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.registry.model import JobSpec
    from airflow_kafka_spark.watch.observation import Observation

FORMAT_VERSION = 1
STALE_TMP_AFTER_S = 15 * 60.0       # Spark renames its temp files within milliseconds


@dataclass(frozen=True)
class AuditChecks:
    """What the audit looks at beyond the observation: the pre-deploy verdict (``verdict``; a few Kafka reads
    per job), and from which age a checkpoint's ``.tmp`` file is a leftover rather than a write in progress."""

    verdict: bool = True
    stale_tmp_after_s: float = STALE_TMP_AFTER_S


ALL_CHECKS = AuditChecks()


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
    """The pre-deploy verdict for restarting this job now, read-only (the lifecycle record is not written).

    A DStream job is judged from its group, as ``aks validate --job`` does (its checkpoint location
    only holds the lifecycle record)."""
    from airflow_kafka_spark.verdict.options import DeployOptions
    from airflow_kafka_spark.verdict.validate import validate

    options = DeployOptions.for_job(spec)
    checkpoint, group = spec.position_source
    verdict = validate(checkpoint_location=checkpoint, group_id=group, view=view, options=options,
                       storage_options=storage_options, record_identity=False, job_name=spec.name,
                       probe_budget_s=5.0)
    notable = [f for f in verdict.findings if f.code != "OK"]
    return {"verdict": str(verdict.severity), "headline": verdict.headline, "fix": verdict.fix,
            "findings": [{"code": f.code, "severity": str(f.severity), "where": f.where, "message": f.message}
                         for f in notable]}


def audit_job(spec: JobSpec, kafka_config: Mapping[str, Any] | None = None, *, view: KafkaView | None = None,
              samples: Sequence[Sample] = (), now_ms: int | None = None, run: RunOptions = DEFAULT_RUN,
              checks: AuditChecks = ALL_CHECKS, on_observation: Callable[[Observation], None] | None = None
              ) -> JobAudit:
    """Audit one job. Never raises for the job's own problems: they become alerts in the result.

    ``run`` gives the checkpoint's and the backups' store options (``run.stores``) and Kafka's timeout
    (``run.kafka_timeout``); its other fields do not apply to an audit.

    ``on_observation`` receives the observation itself (the audit keeps its JSON): the DAG sends its
    numbers to Airflow's metrics from there, without a second look at the job.

    An audit must report every job, so a failure to read one (unreachable cluster, missing
    checkpoint, even a bug) is caught and turned into an ``AUDIT_ERROR`` alert for that job.
    """
    from airflow_kafka_spark.kafka.view import KafkaView

    storage_options, timeout = run.stores.checkpoint, run.kafka_timeout
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
        if on_observation is not None:
            on_observation(obs)
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
        location = position_kind(spec).scanned_location(spec)
        if location is not None:
            audit.checkpoint.update(scan_checkpoint(location, now_ms=now, storage_options=storage_options,
                                                    stale_tmp_after_s=checks.stale_tmp_after_s))
        for tmp in audit.checkpoint["stale_tmp_files"]:
            audit.warnings.append(f"stale temp file {tmp['path']} ({fmt_duration(tmp['age_s'])} old): left by an "
                                  "interrupted write; delete it while the query is stopped")
    except Exception as exc:
        audit.checkpoint["scan_error"] = _one_line(exc)
        audit.warnings.append(f"checkpoint listing failed: {audit.checkpoint['scan_error']}")
    if checks.verdict and kafka is not None and audit.observation is not None:
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
        audit.backup.update(position_kind(spec).backup_summary(spec, now, run.stores.backup))
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
