"""A pending batch's replay (S07/S14): Spark re-runs a planned but uncommitted batch with exactly
its recorded range, under the same batch id.

Faithful only if every range is still readable (else a BLOCK: the replay would skip records), and
free of duplicates only on a sink that is idempotent for a re-run batch id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, WARN, Bound, Finding, Number, RecordCounts
from airflow_kafka_spark.verdict.options import DeployOptions


@dataclass(frozen=True)
class ReplayRange:
    """One partition's share of a pending batch: Spark re-reads ``[start, end)``."""

    tp: TopicPartition
    start: int
    end: int
    log_start: int | None
    log_end: int | None
    readable: bool

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


def pending_replay_finding(pos: ResumePosition, replay: list[ReplayRange], options: DeployOptions) -> Finding:
    batch = pos.pending_batch
    records = sum(r.records for r in replay)
    unreadable = [r for r in replay if r.records and not r.readable]
    ranges = ", ".join(f"{r.tp} [{r.start:,}, {r.end:,})" for r in replay if r.records)
    if len(ranges) > 200:
        ranges = ranges[:199] + "…"
    numbers: dict[str, Number] = {
        "batch_id": batch,
        "records_to_replay": records,
        "partitions": sum(1 for r in replay if r.records),
    }
    if unreadable:
        numbers["unreadable_partitions"] = len(unreadable)
        counts = {
            r.tp: RecordCounts(lost=min(r.log_start, r.end) - r.start)
            if r.log_start is not None
            else RecordCounts(bound=Bound.AT_LEAST)
            for r in unreadable
        }
        r = unreadable[0]
        now = (
            f"the log now [{r.log_start:,}, {r.log_end:,})"
            if r.log_start is not None and r.log_end is not None
            else "the partition gone"
        )
        return Finding(
            "PENDING_BATCH_REPLAY",
            BLOCK,
            numbers=numbers,
            counts=counts,
            message=(
                f"batch {batch} was planned but not committed, and Spark re-runs exactly its recorded "
                f"range ({records:,} records), but {len(unreadable)} partition range(s) are no longer "
                f"readable, e.g. {r.tp} [{r.start:,}, {r.end:,}) with {now}: the replay cannot be "
                f"faithful (S07)"
            ),
            fix=(
                f"drop the uncommitted offsets/{batch} so Spark re-plans from the committed position (after "
                f"resolving any loss above), or restore the records"
            ),
        )
    if options.idempotent_sink is True:
        sev, sink = (
            INFO,
            ("the sink is idempotent for a re-run batch id (it overwrites, or a file sink skips it): no duplicates"),
        )
    elif options.idempotent_sink is False:
        sev, sink = WARN, f"the sink is not idempotent: {records:,} duplicate records expected"
        numbers["duplicates_expected"] = records
    else:
        sev, sink = WARN, f"a sink that is not idempotent gets up to {records:,} duplicate records"
    counts = {} if options.idempotent_sink is True else _duplicates(replay, options.idempotent_sink)
    return Finding(
        "PENDING_BATCH_REPLAY",
        sev,
        numbers=numbers,
        counts=counts,
        message=(
            f"batch {batch} was planned but not committed: on restart Spark re-runs it with the same "
            f"range ({records:,} records{': ' + ranges if ranges else ''}); {sink} (S07/S14)"
        ),
        fix=(
            "use an idempotent sink (batchId-keyed writes, MERGE) or accept the duplicates; stop queries on "
            "a batch boundary to avoid this"
        ),
    )


def _duplicates(replay: Iterable[ReplayRange], idempotent_sink: bool | None) -> dict[TopicPartition, RecordCounts]:
    """Spark re-runs a pending batch with exactly its recorded range, under the same batch id: a sink
    that is not idempotent gets each record of it twice (``at_most`` while the sink is unknown)."""
    bound = Bound.EXACT if idempotent_sink is False else Bound.AT_MOST
    return {r.tp: RecordCounts(duplicated=r.records, bound=bound) for r in replay if r.records}
