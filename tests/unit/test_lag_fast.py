"""Lag computed the fast way (what ``observe`` reads: the newest 2×window+1 batches, merged offsets cached)
equals lag computed the old way (every retained batch, offsets merged again on every access) on
generated histories: random partition counts, per-partition rates with idle stretches, irregular
trigger times, a pending batch or not, retention below the position, probes answered or not.

The old way is kept here as the oracle, not in the package.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition, to_offsets_json
from airflow_kafka_spark.watch.lag import compute_lag
from airflow_kafka_spark.watch.observe import ObserveTarget, observe
from tests.support.checkpoint_factory import START_TIMESTAMP_MS, commit_file, metadata_file, offsets_file
from tests.unit.test_watch import FakeView


@dataclass(frozen=True)
class OldBatch:
    """A batch as the old code saw it: ``kafka_offsets`` merged again on every access."""

    batch_id: int
    batch_timestamp_ms: int | None
    sources: dict

    @property
    def kafka_offsets(self) -> PartitionOffsets:
        out: PartitionOffsets = {}
        for offs in self.sources.values():
            if offs:
                out.update(offs)
        return out


def generate(root: Path, rng: random.Random) -> tuple[PartitionOffsets, int]:
    """A Spark-format checkpoint with a random monotone history; returns (committed offsets, last batch time)."""
    partitions = rng.randint(1, 12)
    batches = rng.randint(1, 260)
    pending = rng.random() < 0.4
    rates = [rng.choice([0, 0, 1, 3, 10, 50]) for _ in range(partitions)]
    for rel in ("offsets", "commits"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    (root / "metadata").write_bytes(metadata_file())
    offs = {TopicPartition("orders", p): rng.randint(0, 100) for p in range(partitions)}
    ts = START_TIMESTAMP_MS
    committed: PartitionOffsets = {}
    for b in range(batches + (1 if pending else 0)):
        ts += rng.choice([500, 1000, 1000, 1000, 3000, 60_000])
        offs = {tp: o + (rng.randint(0, rates[tp.partition]) if rng.random() < 0.8 else 0) for tp, o in offs.items()}
        (root / "offsets" / str(b)).write_bytes(offsets_file([to_offsets_json(offs)], batch_timestamp_ms=ts))
        if b < batches:
            (root / "commits" / str(b)).write_bytes(commit_file())
            committed = dict(offs)
    return committed, ts


def old_lag(location: str, view: FakeView, now_ms: int):
    """The old computation: the whole retained history, offsets merged per access."""
    state = read_checkpoint(location, read_history=True)
    history = [OldBatch(b.batch_id, b.batch_timestamp_ms, b.sources) for b in state.history]
    positions = dict(state.latest_committed.kafka_offsets)
    broker = view.broker_state(["orders"])
    first = {tp: view.first_record_at_or_after(tp, max(pos, broker.earliest.get(tp, 0)))
             for tp, pos in positions.items()
             if broker.latest[tp] > max(pos, broker.earliest.get(tp, 0))}
    return compute_lag(positions, broker, first_unread_ts=first, history=history, now_ms=now_ms)


@pytest.mark.parametrize("seed", range(40))
def test_fast_lag_equals_the_old_computation(tmp_path, seed):
    rng = random.Random(seed)
    committed, last_ts = generate(tmp_path / "ck", rng)
    now = last_ts + rng.choice([0, 5_000, 600_000])
    latest = {tp: o + rng.choice([0, 0, 1, 2, 40, 1000]) for tp, o in committed.items()}
    earliest = {tp: (o + 1 if rng.random() < 0.15 and latest[tp] > o + 1 else 0) for tp, o in committed.items()}
    # Some partitions answer the probe with a timestamp, the others leave the seconds to interpolation.
    record_ts = {tp: now - rng.randint(0, 900_000) for tp in committed if rng.random() < 0.5}
    view = FakeView(latest=latest, earliest=earliest, record_ts=record_ts, now_ms=now)

    fast = observe(ObserveTarget(checkpoint=str(tmp_path / "ck")), view, now_ms=now).lag
    old = old_lag(str(tmp_path / "ck"), FakeView(latest=latest, earliest=earliest, record_ts=record_ts,
                                                 now_ms=now), now)

    assert fast.to_dict() == old.to_dict()
    retained = len(list((tmp_path / "ck" / "offsets").iterdir()))
    read = read_checkpoint(str(tmp_path / "ck"), read_history=True, history_batches=21).history
    assert len(read) == min(21, retained)   # what the fast way read: the newest 21 batches only
