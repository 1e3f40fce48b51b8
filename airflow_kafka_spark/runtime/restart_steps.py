"""What the steps of a safe restart decided and did, as typed values: the plan, the submitted driver, the
rollback, and the audit entry with its summaries of every step.

The steps of the ``streaming_safe_restart`` DAG hand their results to each other through XCom, which
carries JSON. Read as loosely keyed dicts (``plan.get("was_running")``), a renamed key is a silent
``None`` in an audit entry; read through these types it is an ``AttributeError`` or a type
checker's error at the one place that names it. The Airflow edge turns each value into XCom's JSON
with ``to_dict()`` (exactly the document XCom has always carried: tests, the UI and the audit
read it) and reads XCom back with :func:`from_xcom` only.

Each type's ``_read`` is the only place that knows the key names of the document it is read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.runtime.safe_restart import RestartAction, RestartDecision

Json = dict[str, Any]


class _FromXcom(Protocol):
    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> Any: ...


T = TypeVar("T", bound=_FromXcom)


def from_xcom(kind: type[T], doc: object) -> T | None:
    """The one way back from XCom: ``doc`` (a step's XCom value) as a ``kind``; None when the step left none."""
    if not isinstance(doc, Mapping):
        return None
    return kind._read(doc)


@dataclass(frozen=True)
class DriverRef:
    """A driver as the plan saw it before the run: kind, id, whether it was alive."""

    kind: str
    id: str
    alive: bool

    def to_dict(self) -> Json:
        return {"kind": self.kind, "id": self.id, "alive": self.alive}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> DriverRef:
        return cls(kind=doc["kind"], id=doc["id"], alive=doc["alive"])


@dataclass(frozen=True)
class RunLeaseRef:
    """The run lease the plan took (see ``operators/safe_restart.py``)."""

    holder: str
    expires_at_ms: int

    def to_dict(self) -> Json:
        return {"holder": self.holder, "expires_at_ms": self.expires_at_ms}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> RunLeaseRef:
        return cls(holder=doc["holder"], expires_at_ms=doc["expires_at_ms"])


@dataclass(frozen=True)
class RunContext:
    """Who started the run and why, as the plan records it."""

    reason: str | None
    who: str
    run: str


@dataclass(frozen=True)
class RestartPlan:
    """The plan task's result: the decision for the mode, who asked, where the job stood before."""

    job: str
    mode: str
    action: RestartAction
    why: str
    reset_mode: ResetMode | None
    restore_backup_id: str | None
    to_datetime: str | None
    probe: Mapping[str, Any] | None          # the compatibility probe's own JSON (ProbeResult.to_dict)
    dry_run: bool
    accept_data_loss: bool
    asked: RunContext
    registry_compatibility_version: str
    recorded_compatibility_version: str | None
    was_running: bool
    driver_before: DriverRef | None
    position_before: Mapping[str, Any]      # the kind's position document (airflow_glue.kinds)
    run_lease: RunLeaseRef | None = None

    @classmethod
    def of(cls, decision: RestartDecision, *, job: str, mode: str, flags: tuple[bool, bool], asked: RunContext,
           compat: tuple[str, str | None], before: tuple[DriverRef | None, Mapping[str, Any]],
           was_running: bool) -> RestartPlan:
        """``flags``: (dry_run, accept_data_loss); ``compat``: (registry, recorded); ``before``: (driver, position)."""
        d = decision.to_dict()
        return cls(job=job, mode=mode, action=decision.action, why=decision.why, reset_mode=decision.reset_mode,
                   restore_backup_id=decision.restore_backup_id, to_datetime=decision.to_datetime, probe=d["probe"],
                   dry_run=flags[0], accept_data_loss=flags[1], asked=asked, registry_compatibility_version=compat[0],
                   recorded_compatibility_version=compat[1], was_running=was_running, driver_before=before[0],
                   position_before=before[1])

    @property
    def tolerate_block(self) -> bool:
        """As :attr:`RestartDecision.tolerate_block`: only a run that replaces the checkpoint may pass a BLOCK."""
        return self.action in (RestartAction.RESET, RestartAction.RESTORE)

    @property
    def offsets_before(self) -> Any:
        return self.position_before.get("offsets")

    def to_dict(self) -> Json:
        """The plan's XCom document, keys in the order it has always had."""
        return {"job": self.job, "mode": self.mode, "action": str(self.action),
                "reset_mode": None if self.reset_mode is None else str(self.reset_mode),
                "restore_backup_id": self.restore_backup_id, "to_datetime": self.to_datetime, "why": self.why,
                "tolerate_block": self.tolerate_block, "probe": None if self.probe is None else dict(self.probe),
                "dry_run": self.dry_run, "accept_data_loss": self.accept_data_loss, "reason": self.asked.reason,
                "who": self.asked.who, "run": self.asked.run,
                "registry_compatibility_version": self.registry_compatibility_version,
                "recorded_compatibility_version": self.recorded_compatibility_version,
                "was_running": self.was_running,
                "driver_before": None if self.driver_before is None else self.driver_before.to_dict(),
                "position_before": dict(self.position_before),
                "run_lease": None if self.run_lease is None else self.run_lease.to_dict()}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> RestartPlan:
        return cls(job=doc["job"], mode=doc["mode"], action=RestartAction(doc["action"]), why=doc["why"],
                   reset_mode=None if doc["reset_mode"] is None else ResetMode(doc["reset_mode"]),
                   restore_backup_id=doc["restore_backup_id"], to_datetime=doc["to_datetime"], probe=doc["probe"],
                   dry_run=bool(doc["dry_run"]), accept_data_loss=bool(doc["accept_data_loss"]),
                   asked=RunContext(reason=doc["reason"], who=doc["who"], run=doc["run"]),
                   registry_compatibility_version=doc["registry_compatibility_version"],
                   recorded_compatibility_version=doc["recorded_compatibility_version"],
                   was_running=bool(doc["was_running"]),
                   driver_before=from_xcom(DriverRef, doc["driver_before"]),
                   position_before=doc["position_before"] or {}, run_lease=from_xcom(RunLeaseRef, doc["run_lease"]))


@dataclass(frozen=True)
class SubmittedDriver:
    """The driver a submit started (``driver`` of the submit's XCom; a dry run has none)."""

    kind: str
    id: str
    host: str | None = None
    started_at: int | None = None

    def to_dict(self) -> Json:
        return {"kind": self.kind, "id": self.id, "host": self.host, "started_at": self.started_at}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> SubmittedDriver | None:
        drv = doc.get("driver")
        if not isinstance(drv, Mapping) or not drv.get("id"):
            return None
        return cls(kind=str(drv["kind"]), id=str(drv["id"]), host=drv.get("host"), started_at=drv.get("started_at"))


@dataclass(frozen=True)
class BackupTaken:
    """What the audit keeps of the backup step: the backup's id (a DStream backup has none)."""

    backup_id: str | None

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> BackupTaken:
        return cls(backup_id=doc.get("backup_id"))


@dataclass(frozen=True)
class RollbackOutcome:
    """What the rollback did: the steps that failed, the driver it stopped, the backup it restored, the resubmit.

    ``restored``: the kind's own account of the restore (``restored_backup_id`` first, then what that
    kind adds: a ``restore`` summary, a ``restored_dstream_backup``), kept in its order.
    """

    job: str
    failed_steps: tuple[str, ...]
    notes: tuple[str, ...]
    restored: Mapping[str, Any]
    stopped: Mapping[str, Any] | None = None
    resubmitted: Mapping[str, Any] | None = None

    @property
    def restored_backup_id(self) -> str | None:
        return self.restored.get("restored_backup_id")

    @property
    def resubmitted_driver(self) -> SubmittedDriver | None:
        return from_xcom(SubmittedDriver, self.resubmitted)

    def to_dict(self) -> Json:
        out: Json = {"job": self.job, "failed_steps": list(self.failed_steps), "notes": list(self.notes)}
        if self.stopped is not None:
            out["stopped"] = dict(self.stopped)
        out.update(self.restored)
        out["resubmitted"] = None if self.resubmitted is None else dict(self.resubmitted)
        return out

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> RollbackOutcome:
        fixed = ("job", "failed_steps", "notes", "stopped", "resubmitted")
        return cls(job=doc["job"], failed_steps=tuple(doc["failed_steps"]), notes=tuple(doc["notes"]),
                   restored={k: v for k, v in doc.items() if k not in fixed}, stopped=doc.get("stopped"),
                   resubmitted=doc["resubmitted"])


@dataclass(frozen=True)
class VerdictSummary:
    """A validate step's verdict as the audit keeps it."""

    verdict: str | None
    headline: str | None
    overridden: Any

    def to_dict(self) -> Json:
        return {"verdict": self.verdict, "headline": self.headline, "overridden": self.overridden}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> VerdictSummary:
        return cls(verdict=doc.get("verdict"), headline=doc.get("headline"), overridden=doc.get("overridden"))


@dataclass(frozen=True)
class ChangeSummary:
    """A reset's or restore's result as the audit keeps it (keys without a value left out)."""

    dry_run: bool | None = None
    operation_id: str | None = None
    backup_id: str | None = None
    headline: str | None = None
    starting_offsets: Any = None
    aside_location: str | None = None

    def to_dict(self) -> Json:
        return {k: v for k, v in {"dry_run": self.dry_run, "operation_id": self.operation_id,
                                  "backup_id": self.backup_id, "headline": self.headline,
                                  "starting_offsets": self.starting_offsets,
                                  "aside_location": self.aside_location}.items() if v is not None}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> ChangeSummary:
        """From the step's XCom: the plan's headline is nested in its ``plan``."""
        plan = doc.get("plan") or {}
        return cls(dry_run=doc.get("dry_run"), operation_id=doc.get("operation_id"), backup_id=doc.get("backup_id"),
                   headline=plan.get("headline"), starting_offsets=doc.get("starting_offsets"),
                   aside_location=doc.get("aside_location"))


@dataclass(frozen=True)
class StopSummary:
    """A stop's result as the audit keeps it: every key present (None when the stop had none)."""

    outcome: str | None = None
    graceful: bool | None = None
    killed: bool | None = None
    last_committed: int | None = None
    replay_batch: int | None = None
    driver: Any = None

    def to_dict(self) -> Json:
        return {"outcome": self.outcome, "graceful": self.graceful, "killed": self.killed,
                "last_committed": self.last_committed, "replay_batch": self.replay_batch, "driver": self.driver}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> StopSummary:
        return cls(outcome=doc.get("outcome"), graceful=doc.get("graceful"), killed=doc.get("killed"),
                   last_committed=doc.get("last_committed"), replay_batch=doc.get("replay_batch"),
                   driver=doc.get("driver"))


@dataclass(frozen=True)
class HealthSummary:
    """The health gate's result as the audit keeps it: every key present (None when the gate had none)."""

    state: str | None = None
    reason: str | None = None
    new_batches: int | None = None
    last_committed: int | None = None
    lag_records: int | None = None
    status: str | None = None
    promoted: bool | None = None
    idle: bool | None = None
    dry_run: bool | None = None
    #: where the gate took its first look: "worker", or "triggerer" (started from the triggerer)
    first_look: str | None = None

    def to_dict(self) -> Json:
        return {"state": self.state, "reason": self.reason, "new_batches": self.new_batches,
                "last_committed": self.last_committed, "lag_records": self.lag_records, "status": self.status,
                "promoted": self.promoted, "idle": self.idle, "dry_run": self.dry_run, "first_look": self.first_look}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> HealthSummary:
        return cls(state=doc.get("state"), reason=doc.get("reason"), new_batches=doc.get("new_batches"),
                   last_committed=doc.get("last_committed"), lag_records=doc.get("lag_records"),
                   status=doc.get("status"), promoted=doc.get("promoted"), idle=doc.get("idle"),
                   dry_run=doc.get("dry_run"), first_look=doc.get("first_look"))


@dataclass(frozen=True)
class ApprovalSummary:
    """Who decided what on which numbers: the approval as the audit keeps it."""

    decision: str | None
    by: str | None
    comment: str | None
    at: Any
    max_records_skipped: Any
    request: Mapping[str, Any]

    def to_dict(self) -> Json:
        r = self.request
        return {"decision": self.decision, "by": self.by, "comment": self.comment, "at": self.at,
                "max_records_skipped": self.max_records_skipped, "reasons": r.get("reasons"),
                "shown": {"skipped": r.get("skipped"), "replayed": r.get("replayed"), "topics": r.get("topics"),
                          "codes": r.get("codes")}}

    @classmethod
    def _read(cls, doc: Mapping[str, Any]) -> ApprovalSummary:
        return cls(decision=doc.get("decision"), by=doc.get("by"), comment=doc.get("comment"), at=doc.get("at"),
                   max_records_skipped=doc.get("max_records_skipped"), request=doc.get("request") or {})


def _opt(value: Any) -> Any:
    return None if value is None else value.to_dict()


@dataclass(frozen=True)
class AuditEntry:
    """The run's audit entry: the finish task's XCom and the ``SAFE_RESTART`` event in the lifecycle record."""

    outcome: str
    job: str
    who: str
    reason: str | None
    plan: RestartPlan | None
    dry_run: bool
    run: str
    verdicts: tuple[VerdictSummary | None, VerdictSummary | None]    # before, after
    backup_id: str | None
    reset: ChangeSummary | None
    restore: ChangeSummary | None
    stop: StopSummary | None
    submitted_driver: SubmittedDriver | None
    health: HealthSummary | None
    rollback: RollbackOutcome | None
    approval: ApprovalSummary | None
    offsets_after: Any
    failures: Mapping[str, str]
    task_states: Mapping[str, str]
    pruned: tuple[str, ...] = ()   # backups the job's retention removed after the run (the finish task)

    def to_dict(self) -> Json:
        """The audit's document, keys in the order it has always had."""
        plan = self.plan
        probe = {k: v for k, v in ((plan.probe if plan else None) or {}).items() if k != "log_tail"} or None
        return {"outcome": self.outcome, "job": self.job, "who": self.who, "reason": self.reason,
                "mode": plan.mode if plan else None, "action": str(plan.action) if plan else None,
                "why": plan.why if plan else None, "probe": probe, "dry_run": self.dry_run, "run": self.run,
                "verdict_before": _opt(self.verdicts[0]), "verdict_after": _opt(self.verdicts[1]),
                "backup_id": self.backup_id, "reset": _opt(self.reset), "restore": _opt(self.restore),
                "stop": _opt(self.stop), "submitted_driver": _opt(self.submitted_driver),
                "health": _opt(self.health), "rollback": _opt(self.rollback), "approval": _opt(self.approval),
                "offsets_before": plan.offsets_before if plan else None, "offsets_after": self.offsets_after,
                "failures": dict(self.failures), "task_states": dict(self.task_states), "pruned": list(self.pruned)}

    def event_fields(self) -> Json:
        """What the lifecycle record's ``SAFE_RESTART`` event keeps besides its actor (``who``)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("task_states", "who")}
