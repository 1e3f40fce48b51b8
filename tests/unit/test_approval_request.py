"""When the safe restart pauses for a person, and what it shows (ops/approval.py, pure)."""

from __future__ import annotations

from airflow_kafka_spark.ops.approval import SLACK_MIN_RECORDS, ApprovalRequest, approval_request
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.verdict.findings import BLOCK, INFO


def plan(kind: str, mode: str | None, *moves: tuple[str, int, int | None, int, int | None]) -> Plan:
    p = Plan(kind=kind, subject="/ck", details={"mode": mode} if mode else {})
    for topic, part, old, new, pending in moves:
        p.moves.append(PartitionMove(topic=topic, partition=part, old=old, new=new, log_start=0, log_end=1000,
                                     pending_end=pending))
    return p


def test_a_plan_that_loses_nothing_does_not_pause():
    req = approval_request(plan("reset", "preserve", ("a", 0, 30, 30, None)), idempotent_sink=None)
    assert not req.needed and req.skipped == 0 and req.reasons == ()


def test_skipped_records_pause_and_are_shown_per_topic_with_the_codes():
    p = plan("reset", "latest", ("a", 0, 30, 100, None), ("a", 1, 30, 100, None), ("b", 0, 5, 10, None))
    p.add("DATA_LOSS", BLOCK, "skips", records_skipped=145)
    p.add("SINK_NOT_INSPECTED", INFO, "not inspected")
    req = approval_request(p, idempotent_sink=True)
    assert req.needed and req.skipped == 145 and req.topics["a"].skipped == 140 and req.topics["b"].skipped == 5
    assert req.codes == ("DATA_LOSS",)                       # INFO findings are not shown as codes
    body = req.body()
    assert "| a | 140 | 0 |" in body and "**145**" in body and "`DATA_LOSS`" in body
    assert ApprovalRequest.from_dict(req.to_dict()) == req   # survives XCom


def test_reset_latest_pauses_even_when_nothing_is_behind_yet():
    req = approval_request(plan("reset", "latest", ("a", 0, 100, 100, None)), idempotent_sink=None)
    assert req.needed and req.bound() == SLACK_MIN_RECORDS


def test_a_restore_pauses_for_replay_only_into_a_sink_that_is_not_idempotent():
    p = plan("restore", None, ("a", 0, 80, 50, 90))          # 30 committed + 10 pending read again
    assert approval_request(p, idempotent_sink=False).replayed == 40
    assert approval_request(p, idempotent_sink=False).needed
    assert not approval_request(p, idempotent_sink=True).needed


def test_an_overridden_block_pauses_even_without_a_change_plan():
    req = approval_request(None, idempotent_sink=None, overridden_codes=["OFFSET_BELOW_LOG_START"])
    assert req.needed and req.kind == "none" and req.codes == ("OFFSET_BELOW_LOG_START",)


def test_the_bound_is_what_the_approver_entered_else_the_number_shown_plus_a_margin():
    req = approval_request(plan("reset", "to-datetime", ("a", 0, 0, 50_000, None)), idempotent_sink=None)
    assert req.bound(None) == 55_000 and req.bound("") == 55_000 and req.bound(50_000) == 50_000
