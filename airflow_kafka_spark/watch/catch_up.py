"""How long until a job's backlog is gone: ``backlog ÷ (processing rate − produce rate)``.

``None`` (never) when the job does not process faster than the topic grows. A separate question
from retention headroom (:mod:`.headroom`): headroom is the downtime budget, catch-up the time to be
current again once running; both read the same offsets history and broker samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.checkpoint.throughput import processing_rates
from airflow_kafka_spark.watch.lag import produce_rates
from airflow_kafka_spark.watch.offset_time import OffsetSample

if TYPE_CHECKING:
    from airflow_kafka_spark.checkpoint.model import BatchOffsets


@dataclass(frozen=True)
class CatchUpEstimate:
    """How long until the backlog is gone, and how the first batches will look (S28)."""

    backlog_records: int
    processing_rate: float | None           # records/s
    processing_rate_source: str
    produce_rate: float | None              # records/s
    produce_rate_source: str
    seconds: float | None                   # None: never (see ``never``) or unknown
    never: bool                             # processing ≤ produce: the backlog does not shrink
    first_batch_records: int | None         # what the next batch takes (all of it without a rate limit)
    batches: int | None                     # batches to drain the current backlog with maxOffsetsPerTrigger
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backlog_records": self.backlog_records, "processing_rate": self.processing_rate,
            "processing_rate_source": self.processing_rate_source, "produce_rate": self.produce_rate,
            "produce_rate_source": self.produce_rate_source, "seconds": self.seconds, "never": self.never,
            "first_batch_records": self.first_batch_records, "batches": self.batches,
            "notes": list(self.notes),
        }


def estimate_catch_up(
    backlog_records: int,
    *,
    processing_rate: float | None = None,
    produce_rate: float | None = None,
    history: Sequence[BatchOffsets] | None = None,
    samples: Sequence[OffsetSample] | None = None,
    max_offsets_per_trigger: int | None = None,
) -> CatchUpEstimate:
    """Catch-up time = backlog ÷ (processing rate − produce rate).

    ``processing_rate`` (records/s) is best taken from the job itself (``processedRowsPerSecond``
    of ``StreamingQueryProgress`` while it was busy); otherwise it is the peak batch rate of the
    ``history`` (:func:`checkpoint.throughput.processing_rates`), which underestimates a job that was never
    busy, so "never" from history alone may be wrong — the notes say so. ``produce_rate`` (records/s):
    given, or between the first and last of ``samples`` (summed over partitions); unknown counts as 0
    with a note (optimistic). ``max_offsets_per_trigger`` gives the number of batches (S28: "≈ 10
    batches" instead of one gigantic batch).
    """
    notes: list[str] = []
    backlog = max(0, backlog_records)
    if processing_rate is not None:
        proc, proc_src = float(processing_rate), "given"
    else:
        avg, peak = processing_rates(history or ())
        if peak is not None:
            proc, proc_src = peak, "history: peak batch rate (a lower bound of capacity)"
        elif avg is not None:
            proc, proc_src = avg, "history: average over the window (a lower bound of capacity)"
        else:
            proc, proc_src = None, "unknown"
    if produce_rate is not None:
        prod, prod_src = float(produce_rate), "given"
    elif samples and len(samples) >= 2:
        prod, prod_src = sum(produce_rates(samples).values()), "broker samples"
    else:
        prod, prod_src = None, "unknown (counted as 0: optimistic)"

    if max_offsets_per_trigger is not None and max_offsets_per_trigger > 0:
        first_batch = min(backlog, max_offsets_per_trigger)
        batches = math.ceil(backlog / max_offsets_per_trigger)
    else:
        first_batch, batches = backlog, (1 if backlog else 0)
        if backlog:
            notes.append(f"no maxOffsetsPerTrigger: the next batch takes all {backlog} records at once (S28)")

    if backlog == 0:
        seconds, never = 0.0, False
    elif proc is None:
        seconds, never = None, False
        notes.append("processing rate unknown: pass processing_rate or a history with ≥ 2 timed batches")
    else:
        net = proc - (prod or 0.0)
        if net <= 0:
            seconds, never = None, True
            if proc_src.startswith("history"):
                notes.append("the history only shows what the job did, not what it can do: a job that "
                             "was keeping up consumed at the produce rate; pass processing_rate for a "
                             "real estimate")
        else:
            seconds, never = backlog / net, False
    return CatchUpEstimate(backlog, proc, proc_src, prod, prod_src, seconds, never, first_batch, batches,
                           notes)
