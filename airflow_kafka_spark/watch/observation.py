"""What one look at a job found: the :class:`Observation` every watching surface prints or stores, and its samples.

Pure values (no I/O), apart from :mod:`.observe` that takes the look: the CLI, the lag sensor and
trigger, and the audit all read these, so the JSON shape and the alert rules live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from airflow_kafka_spark._util.text import fmt_duration
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.verdict.findings import Finding
from airflow_kafka_spark.watch.catch_up import CatchUpEstimate
from airflow_kafka_spark.watch.headroom import JobHeadroom
from airflow_kafka_spark.watch.lag import JobLag
from airflow_kafka_spark.watch.status import JobStatus, Status, StatusThresholds

Source = Literal["checkpoint", "group"]

#: Statuses that mean "someone must look now". WARN (slow, growing) and IDLE are reported, not
#: alerted: a WARN that lasts becomes STALLED or eats into the headroom, which alerts on its own.
ALERT_STATUSES = frozenset({Status.STALLED, Status.STOPPED, Status.REWIND})
#: How many earlier samples a caller should keep: the status window (10) plus room for the
#: "rates" evaluator's older reference point.
KEEP_SAMPLES = 30


# --------------------------------------------------------------------------------------------------
# samples: the produced side over time
# --------------------------------------------------------------------------------------------------


def offsets_to_doc(offsets: Mapping[TopicPartition, int] | None) -> dict[str, dict[str, int]] | None:
    """``{"topic": {"0": 12}}``: JSON keys must be strings, and this is Spark's own shape."""
    if offsets is None:
        return None
    doc: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return doc


def offsets_from_doc(doc: Mapping[str, Mapping[str, int]] | None) -> PartitionOffsets | None:
    if doc is None:
        return None
    return {TopicPartition(str(t), int(p)): int(o) for t, parts in doc.items() for p, o in parts.items()}


@dataclass(frozen=True)
class Sample:
    """What the broker (and, for a group, the group) said at ``at_ms``. Kept between observations."""

    at_ms: int
    latest: PartitionOffsets
    position: PartitionOffsets | None = None   # the job's position then (groups: their history)

    def to_dict(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "latest": offsets_to_doc(self.latest),
                "position": offsets_to_doc(self.position)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Sample:
        return cls(at_ms=int(doc["at_ms"]), latest=offsets_from_doc(doc.get("latest")) or {},
                   position=offsets_from_doc(doc.get("position")))


def keep_recent(samples: Sequence[Sample], new: Sample | None = None, *, keep: int = KEEP_SAMPLES) -> list[Sample]:
    """The newest ``keep`` samples in time order, ``new`` included: what a caller carries forward."""
    found = sorted([*samples, *([new] if new is not None else [])], key=lambda s: s.at_ms)
    return found[-keep:]


# --------------------------------------------------------------------------------------------------
# the observation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Alert:
    """A reason to fail a check or page someone: a stable code and one line for a person."""

    code: str            # STALLED, STOPPED, REWIND, HEADROOM_LOW, DATA_LOST, LAG_RECORDS, LAG_SECONDS ...
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Observation:
    """One look at a job. ``to_dict()`` is the JSON every surface prints or stores."""

    job: str | None
    source: Source
    subject: str                         # checkpoint location or group id
    observed_at_ms: int                  # = the broker sample time, the "now" of every number
    position: PartitionOffsets           # C (or P with basis=planned, or the group's offsets)
    broker: BrokerState
    lag: JobLag
    status: JobStatus
    headroom: JobHeadroom
    catch_up: CatchUpEstimate
    sample: Sample
    thresholds: StatusThresholds
    last_planned_batch: int | None = None
    last_committed_batch: int | None = None
    last_batch_timestamp_ms: int | None = None
    probe_seconds: float = 0.0
    unprobed: list[TopicPartition] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # A reset/restore killed half-way beside the checkpoint (the verdict's INTERRUPTED_OPERATION BLOCK):
    # lag, validate, the audit and the UI all show it, so nobody deploys onto a checkpoint about to move.
    interrupted: Finding | None = None

    @property
    def last_batch_age_s(self) -> float | None:
        if self.last_batch_timestamp_ms is None:
            return None
        return max(0.0, (self.observed_at_ms - self.last_batch_timestamp_ms) / 1000.0)

    def lag_within(self, max_records: int | None = None, max_seconds: float | None = None) -> tuple[bool, str]:
        """Is the lag at or under both limits? (A limit of None is not checked.)

        Records are the *effective* lag (trailing transaction markers do not count, S25). An unknown
        time lag never satisfies a seconds limit: "unknown" must not open a gate.
        """
        if max_records is None and max_seconds is None:
            raise UserError("no lag limit to compare with: set max_lag_records and/or max_lag_seconds "
                            "(in the job registry or on the sensor)")
        reasons: list[str] = []
        if self.lag.missing:
            reasons.append(f"partitions not on the broker: {', '.join(map(str, self.lag.missing))}")
        if max_records is not None and self.lag.records_effective > max_records:
            reasons.append(f"lag {self.lag.records_effective} records > {max_records}")
        if max_seconds is not None:
            if self.lag.seconds is None:
                reasons.append("time lag unknown")
            elif self.lag.seconds > max_seconds:
                reasons.append(f"lag {self.lag.seconds:.1f} s > {max_seconds:g} s")
        if reasons:
            return False, "; ".join(reasons)
        return True, (f"lag {self.lag.records_effective} records, "
                      f"{'?' if self.lag.seconds is None else f'{self.lag.seconds:.1f}'} s: within limits")

    def alerts(self, *, min_headroom_s: float | None = None) -> list[Alert]:
        """Why this job needs attention now (empty: it does not). Shared by the audit and the CLI.

        Stalled/stopped/rewound jobs, records already lost to retention, and a retention headroom
        under ``min_headroom_s``. Lag over ``max_lag_*`` is a WARN status, not an alert: a job that
        catches up after a deploy is slow on purpose for a while.
        """
        out: list[Alert] = []
        if self.interrupted is not None:
            out.append(Alert(self.interrupted.code, self.interrupted.message))
        if self.status.status in ALERT_STATUSES:
            prefix = f"{self.status.status}: "
            reason = self.status.reason
            out.append(Alert(str(self.status.status), reason[len(prefix):] if reason.startswith(prefix) else reason))
        if self.headroom.lost_records:
            out.append(Alert("DATA_LOST", f"{self.headroom.lost_records} records the job had not read were "
                                          "already deleted by retention (S01)"))
        elif min_headroom_s is not None:
            low = self._lowest_headroom()
            if low is not None and low[0] < min_headroom_s:
                seconds, tp, by, partial = low
                extra = " (size retention not computable, so possibly sooner)" if partial else ""
                out.append(Alert("HEADROOM_LOW", f"retention deletes unread records on {tp} in "
                                                 f"{fmt_duration(seconds)} (< min_headroom_s "
                                                 f"{fmt_duration(min_headroom_s)}, by {by}){extra}"))
        return out

    def _lowest_headroom(self) -> tuple[float, TopicPartition, str, bool] | None:
        """(seconds, partition, "time"/"size", partial) of the soonest known deletion.

        A partition whose headroom is "unknown" (e.g. ``retention.bytes`` set but its size not
        readable) still has a by-time estimate, and deletion comes no later than time retention's
        (size can only make it sooner): so a low by-time figure still raises HEADROOM_LOW, marked
        partial. An unknown alone never alerts (the
        audit lists it as a warning): a threshold must not fire on what could not be measured.
        """
        found: list[tuple[float, TopicPartition, str, bool]] = []
        for p in self.headroom.partitions:
            if p.seconds is not None:
                found.append((p.seconds, p.tp, p.limited_by or "time", False))
                continue
            for value, kind in ((p.by_time_s, "time"), (p.by_size_s, "size")):
                if value is not None and p.unknown is not None:
                    found.append((value, p.tp, kind, True))
        return min(found, key=lambda f: (f[0], f[1]), default=None)

    def summary(self) -> dict[str, Any]:
        """The few numbers a table row or an XCom needs."""
        return {
            "job": self.job, "source": self.source, "subject": self.subject,
            "observed_at_ms": self.observed_at_ms, "status": str(self.status.status),
            "reason": self.status.reason, "lag_records": self.lag.records,
            "lag_records_effective": self.lag.records_effective, "lag_seconds": self.lag.seconds,
            "headroom_s": self.headroom.seconds, "headroom_infinite": self.headroom.infinite,
            "lost_records": self.headroom.lost_records, "catch_up_s": self.catch_up.seconds,
            "catch_up_never": self.catch_up.never, "last_committed_batch": self.last_committed_batch,
            "last_batch_age_s": self.last_batch_age_s,
            "interrupted_operation": None if self.interrupted is None else self.interrupted.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary(),
            "position": offsets_to_doc(self.position),
            "last_planned_batch": self.last_planned_batch,
            "last_batch_timestamp_ms": self.last_batch_timestamp_ms,
            "cluster_id": self.broker.cluster_id,
            "missing_topics": list(self.broker.missing_topics),
            "thresholds": asdict(self.thresholds),
            "lag": self.lag.to_dict(),
            "status_detail": self.status.to_dict(),
            "headroom": self.headroom.to_dict(),
            "catch_up": self.catch_up.to_dict(),
            "sample": self.sample.to_dict(),
            "probe_seconds": round(self.probe_seconds, 3),
            "unprobed": [str(tp) for tp in self.unprobed],
            "notes": list(self.notes),
        }


def lag_gate(obs: Observation, *, max_lag_records: int | None, max_lag_seconds: float | None,
             fail_on_alert: bool = False) -> dict[str, Any] | None:
    """The sensor's decision for one observation: an event dict when it is done, None to keep waiting.

    ``status`` is ``success`` (lag within the limits) or ``failed`` (``fail_on_alert`` and the job is
    STALLED/STOPPED/REWIND: waiting longer cannot help). The dict is what the trigger yields and
    what the sensor returns, so XCom looks the same in poke and deferrable mode.
    """
    base = {"job": obs.job, "observation": obs.summary()}
    if fail_on_alert and obs.status.status in ALERT_STATUSES:
        return {**base, "status": "failed", "message": f"job {obs.job}: {obs.status.reason}"}
    ok, why = obs.lag_within(max_lag_records, max_lag_seconds)
    if ok:
        return {**base, "status": "success", "message": f"job {obs.job}: {why}"}
    return None


