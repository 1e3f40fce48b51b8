"""The job's own rhythm and its stall clock, from the checkpoint's offsets history (pure).

Part of the status rules of :mod:`airflow_kafka_spark.watch.status` (its docstring has them): how
long a batch may take before a job is STALLED or STOPPED when the registry says nothing (a multiple
of the median interval between batches, with a floor), and since when records have been waiting
(the stall clock starts at the last batch, or later when a broker sample or the oldest unread
record's timestamp proves the data arrived later: Burrow's PR #338).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.watch.lag_trend import job_lag

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.watch.lag import JobLag

STALL_FACTOR = 3
STALL_FLOOR_S = 30.0
STOPPED_FACTOR = 10
STOPPED_FLOOR_S = 300.0


def _age_limit(given: float | None, med_interval: float | None, factor: float, floor: float) -> tuple[float, str]:
    """A batch-age limit and where it came from: the threshold, else ``factor`` x the job's rhythm (>= floor)."""
    if given is not None:
        return float(given), "threshold"
    if med_interval is not None:
        return max(factor * med_interval, floor), "derived"
    return floor, "default (fewer than 2 timed batches)"


@dataclass(frozen=True)
class Rhythm:
    """The job's own rhythm: the median interval between batches and the age limits derived from it."""

    median_interval_s: float | None
    stall_after: float
    stall_source: str
    stopped_after: float
    stopped_source: str
    t_last: int | None
    age_s: float | None

    def numbers(self) -> dict[str, Any]:
        return {"median_batch_interval_s": self.median_interval_s, "stall_after_s": self.stall_after,
                "stall_after_source": self.stall_source, "stopped_after_s": self.stopped_after,
                "stopped_after_source": self.stopped_source, "last_batch_age_s": self.age_s}


def job_rhythm(timed: Sequence[BatchOffsets], stall_after_s: float | None, stopped_after_s: float | None,
               now_ms: int) -> Rhythm:
    """The rhythm of ``timed`` batches; ``stall_after_s`` / ``stopped_after_s``: the registry's thresholds, if any."""
    intervals = [
        (b.batch_timestamp_ms - a.batch_timestamp_ms) / 1000.0
        for a, b in pairwise(timed)
        if b.batch_timestamp_ms > a.batch_timestamp_ms
    ]
    med_interval = statistics.median(intervals) if intervals else None
    stall_after, stall_src = _age_limit(stall_after_s, med_interval, STALL_FACTOR, STALL_FLOOR_S)
    stopped_after, stopped_src = _age_limit(stopped_after_s, med_interval, STOPPED_FACTOR, STOPPED_FLOOR_S)
    t_last = max((b.batch_timestamp_ms for b in timed), default=None)
    return Rhythm(median_interval_s=med_interval, stall_after=stall_after, stall_source=stall_src,
                   stopped_after=max(stopped_after, stall_after), stopped_source=stopped_src, t_last=t_last,
                   age_s=(now_ms - t_last) / 1000.0 if t_last is not None else None)


def stall_clock(t_last: int | None, planned: PartitionOffsets, committed: PartitionOffsets | None,
                 samples: Sequence[tuple[int, PartitionOffsets]], current_lag: JobLag | None, now_ms: int,
                 allowed: int) -> tuple[int | None, float | None, str]:
    """Since when records have been waiting: (since ms, clock seconds, the evidence it starts from)."""
    waiting_since, evidence = t_last, "last batch"
    if t_last is not None:
        processed_all = committed is None or all(committed.get(tp) == off for tp, off in planned.items())
        quiet = [t for t, e in samples if t >= t_last and processed_all and job_lag(e, planned) <= allowed]
        if quiet and max(quiet) > waiting_since:
            waiting_since, evidence = max(quiet), "broker sample that showed nothing to read"
        if current_lag is not None:
            waiting = [p for p in current_lag.partitions if (p.records_effective or 0) > 0]
            stamps = [p.first_unread_ts_ms for p in waiting]
            if waiting and all(ts is not None for ts in stamps):
                oldest = min(min(ts for ts in stamps if ts is not None), now_ms)
                if oldest > waiting_since:
                    waiting_since, evidence = oldest, "timestamp of the oldest unread record"
    stall_clock_s = (now_ms - waiting_since) / 1000.0 if waiting_since is not None else None
    return waiting_since, stall_clock_s, evidence
