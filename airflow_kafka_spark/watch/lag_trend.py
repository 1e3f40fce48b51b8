"""Is a job's lag growing? Burrow's "lag never decreased over the window", from the checkpoint.

Burrow warns when the lag never decreased over the window (rule 5) unless some evaluation in the
window had lag ≤ allowed (rule 1). Three evaluators look at the lag from the data the caller has;
each one with enough data votes, and one "growing" vote is enough
(:func:`~airflow_kafka_spark.watch.status.evaluate_status` turns it into a WARN):

* ``samples``: at least 3 broker samples (previous ones plus now) inside the time span of the
  history, each giving the exact job lag at its time, ``log end − end offsets of the latest batch
  planned by then``. Growing = no evaluation at or below the allowed lag, every step
  non-decreasing, and a total growth larger than one median batch. The last condition is ours:
  between two batches the lag rises and falls by up to one batch (a sawtooth), so three samples of
  a healthy job increase by chance one time in six; a job that falls behind gains more than a batch.
  This is what sees a rate-limited job (``maxOffsetsPerTrigger``) falling behind (S23).
* ``batch-sizes``: at least 5 batches. The size of batch N is the lag when it was planned, exactly
  so without a rate limit (Spark plans everything available): Burrow's "lag at commit time".
  Growing = every size ≥ the previous one and the last > the first: a job without a rate limit that
  is too slow takes ever larger batches. This is what sees such a job; broker samples cannot, since
  its lag against the planned position drops to ~0 at every plan. A rate-limited job at its limit
  takes equal batches whatever the backlog does, so this evaluator is blind to it.
* ``rates``: when the samples are too few but an earlier broker sample exists (a previous audit run,
  any age), the produce rate since that sample against the consumption rate over the window.
  Growing = produce rate > consumption rate and more than two median batches waiting now.

Without earlier samples the trend of a rate-limited job is unknown, and the result says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark._util.text import fmt_duration

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets
    from airflow_kafka_spark.kafka.offsets import PartitionOffsets

MIN_SAMPLE_EVALUATIONS = 3
MIN_BATCH_EVALUATIONS = 5


def job_lag(log_end: PartitionOffsets, position: PartitionOffsets) -> int:
    """Σ max(0, log_end − position) over the partitions both know."""
    return sum(max(0, log_end[tp] - off) for tp, off in position.items() if tp in log_end)


def batch_size(prev: PartitionOffsets, cur: PartitionOffsets) -> int:
    """Records planned by a batch; partitions new in ``cur`` are left out (their start is unknown)."""
    return sum(max(0, off - prev[tp]) for tp, off in cur.items() if tp in prev)


def position_at(timed: Sequence[BatchOffsets], t_ms: int) -> PartitionOffsets | None:
    """End offsets of the latest batch planned at or before ``t_ms`` (None if before the history)."""
    found = None
    for b in timed:
        if b.batch_timestamp_ms is not None and b.batch_timestamp_ms <= t_ms:
            found = b.kafka_offsets
        else:
            break
    return found


@dataclass(frozen=True)
class LagTrend:
    growing: bool
    mode: str  # evaluators that had enough data, e.g. "samples+batch-sizes"
    reason: str | None
    extra: dict[str, Any]


def _non_decreasing(vals: Sequence[int]) -> bool:
    return all(b >= a for a, b in pairwise(vals))


def lag_trend(
    timed: Sequence[BatchOffsets],
    samples: Sequence[tuple[int, PartitionOffsets]],
    planned: PartitionOffsets,
    now_ms: int,
    *,
    allowed: int,
    window: int,
) -> LagTrend:
    """Is the lag growing? Each evaluator that has enough data votes; one "growing" is enough.

    ``timed``: the batches with a timestamp, in batch order; ``samples``: broker log ends
    ``(sampled_at_ms, latest)``, oldest first, the last one taken at ``now_ms``; ``allowed`` and
    ``window``: Burrow's allowed lag and number of evaluations (``StatusThresholds``).
    """
    sizes = [(b.batch_timestamp_ms or 0, batch_size(a.kafka_offsets, b.kafka_offsets)) for a, b in pairwise(timed)][
        -window:
    ]
    med_batch = statistics.median([s for _, s in sizes]) if sizes else 0.0
    modes: list[str] = []
    reasons: list[str] = []

    # samples: exact lag at each broker sample inside the history's span.
    evals: list[tuple[int, int]] = []
    for t, log_end in samples:
        pos = planned if t == now_ms else position_at(timed, t)
        if pos is not None:
            evals.append((t, job_lag(log_end, pos)))
    evals = evals[-window:]
    extra: dict[str, Any] = {
        "median_batch_records": med_batch,
        "evaluations": [[t, v] for t, v in evals],
        "batch_sizes": [[t, v] for t, v in sizes],
    }
    if len(evals) >= MIN_SAMPLE_EVALUATIONS:
        modes.append("samples")
        vals = [v for _, v in evals]
        growth = vals[-1] - vals[0]
        if min(vals) > allowed and _non_decreasing(vals) and growth > max(allowed, med_batch):
            span = (evals[-1][0] - evals[0][0]) / 1000.0
            reasons.append(
                f"lag grew at every one of {len(vals)} evaluations, from {vals[0]} to "
                f"{vals[-1]} records in {fmt_duration(span)} (+{growth}, more than one median batch "
                f"of {med_batch:g})"
            )

    # batch sizes: the lag each batch found when it was planned (exact without a rate limit).
    if len(sizes) >= MIN_BATCH_EVALUATIONS:
        modes.append("batch-sizes")
        vals = [v for _, v in sizes]
        if min(vals) > allowed and _non_decreasing(vals) and vals[-1] > vals[0]:
            reasons.append(
                f"each of the last {len(vals)} batches took at least as many records as the one "
                f"before, from {vals[0]} to {vals[-1]}: the job falls behind"
            )

    # rates: an older broker sample gives the produce rate when the samples alone are too few.
    if "samples" not in modes:
        rates = _rates_vote(timed, samples, planned, now_ms, allowed=allowed, window=window, med_batch=med_batch)
        if rates is not None:
            numbers, voted, reason = rates
            extra.update(numbers)
            if voted:
                modes.append("rates")
            if reason:
                reasons.append(reason)
    return LagTrend(bool(reasons), "+".join(modes) or "insufficient", reasons[0] if reasons else None, extra)


def _rates_vote(timed: Sequence[BatchOffsets], samples: Sequence[tuple[int, PartitionOffsets]],
                planned: PartitionOffsets, now_ms: int, *, allowed: int, window: int, med_batch: float
                ) -> tuple[dict[str, Any], bool, str | None] | None:
    """Produce rate (from an older broker sample) against consume rate (over the window's batches).

    None without an older sample or two batches in the window; else (numbers, whether both rates are
    known so the evaluator votes, the reason when it says "growing").
    """
    prev = [(t, e) for t, e in samples if t < now_ms]
    window_batches = timed[-(window + 1) :]
    if not prev or len(window_batches) < 2:
        return None
    t0 = window_batches[0].batch_timestamp_ms or 0
    t1 = window_batches[-1].batch_timestamp_ms or 0
    inside = [s for s in prev if s[0] >= t0]
    ref_t, ref = inside[0] if inside else prev[-1]
    now_end = samples[-1][1]
    produced = sum(now_end[tp] - ref[tp] for tp in now_end if tp in ref and now_end[tp] >= ref[tp])
    r_p = produced / ((now_ms - ref_t) / 1000.0) if now_ms > ref_t else None
    r_c = (
        (batch_size(window_batches[0].kafka_offsets, window_batches[-1].kafka_offsets) / ((t1 - t0) / 1000.0))
        if t1 > t0
        else None
    )
    waiting = job_lag(now_end, planned)
    numbers = {"produce_rate": r_p, "consume_rate": r_c, "waiting_records": waiting}
    if r_p is None or r_c is None:
        return numbers, False, None
    if r_p > r_c and waiting > max(allowed, 2 * med_batch):
        return numbers, True, (
            f"produced {r_p:.1f} rec/s against {r_c:.1f} rec/s consumed over the window, "
            f"and {waiting} records wait (more than two median batches of {med_batch:g}): "
            f"lag grows ~{r_p - r_c:.1f} rec/s"
        )
    return numbers, True, None
