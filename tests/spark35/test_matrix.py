"""The format matrix on Spark 3.5: the Spark-oracle scenarios whose verdict depends on the checkpoint format.

Same recipes and the same assertions as tests/integration/test_scenarios.py (which runs them on the
default 4.x runtime in-process), here with the query on Spark 3.5.1 (one long-lived 3.5 driver,
tests/spark35/conftest.py). Each test asserts the verdict's code and severity and counts the sink
against what Kafka acknowledged; the observed rows go to .cache/scenarios-observed-spark35.json and
docs/scenarios.md (the "Spark 3.5.1" column).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack import oracle, topics
from tests.support.scenario import drop_latest, short, write_observed

pytestmark = [pytest.mark.integration, pytest.mark.spark35]

OBSERVED: list[dict] = []


def codes(verdict) -> set[str]:
    return {f.code for f in verdict.findings}


def finding(verdict, code: str):
    return [f for f in verdict.findings if f.code == code]


def record(scenario: str, verdict, spark_outcome: str) -> None:
    row = {"scenario": scenario, "spark_version": "3.5.1", "verdict": verdict.severity,
           "codes": sorted(codes(verdict) - {"OK"}), "spark": spark_outcome}
    OBSERVED.append(row)
    print("SCENARIO " + json.dumps(row))


def ok_first_run(j, n: int = 300, **options) -> None:
    j.produce(n)
    res = j.run(**options)
    assert res.ok, res.error
    assert j.compare().exact


def last_id(folder: Path) -> int:
    return max(int(p.name) for p in folder.iterdir() if p.name.isdigit())


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_s01_retention_past_checkpoint(job35, fail_on_data_loss):
    j = job35()
    ok_first_run(j, 300)
    j.produce(300)
    ck = {tp.partition: off for tp, off in j.committed().items()}
    topics.delete_records(j.bootstrap, j.topics[0], {p: o + 40 for p, o in ck.items()})

    v = j.validate(fail_on_data_loss=fail_on_data_loss == "true")
    assert v.severity == "BLOCK"
    assert sum(f.numbers["records_lost"] for f in finding(v, "OFFSET_BELOW_LOG_START")) == 120
    res = j.run(fail_on_data_loss=fail_on_data_loss)
    cmp = j.compare()
    if fail_on_data_loss == "true":
        assert not res.ok, "Spark should refuse to read deleted offsets"
        outcome = "fails: " + short(res.error)
    else:
        assert "FAIL_ON_DATA_LOSS_DISABLED" in codes(v)
        assert res.ok, res.error
        assert len(cmp.missing) == 120 and not cmp.duplicated, cmp.summary()
        outcome = f"silently skipped {len(cmp.missing)} records"
    record(f"S01 retention past checkpoint (failOnDataLoss={fail_on_data_loss})", v, outcome)


def test_s03_topic_recreated_with_more_records_is_silently_skipped(job35):
    j = job35()
    ok_first_run(j, 300)
    old_batches = {r["batch_id"] for r in j.sink_rows()}
    topics.delete_topic(j.bootstrap, j.topics[0])
    topics.create_topic(j.bootstrap, j.topics[0], 3)
    new = j.produce(450)

    v = j.validate()
    assert v.severity == "BLOCK" and "TOPIC_RESET" in codes(v)
    res = j.run()
    assert res.ok, res.error
    cmp = oracle.compare(new, [r for r in j.sink_rows() if r["batch_id"] not in old_batches])
    assert len(cmp.missing) == 300, cmp.summary()
    record("S03 topic recreated, more records", v, f"starts silently, skipped {len(cmp.missing)} new records")


def test_s07_half_written_batch_replays_exactly_the_recorded_range(job35):
    j = job35(sink="append")
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    last = drop_latest(j, "commits")

    v = j.validate(idempotent_sink=False)
    assert v.severity == "WARN"
    [pending] = finding(v, "PENDING_BATCH_REPLAY")
    announced = pending.numbers["records_to_replay"]
    assert announced > 0
    res = j.run()
    assert res.ok, res.error
    cmp = j.compare()
    assert not cmp.missing and cmp.duplicate_count == announced, cmp.summary()
    record("S07 half-written batch (non-idempotent sink)", v, f"replayed batch {last}: {cmp.duplicate_count} dups")


def test_s09_truncated_offset_file(job35):
    j = job35()
    ok_first_run(j, 300)
    j.produce(60)
    (j.checkpoint / "offsets" / str(last_id(j.checkpoint / "offsets"))).write_bytes(b"")

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    assert not res.ok and "Incomplete log file" in res.error, res.error
    record("S09 empty offsets file", v, "fails: " + short(res.error))


def test_s09_garbage_commit_file(job35):
    j = job35()
    ok_first_run(j, 300)
    (j.checkpoint / "commits" / str(last_id(j.checkpoint / "commits"))).write_bytes(b"\x00\xffgarbage")

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    assert not res.ok or not j.compare().exact, "Spark restarted cleanly: BLOCK was not needed"
    record("S09 garbage commit file", v, "fails: " + short(res.error) if not res.ok else json.dumps(
        j.compare().summary()))


def test_s10_missing_query_id_breaks_the_idempotent_sink(job35):
    j = job35()
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    drop_latest(j, "commits")
    (j.checkpoint / "metadata").unlink()
    (j.checkpoint / ".metadata.crc").unlink()

    v = j.validate()
    assert v.severity == "BLOCK" and "MISSING_QUERY_ID" in codes(v)
    res = j.run()
    assert res.ok, res.error
    cmp = j.compare()
    assert not cmp.missing and cmp.duplicate_count == 60, cmp.summary()  # the replayed batch, once more
    record("S10 metadata (query id) missing", v, f"new query id; idempotent sink got {cmp.duplicate_count} dups")


def test_s10_metadata_deleted_by_hand_keeps_its_crc(job35):
    j = job35()
    ok_first_run(j, 300)
    (j.checkpoint / "metadata").unlink()

    v = j.validate()
    assert v.severity == "BLOCK" and codes(v) & {"MISSING_QUERY_ID", "CHECKPOINT_CORRUPT"}
    res = j.run()
    assert not res.ok and "concurrently using metadata" in res.error, res.error
    record("S10b metadata deleted by hand, .metadata.crc left", v, "fails: " + short(res.error))


def test_s11_shuffle_partitions_pinned(job35, worker35):
    j = job35()
    j.produce(300)
    assert j.run(stateful="dedup").ok
    v = j.validate(conf={"spark.sql.shuffle.partitions": "8"})
    assert v.severity == "WARN" and "CONF_PINNED_BY_CHECKPOINT" in codes(v)
    worker35.set_conf({"spark.sql.shuffle.partitions": "8"})
    try:
        j.produce(90)
        res = j.run(stateful="dedup")
    finally:
        worker35.set_conf({"spark.sql.shuffle.partitions": "2"})
    assert res.ok, res.error
    conf = json.loads((j.checkpoint / "offsets" / str(last_id(j.checkpoint / "offsets"))).read_text()
                      .splitlines()[1])["conf"]
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert sorted(p.name for p in (j.checkpoint / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
    assert j.compare().exact
    record("S11 shuffle partitions changed", v, "Spark kept the pinned 2 partitions (8 ignored); sink exact")


def test_s22_starting_offsets_ignored(job35):
    j = job35()
    ok_first_run(j, 300)
    j.produce(150)
    v = j.validate(starting_offsets="latest")
    assert v.severity == "WARN" and "STARTING_OFFSETS_IGNORED" in codes(v)
    assert j.run(starting_offsets="latest").ok
    cmp = j.compare()
    assert cmp.exact and cmp.consumed_rows == 450, cmp.summary()
    record("S22 startingOffsets=latest on an existing checkpoint", v, "ignored by Spark; sink exact")


@pytest.fixture(scope="module", autouse=True)
def _write_observed_table():
    yield
    write_observed(OBSERVED, "scenarios-observed-spark35")
