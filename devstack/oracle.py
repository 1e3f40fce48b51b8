"""Compare what the reference job wrote with what Kafka acknowledged, record by record.

This is the "Spark is the oracle" half of the tests and the demo: a verdict about a restart is
only believed when the sink, matched on (topic, partition, offset) against the produced records,
shows exactly the loss, replay or duplication the verdict announced.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

Key = tuple[str, int, int]  # topic, partition, offset


def read_sink(output: str | Path, sink: str) -> list[dict]:
    """Rows written by the reference job, each with topic/partition/offset/batch_id."""
    out = Path(output)
    if not out.exists():
        return []
    if sink == "parquet":
        import pyarrow.parquet as pq

        from airflow_kafka_spark.checkpoint.sink_log import read_sink_log

        log = read_sink_log(str(out))
        rows: list[dict] = []
        for path in log.files():
            local = path[len("file:"):] if path.startswith("file:") else path
            rows.extend(pq.read_table(local).to_pylist())
        return rows
    rows = []
    for f in sorted(out.rglob("*.json")):
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


@dataclass
class Comparison:
    produced: int
    consumed_rows: int
    missing: list[Key] = field(default_factory=list)
    duplicated: dict[Key, int] = field(default_factory=dict)   # key -> extra copies
    unexpected: list[Key] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected)

    @property
    def duplicate_count(self) -> int:
        return sum(self.duplicated.values())

    def summary(self) -> dict:
        return {"produced": self.produced, "sink_rows": self.consumed_rows, "missing": len(self.missing),
                "duplicated": self.duplicate_count, "unexpected": len(self.unexpected)}


def compare(produced: Iterable, rows: Iterable[dict]) -> Comparison:
    """``produced``: ProducedRecord-like objects (topic, partition, offset)."""
    want = {(p.topic, p.partition, p.offset) for p in produced}
    seen = Counter((r["topic"], int(r["partition"]), int(r["offset"])) for r in rows)
    return Comparison(
        produced=len(want),
        consumed_rows=sum(seen.values()),
        missing=sorted(want - set(seen)),
        duplicated={k: n - 1 for k, n in seen.items() if n > 1},
        unexpected=sorted(set(seen) - want),
    )
