"""S27 — Spark upgrade and rollback on one checkpoint, with real Spark 3.5.1 and the default 4.x.

The same checkpoint is written by one Spark and restarted by the other (the 3.5 side in the
long-lived 3.5 driver, the 4.x side in the in-process session), stateless (the sink compared record
by record with what Kafka acknowledged) and stateful (``groupBy(key).count()`` in update mode: after
a restart the counts must go on from the state the other Spark wrote, i.e. equal every record
produced per key; a lost or unreadable state shows as smaller counts or a failure). Before each
restart the validator is asked with ``target_spark_version``; the test asserts its verdict and what
Spark did.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from devstack import spark_runtimes
from tests.support.scenario import Job, short, write_observed

pytestmark = [pytest.mark.integration, pytest.mark.spark35]

OBSERVED: list[dict] = []
V35 = "3.5.1"


def v4() -> str:
    return spark_runtimes.runtime().version


def run_on(j, version: str, **options):
    """Restart the query on ``version``: 3.5 in the worker, 4.x in this interpreter's session."""
    return j.run(**options) if version == V35 else Job.run(j, **options)


def codes(verdict) -> set[str]:
    return {f.code for f in verdict.findings} - {"OK"}


def record(scenario: str, verdict, outcome: str) -> None:
    row = {"scenario": scenario, "verdict": verdict.severity, "codes": sorted(codes(verdict)), "spark": outcome}
    OBSERVED.append(row)
    print("SCENARIO " + json.dumps(row))


def outcome_of(j, stateful: str, res) -> tuple[bool, str]:
    """(Spark ran and its output is exactly right, the observed outcome in words)."""
    if not res.ok:
        return False, "fails: " + short(res.error, 220)
    if stateful == "none":
        cmp = j.compare()
        return cmp.exact, (f"runs; sink exact ({cmp.consumed_rows} rows)" if cmp.exact else
                           f"runs; sink {json.dumps(cmp.summary())}")
    got: dict[str, int] = {}
    for r in sorted(j.sink_rows(), key=lambda r: r["batch_id"]):  # update mode: a key's newest running count
        got[r["key"]] = int(r["count"])
    want = dict(Counter(str(p.id % 10) for p in j.produced))
    if got == want:
        return True, f"runs; state carried over (count per key = all {sum(want.values())} records produced)"
    return False, f"runs; counts {sorted(got.items())} != produced {sorted(want.items())}"


def restart(j, stateful: str, writer: str, runtime: str, n: int) -> tuple:
    """Validate for ``runtime``, produce ``n`` more, restart on ``runtime``; (verdict, exact, outcome)."""
    v = j.validate(target_spark_version=runtime)
    j.produce(n)
    exact, outcome = outcome_of(j, stateful, run_on(j, runtime, stateful=stateful))
    kind = "stateful" if stateful != "none" else "stateless"
    record(f"S27 {kind}: written by {writer}, restarted by {runtime}", v, outcome)
    return v, exact, outcome


@pytest.mark.parametrize("stateful", ["none", "count_by_key"])
def test_s27_upgrade_35_to_4_then_rollback(job35, stateful):
    j = job35()
    j.produce(300)
    first = j.run(stateful=stateful, max_offsets_per_trigger=100)            # Spark 3.5 writes 3 batches
    assert outcome_of(j, stateful, first)[0], first.error

    v, exact, outcome = restart(j, stateful, V35, v4(), 150)                  # upgrade
    assert exact, outcome
    assert v.severity == "WARN" and "SPARK_UPGRADE" in codes(v), v.to_dict()

    v, exact, outcome = restart(j, stateful, v4(), V35, 90)                   # rollback
    assert exact, outcome
    assert v.severity == "WARN" and "CHECKPOINT_NEWER_THAN_RUNTIME" in codes(v), v.to_dict()


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.parametrize(("stateful", "provider"), [("none", None), ("count_by_key", None),
                                                    ("count_by_key", ROCKSDB)])
def test_s27_written_by_4_restarted_by_35(job35, stateful, provider):
    from tests.support import spark_session

    j = job35()
    j.produce(300)
    conf = spark_session.session().conf
    default = conf.get("spark.sql.streaming.stateStore.providerClass")
    if provider:
        conf.set("spark.sql.streaming.stateStore.providerClass", provider)   # pinned in offsets/ from batch 0
    try:
        assert Job.run(j, stateful=stateful, max_offsets_per_trigger=100).ok  # Spark 4.x writes 3 batches
    finally:
        conf.set("spark.sql.streaming.stateStore.providerClass", default)

    v, exact, outcome = restart(j, stateful, v4(), V35, 90)
    if provider:
        record_provider = OBSERVED[-1]
        record_provider["scenario"] += " (RocksDB state store)"
    assert exact, outcome
    assert v.severity == "WARN" and "CHECKPOINT_NEWER_THAN_RUNTIME" in codes(v), v.to_dict()


@pytest.fixture(scope="module", autouse=True)
def _write_observed_table():
    yield
    write_observed(OBSERVED, "scenarios-observed-s27")
