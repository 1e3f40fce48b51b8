"""Record counts on the findings that predict loss, skip or duplication (issue 14): the rule of each.

What Spark does is checked against real Spark in tests/integration/test_scenarios.py; here the
rules themselves, per partition, in the summary, the JSON, the table and the headline.
"""

from __future__ import annotations

import json

from airflow_kafka_spark.cli.output import render_verdict
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.evaluate import evaluate
from airflow_kafka_spark.verdict.findings import Bound, Finding, RecordCounts, Verdict
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support.verdict_states import broker, checkpoint, problem, record

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def run(cp, br, rec=None, **opts) -> Verdict:
    return evaluate(cp, br, rec, DeployOptions(**({"topics": ("t",)} | opts)))


def at(v: Verdict, code: str) -> Finding:
    [f] = [f for f in v.findings if f.code == code]
    return f


def test_s01_lost_per_partition_and_in_the_summary():
    v = run(checkpoint({("t", 0): 500, ("t", 1): 500}), broker({("t", 0): (800, 1000), ("t", 1): (0, 1000)}))
    assert at(v, "OFFSET_BELOW_LOG_START").counts == {T0: RecordCounts(lost=300)}
    assert v.counts == {T0: RecordCounts(lost=300)}
    assert v.summary["records_lost"] == 300 and v.summary["records_skipped"] == 0
    assert "records lost 300" in v.headline


def test_compacted_loss_is_at_most():
    v = run(checkpoint({("t", 0): 500}), broker({("t", 0): (800, 1000)}, cleanup={"t": "compact,delete"}))
    assert v.counts[T0] == RecordCounts(lost=300, bound=Bound.AT_MOST)
    assert "lost ≤300" in v.headline


def test_s03_topic_reset_skips_the_new_records_below_the_checkpoint():
    rec = record(topic_ids={"t": "old"})
    v = run(checkpoint({("t", 0): 100, ("t", 1): 100}), broker({("t", 0): (0, 150), ("t", 1): (0, 150)},
                                                                 topic_ids={"t": "new"}), rec)
    assert v.counts == {T0: RecordCounts(skipped=100), T1: RecordCounts(skipped=100)}
    assert v.summary["records_skipped"] == 200 and "records skipped 200" in v.headline


def test_s02_log_end_below_the_checkpoint_skips_the_whole_new_log_at_least():
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 30)}))
    assert at(v, "OFFSET_AHEAD_OF_LOG_END").counts == {T0: RecordCounts(skipped=30, bound=Bound.AT_LEAST)}
    rec = record(topic_ids={"t": "old"})
    both = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 30)}, topic_ids={"t": "new"}), rec)
    assert both.counts == {T0: RecordCounts(skipped=30, bound=Bound.AT_LEAST)}   # two findings, one count


def test_s06_cluster_mismatch_counts_per_partition():
    rec = record(cluster_id="A")
    v = run(checkpoint({("t", 0): 100, ("t", 1): 100}), broker({("t", 0): (0, 200), ("t", 1): (0, 50)},
                                                                 cluster_id="B"), rec)
    f = at(v, "CLUSTER_MISMATCH")
    assert f.counts == {T0: RecordCounts(skipped=100), T1: RecordCounts(skipped=50, bound=Bound.AT_LEAST)}
    assert f.records == RecordCounts(skipped=150, bound=Bound.AT_LEAST)


def test_s04_truncated_new_partition_loses_its_first_records():
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100), ("t", 1): (50, 90)}))
    assert v.counts == {T1: RecordCounts(lost=50)}


def test_s05_gone_partition_of_a_deleted_topic_cannot_be_counted_but_an_unsubscribed_one_can():
    v = run(checkpoint({("t", 0): 100, ("t", 1): 100}), broker({("t", 0): (0, 200)}))
    assert at(v, "PARTITIONS_GONE").counts == {T1: RecordCounts(bound=Bound.AT_LEAST)}
    assert T1 not in v.counts
    a0 = TopicPartition("a", 0)
    cp = checkpoint({("a", 0): 10, ("b", 0): 20})
    u = evaluate(cp, broker({("a", 0): (0, 25), ("b", 0): (0, 20)}), None, DeployOptions(topics=("b",)))
    assert u.counts == {a0: RecordCounts(skipped=15, bound=Bound.AT_LEAST)}


def test_s07_pending_batch_duplicates_by_sink():
    cp = checkpoint({("t", 0): 200, ("t", 1): 100}, pending={("t", 0): 300, ("t", 1): 150})
    br = broker({("t", 0): (0, 400), ("t", 1): (0, 150)})
    append = run(cp, br, idempotent_sink=False)
    assert append.counts == {T0: RecordCounts(duplicated=100), T1: RecordCounts(duplicated=50)}
    assert append.summary["records_duplicated"] == 150 and "records duplicated 150" in append.headline
    unknown = run(cp, br)
    assert unknown.records == RecordCounts(duplicated=150, bound=Bound.AT_MOST)
    assert run(cp, br, idempotent_sink=True).counts == {}


def test_s07_unreadable_pending_range_counts_the_lost_part():
    cp = checkpoint({("t", 0): 200}, pending={("t", 0): 300})
    v = run(cp, broker({("t", 0): (250, 400)}))
    assert at(v, "PENDING_BATCH_REPLAY").counts == {T0: RecordCounts(lost=50)}
    assert v.counts[T0].lost == 50


def test_s10_missing_query_id_duplicates_the_pending_batch_only():
    cp = checkpoint({("t", 0): 200}, pending={("t", 0): 260}, problems=[problem("MISSING_QUERY_ID", "metadata")])
    v = run(cp, broker({("t", 0): (0, 300)}), idempotent_sink=True)
    assert at(v, "MISSING_QUERY_ID").counts == {T0: RecordCounts(duplicated=60, bound=Bound.AT_MOST)}
    refused = run(cp, broker({("t", 0): (0, 300)}), idempotent_sink=True, target_spark_version="4.2.0")
    assert at(refused, "MISSING_QUERY_ID").counts == {}   # Spark 4.2 refuses to start: nothing written twice
    quiet = run(checkpoint({("t", 0): 200}, problems=[problem("MISSING_QUERY_ID", "metadata")]),
                broker({("t", 0): (0, 300)}))
    assert at(quiet, "MISSING_QUERY_ID").counts == {}


def test_new_query_from_latest_skips_what_is_there():
    v = run(checkpoint(exists=False), broker({("t", 0): (10, 110), ("t", 1): (0, 0)}), expect_new_checkpoint=True,
            starting_offsets="latest")
    assert at(v, "NO_CHECKPOINT").counts == {T0: RecordCounts(skipped=100, bound=Bound.AT_LEAST)}
    assert run(checkpoint(exists=False), broker({("t", 0): (10, 110)}), expect_new_checkpoint=True,
               starting_offsets="earliest").counts == {}


def test_counts_in_json_and_table():
    v = run(checkpoint({("t", 0): 500}), broker({("t", 0): (800, 1000)}))
    doc = json.loads(json.dumps(v.to_dict()))
    assert doc["records"] == {"lost": 300, "skipped": 0, "duplicated": 0, "bound": "exact"}
    assert doc["counts"] == [{"topic": "t", "partition": 0, "lost": 300, "skipped": 0, "duplicated": 0,
                              "bound": "exact"}]
    [f] = [f for f in doc["findings"] if f["code"] == "OFFSET_BELOW_LOG_START"]
    assert f["counts"][0]["lost"] == 300
    table = render_verdict(v)
    assert "RECORDS" in table.splitlines()[1]
    assert "lost 300" in next(line for line in table.splitlines() if "OFFSET_BELOW_LOG_START" in line)


def test_merging_takes_the_largest_of_each_kind_and_sums_over_partitions():
    a = RecordCounts(lost=5, duplicated=2)
    b = RecordCounts(skipped=3, duplicated=4, bound=Bound.AT_MOST)
    assert a.merged(b) == RecordCounts(lost=5, skipped=3, duplicated=4, bound=Bound.AT_MOST)
    assert b.merged(RecordCounts(skipped=1, bound=Bound.AT_LEAST)).bound == Bound.AT_LEAST   # neither holds: loosest
    assert a.plus(b) == RecordCounts(lost=5, skipped=3, duplicated=6, bound=Bound.AT_MOST)
    assert RecordCounts(lost=-3).lost == 0


# --------------------------------------------------------------------------- S24 / S28 / S29


def test_s24_shared_group_id_warns_with_live_members_only():
    from airflow_kafka_spark.kafka.model import GroupInfo

    cp, br = checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100)})
    busy = evaluate(cp, br, None, DeployOptions(topics=("t",), kafka_group_id="g1"),
                    group=GroupInfo("g1", "STABLE", "CLASSIC", ["kcat@h1"]))
    f = at(busy, "SHARED_GROUP_ID")
    assert f.severity == "WARN" and f.numbers["members"] == 1 and "kcat@h1" in f.message and not f.counts
    idle = evaluate(cp, br, None, DeployOptions(topics=("t",), kafka_group_id="g1"),
                    group=GroupInfo("g1", "DEAD", "CLASSIC", []))
    assert at(idle, "SHARED_GROUP_ID").severity == "INFO" and idle.severity == "PASS"
    assert "SHARED_GROUP_ID" not in {f.code for f in run(cp, br).findings}


def test_s28_first_batch_far_beyond_recent_batches_warns_with_an_estimate():
    from airflow_kafka_spark.verdict.first_batch import RecentBatches
    from tests.support.verdict_states import BATCH_TS, batch

    history = [batch(i, {("t", 0): 60 * i}, ts=BATCH_TS + 2000 * i) for i in range(1, 6)]   # 60 per batch, 2 s
    recent = RecentBatches.of(history)
    assert recent == RecentBatches(batches=4, largest=60, peak_rate=30.0)
    cp, br = checkpoint({("t", 0): 300}), broker({("t", 0): (0, 3300)})
    v = evaluate(cp, br, None, DeployOptions(topics=("t",)), recent=recent)
    f = at(v, "BACKLOG")
    assert f.severity == "WARN" and f.numbers["first_batch_records"] == 3000
    assert f.numbers["times_largest_recent"] == 50.0 and f.numbers["estimated_first_batch_s"] == 100
    assert "50× the largest of the last 4 batches" in f.message
    small = evaluate(cp, broker({("t", 0): (0, 500)}), None, DeployOptions(topics=("t",)), recent=recent)
    assert at(small, "BACKLOG").severity == "INFO"       # 200 records: below the floor
    limited = evaluate(cp, br, None, DeployOptions(topics=("t",), max_offsets_per_trigger=60), recent=recent)
    assert at(limited, "BACKLOG").severity == "INFO" and at(limited, "BACKLOG").numbers["batches"] == 50


def test_s29_new_checkpoint_beside_the_previous_one_counts_against_its_position():
    from airflow_kafka_spark.verdict.previous import PreviousCheckpoint

    prev = PreviousCheckpoint("/data/checkpoints/orders-v1", "orders", 5, None, {T0: 100, T1: 100})
    br = broker({("t", 0): (0, 200), ("t", 1): (0, 150)})
    latest = evaluate(checkpoint(exists=False), br, None, DeployOptions(topics=("t",), expect_new_checkpoint=True,
                                                                        starting_offsets="latest"), previous=prev)
    f = at(latest, "NEW_CHECKPOINT_FOR_KNOWN_QUERY")
    assert f.severity == "WARN"   # declared new, tied by the folder name only: still told what it costs
    assert latest.counts == {T0: RecordCounts(skipped=100, bound=Bound.AT_LEAST),
                             T1: RecordCounts(skipped=50, bound=Bound.AT_LEAST)}   # not the whole topic
    earliest = evaluate(checkpoint(), br, None, DeployOptions(topics=("t",), starting_offsets="earliest"),
                        previous=prev)
    assert at(earliest, "NEW_CHECKPOINT_FOR_KNOWN_QUERY").severity == "BLOCK"
    assert earliest.counts == {T0: RecordCounts(duplicated=100), T1: RecordCounts(duplicated=100)}
    named = PreviousCheckpoint("/data/checkpoints/orders-v1", "orders", 5, None, {T0: 100}, named=True)
    declared = evaluate(checkpoint(exists=False), br, None, DeployOptions(topics=("t",), expect_new_checkpoint=True),
                        previous=named)
    assert at(declared, "NEW_CHECKPOINT_FOR_KNOWN_QUERY").severity == "BLOCK"   # its record names this job
    carried = evaluate(checkpoint(exists=False), br, record(next_starting_offsets='{"t":{"0":100,"1":100}}'),
                       DeployOptions(topics=("t",)), previous=prev)
    assert "NEW_CHECKPOINT_FOR_KNOWN_QUERY" not in {f.code for f in carried.findings}


def test_s29_finds_the_sibling_of_the_same_job_on_disk(tmp_path):
    from airflow_kafka_spark.verdict.previous import find_previous_checkpoint
    from tests.support.checkpoint_factory import write_checkpoint
    from tests.support.verdict_states import NOW_MS

    for name in ("orders-v1", "payments-v1"):
        write_checkpoint(tmp_path / name, batches=3, sources=({"t": 2},), records_per_batch=10,
                         start_timestamp_ms=NOW_MS)
    (tmp_path / "orders-v1.reset-20261124").mkdir()
    (tmp_path / "orders-v2").mkdir()
    prev = find_previous_checkpoint(str(tmp_path / "orders-v2"), None, None, NOW_MS + 60_000)
    assert prev is not None and prev.location.endswith("orders-v1") and prev.position
    assert find_previous_checkpoint(str(tmp_path / "other"), None, None, NOW_MS) is None
    assert find_previous_checkpoint(str(tmp_path / "orders-v2"), None, None, NOW_MS + 90 * 86_400_000) is None  # old


def test_consumer_group_without_offsets_skips_per_partition_under_latest():
    from airflow_kafka_spark.verdict.group import evaluate_group

    br = broker({("t", 0): (0, 40), ("t", 1): (5, 25)})
    v = evaluate_group({}, br, DeployOptions(topics=("t",)))
    assert v.counts == {T0: RecordCounts(skipped=40, bound=Bound.AT_LEAST),
                        T1: RecordCounts(skipped=20, bound=Bound.AT_LEAST)}
    assert evaluate_group({}, br, DeployOptions(topics=("t",), starting_offsets="earliest")).counts == {}
    new = evaluate_group({T0: 40}, br, DeployOptions(topics=("t",)))          # t-1 new to the group: latest
    assert new.counts == {T1: RecordCounts(skipped=20)}


def test_new_query_explicit_offsets_below_log_start_count_the_deleted_records():
    v = run(checkpoint(exists=False), broker({("t", 0): (50, 100), ("t", 1): (0, 100)}), expect_new_checkpoint=True,
            starting_offsets='{"t":{"0":20,"1":10}}')
    assert v.counts == {T0: RecordCounts(lost=30)} and v.summary["records_lost"] == 30
