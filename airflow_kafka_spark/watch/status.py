"""Burrow-style status of a Structured Streaming job, without thresholds, from its checkpoint.

Burrow evaluates a consumer group over a sliding window of its last N offset commits (default 10)
and tells apart "slow" (WARN), "stuck" (STALL), "dead" (STOP) and "went backwards" (REWIND) without
any lag threshold. A Structured Streaming job commits nothing to Kafka (S23), but its checkpoint
keeps the same information: every ``offsets/<N>`` file holds the end offsets of batch N and
``batchTimestampMs``, the time the batch was planned. That history is the consumed side; the broker's
log end offsets at ``now`` are the produced side, and earlier broker samples (``previous_latest``,
kept by the caller from previous runs) show how the produced side moved.

Statuses, checked in this order (the first that applies wins):

``UNKNOWN``
    No batch in the history: the query has not planned anything yet. Not an alert.
``REWIND``
    Offsets went backwards and the job has not recovered, the broker's log end is below the job's
    position or below an earlier sample, or a partition is gone (:mod:`~airflow_kafka_spark.watch.rewind`).
    A log-end regression seen only in the newest sample yields ``WARN`` now and ``REWIND`` if the
    next run sees it again (S26).
``STOPPED`` / ``STALLED``
    Records wait (effective lag > ``allowed_lag_records``) and no batch has been planned for longer
    than ``stopped_after`` / ``stall_after``. The clock starts at the last batch, or later when there
    is evidence the data arrived later: a broker sample taken after the last batch that showed
    nothing to read, or the timestamp of the oldest unread record. That is Burrow's PR #338 fix for
    false STOPs on slow topics: a job that was idle for an hour is not stalled because one record
    arrived a second ago. Without such evidence the clock starts at the last batch (conservative:
    a job stuck for real must not be missed). Defaults are derived from the job's own rhythm, the
    median interval between batches in the history: ``stall_after = max(3 × median, 30 s)``
    (S30: "no new commit for > k × trigger interval") and ``stopped_after = max(10 × median,
    5 min)``, never below ``stall_after``. Thresholds from the job registry replace them.
``IDLE``
    Nothing to read (effective lag ≤ ``allowed_lag_records``) and no batch for longer than
    ``stall_after``: the topic is quiet. Not an alert; an explicit "idle, caught up" state instead
    of kafka-lag-exporter's NaN on idle partitions.
``WARN``
    (a) A user threshold is exceeded (``max_lag_records`` on the job's effective lag,
    ``max_lag_seconds`` on its largest time lag); or (b) lag is growing (below); or (c) a possible
    transient regression (see REWIND).
``OK``
    Otherwise.

Lag growing: three evaluators (broker samples, batch sizes, produce against consume rate) vote, as
Burrow's rule 5 with rule 1 (:mod:`~airflow_kafka_spark.watch.lag_trend`). Without earlier broker
samples the trend of a rate-limited job is unknown, and the result says so. The window is the last
``window`` (default 10, Burrow's ``intervals``) evaluations.

Caveats, to be validated on real jobs: ``batchTimestampMs`` is the driver's clock and ``now_ms`` the
caller's; one batch that legitimately runs longer than ``stall_after`` (a huge first batch after
downtime, S28) looks like a stall from the checkpoint alone — cross-check with the driver
(``StreamingQueryProgress``) before restarting anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark._util.text import fmt_duration
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.watch.lag_trend import LagTrend, lag_trend
from airflow_kafka_spark.watch.rewind import Rewinds, find_rewinds
from airflow_kafka_spark.watch.rhythm import Rhythm, job_rhythm, stall_clock

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.watch.lag import JobLag

DEFAULT_WINDOW = 10


class Status(StrEnum):
    OK = "OK"
    IDLE = "IDLE"
    UNKNOWN = "UNKNOWN"
    WARN = "WARN"
    STALLED = "STALLED"
    STOPPED = "STOPPED"
    REWIND = "REWIND"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def is_alert(self) -> bool:
        return self in (Status.WARN, Status.STALLED, Status.STOPPED, Status.REWIND)


_SEVERITY = {
    Status.OK: 0,
    Status.IDLE: 0,
    Status.UNKNOWN: 1,
    Status.WARN: 2,
    Status.STALLED: 3,
    Status.STOPPED: 4,
    Status.REWIND: 5,
}


@dataclass(frozen=True)
class StatusThresholds:
    """Per-job overrides from the job registry. All optional: without them the rules are threshold-free.

    ``allowed_lag_records`` is Burrow's ``allowed-lag`` (default 0). Leave it at 0 when the caller
    passes ``current_lag`` built with first-unread lookups (trailing transaction markers then count
    0); raise it to the number of partitions for transactional topics otherwise (S25).
    """

    max_lag_records: int | None = None
    max_lag_seconds: float | None = None
    stall_after_s: float | None = None
    stopped_after_s: float | None = None
    allowed_lag_records: int = 0
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        for name in ("max_lag_records", "max_lag_seconds", "stall_after_s", "stopped_after_s"):
            value = getattr(self, name)
            bad = isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            if value is not None and bad:
                raise UserError(f"status threshold {name} must be a positive number, got {value!r}")
        if (
            isinstance(self.allowed_lag_records, bool)
            or not isinstance(self.allowed_lag_records, int)
            or self.allowed_lag_records < 0
        ):
            raise UserError(f"allowed_lag_records must be an integer >= 0, got {self.allowed_lag_records!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 2:
            raise UserError(f"status window must be an integer >= 2, got {self.window!r}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> StatusThresholds:
        """From a job-registry entry; unknown keys are refused so a typo does not silently do nothing."""
        if not data:
            return cls()
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserError(f"unknown status threshold(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**{k: v for k, v in data.items() if v is not None})


@dataclass(frozen=True)
class PartitionStatus:
    tp: TopicPartition
    status: Status
    lag_records: int | None
    lag_records_effective: int | None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "status": str(self.status),
            "lag_records": self.lag_records,
            "lag_records_effective": self.lag_records_effective,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class JobStatus:
    """The status: one status, one reason line for a person, notes, and the numbers used.

    ``notes`` are plain lines (a recovered rewind, a transient regression, a blind trend): they are
    not :class:`~airflow_kafka_spark.verdict.findings.Finding` values, which are the verdict's
    (a code, a severity, a fix, per partition). "Finding" means only that; the JSON keeps its key
    ``findings`` for these lines (the CLI's ``--json``, the sensor's XCom and the UI read it).
    """

    status: Status
    reason: str
    evaluated_at_ms: int
    notes: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    partitions: list[PartitionStatus] = field(default_factory=list)

    @property
    def is_alert(self) -> bool:
        return self.status.is_alert

    @property
    def findings(self) -> list[str]:
        """The :attr:`notes`, under the name of their JSON key (kept for callers that read it)."""
        return self.notes

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": str(self.status),
            "is_alert": self.is_alert,
            "reason": self.reason,
            "evaluated_at_ms": self.evaluated_at_ms,
            "findings": list(self.notes),
            "numbers": self.numbers,
            "partitions": [p.to_dict() for p in self.partitions],
        }


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------


def evaluate_status(
    history: Sequence[BatchOffsets],
    broker_latest: PartitionOffsets,
    now_ms: int,
    *,
    previous_latest: Sequence[tuple[int, PartitionOffsets]] | None = None,
    thresholds: StatusThresholds | None = None,
    committed: PartitionOffsets | None = None,
    current_lag: JobLag | None = None,
) -> JobStatus:
    """Status of a job from its offsets history and the broker's log end offsets at ``now_ms``.

    ``history``: the checkpoint's ``offsets/N`` files (``CheckpointState.history``), any order.
    ``broker_latest``: ``BrokerState.latest`` sampled now. ``previous_latest``: earlier samples
    ``(sampled_at_ms, latest)`` from previous runs (any age; those inside the history's time span
    give exact lag evaluations, older ones the produce rate). ``committed``: ``C`` when known
    (``latest_committed.kafka_offsets``); without it the latest planned batch counts as processed.
    ``current_lag``: the :func:`~airflow_kafka_spark.watch.lag.compute_lag` result for now; it provides the
    effective lag (transaction markers not counted, S25), the time lag for ``max_lag_seconds`` and
    the oldest unread record's timestamp for the stall clock. The module docstring has the rules.
    """
    th = thresholds or StatusThresholds()
    batches = sorted((b for b in history if b.kafka_offsets), key=lambda b: b.batch_id)
    if not batches:
        return JobStatus(
            Status.UNKNOWN,
            "UNKNOWN: no batch in the checkpoint's offsets history yet",
            now_ms,
            numbers={"batches_in_history": 0},
        )
    latest = batches[-1]
    position = dict(committed) if committed is not None else dict(latest.kafka_offsets)
    timed = [b for b in batches if b.batch_timestamp_ms is not None]
    notes: list[str] = []
    numbers: dict[str, Any] = {
        "batches_in_history": len(batches),
        "last_batch_id": latest.batch_id,
        "last_batch_timestamp_ms": latest.batch_timestamp_ms,
        "position_basis": "committed" if committed is not None else "planned",
    }
    rhythm = job_rhythm(timed, th.stall_after_s, th.stopped_after_s, now_ms)
    numbers.update(rhythm.numbers())
    samples = sorted((t, dict(e)) for t, e in (previous_latest or ()) if t < now_ms)
    rewinds = find_rewinds(batches, position, broker_latest, samples)
    notes.extend(f"rewind {r}" for r in rewinds.recovered)
    numbers["rewind"] = {str(tp): line for tp, line in sorted(rewinds.rewind.items())}
    lag = _lag_now(position, broker_latest, current_lag, th, notes)
    numbers.update(lag_records=lag.raw_total, lag_records_effective=lag.effective_total, lag_seconds=lag.seconds)
    clock = stall_clock(rhythm.t_last, latest.kafka_offsets, committed, samples, current_lag, now_ms,
                         th.allowed_lag_records)
    numbers.update(waiting_since_ms=clock[0], stall_clock_s=clock[1], stall_clock_from=clock[2])
    trend = lag_trend(timed, [*samples, (now_ms, dict(broker_latest))], latest.kafka_offsets, now_ms,
                      allowed=th.allowed_lag_records, window=th.window)
    numbers.update(trend_mode=trend.mode, trend_growing=trend.growing, **trend.extra)
    status, reason = _verdict(rewinds, lag, rhythm, clock[1], trend, th, notes)
    parts = _partitions(status, position, rewinds, lag)
    return JobStatus(status, reason, now_ms, notes, numbers, parts)


@dataclass(frozen=True)
class _LagNow:
    """Lag now, per partition (raw and effective) and in total, and the time lag when known."""

    raw: Mapping[TopicPartition, int | None]
    effective: Mapping[TopicPartition, int | None]
    raw_total: int
    effective_total: int
    seconds: float | None


def _lag_now(position: PartitionOffsets, broker_latest: PartitionOffsets, current_lag: JobLag | None,
             th: StatusThresholds, notes: list[str]) -> _LagNow:
    if current_lag is not None:
        return _LagNow(raw={p.tp: p.records for p in current_lag.partitions},
                       effective={p.tp: p.records_effective for p in current_lag.partitions},
                       raw_total=current_lag.records, effective_total=current_lag.records_effective,
                       seconds=current_lag.seconds)
    raw = {tp: broker_latest[tp] - off if tp in broker_latest else None for tp, off in position.items()}
    total = sum(max(0, v) for v in raw.values() if v is not None)
    if th.max_lag_seconds is not None:
        notes.append("max_lag_seconds is set but the time lag is unknown (pass current_lag)")
    return _LagNow(raw=raw, effective={tp: max(0, v) if v is not None else None for tp, v in raw.items()},
                   raw_total=total, effective_total=total, seconds=None)


def _verdict(rewinds: Rewinds, lag: _LagNow, rhythm: Rhythm, stall_clock_s: float | None, trend: LagTrend,
             th: StatusThresholds, notes: list[str]) -> tuple[Status, str]:
    """The status and its reason line, in the module docstring's order; adds the notes that go with them."""
    rewind, transient = rewinds.rewind, rewinds.transient
    transient_lines = [
        f"possible transient regression (S26), REWIND if it persists: {line}" for _, line in sorted(transient.items())
    ]
    lag_eff, lag_s, age_s = lag.effective_total, lag.seconds, rhythm.age_s
    lagging = lag_eff > th.allowed_lag_records
    waits = f"{lag_eff} records wait" + (f" (oldest {fmt_duration(lag_s)} old)" if lag_s is not None else "")
    if rewind:
        status = Status.REWIND
        first = next(iter(sorted(rewind.items())))[1]
        reason = f"REWIND: {first}" + (f" (+{len(rewind) - 1} more partitions)" if len(rewind) > 1 else "")
    elif lagging and stall_clock_s is not None and stall_clock_s > rhythm.stopped_after:
        status = Status.STOPPED
        reason = (
            f"STOPPED: no new batch for {fmt_duration(age_s)}; {waits} since {fmt_duration(stall_clock_s)} "
            f"(> stopped_after {fmt_duration(rhythm.stopped_after)}, {rhythm.stopped_source})"
        )
    elif lagging and stall_clock_s is not None and stall_clock_s > rhythm.stall_after:
        status = Status.STALLED
        reason = (
            f"STALLED: no new batch for {fmt_duration(age_s)}; {waits} since {fmt_duration(stall_clock_s)} "
            f"(> stall_after {fmt_duration(rhythm.stall_after)}, {rhythm.stall_source})"
        )
    elif not lagging and age_s is not None and age_s > rhythm.stall_after:
        status = Status.IDLE
        reason = f"IDLE: caught up and no new data for {fmt_duration(age_s)} (not an alert)"
    else:
        status, reason = _ok_or_warn(lag, lagging, waits, trend, th, transient_lines, notes)
    if transient and status is not Status.WARN:
        notes.extend(transient_lines)
    if trend.mode in ("batch-sizes", "insufficient") and status in (Status.OK, Status.WARN):
        notes.append(
            f"lag trend from {trend.mode.replace('-', ' ')} only, blind to a rate-limited job "
            "falling behind: pass earlier broker samples (previous_latest)"
        )
    return status, reason


def _ok_or_warn(lag: _LagNow, lagging: bool, waits: str, trend: LagTrend, th: StatusThresholds,
                transient_lines: list[str], notes: list[str]) -> tuple[Status, str]:
    lag_eff, lag_s = lag.effective_total, lag.seconds
    warns: list[str] = []
    if th.max_lag_records is not None and lag_eff > th.max_lag_records:
        warns.append(f"lag {lag_eff} records > max_lag_records {th.max_lag_records}")
    if th.max_lag_seconds is not None and lag_s is not None and lag_s > th.max_lag_seconds:
        warns.append(f"lag {fmt_duration(lag_s)} > max_lag_seconds {fmt_duration(th.max_lag_seconds)}")
    if lagging and trend.growing and trend.reason:
        warns.append(trend.reason)
    warns.extend(transient_lines)
    if warns:
        notes.extend(warns[1:])
        return Status.WARN, f"WARN: {warns[0]}"
    if lagging and ("samples" in trend.mode or "rates" in trend.mode):
        return Status.OK, f"OK: {waits}, not growing"
    if lagging:
        return Status.OK, f"OK: {waits}; batch sizes do not grow (trend of a rate-limited job unknown)"
    return Status.OK, "OK: caught up"


def _partitions(status: Status, position: PartitionOffsets, rewinds: Rewinds, lag: _LagNow
                ) -> list[PartitionStatus]:
    rewind, transient = rewinds.rewind, rewinds.transient
    parts: list[PartitionStatus] = []
    for tp in sorted(set(position) | set(rewind)):
        p_raw, p_eff = lag.raw.get(tp), lag.effective.get(tp)
        if tp in rewind:
            parts.append(PartitionStatus(tp, Status.REWIND, p_raw, p_eff, rewind[tp]))
        elif tp in transient:
            parts.append(PartitionStatus(tp, Status.WARN, p_raw, p_eff, transient[tp]))
        elif status in (Status.STALLED, Status.STOPPED, Status.WARN) and (p_eff or 0) > 0:
            parts.append(PartitionStatus(tp, status, p_raw, p_eff))
        elif status is Status.IDLE:
            parts.append(PartitionStatus(tp, Status.IDLE, p_raw, p_eff))
        else:
            parts.append(PartitionStatus(tp, Status.OK, p_raw, p_eff))
    return parts
