"""Record counts of the query-level findings: what Spark does to each partition's records
(docs/scenarios.md, "Announced vs observed record counts", checks them against what Spark did).

Why here: CLUSTER_MISMATCH and MISSING_QUERY_ID are raised before the per-partition checks (from the
lifecycle record and the checkpoint's own files), but what they cost is per partition — it needs the
resume position and the broker's logs. :func:`with_query_counts` attaches those counts once every
finding exists. The per-partition rule shared with TOPIC_RESET and OFFSET_AHEAD_OF_LOG_END is
:func:`reset_skip`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_kafka_spark.checkpoint.position import ResumePosition
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.findings import Bound, Finding, RecordCounts
from airflow_kafka_spark.verdict.versions import parse_version

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client imports
    from airflow_kafka_spark.kafka.model import BrokerState


def reset_skip(c: int, ls: int, le: int) -> RecordCounts:
    """Spark on a recreated topic (or another cluster's log) resumes at ``c`` if ``c ≤ le``: the new
    log's records ``[ls, c)`` are never read (S03, S06). If ``c > le`` it fails, or with
    failOnDataLoss=false drops that range and goes on from the end it planned, so ``[ls, le)`` and
    whatever arrives before the restart plans its batch are skipped (S02; KafkaOffsetReader's
    ``untilOffset < fromOffset`` branch, and the range calculator drops empty ranges)."""
    if c <= le:
        return RecordCounts(skipped=c - ls)
    return RecordCounts(skipped=le - ls, bound=Bound.AT_LEAST)


def reset_outcome(c: int, ls: int, le: int, skip: RecordCounts) -> str:
    """The sentence that says what :func:`reset_skip` counted."""
    if c <= le:
        return (f"Spark resumes silently at {c:,} of this log and skips its {skip.skipped:,} records "
                f"[{ls:,}, {c:,})")
    return (f"Spark fails (offset changed from {c} to {le}), or with failOnDataLoss=false skips this log's "
            f"{skip.skipped:,} records and whatever arrives before it restarts")


def cluster_counts(pos: ResumePosition, broker: BrokerState) -> dict[TopicPartition, RecordCounts]:
    """Another cluster: its log of each partition is read as if it were the recorded one (S06)."""
    out: dict[TopicPartition, RecordCounts] = {}
    for tp, c in sorted(pos.start.items()):
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is not None and le is not None and c >= ls:
            out[tp] = reset_skip(c, ls, le)
    return out


def new_id_duplicates(pos: ResumePosition, idempotent_sink: bool | None, spark_version: str | None = None
                      ) -> dict[TopicPartition, RecordCounts]:
    """A missing ``metadata`` gives the restart a new query id (Spark 3.5/4.0, S10). Only a pending batch
    is re-run; a sink that dedupes by (query id, batch id) cannot recognise it under the new id, so every
    record of it is written again. A sink that dedupes by batch id alone (a file sink) is not fooled,
    hence ``at_most`` unless the sink is known not to be idempotent at all. Spark 4.2 refuses to start
    (STREAMING_CHECKPOINT_MISSING_METADATA_FILE, SPARK-55058): nothing is written twice."""
    version = parse_version(spark_version) if spark_version else None
    if version is not None and version >= (4, 2):
        return {}
    bound = Bound.EXACT if idempotent_sink is False else Bound.AT_MOST
    out: dict[TopicPartition, RecordCounts] = {}
    for tp, end in sorted(pos.pending.items()):
        n = end - pos.start.get(tp, 0)
        if n > 0:
            out[tp] = RecordCounts(duplicated=n, bound=bound)
    return out


def with_query_counts(findings: Iterable[Finding], pos: ResumePosition | None, broker: BrokerState,
                      idempotent_sink: bool | None, spark_version: str | None = None) -> list[Finding]:
    """The findings, with CLUSTER_MISMATCH and MISSING_QUERY_ID counted where the position is known."""
    out = []
    for f in findings:
        if pos is not None and pos.known and f.code == "CLUSTER_MISMATCH":
            f = f.with_counts(cluster_counts(pos, broker))
        elif pos is not None and pos.known and f.code == "MISSING_QUERY_ID":
            f = f.with_counts(new_id_duplicates(pos, idempotent_sink, spark_version))
        out.append(f)
    return out
