"""What a soak measured, and the end-of-run check: the sink against what Kafka acknowledged.

Shared by the local soak (``test_soak.py``) and the YARN + HDFS one (``test_soak_yarn.py``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.store import verify_backup
from devstack import oracle
from tests.soak.feeder import Feeder
from tests.soak.stage import JOB
from tests.support.waiting import wait_until


@dataclass
class Figures:
    seed: int
    events_target: int
    events: list[str] = field(default_factory=list)
    mix: dict[str, int] = field(default_factory=dict)
    dag_runs: int = 0
    rollbacks: int = 0
    missed_kills: list[str] = field(default_factory=list)
    produced: int = 0
    sink_rows: int = 0
    missing: int = 0
    duplicated: int = 0
    announced: int = 0
    unexpected: int = 0
    max_drivers: int = 0
    driver_samples: int = 0
    backups_verified: int = 0
    killed_operators: list[str] = field(default_factory=list)
    feeder_restarts: list[str] = field(default_factory=list)   # the test's producer stalled (see feeder.py)
    wall_s: float = 0.0

    def note(self, kind: str, text: str) -> None:
        self.events.append(f"{len(self.events) + 1:3d} {kind}: {text}")
        self.mix[kind] = self.mix.get(kind, 0) + 1
        print(self.events[-1], flush=True)


def announced(reset_xcom: dict) -> int:
    """The records a reset said the new run reads again (a pending batch), from its findings."""
    found = 0

    def walk(node) -> None:
        nonlocal found
        if isinstance(node, dict):
            if isinstance(node.get("records_to_replay"), int):
                found = max(found, node["records_to_replay"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(reset_xcom)
    return found


def finish(
    soak: Any,
    feeder: Feeder,
    counter,
    sink: Callable[[], Path],
    started: float,
    what: str = "drivers",
    catch_up_s: float = 300,
) -> None:
    """Stop producing, let the job catch up, compare the sink (``sink()`` gives a local copy) record by record
    with what Kafka acknowledged, verify every backup, print and assert the figures."""
    fig, seed = soak.fig, soak.fig.seed
    feeder.stop()
    fig.feeder_restarts = feeder.restarts
    ends = feeder.end_offsets()

    seen: dict[int, int] = {}

    def caught_up() -> bool:
        st = read_checkpoint(str(soak.checkpoint))
        seen.clear()
        seen.update(
            {tp.partition: o for tp, o in st.latest_committed.kafka_offsets.items()} if st.latest_committed else {}
        )
        return seen == ends

    try:
        wait_until(caught_up, timeout=catch_up_s, interval=1, what="the job to commit every acknowledged record")
    except TimeoutError as exc:
        raise AssertionError(
            f"{exc}: committed {seen}, acknowledged ends {ends}, driver alive {soak.driver_alive()}"
        ) from exc
    counter.stop()
    cmp = oracle.compare(feeder.produced, oracle.read_sink(sink(), "idempotent"))
    backups = f"{soak.data}/backups"
    catalog = list_backups(backups, JOB)
    for b in catalog.backups:
        verify_backup(backups, JOB, b.backup_id)
    fig.backups_verified = len(catalog.backups)
    fig.produced, fig.sink_rows = cmp.produced, cmp.consumed_rows
    fig.missing, fig.duplicated, fig.unexpected = len(cmp.missing), cmp.duplicate_count, len(cmp.unexpected)
    fig.max_drivers, fig.driver_samples = counter.max_seen, counter.samples
    fig.killed_operators = sorted(soak.killed_ops)
    fig.wall_s = time.monotonic() - started
    print(
        f"soak seed {seed}: {len(fig.events)} events {fig.mix} in {fig.dag_runs} DAG runs "
        f"({fig.rollbacks} rolled back); "
        f"records produced {fig.produced}, missing {fig.missing}, duplicated {fig.duplicated} "
        f"(announced {fig.announced}), unexpected {fig.unexpected}; max {what} at once {fig.max_drivers} "
        f"({fig.driver_samples} samples); backups verified {fig.backups_verified} "
        f"(invalid {len(catalog.invalid)}); operators killed {fig.killed_operators}; "
        f"missed kills {len(fig.missed_kills)}; feeder restarts {len(fig.feeder_restarts)} "
        f"({feeder.purged} records purged, their fate read from the log); wall {fig.wall_s:.0f}s",
        flush=True,
    )
    if os.environ.get("AKS_SOAK_REPORT"):
        Path(os.environ["AKS_SOAK_REPORT"]).write_text(json.dumps(asdict(fig), indent=1))
    assert feeder.failed == [], feeder.failed[:3]
    assert fig.missing == 0, cmp.missing[:10]
    assert fig.unexpected == 0, cmp.unexpected[:10]
    assert fig.duplicated <= fig.announced, (cmp.summary(), fig.announced)
    assert fig.max_drivers <= 1, counter.over_one[:5]
    # every run with a checkpoint took one; the registry keeps the newest 5 (keep_last), all must verify
    assert not catalog.invalid and fig.backups_verified >= min(5, soak.backups_taken), soak.backups_taken
    assert len(fig.events) >= fig.events_target or soak.max_s != float("inf"), (
        f"{len(fig.events)} events, {fig.events_target} wanted"
    )
