"""The reset plan is a pure function: every mode and edge case, no broker, no files."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark.errors import ExitCode, UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.ops.reset_plan import (
    ResetRequest,
    SinkInfo,
    build_reset_plan,
    parse_datetime,
    parse_to_offsets,
)
from tests.support.verdict_states import broker, checkpoint, record

T = "orders"
TP0, TP1 = TopicPartition(T, 0), TopicPartition(T, 1)


def plan_for(mode: str = "preserve", *, committed=None, pending=None, ranges=None, rec=None, sink=None,
             partitions=None, timestamps=None, **request):
    cp = checkpoint({(T, 0): 100, (T, 1): 200} if committed is None else committed, pending=pending)
    br = broker(ranges or {(T, 0): (0, 150), (T, 1): (0, 260)}, partitions=partitions)
    req = ResetRequest(mode=mode, **request)
    return build_reset_plan(cp, br, rec, req, timestamp_offsets=timestamps, sink=sink)


def moves(plan):
    return {(m.topic, m.partition): (m.old, m.new) for m in plan.moves}


def codes(plan):
    return {f.code for f in plan.findings}


def test_preserve_carries_the_committed_offsets():
    plan = plan_for()
    assert moves(plan) == {(T, 0): (100, 100), (T, 1): (200, 200)}
    assert (plan.skipped, plan.replayed, plan.pending_replay) == (0, 0, 0)
    assert not plan.blocked
    assert parse_offsets_json(plan.starting_offsets_json) == {TP0: 100, TP1: 200}
    assert plan.backlog == 50 + 60


def test_preserve_replays_a_pending_batch_instead_of_skipping_it():
    plan = plan_for(pending={(T, 0): 130, (T, 1): 240})
    assert moves(plan) == {(T, 0): (100, 100), (T, 1): (200, 200)}   # from C, not from P
    assert plan.skipped == 0
    assert plan.pending_replay == 30 + 40
    assert "PENDING_BATCH_REPLAY" in codes(plan)
    assert not plan.blocked


def test_preserve_starts_new_partitions_at_their_earliest_offset():
    plan = plan_for(ranges={(T, 0): (0, 150), (T, 1): (0, 260), (T, 2): (5, 40)})
    m = {x.partition: x for x in plan.moves}
    assert (m[2].old, m[2].new, m[2].skipped) == (None, 5, 0)
    assert "earliest" in m[2].source
    assert json.loads(plan.starting_offsets_json) == {T: {"0": 100, "1": 200, "2": 5}}


def test_preserve_blocks_when_retention_passed_the_committed_offsets_unless_accepted():
    plan = plan_for(ranges={(T, 0): (120, 150), (T, 1): (0, 260)})
    assert plan.blocked and "OFFSET_BELOW_LOG_START" in codes(plan)
    f = next(f for f in plan.findings if f.code == "OFFSET_BELOW_LOG_START")
    assert f.numbers["records_lost"] == 20
    accepted = plan_for(ranges={(T, 0): (120, 150), (T, 1): (0, 260)}, accept_data_loss=True)
    assert not accepted.blocked
    assert moves(accepted)[(T, 0)] == (100, 120)
    assert accepted.skipped == 20 and "DATA_LOSS_ACCEPTED" in codes(accepted)


def test_preserve_blocks_a_log_that_went_backwards():
    plan = plan_for(ranges={(T, 0): (0, 50), (T, 1): (0, 260)})
    assert plan.blocked and "OFFSET_AHEAD_OF_LOG_END" in codes(plan)


def test_preserve_blocks_on_another_cluster_or_a_recreated_topic():
    other = plan_for(rec=record(cluster_id="cluster-B"))
    assert other.blocked and "CLUSTER_MISMATCH" in codes(other)
    recreated = plan_for(rec=record(topic_ids={T: "old-id"}))
    assert recreated.blocked and "TOPIC_RESET" in codes(recreated)
    # earliest does not use the old offsets: only a warning
    fresh = plan_for("earliest", rec=record(topic_ids={T: "old-id"}), accept_data_loss=True)
    assert not fresh.blocked


def test_preserve_blocks_partitions_that_are_gone():
    plan = plan_for(ranges={(T, 0): (0, 150)})
    assert plan.blocked and "PARTITIONS_GONE" in codes(plan)


def test_earliest_replays_and_latest_skips_which_needs_accept_data_loss():
    early = plan_for("earliest", ranges={(T, 0): (10, 150), (T, 1): (0, 260)})
    assert moves(early) == {(T, 0): (100, 10), (T, 1): (200, 0)}
    assert early.replayed == 90 + 200 and early.skipped == 0 and not early.blocked
    late = plan_for("latest")
    assert moves(late) == {(T, 0): (100, 150), (T, 1): (200, 260)}
    assert late.skipped == 110 and late.blocked and "DATA_LOSS" in codes(late)
    assert plan_for("latest", accept_data_loss=True).blocked is False


def test_to_datetime_uses_offsets_for_time_and_says_when_it_falls_back_to_the_end():
    plan = plan_for("to-datetime", to_datetime_ms=1, timestamps={TP0: 80, TP1: -1})
    m = {x.partition: x for x in plan.moves}
    assert (m[0].new, m[0].replayed) == (80, 20)
    assert m[1].new == 260 and "no record" in m[1].note
    assert plan.blocked  # partition 1 skips 60 records without --accept-data-loss


def test_shift_by_moves_from_committed_and_counts_the_clamp():
    back = plan_for("shift-by", shift_by=-150)
    m = {x.partition: x for x in back.moves}
    assert (m[0].new, m[1].new) == (0, 50)
    assert "clamped to the log start" in m[0].note
    assert back.replayed == 100 + 150 and not back.blocked
    fwd = plan_for("shift-by", shift_by=1000, accept_data_loss=True)
    assert {x.partition: x.new for x in fwd.moves} == {0: 150, 1: 260}
    assert all("clamped to the log end" in x.note for x in fwd.moves)


def test_to_offsets_sets_named_partitions_and_keeps_the_others_committed():
    plan = plan_for("to-offsets", to_offsets={TP0: 90})
    assert moves(plan) == {(T, 0): (100, 90), (T, 1): (200, 200)}
    m = {x.partition: x for x in plan.moves}
    assert m[0].source == "explicit" and "not in --to-offsets" in m[1].source
    sentinels = plan_for("to-offsets", to_offsets={TP0: -2, TP1: -1}, accept_data_loss=True)
    assert moves(sentinels) == {(T, 0): (100, 0), (T, 1): (200, 260)}


@pytest.mark.parametrize("offsets", [{TopicPartition(T, 0): 151}, {TopicPartition("other", 0): 1}])
def test_to_offsets_outside_the_log_or_subscription_is_bad_input(offsets):
    with pytest.raises(UserError) as err:
        plan_for("to-offsets", to_offsets=offsets)
    assert "\n" not in str(err.value)


def test_file_sink_with_batches_blocks_unless_its_log_moves_aside():
    sink = SinkInfo(output="/out", has_log=True, latest_batch_id=5)
    refused = plan_for(sink=sink)
    assert refused.blocked and "SINK_WILL_DISCARD_BATCHES" in codes(refused)
    f = next(f for f in refused.findings if f.code == "SINK_WILL_DISCARD_BATCHES")
    assert "batches 0-5" in f.message and "--sink-log move-aside" in f.fix
    moved = plan_for(sink=sink, sink_log="move-aside")
    assert not moved.blocked and "SINK_LOG_MOVED_ASIDE" in codes(moved)
    assert "SINK_NOT_INSPECTED" in codes(plan_for())
    assert "SINK_OK" in codes(plan_for(sink=SinkInfo(output="/out", has_log=False, latest_batch_id=None)))


def test_a_batch_keyed_output_that_holds_anything_blocks_a_reset_with_the_fix():
    full = SinkInfo(output="/out", has_log=False, latest_batch_id=None, entries=3)
    refused = plan_for(sink=full, batch_keyed_sink=True)
    assert refused.blocked and "BATCH_IDS_COLLIDE" in codes(refused)
    f = next(f for f in refused.findings if f.code == "BATCH_IDS_COLLIDE")
    assert "/out holds 3 entries" in f.message and "new folder" in f.fix
    assert plan_for(batch_keyed_sink=True).blocked                       # no output declared: cannot tell
    empty = plan_for(sink=SinkInfo(output="/new", has_log=False, latest_batch_id=None), batch_keyed_sink=True)
    assert not empty.blocked and "BATCH_KEYED_OUTPUT_EMPTY" in codes(empty)
    assert not plan_for(sink=full).blocked                               # another sink kind: only the note
    assert "batch_keyed_sink" not in plan_for(sink=full).details["request"]  # the journal's shape is unchanged


def test_topics_override_drops_and_adds_topics():
    cp = checkpoint({(T, 0): 100, (T, 1): 200})
    br = broker({(T, 0): (0, 150), (T, 1): (0, 260), ("new", 0): (0, 7)})
    plan = build_reset_plan(cp, br, None, ResetRequest(mode="preserve", topics=("new",)))
    assert moves(plan) == {("new", 0): (None, 0)}
    assert "TOPIC_UNSUBSCRIBED" in codes(plan) and not plan.blocked


def test_nothing_committed_preserves_the_start_of_batch_zero():
    cp = checkpoint(None, pending={(T, 0): 50, (T, 1): 60}, initial={(T, 0): 0, (T, 1): 0})
    plan = build_reset_plan(cp, broker({(T, 0): (0, 150), (T, 1): (0, 260)}), None, ResetRequest(mode="preserve"))
    assert moves(plan) == {(T, 0): (0, 0), (T, 1): (0, 0)}
    assert plan.pending_replay == 110


def test_plan_output_is_complete_and_machine_readable():
    plan = plan_for(pending={(T, 0): 130, (T, 1): 200})
    doc = plan.to_dict()
    assert doc["exit_code"] == 0 and doc["totals"]["pending_replay"] == 30
    assert json.loads(doc["starting_offsets"]) == {T: {"0": 100, "1": 200}}
    text = plan.render()
    assert "OLD(C)" in text and "startingOffsets:" in text
    blocked = plan_for("latest")
    assert blocked.to_dict()["exit_code"] == ExitCode.BLOCKED


@pytest.mark.parametrize("kwargs,needle", [
    ({"mode": "sideways"}, "not one of"),
    ({"mode": "to-datetime"}, "needs a time"),
    ({"mode": "shift-by"}, "needs a number"),
    ({"mode": "to-offsets"}, "needs offsets"),
    ({"mode": "preserve", "sink_log": "delete"}, "sink log policy"),
])
def test_bad_requests_are_one_line_errors(kwargs, needle):
    with pytest.raises(UserError) as err:
        ResetRequest(**kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_parse_datetime_and_offsets(tmp_path):
    assert parse_datetime("1970-01-01T00:00:01Z") == 1000
    assert parse_datetime("1970-01-01T01:00:01+01:00") == 1000
    assert parse_datetime("1970-01-01T00:00:02") == 2000
    assert parse_datetime("1234") == 1234
    with pytest.raises(UserError):
        parse_datetime("yesterday")
    f = tmp_path / "o.json"
    f.write_text('{"orders":{"0":5}}')
    assert parse_to_offsets(f"@{f}") == {TP0: 5} == parse_to_offsets(str(f)) == parse_to_offsets('{"orders":{"0":5}}')
    with pytest.raises(UserError):
        parse_to_offsets(f"@{tmp_path / 'missing.json'}")
