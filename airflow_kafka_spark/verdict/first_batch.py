"""How big the first batch after a downtime will be next to the job's recent batches (S28).

Without ``maxOffsetsPerTrigger`` Spark's next batch takes every record between the checkpoint and
the log end at once: after a long downtime that is one batch many times larger than any the job
ran before, which can take hours or run out of memory. The checkpoint's own offsets history says
what the job usually digests: the records per batch (end offsets of ``offsets/N`` minus those of
``offsets/N-1``) and how fast it went (batch ``N+1`` is planned only after batch ``N`` finished, so
``size(N) ÷ (ts(N+1) − ts(N))`` is at most the rate batch ``N`` ran at: the peak of those is a
lower bound of the job's capacity, so the duration estimated from it is on the long side).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.text import fmt_duration
from airflow_kafka_spark.checkpoint.formats import parse_offsets_file
from airflow_kafka_spark.checkpoint.throughput import processing_rates, records_between
from airflow_kafka_spark.errors import CheckpointFormatError, UserError

if TYPE_CHECKING:  # types only
    from airflow_kafka_spark.checkpoint.model import BatchOffsets, CheckpointState

#: How many of the newest batches describe "recent" (the validate flow reads this many offsets files).
RECENT_BATCHES = 10
#: An unlimited first batch this many times the largest recent one is a WARN (S28) ...
WARN_RATIO = 10
#: ... once it is at least this many records (a job that ran 3-record batches is not warned about 40).
WARN_FLOOR = 1_000


@dataclass(frozen=True)
class RecentBatches:
    """What the job's last batches digested: their count, the largest one and the peak rate."""

    batches: int
    largest: int                  # records in the largest recent batch
    peak_rate: float | None       # records/s, None when no two batches have timestamps apart

    @classmethod
    def of(cls, history: Sequence[BatchOffsets], window: int = RECENT_BATCHES) -> RecentBatches | None:
        ordered = sorted((b for b in history if b.kafka_offsets), key=lambda b: b.batch_id)[-(window + 1):]
        pairs = list(pairwise(ordered))
        if not pairs:
            return None
        sizes = [records_between(a, b) for a, b in pairs]
        _, peak = processing_rates(ordered, window=window)
        return cls(batches=len(sizes), largest=max(sizes), peak_rate=peak or None)

    def too_big(self, records: int) -> bool:
        return records >= WARN_FLOOR and records >= WARN_RATIO * max(self.largest, 1)

    def seconds_for(self, records: int) -> float | None:
        """At the recent peak rate (None if unknown)."""
        return records / self.peak_rate if self.peak_rate else None


    def numbers(self, backlog: int) -> dict[str, int | float]:
        out: dict[str, int | float] = {"recent_batches": self.batches, "recent_largest_batch": self.largest,
                                       "times_largest_recent": round(backlog / max(self.largest, 1), 1)}
        seconds = self.seconds_for(backlog)
        if seconds is not None and self.peak_rate:
            out.update(recent_peak_rate=round(self.peak_rate, 1), estimated_first_batch_s=round(seconds))
        return out

    def warning(self, backlog: int) -> str:
        """The WARN clause for an unlimited first batch of ``backlog`` records, or '' if it is digestible."""
        if not self.too_big(backlog):
            return ""
        seconds = self.seconds_for(backlog)
        took = (f"; at the recent peak of {self.peak_rate:,.0f} records/s it takes ≈{fmt_duration(seconds)}"
                if seconds is not None and self.peak_rate else "")
        return (f": {backlog / max(self.largest, 1):,.0f}× the largest of the last {self.batches} batches "
                f"({self.largest:,} records){took} (S28)")


def read_recent_batches(checkpoint: CheckpointState, storage_options: dict | None = None,
                        window: int = RECENT_BATCHES) -> RecentBatches | None:
    """:class:`RecentBatches` from the newest ``window + 1`` ``offsets/`` files of ``checkpoint``.

    Read here rather than as the checkpoint's history: only sizes and timestamps are wanted, and a
    damaged old file Spark no longer needs must not become a finding of its own — it is skipped.
    """
    ids = checkpoint.offset_batch_ids[-(window + 1):]
    if len(ids) < 2:
        return None
    root = open_location(checkpoint.location, storage_options, what="checkpoint location")
    history = []
    for batch_id in ids:
        try:
            data = read_bytes(root.child("offsets", str(batch_id)), limit=1 << 20)
            if data:
                history.append(parse_offsets_file(batch_id, data))
        except (CheckpointFormatError, UserError, OSError):
            continue
    return RecentBatches.of(history, window)
