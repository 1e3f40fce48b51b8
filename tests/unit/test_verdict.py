"""The pre-deploy verdict as a pure function: every code by hand, then generated states.

Hand-built cases pin each finding code to the scenario it exists for (S01–S31, docs/scenarios.md);
the generated cases (``random`` with fixed seeds, no hypothesis) check the invariants that must hold
for *any* state: the verdict is the worst finding, data loss always blocks and is counted exactly,
everything inside the window never blocks, failOnDataLoss=false never lowers anything.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from airflow_kafka_spark.checkpoint.position import resume_offsets
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle.model import Lease
from airflow_kafka_spark.verdict.evaluate import evaluate, identity_lookups, subscribed_topics
from airflow_kafka_spark.verdict.findings import (
    BLOCK,
    CODES,
    INFO,
    PASS,
    WARN,
    Finding,
    Severity,
    Verdict,
    verdict_severity,
)
from airflow_kafka_spark.verdict.group import evaluate_group
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support.verdict_states import BATCH_TS, NOW_MS, batch, broker, checkpoint, problem, record, tps

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def codes(v: Verdict) -> set[str]:
    return {f.code for f in v.findings}


def at(v: Verdict, code: str, tp: TopicPartition | None = None) -> Finding:
    found = [f for f in v.findings if f.code == code and (tp is None or f.tp == tp)]
    assert len(found) == 1, (code, tp, [f.to_dict() for f in v.findings])
    return found[0]


def run(cp, br, rec=None, timestamps=None, **opts) -> Verdict:
    return evaluate(cp, br, rec, DeployOptions(**opts), timestamps)


# --------------------------------------------------------------------------- severities and verdicts


def test_severity_order_is_by_gravity_not_alphabet():
    assert PASS < INFO < WARN < BLOCK
    assert max([WARN, BLOCK, INFO]) == BLOCK
    assert Severity.BLOCK == "BLOCK" and BLOCK > "WARN" and "INFO" < WARN  # noqa: SIM300 (reflected compare)
    with pytest.raises(TypeError):
        assert BLOCK > "FATAL"


def test_info_never_raises_a_verdict_above_pass():
    assert verdict_severity([Finding("NEW_PARTITION", INFO)]) == PASS
    assert verdict_severity([]) == PASS
    assert verdict_severity([Finding("X", INFO), Finding("Y", WARN)]) == WARN


def test_exit_codes_and_json():
    ok = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100)}))
    assert ok.severity == PASS and ok.exit_code == 0
    blocked = run(checkpoint({("t", 0): 100}), broker({("t", 0): (150, 200)}))
    assert blocked.severity == BLOCK and blocked.exit_code == 3
    doc = json.loads(json.dumps(blocked.to_dict()))
    assert doc["verdict"] == "BLOCK" and doc["exit_code"] == 3
    assert doc["summary"]["records_lost"] == 50 and doc["summary"]["BLOCK"] == 1
    assert doc["findings"][0]["code"] == "OFFSET_BELOW_LOG_START"
    assert "OFFSET_BELOW_LOG_START (t-0)" in blocked.headline and "records lost 50" in blocked.headline
    assert blocked.fix == at(blocked, "OFFSET_BELOW_LOG_START").fix


def test_aligned_partitions_pass_with_one_row_each():
    v = run(checkpoint({("t", 0): 100, ("t", 1): 50}), broker({("t", 0): (0, 100), ("t", 1): (10, 80)}))
    assert v.severity == PASS and codes(v) == {"OK", "BACKLOG"}
    assert at(v, "OK", T1).numbers == {"checkpoint_offset": 50, "log_start": 10, "log_end": 80, "backlog": 30}
    assert at(v, "BACKLOG").severity == INFO and at(v, "BACKLOG").numbers["backlog"] == 30
    assert v.summary["partitions"] == 2 and v.summary["backlog"] == 30


# --------------------------------------------------------------------------- S01 / S31 data loss


def test_s01_offset_below_log_start_counts_lost_records():
    v = run(checkpoint({("t", 0): 500, ("t", 1): 500}), broker({("t", 0): (800, 1000), ("t", 1): (0, 1000)}))
    f = at(v, "OFFSET_BELOW_LOG_START", T0)
    assert f.severity == BLOCK and f.numbers["records_lost"] == 300
    assert f.numbers["checkpoint_offset"] == 500 and f.numbers["log_start"] == 800
    assert at(v, "OK", T1)
    assert v.severity == BLOCK and v.summary["records_lost"] == 300


def test_s31_fail_on_data_loss_false_still_blocks_and_warns():
    v = run(checkpoint({("t", 0): 500}), broker({("t", 0): (800, 1000)}), fail_on_data_loss=False)
    assert v.severity == BLOCK
    assert at(v, "OFFSET_BELOW_LOG_START").severity == BLOCK
    w = at(v, "FAIL_ON_DATA_LOSS_DISABLED")
    assert w.severity == WARN and w.numbers["records_silently_skipped"] == 300


def test_fail_on_data_loss_disabled_alone_is_a_warning():
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100)}), fail_on_data_loss=False)
    assert v.severity == WARN and codes(v) == {"OK", "FAIL_ON_DATA_LOSS_DISABLED"}


def test_compacted_topic_loss_is_an_upper_bound_but_compaction_inside_is_fine():
    v = run(checkpoint({("t", 0): 500}), broker({("t", 0): (800, 1000)}, cleanup={"t": "compact,delete"}))
    f = at(v, "OFFSET_BELOW_LOG_START")
    assert f.severity == BLOCK and f.numbers["records_lost"] == 300 and "at most" in f.message
    ok = run(checkpoint({("t", 0): 500}), broker({("t", 0): (0, 1000)}, cleanup={"t": "compact"}))
    assert ok.severity == PASS


# --------------------------------------------------------------------------- S02 / S26 log end


def test_s02_offset_ahead_of_log_end():
    v = run(checkpoint({("t", 0): 500}), broker({("t", 0): (0, 300)}))
    f = at(v, "OFFSET_AHEAD_OF_LOG_END")
    assert f.severity == BLOCK and f.numbers["records_ahead"] == 200
    assert "500" in f.message and "300" in f.message
    assert "BACKLOG" not in codes(v)


def test_s26_persistent_regression_blocks_with_the_samples():
    br = broker({("t", 0): (0, 300)}, resampled={("t", 0): (300, 300, 300, 300)})
    f = at(run(checkpoint({("t", 0): 500}), br), "OFFSET_AHEAD_OF_LOG_END")
    assert f.numbers["samples"] == 4 and "all 4 samples" in f.message


def test_s26_transient_regression_that_healed_warns():
    br = broker({("t", 0): (0, 520)}, resampled={("t", 0): (300, 520)})
    v = run(checkpoint({("t", 0): 500}), br)
    f = at(v, "TRANSIENT_REGRESSION", T0)
    assert v.severity == WARN and f.severity == WARN and f.numbers["samples"] == 2
    assert "300" in f.message


def test_s25_transactional_marker_at_the_end_is_no_alarm():
    # the checkpoint consumed up to the commit marker (C == LE) or stopped before it (LE - C == 1)
    assert run(checkpoint({("t", 0): 101}), broker({("t", 0): (0, 101)})).severity == PASS
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 101)}))
    assert v.severity == PASS and at(v, "BACKLOG").numbers["backlog"] == 1


# --------------------------------------------------------------------------- S03 / S06 identity


def test_s03_topic_reset_by_topic_id():
    rec = record(topic_ids={"t": "old-id"})
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 300)}, topic_ids={"t": "new-id"}), rec)
    f = at(v, "TOPIC_RESET", T0)
    assert f.severity == BLOCK and not f.inferred
    assert f.numbers["recorded_topic_id"] == "old-id" and f.numbers["topic_id"] == "new-id"
    assert "OK" not in codes(v)


def test_same_topic_id_is_no_reset_and_needs_no_probe():
    rec = record(topic_ids={"t": "id-t"})
    cp, br = checkpoint({("t", 0): 100}), broker({("t", 0): (0, 300)})
    assert identity_lookups(cp, br, rec, DeployOptions()) == {}
    assert run(cp, br, rec).severity == PASS


def test_s03_topic_reset_inferred_from_record_timestamps():
    cp, br = checkpoint({("t", 0): 100, ("t", 1): 100}), broker({("t", 0): (0, 300), ("t", 1): (0, 300)})
    assert identity_lookups(cp, br, None, DeployOptions()) == {T0: 100, T1: 100}
    newer = {T0: (99, BATCH_TS + 60_000), T1: (99, BATCH_TS - 5_000)}
    v = run(cp, br, None, newer)
    f = at(v, "TOPIC_RESET", T0)
    assert f.severity == BLOCK and f.inferred and f.numbers["newer_by_ms"] == 60_000
    assert f.numbers["record_offset"] == 99 and f.numbers["batch_timestamp_ms"] == BATCH_TS
    assert at(v, "OK", T1)


@pytest.mark.parametrize("probe", [
    (99, BATCH_TS + 500),     # within the default 1 s skew tolerance
    (99, None),               # no timestamp on the record
    (100, BATCH_TS + 60_000),  # not below C: not evidence
    None,                     # nothing readable below C (markers only)
])
def test_timestamp_heuristic_needs_real_evidence(probe):
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 300)}), None, {T0: probe})
    assert "TOPIC_RESET" not in codes(v)


def test_clock_skew_tolerance_is_configurable():
    args = (checkpoint({("t", 0): 100}), broker({("t", 0): (0, 300)}), None, {T0: (99, BATCH_TS + 30_000)})
    assert "TOPIC_RESET" in codes(run(*args))
    assert "TOPIC_RESET" not in codes(run(*args, clock_skew_ms=60_000))


def test_no_probe_where_no_record_can_be_below_c():
    cp = checkpoint({("t", 0): 100, ("t", 1): 0, ("t", 2): 100, ("t", 3): 100})
    br = broker({("t", 0): (100, 300), ("t", 1): (0, 10), ("t", 2): (0, 50), ("t", 3): (0, 100)})
    assert identity_lookups(cp, br, None, DeployOptions()) == {TopicPartition("t", 3): 100}


def test_s06_cluster_mismatch_blocks_and_skips_topic_id_comparison():
    rec = record(cluster_id="cluster-A", topic_ids={"t": "id-on-A"})
    cp, br = checkpoint({("t", 0): 100}), broker({("t", 0): (0, 300)}, cluster_id="cluster-B")
    v = run(cp, br, rec)
    f = at(v, "CLUSTER_MISMATCH")
    assert f.severity == BLOCK and f.numbers == {"recorded_cluster_id": "cluster-A", "cluster_id": "cluster-B"}
    assert "TOPIC_RESET" not in codes(v)
    assert identity_lookups(cp, br, rec, DeployOptions()) == {}


# --------------------------------------------------------------------------- S04 / S05 / S13 partitions


def test_s04_new_partition_from_zero_is_info_and_the_verdict_passes():
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100), ("t", 1): (0, 40)}))
    f = at(v, "NEW_PARTITION", T1)
    assert f.severity == INFO and f.numbers["records"] == 40
    assert v.severity == PASS and at(v, "BACKLOG").numbers["backlog"] == 40


def test_s04_new_partition_already_trimmed_blocks():
    v = run(checkpoint({("t", 0): 100}), broker({("t", 0): (0, 100), ("t", 1): (50, 90)}))
    f = at(v, "NEW_PARTITION_TRUNCATED", T1)
    assert f.severity == BLOCK and f.numbers["records_lost"] == 50 and not f.inferred


def test_s05_partitions_gone_when_topic_shrank_or_vanished():
    v = run(checkpoint({("t", 0): 100, ("t", 1): 100, ("u", 0): 5}), broker({("t", 0): (0, 200)}, missing=["u"]),
            topics=("t", "u"))
    assert at(v, "PARTITIONS_GONE", T1).severity == BLOCK
    gone_u = at(v, "PARTITIONS_GONE", TopicPartition("u", 0))
    assert "no longer exists" in gone_u.message
    assert "TOPIC_NOT_FOUND" not in codes(v)  # u is reported once, as gone


def test_s13_topic_removed_from_subscription_blocks():
    cp = checkpoint({("a", 0): 10, ("b", 0): 20})
    v = run(cp, broker({("a", 0): (0, 10), ("b", 0): (0, 20)}), topics=("b",))
    f = at(v, "PARTITIONS_GONE", TopicPartition("a", 0))
    assert "not in the deploy's subscription" in f.message
    assert at(v, "OK", TopicPartition("b", 0))


def test_s13_topic_added_is_read_from_earliest_with_a_count():
    cp = checkpoint({("a", 0): 10})
    br = broker({("a", 0): (0, 10), ("b", 0): (0, 100), ("b", 1): (0, 50)})
    v = run(cp, br, topics="a,b")
    f = at(v, "NEW_TOPIC_FROM_EARLIEST")
    assert f.severity == WARN and f.topic == "b" and f.numbers == {"records": 150, "partitions": 2}
    assert v.severity == WARN and at(v, "BACKLOG").numbers["backlog"] == 150


def test_added_topic_already_trimmed_blocks_as_inferred():
    v = run(checkpoint({("a", 0): 10}), broker({("a", 0): (0, 10), ("b", 0): (30, 100)}), topics=("a", "b"))
    f = at(v, "NEW_PARTITION_TRUNCATED", TopicPartition("b", 0))
    assert f.severity == BLOCK and f.inferred and f.numbers["records_lost"] == 30


def test_subscribed_topic_that_does_not_exist_warns():
    v = run(checkpoint({("a", 0): 10}), broker({("a", 0): (0, 10)}, missing=["nope"]), topics=("a", "nope"))
    assert at(v, "TOPIC_NOT_FOUND").topic == "nope" and v.severity == WARN


def test_offsets_unavailable_block():
    br = broker({("t", 0): (0, 100)}, partitions={"t": 2})
    v = run(checkpoint({("t", 0): 100, ("t", 1): 5}), br)
    assert at(v, "OFFSETS_UNAVAILABLE", T1).severity == BLOCK


# --------------------------------------------------------------------------- S07 pending batch


def test_s07_pending_batch_replay_quantified_once():
    cp = checkpoint({("t", 0): 200, ("t", 1): 100}, pending={("t", 0): 300, ("t", 1): 150})
    v = run(cp, broker({("t", 0): (0, 400), ("t", 1): (0, 150)}), idempotent_sink=False)
    f = at(v, "PENDING_BATCH_REPLAY")
    assert f.severity == WARN and f.topic is None
    assert f.numbers["records_to_replay"] == 150 and f.numbers["duplicates_expected"] == 150
    assert f.numbers["batch_id"] == 6 and "t-0 [200, 300)" in f.message
    assert v.severity == WARN and v.summary["records_to_replay"] == 150
    ok = at(v, "OK", T0)
    assert ok.numbers["replay_from"] == 200 and ok.numbers["replay_to"] == 300 and ok.numbers["backlog"] == 100
    assert at(v, "BACKLOG").numbers["backlog"] == 100   # after the replay, not including it


def test_pending_replay_into_an_idempotent_sink_is_info():
    cp = checkpoint({("t", 0): 200}, pending={("t", 0): 300})
    v = run(cp, broker({("t", 0): (0, 300)}), idempotent_sink=True)
    assert at(v, "PENDING_BATCH_REPLAY").severity == INFO and v.severity == PASS


def test_pending_replay_of_unknown_sink_warns_without_claiming_duplicates():
    v = run(checkpoint({("t", 0): 200}, pending={("t", 0): 300}), broker({("t", 0): (0, 300)}))
    f = at(v, "PENDING_BATCH_REPLAY")
    assert f.severity == WARN and "duplicates_expected" not in f.numbers


@pytest.mark.parametrize(("ls", "le"), [(250, 400), (0, 280)])
def test_pending_range_no_longer_readable_blocks(ls, le):
    v = run(checkpoint({("t", 0): 200}, pending={("t", 0): 300}), broker({("t", 0): (ls, le)}))
    f = at(v, "PENDING_BATCH_REPLAY")
    assert f.severity == BLOCK and f.numbers["unreadable_partitions"] == 1


def test_pending_batch_zero_starts_from_the_initial_offsets():
    cp = checkpoint(None, pending={("t", 0): 30}, initial={("t", 0): 10})
    v = run(cp, broker({("t", 0): (0, 50)}))
    assert at(v, "PENDING_BATCH_REPLAY").numbers["records_to_replay"] == 20
    assert resume_offsets(cp) == {T0: 30}


def test_partition_first_seen_in_the_pending_batch_is_replayed_from_earliest():
    cp = checkpoint({("t", 0): 100}, pending={("t", 0): 120, ("t", 1): 15})
    v = run(cp, broker({("t", 0): (0, 120), ("t", 1): (0, 15)}))
    assert at(v, "PENDING_BATCH_REPLAY").numbers["records_to_replay"] == 35
    trimmed = run(cp, broker({("t", 0): (0, 120), ("t", 1): (5, 15)}))
    assert at(trimmed, "NEW_PARTITION_TRUNCATED", T1).severity == BLOCK
    assert at(trimmed, "PENDING_BATCH_REPLAY").severity == BLOCK


# --------------------------------------------------------------------------- S08–S10, S27 checkpoint problems


@pytest.mark.parametrize(("code", "severity"), [
    ("CHECKPOINT_CORRUPT", BLOCK), ("MISSING_QUERY_ID", BLOCK), ("UNSUPPORTED_LOG_VERSION", BLOCK),
    ("STRAY_TEMP_FILE", WARN), ("LOG_GAP", WARN),
])
def test_checkpoint_problems_carry_their_repair(code, severity):
    msg = "offsets gap at 4 (have offsets 0-3,5; commits 0-5): Spark needs offsets/4: restore offsets/4 from a backup"
    v = run(checkpoint({("t", 0): 10}, problems=[problem(code, message=msg)]), broker({("t", 0): (0, 10)}))
    f = at(v, code)
    assert f.severity == severity and f.message == msg
    assert f.fix == "restore offsets/4 from a backup" and f.numbers["path"] == "offsets/5"
    assert v.severity == severity


def test_unreadable_position_reports_only_the_problem():
    cp = replace(checkpoint({("t", 0): 10}), latest_committed=None, latest_planned=None,
                 problems=[problem("CHECKPOINT_CORRUPT")])
    v = run(cp, broker({("t", 0): (0, 10)}))
    assert codes(v) == {"CHECKPOINT_CORRUPT"}


def test_s27_offsets_v2_on_a_runtime_that_reads_only_v1():
    cp = checkpoint({("t", 0): 10}, version=2)
    v = run(cp, broker({("t", 0): (0, 10)}), target_spark_version="4.0.0")
    f = at(v, "CHECKPOINT_NEWER_THAN_RUNTIME")
    assert f.severity == BLOCK and f.inferred and f.numbers["log_version"] == 2
    assert "CHECKPOINT_NEWER_THAN_RUNTIME" not in codes(run(cp, broker({("t", 0): (0, 10)}),
                                                            target_spark_version="4.1.0"))
    assert "CHECKPOINT_NEWER_THAN_RUNTIME" not in codes(run(cp, broker({("t", 0): (0, 10)})))


def test_s27_commits_v2_before_spark_4():
    cp = checkpoint({("t", 0): 10}, commit_version=2)
    f = at(run(cp, broker({("t", 0): (0, 10)}), target_spark_version="3.5.1"), "CHECKPOINT_NEWER_THAN_RUNTIME")
    assert f.numbers["log"] == "commits"


_HDFS = {"spark.sql.streaming.stateStore.providerClass":
         "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}
_ROCKSDB = {"spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}


@pytest.mark.parametrize(("has_state", "conf", "severity"), [
    (True, _HDFS, WARN), (True, _ROCKSDB, WARN), (False, _HDFS, WARN),
    (True, {**_ROCKSDB, "spark.sql.streaming.stateStore.encodingFormat": "avro"}, BLOCK)])
def test_s27_rollback_per_lifecycle_record(has_state, conf, severity):
    """Spark 3.5.1 restarts 4.2.0's state (HDFS-backed and RocksDB) exactly (tests/spark35/test_upgrade.py):
    a WARN; Avro-encoded state (4.0+) cannot be read before 4.0: BLOCK."""
    cp = checkpoint({("t", 0): 10}, has_state=has_state, conf=conf)
    v = run(cp, broker({("t", 0): (0, 10)}), record(spark_version="4.1.0"), target_spark_version="3.5.1")
    assert at(v, "CHECKPOINT_NEWER_THAN_RUNTIME").severity == severity


def test_s27_upgrade_warns_to_take_a_backup():
    v = run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 10)}), record(spark_version="3.5.1"),
            target_spark_version="4.0.0")
    assert at(v, "SPARK_UPGRADE").severity == WARN


# --------------------------------------------------------------------------- S11 / S22 deploy options


def test_s11_conf_pinned_by_checkpoint():
    cp = checkpoint({("t", 0): 10}, has_state=True)
    v = run(cp, broker({("t", 0): (0, 10)}), conf={"spark.sql.shuffle.partitions": "8", "spark.other": "x"})
    f = at(v, "CONF_PINNED_BY_CHECKPOINT")
    assert f.severity == WARN and f.numbers["checkpoint_value"] == "200" and f.numbers["requested_value"] == "8"
    assert "state is partitioned" in f.message
    same = run(cp, broker({("t", 0): (0, 10)}), conf={"spark.sql.shuffle.partitions": "200"})
    assert "CONF_PINNED_BY_CHECKPOINT" not in codes(same)


def test_s11_stateless_note():
    f = at(run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 10)}),
               conf={"spark.sql.shuffle.partitions": "8"}), "CONF_PINNED_BY_CHECKPOINT")
    assert "SPARK-53942" in f.message


def test_s22_starting_offsets_ignored_on_an_existing_checkpoint():
    v = run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 20)}), starting_offsets="LATEST")
    f = at(v, "STARTING_OFFSETS_IGNORED")
    assert f.severity == WARN and "latest" in f.message and v.severity == WARN
    j = at(run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 20)}),
               starting_offsets='{"t":{"0":15}}'), "STARTING_OFFSETS_IGNORED")
    assert j.numbers["partitions_differing"] == 1


def test_sources_only_checkpoint_pins_the_start_too():
    cp = checkpoint(None, initial={("t", 0): 7})
    v = run(cp, broker({("t", 0): (0, 20)}), starting_offsets="earliest")
    assert "sources/" in at(v, "STARTING_OFFSETS_IGNORED").message
    assert at(v, "OK", T0).numbers["checkpoint_offset"] == 7


def test_reset_offsets_in_the_record_are_ignored_while_a_checkpoint_exists():
    v = run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 20)}),
            record(next_starting_offsets='{"t":{"0":3}}'))
    assert "next_starting_offsets" in at(v, "STARTING_OFFSETS_IGNORED").message


def test_expecting_a_new_checkpoint_but_finding_batches_blocks():
    v = run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 20)}), expect_new_checkpoint=True)
    assert at(v, "CHECKPOINT_NOT_EMPTY").severity == BLOCK


def test_s28_backlog_warns_only_when_one_unlimited_batch_is_huge():
    cp = checkpoint({("t", 0): 0})
    big = run(cp, broker({("t", 0): (0, 500_000)}))
    assert at(big, "BACKLOG").severity == WARN and at(big, "BACKLOG").numbers["first_batch_records"] == 500_000
    limited = at(run(cp, broker({("t", 0): (0, 500_000)}), max_offsets_per_trigger=50_000), "BACKLOG")
    assert limited.severity == INFO and limited.numbers["batches"] == 10
    assert at(run(cp, broker({("t", 0): (0, 500)})), "BACKLOG").severity == INFO


def test_strict_turns_warnings_into_blocks():
    v = run(checkpoint({("t", 0): 10}), broker({("t", 0): (0, 20)}), starting_offsets="latest", strict=True)
    f = at(v, "STARTING_OFFSETS_IGNORED")
    assert f.severity == BLOCK and "strict" in f.message and v.exit_code == 3
    assert at(v, "BACKLOG").severity == INFO


def test_deploy_options_validate_their_input():
    with pytest.raises(UserError, match="startingOffsets"):
        DeployOptions(starting_offsets="{nope")
    with pytest.raises(UserError):
        DeployOptions(target_spark_version="banana")
    with pytest.raises(UserError):
        DeployOptions(max_offsets_per_trigger=0)
    o = DeployOptions(topics=["a, b", "b", " c "], conf={"k": 1})
    assert o.topics == ("a", "b", "c") and o.conf == {"k": "1"}
    assert DeployOptions(topics="").topics is None


# --------------------------------------------------------------------------- S16 lease


def test_s16_live_lease_of_someone_else_blocks():
    lease = Lease(holder="airflow:run-1", run_id="r1", expires_at_ms=NOW_MS + 60_000)
    cp, br = checkpoint({("t", 0): 10}), broker({("t", 0): (0, 10)})
    f = at(run(cp, br, record(lease=lease)), "ALREADY_RUNNING")
    assert f.severity == BLOCK and f.numbers["seconds_left"] == 60 and "airflow:run-1" in f.message
    assert "ALREADY_RUNNING" not in codes(run(cp, br, record(lease=lease), owner="airflow:run-1"))
    expired = replace(lease, expires_at_ms=NOW_MS - 1)
    assert "ALREADY_RUNNING" not in codes(run(cp, br, record(lease=expired)))


# --------------------------------------------------------------------------- S21 / S29 new query


def test_new_query_expected_is_info_and_counts_what_latest_skips():
    v = run(checkpoint(exists=False), broker({("t", 0): (10, 110)}), topics=("t",), expect_new_checkpoint=True)
    f = at(v, "NO_CHECKPOINT")
    assert f.severity == INFO and f.numbers == {"records_skipped": 100} and v.severity == PASS


def test_new_query_not_declared_warns():
    v = run(checkpoint(exists=False), broker({("t", 0): (10, 110)}), topics=("t",), starting_offsets="earliest")
    f = at(v, "NO_CHECKPOINT")
    assert f.severity == WARN and f.numbers == {"records_to_read": 100}


def test_new_query_from_the_resets_carried_over_offsets():
    rec = record(next_starting_offsets='{"t":{"0":50,"1":-2}}')
    v = run(checkpoint(exists=False), broker({("t", 0): (10, 110), ("t", 1): (5, 20)}), rec, topics=("t",))
    f = at(v, "NO_CHECKPOINT")
    assert f.severity == INFO and f.numbers["records_to_read"] == 60 + 15
    assert at(v, "OK", T0).numbers["checkpoint_offset"] == 50
    assert at(v, "OK", T1).numbers["checkpoint_offset"] == 5
    assert v.severity == PASS


def test_carried_over_offsets_that_aged_out_block():
    rec = record(next_starting_offsets='{"t":{"0":50}}')
    v = run(checkpoint(exists=False), broker({("t", 0): (80, 110)}), rec, topics=("t",))
    assert at(v, "OFFSET_BELOW_LOG_START", T0).numbers["records_lost"] == 30


def test_explicit_starting_offsets_must_cover_every_partition():
    v = run(checkpoint(exists=False), broker({("t", 0): (0, 10), ("t", 1): (0, 10)}), topics=("t",),
            starting_offsets='{"t":{"0":5},"x":{"0":1}}', expect_new_checkpoint=True)
    f = at(v, "STARTING_OFFSETS_INCOMPLETE")
    assert f.severity == BLOCK and f.numbers["partitions"] == 2 and "t-1" in f.message and "x (not" in f.message


def test_state_without_batches_warns():
    v = run(checkpoint(None, has_state=True), broker({}), expect_new_checkpoint=True)
    assert at(v, "CHECKPOINT_NOT_EMPTY").severity == WARN


# --------------------------------------------------------------------------- consumer groups (story 1)


def test_group_offsets_get_the_same_checks_and_the_one_batch_trail():
    v = evaluate_group(tps({("t", 0): 500, ("t", 1): 40}), broker({("t", 0): (800, 1000), ("t", 1): (0, 90)}),
                       DeployOptions(), group_id="g1")
    assert v.source == "group" and v.subject == "g1"
    assert at(v, "OFFSET_BELOW_LOG_START", T0).numbers["records_lost"] == 300
    trail = at(v, "GROUP_COMMIT_TRAILS_ONE_BATCH")
    assert trail.severity == WARN and "commitAsync" in trail.message and trail.numbers["backlog"] == 50
    assert v.severity == BLOCK
    quiet = evaluate_group(tps({("t", 0): 900}), broker({("t", 0): (800, 1000)}), DeployOptions(),
                           batch_trail_note=False)
    assert "GROUP_COMMIT_TRAILS_ONE_BATCH" not in codes(quiet) and quiet.severity == PASS


def test_group_partition_without_commit_follows_the_reset_policy():
    br = broker({("t", 0): (0, 10), ("t", 1): (0, 30)})
    latest = evaluate_group(tps({("t", 0): 10}), br, DeployOptions(), batch_trail_note=False)
    assert at(latest, "NEW_PARTITION", T1).severity == WARN
    assert at(latest, "NEW_PARTITION", T1).numbers["records_skipped"] == 30
    earliest = evaluate_group(tps({("t", 0): 10}), br, DeployOptions(starting_offsets="earliest"),
                              batch_trail_note=False)
    assert at(earliest, "NEW_PARTITION", T1).severity == INFO


def test_empty_group():
    v = evaluate_group({}, broker({("t", 0): (0, 30)}), DeployOptions(topics=("t",)), group_id="g")
    f = at(v, "NO_GROUP_OFFSETS")
    assert f.severity == WARN and f.numbers["records_skipped"] == 30
    assert "GROUP_COMMIT_TRAILS_ONE_BATCH" not in codes(v)


def test_group_offsets_of_unsubscribed_topics_are_ignored():
    v = evaluate_group(tps({("t", 0): 10, ("old", 0): 5}), broker({("t", 0): (0, 10)}),
                       DeployOptions(topics=("t",)), batch_trail_note=False)
    assert v.severity == PASS and "PARTITIONS_GONE" not in codes(v)


def test_subscribed_topics_union():
    cp = checkpoint({("a", 0): 1}, pending={("a", 0): 2, ("b", 0): 1})
    rec = record(next_starting_offsets='{"c":{"0":1}}')
    assert subscribed_topics(cp, rec, DeployOptions(topics=("d",), starting_offsets='{"e":{"0":1}}')) == \
        ["a", "b", "d", "e", "c"]


# --------------------------------------------------------------------------- generated states

PROPERTY_CASES = 400


def _random_state(rng: random.Random, *, inside: bool = False):
    """A random checkpoint/broker/deploy. ``inside`` keeps every position readable and consistent."""
    topics = [f"t{i}" for i in range(rng.randint(1, 3))]
    committed: dict[tuple[str, int], int] = {}
    pending: dict[tuple[str, int], int] = {}
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    counts: dict[str, int] = {}
    has_pending = rng.random() < 0.35
    for t in topics:
        n = rng.randint(1, 4)
        counts[t] = n
        for p in range(n):
            c = rng.randint(0, 2_000)
            committed[(t, p)] = c
            end = c + rng.randint(0, 300) if has_pending else c
            if has_pending:
                pending[(t, p)] = end
            if inside:
                ls, le = rng.randint(0, c), end + rng.randint(0, 5_000)
            else:
                ls = rng.choice([0, rng.randint(0, c), c, c + rng.randint(1, 500), rng.randint(0, 3_000)])
                le = max(ls, rng.choice([end, end + rng.randint(0, 5_000), rng.randint(0, 3_000), c - 1]))
            ranges[(t, p)] = (ls, le)
        if rng.random() < 0.3:  # partitions added
            for p in range(n, n + rng.randint(1, 2)):
                ls = 0 if inside or rng.random() < 0.5 else rng.randint(1, 100)
                ranges[(t, p)] = (ls, ls + rng.randint(0, 500))
            counts[t] = max(p for (tt, p) in ranges if tt == t) + 1
        if not inside and rng.random() < 0.15:  # partitions removed
            counts[t] = rng.randint(1, n)
            ranges = {k: v for k, v in ranges.items() if k[0] != t or k[1] < counts[t]}
    deploy = list(topics)
    if rng.random() < 0.2:
        deploy.append("new")
        ranges[("new", 0)] = (0 if inside or rng.random() < 0.5 else 7, 40)
        counts["new"] = 1
    if not inside and rng.random() < 0.15 and len(deploy) > 1:
        deploy.remove(rng.choice(topics))
    cp = checkpoint(committed, pending=pending or None,
                    problems=[problem("CHECKPOINT_CORRUPT")] if not inside and rng.random() < 0.1 else None)
    br = broker(ranges, partitions=counts)
    if not inside and rng.random() < 0.2:
        tp = TopicPartition(*rng.choice(sorted(ranges)))
        br = replace(br, resampled=[tp], latest_samples={tp: (0, br.latest[tp])})
    opts = DeployOptions(topics=tuple(rng.sample(deploy, len(deploy))),
                         fail_on_data_loss=rng.random() < 0.7,
                         idempotent_sink=rng.choice([None, True, False]),
                         max_offsets_per_trigger=rng.choice([None, 1_000]))
    return cp, br, opts


def _cases(seed: int, n: int = PROPERTY_CASES, **kw):
    rng = random.Random(seed)
    for _ in range(n):
        yield _random_state(rng, **kw)


def _position(cp):
    start = dict(cp.latest_committed.kafka_offsets)
    pending = cp.latest_planned.kafka_offsets if cp.pending_batch else {}
    return start, pending


def test_generated_verdict_is_the_worst_finding_and_well_formed():
    for cp, br, opts in _cases(1):
        v = evaluate(cp, br, None, opts)
        worst = max((f.severity for f in v.findings), default=PASS)
        assert v.severity == (PASS if worst == INFO else worst)
        assert v.exit_code == (3 if v.severity == BLOCK else 0)
        assert sum(v.summary[s.value] for s in Severity) == len(v.findings)
        json.dumps(v.to_dict())
        for f in v.findings:
            assert f.code in CODES, f.code
            assert f.message and "\n" not in f.message
            if f.severity >= WARN:
                assert f.fix, f.to_dict()


def test_generated_data_loss_always_blocks_with_the_exact_count():
    seen = 0
    for cp, br, opts in _cases(2):
        v = evaluate(cp, br, None, opts)
        start, _ = _position(cp)
        for tp, c in start.items():
            if tp.topic not in opts.topics or tp not in br.earliest or tp.partition >= br.topics[tp.topic].partitions:
                continue
            if br.earliest[tp] > c:
                seen += 1
                f = at(v, "OFFSET_BELOW_LOG_START", tp)
                assert f.severity == BLOCK and f.numbers["records_lost"] == br.earliest[tp] - c
                assert v.severity == BLOCK
            if c > br.latest[tp]:
                assert at(v, "OFFSET_AHEAD_OF_LOG_END", tp).severity == BLOCK
    assert seen > 50  # the generator does exercise the case


def test_generated_every_checkpoint_partition_gets_a_row():
    for cp, br, opts in _cases(3):
        v = evaluate(cp, br, None, opts)
        start, pending = _position(cp)
        placed = {f.tp for f in v.findings if f.tp is not None}
        assert set(start) | set(pending) <= placed


def test_generated_inside_the_window_never_blocks():
    for cp, br, opts in _cases(4, inside=True):
        v = evaluate(cp, br, None, opts)
        assert v.severity != BLOCK, [f.to_dict() for f in v.findings if f.severity == BLOCK]
        start, pending = _position(cp)
        replay = sum(max(pending[tp] - start.get(tp, 0), 0) for tp in pending)
        assert v.summary["records_to_replay"] == replay
        assert v.summary["records_lost"] == 0


def test_generated_fail_on_data_loss_false_never_downgrades():
    for cp, br, opts in _cases(5):
        on = evaluate(cp, br, None, replace(opts, fail_on_data_loss=True))
        off = evaluate(cp, br, None, replace(opts, fail_on_data_loss=False))
        assert off.severity >= on.severity
        assert {(f.code, f.where) for f in on.findings if f.severity == BLOCK} == \
            {(f.code, f.where) for f in off.findings if f.severity == BLOCK}
        assert "FAIL_ON_DATA_LOSS_DISABLED" in codes(off)


def test_generated_strict_blocks_exactly_what_warned():
    for cp, br, opts in _cases(6):
        normal = evaluate(cp, br, None, opts)
        strict = evaluate(cp, br, None, replace(opts, strict=True))
        assert (strict.severity == BLOCK) == (normal.severity in (WARN, BLOCK))


def test_generated_retention_advancing_never_makes_it_better():
    rng = random.Random(7)
    for cp, br, opts in _cases(7):
        before = evaluate(cp, br, None, opts)
        tp = rng.choice(sorted(br.earliest))
        moved = replace(br, earliest={**br.earliest, tp: min(br.earliest[tp] + rng.randint(1, 400), br.latest[tp])})
        after = evaluate(cp, moved, None, opts)
        assert after.severity >= before.severity
        assert after.summary["records_lost"] >= before.summary["records_lost"]


def test_generated_idempotent_sink_never_raises_severity():
    for cp, br, opts in _cases(8):
        unknown = evaluate(cp, br, None, replace(opts, idempotent_sink=None))
        idem = evaluate(cp, br, None, replace(opts, idempotent_sink=True))
        assert idem.severity <= unknown.severity


def test_generated_order_of_inputs_does_not_matter():
    for cp, br, opts in _cases(9, n=150):
        a = evaluate(cp, br, None, opts)
        rev = replace(br, earliest=dict(reversed(list(br.earliest.items()))),
                      latest=dict(reversed(list(br.latest.items()))))
        b = evaluate(cp, rev, None, opts)
        assert a.to_dict() == b.to_dict()


def test_generated_topic_reset_evidence_only_from_newer_records():
    """A probe at or before the batch time (+ tolerance) never produces TOPIC_RESET; a newer one always does."""
    rng = random.Random(10)
    for cp, br, opts in _cases(10, n=200, inside=True):
        probes = identity_lookups(cp, br, None, opts)
        old = {tp: (c - 1, BATCH_TS - rng.randint(0, 10**9)) for tp, c in probes.items()}
        assert "TOPIC_RESET" not in codes(evaluate(cp, br, None, opts, old))
        if probes:
            tp = rng.choice(sorted(probes))
            newer = {**old, tp: (probes[tp] - 1, cp.latest_planned.batch_timestamp_ms + opts.clock_skew_ms + 1)}
            v = evaluate(cp, br, None, opts, newer)
            assert at(v, "TOPIC_RESET", tp).inferred and v.severity == BLOCK


def test_batch_builder_sanity():
    assert batch(1, {("t", 0): 5}).kafka_offsets == {T0: 5}
