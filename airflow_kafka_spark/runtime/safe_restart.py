"""What a safe restart does, decided from plain values: the mode's action, the rollback's restore rule, the outcome.

``auto`` decides whether the new application breaks the checkpoint: a changed
``compatibility_version`` says so explicitly (an override, always obeyed); otherwise, for a job
with ``compatibility_probe`` in the registry (a user's unchanged job under the agent, which swaps
its sink by configuration, or a reference job implementing ``--aks-probe``), Spark says so through
the compatibility probe (:mod:`airflow_kafka_spark.runtime.probe`): ``breaking``
resets with ``preserve``, ``compatible`` keeps, ``unknown`` stops the run before anything changes
(an :class:`~airflow_kafka_spark.errors.OperationBlocked`, ``COMPATIBILITY_UNKNOWN``) and says why and
what to choose instead: a deploy whose effect on the checkpoint nobody knows is not guessed at.

Why apart from the operators of the ``streaming_safe_restart`` DAG: these are product rules (a
changed ``compatibility_version`` means checkpoint-breaking, so reset with ``preserve``; a BLOCK
before the change is tolerable only when the run replaces the checkpoint anyway), and they must be
testable without Airflow. The decision crosses from the plan task to every later step, so it is a
typed value (:class:`RestartDecision`), turned into XCom's JSON only at the Airflow edge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.names import validate_backup_id
from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.ops.reset_plan import parse_datetime
from airflow_kafka_spark.runtime.probe import ProbeAnswer, ProbeResult


class RestartMode(StrEnum):
    """The ``mode`` of the safe-restart trigger form."""

    AUTO = "auto"
    KEEP = "keep"
    RESET_PRESERVE = "reset-preserve"
    RESET_EARLIEST = "reset-earliest"
    RESET_LATEST = "reset-latest"
    RESET_TO_DATETIME = "reset-to-datetime"
    RESTORE = "restore"


class RestartAction(StrEnum):
    """What the run does to the checkpoint between the stop and the new submit."""

    KEEP = "keep"
    RESET = "reset"
    RESTORE = "restore"


RESET_MODE_OF: Mapping[RestartMode, ResetMode] = {
    RestartMode.RESET_PRESERVE: ResetMode.PRESERVE, RestartMode.RESET_EARLIEST: ResetMode.EARLIEST,
    RestartMode.RESET_LATEST: ResetMode.LATEST, RestartMode.RESET_TO_DATETIME: ResetMode.TO_DATETIME}


@dataclass(frozen=True)
class RestartDecision:
    """What a safe-restart mode means for this job now; ``why`` is one line for the audit entry."""

    action: RestartAction
    why: str
    reset_mode: ResetMode | None = None
    restore_backup_id: str | None = None
    to_datetime: str | None = None
    probe: ProbeResult | None = None

    @property
    def tolerate_block(self) -> bool:
        """A BLOCK on the current checkpoint cannot stop a run that replaces it: the reset plan and the
        restore judge their own result (and refuse data loss unless accepted)."""
        return self.action in (RestartAction.RESET, RestartAction.RESTORE)

    def to_dict(self) -> dict[str, Any]:
        """The plan's JSON (XCom): plain strings, in the order the plan has always had."""
        return {"action": str(self.action), "reset_mode": None if self.reset_mode is None else str(self.reset_mode),
                "restore_backup_id": self.restore_backup_id, "to_datetime": self.to_datetime, "why": self.why,
                "tolerate_block": self.tolerate_block,
                "probe": None if self.probe is None else self.probe.to_dict()}


def wants_probe(mode: str, *, enabled: bool, registry_compat: str, recorded_compat: str | None) -> bool:
    """Whether ``auto`` must ask the compatibility probe: enabled for the job, and no explicit bump decides."""
    return mode == RestartMode.AUTO and enabled and (recorded_compat is None or recorded_compat == registry_compat)


def decide(mode: str, *, registry_compat: str, recorded_compat: str | None, backup_id: str | None = None,
           when: str | None = None, probe: ProbeResult | None = None) -> RestartDecision:
    """The :class:`RestartDecision` for ``mode``; a bad mode, backup id or datetime is a UserError.

    ``probe``: the compatibility probe's answer for the new application (``auto`` only; see
    :func:`wants_probe`). A changed ``compatibility_version`` overrides it.
    """
    try:
        chosen = RestartMode(mode)
    except ValueError:
        raise UserError(f"mode {mode!r} is not one of {', '.join(RestartMode)}") from None
    if chosen is RestartMode.AUTO:
        if recorded_compat is not None and recorded_compat != registry_compat:
            return RestartDecision(
                RestartAction.RESET, f"auto: compatibility_version changed from {recorded_compat!r} to "
                f"{registry_compat!r} (checkpoint-breaking): reset with preserve, the new query continues where the "
                "old one committed", reset_mode=ResetMode.PRESERVE, probe=probe)
        if probe is not None:
            return _auto_by_probe(probe)
        if recorded_compat is None:
            return RestartDecision(RestartAction.KEEP, "auto: no application of this job has passed a health gate "
                                   "yet, nothing to compare with: keep the checkpoint")
        return RestartDecision(RestartAction.KEEP,
                               f"auto: compatibility_version {registry_compat!r} unchanged: keep the checkpoint")
    if chosen is RestartMode.KEEP:
        return RestartDecision(RestartAction.KEEP, "keep: restart on the existing checkpoint")
    if chosen is RestartMode.RESTORE:
        if backup_id is None:
            raise UserError("mode restore needs backup_id: the id of one of the job's backups (see the backup task "
                            "of an earlier run, or `aks backups --job <job>`)")
        return RestartDecision(RestartAction.RESTORE, f"restore: roll the checkpoint back to backup {backup_id}",
                               restore_backup_id=validate_backup_id(backup_id))
    reset_mode = RESET_MODE_OF[chosen]
    to_datetime = None
    if reset_mode is ResetMode.TO_DATETIME:
        if when is None:
            raise UserError("mode reset-to-datetime needs datetime, e.g. 2026-01-31T12:00:00Z")
        parse_datetime(when)    # bad input fails here, before anything is touched
        to_datetime = when
    return RestartDecision(RestartAction.RESET, f"{chosen}: reset the checkpoint ({reset_mode})",
                           reset_mode=reset_mode, to_datetime=to_datetime)


def _auto_by_probe(probe: ProbeResult) -> RestartDecision:
    if probe.answer is ProbeAnswer.BREAKING:
        return RestartDecision(
            RestartAction.RESET, f"auto: the compatibility probe says checkpoint-breaking ({probe.reason}): reset "
            "with preserve, the new query continues where the old one committed", reset_mode=ResetMode.PRESERVE,
            probe=probe)
    if probe.answer is ProbeAnswer.COMPATIBLE:
        return RestartDecision(RestartAction.KEEP, f"auto: the compatibility probe says compatible ({probe.reason}): "
                               "keep the checkpoint", probe=probe)
    raise OperationBlocked(
        f"auto: the compatibility probe could not tell whether the new application runs on the checkpoint "
        f"({probe.reason}); nothing was changed. Trigger again with mode keep (the health gate and the rollback "
        "guard the start) or reset-preserve, or bump compatibility_version", reason=BlockReason.COMPATIBILITY_UNKNOWN,
        details={"probe": probe.to_dict()})


def run_lease_ttl_s(stop_timeout_s: float, health_gate_timeout_s: float) -> float:
    """Long enough for a whole run: two stops, the health gate, and time for backups and Spark starts."""
    return 2 * stop_timeout_s + health_gate_timeout_s + 1800.0


def unchanged_since_backup(position: Mapping[str, Any], *, query_id: str | None, last_committed_batch: int | None,
                           pending_batch: int | None, next_starting_offsets: bool) -> bool:
    """Whether the checkpoint still stands where the backup left it, so a rollback need not restore it.

    ``position``: where the job stands now (query id, last committed and planned batch). Pending
    starting offsets left by a reset count as a change.
    """
    return (position["query_id"] == query_id
            and position["last_committed_batch"] == last_committed_batch
            and position["last_planned_batch"] in (last_committed_batch, pending_batch)
            and not next_starting_offsets)
