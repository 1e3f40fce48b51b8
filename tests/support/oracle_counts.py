"""Announced vs observed record counts, per partition, for the Spark-oracle scenario tests (issue 14).

A verdict announces :class:`~airflow_kafka_spark.verdict.findings.RecordCounts` per partition; the
oracle (devstack/oracle.py) says which produced records the sink lacks or holds twice. These helpers
put both in the same shape — ``{TopicPartition: n}`` — so a test asserts equality per partition, not
only a total that two errors could balance.
"""

from __future__ import annotations

from collections import Counter

from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack.oracle import Comparison


def announced(verdict, kind: str) -> dict[TopicPartition, int]:
    """``lost`` / ``skipped`` / ``duplicated`` of the verdict's merged counts, zero entries left out."""
    return {tp: getattr(c, kind) for tp, c in verdict.counts.items() if getattr(c, kind)}


def missing_by_partition(cmp: Comparison) -> dict[TopicPartition, int]:
    return dict(Counter(TopicPartition(t, p) for t, p, _ in cmp.missing))


def duplicated_by_partition(cmp: Comparison) -> dict[TopicPartition, int]:
    out: Counter = Counter()
    for (t, p, _), extra in cmp.duplicated.items():
        out[TopicPartition(t, p)] += extra
    return dict(out)


def batch_sizes(rows: list[dict]) -> dict[int, int]:
    """Rows per batch id, in batch order (what each micro-batch really took)."""
    return dict(sorted(Counter(int(r["batch_id"]) for r in rows).items()))
