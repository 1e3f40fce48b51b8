"""What a query's offsets history says about its throughput: records per batch and records per second.

One home for the arithmetic the catch-up estimate (watch) and the first-batch warning (verdict, S28)
both need; it depends on the offsets log alone, so it sits with the checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_kafka_spark.checkpoint.model import BatchOffsets


def records_between(a: BatchOffsets, b: BatchOffsets) -> int:
    """Records planned from batch ``a``'s end offsets to batch ``b``'s, over the partitions both know."""
    prev = a.kafka_offsets
    return sum(max(0, off - prev[tp]) for tp, off in b.kafka_offsets.items() if tp in prev)


def processing_rates(history: Sequence[BatchOffsets], *, window: int = 10) -> tuple[float | None, float | None]:
    """(average, peak) records/s consumed over the last ``window`` batches of the offsets history.

    Average: records planned between the first and last batch of the window ÷ the time between them:
    the observed throughput — equal to the produce rate for a job that keeps up, so only a lower
    bound of what the job *can* do. Peak: the best single batch, ``size(N) ÷ (ts(N+1) − ts(N))``:
    batch N+1 is planned only after batch N finished, so that is at most the rate batch N really ran
    at — still a lower bound of capacity, and the closest one the checkpoint alone can give.
    """
    timed = sorted((b for b in history if b.batch_timestamp_ms is not None and b.kafka_offsets),
                   key=lambda b: b.batch_id)[-(window + 1):]
    if len(timed) < 2:
        return None, None

    def ts(b: BatchOffsets) -> int:
        return b.batch_timestamp_ms or 0

    span = (ts(timed[-1]) - ts(timed[0])) / 1000.0
    average = records_between(timed[0], timed[-1]) / span if span > 0 else None
    peaks = [records_between(a, b) / ((ts(c) - ts(b)) / 1000.0)
             for a, b, c in zip(timed, timed[1:], timed[2:], strict=False) if ts(c) > ts(b)]
    return average, max(peaks, default=None)
