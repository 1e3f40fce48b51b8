"""The safe-restart DAG's step results as typed values: each one's ``to_dict()`` is exactly the JSON XCom
has always carried, and :func:`from_xcom` reads it back to an equal value (one test per type)."""

from __future__ import annotations

import dataclasses
import json

from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.runtime import safe_restart
from airflow_kafka_spark.runtime.restart_steps import (
    ApprovalSummary,
    AuditEntry,
    BackupTaken,
    ChangeSummary,
    DriverRef,
    HealthSummary,
    RestartPlan,
    RollbackOutcome,
    RunContext,
    RunLeaseRef,
    StopSummary,
    SubmittedDriver,
    VerdictSummary,
    from_xcom,
)

POSITION = {"exists": True, "query_id": "q-1", "last_committed_batch": 4, "last_planned_batch": 4,
            "offsets": {"t": {"0": 10, "1": 12}}}
PROBE = {"answer": "compatible", "reason": "ran batch 5", "method": "shadow-start", "log_tail": "..."}


def _through_xcom(doc):
    return json.loads(json.dumps(doc))


def _plan(**changes) -> RestartPlan:
    decision = safe_restart.decide("auto", registry_compat="2", recorded_compat="1")
    plan = RestartPlan.of(decision, job="alpha", mode="auto", flags=(False, True),
                          asked=RunContext(reason="deploy v2", who="alice", run="manual__1"), compat=("2", "1"),
                          before=(DriverRef(kind="local-pid", id="42", alive=True), POSITION), was_running=True)
    return dataclasses.replace(plan, **changes)


def test_the_plan_is_todays_json_and_reads_back_equal():
    plan = _plan(run_lease=RunLeaseRef(holder="manual__1", expires_at_ms=123))
    doc = plan.to_dict()
    legacy = {"job": "alpha", "mode": "auto",
              **safe_restart.decide("auto", registry_compat="2", recorded_compat="1").to_dict(),
              "dry_run": False, "accept_data_loss": True, "reason": "deploy v2", "who": "alice", "run": "manual__1",
              "registry_compatibility_version": "2", "recorded_compatibility_version": "1", "was_running": True,
              "driver_before": {"kind": "local-pid", "id": "42", "alive": True}, "position_before": POSITION,
              "run_lease": {"holder": "manual__1", "expires_at_ms": 123}}
    assert list(doc) == list(legacy) and doc == legacy
    assert from_xcom(RestartPlan, _through_xcom(doc)) == plan
    assert plan.reset_mode is ResetMode.PRESERVE and plan.tolerate_block
    bare = _plan(driver_before=None, probe=PROBE)
    assert from_xcom(RestartPlan, _through_xcom(bare.to_dict())) == bare
    assert from_xcom(RestartPlan, None) is None and from_xcom(RestartPlan, "") is None


def test_driver_ref_and_run_lease_read_back_equal():
    for value in (DriverRef(kind="yarn", id="application_1_2", alive=False),
                  RunLeaseRef(holder="h", expires_at_ms=1)):
        assert from_xcom(type(value), _through_xcom(value.to_dict())) == value


def test_the_submitted_driver_is_the_submits_driver_document():
    driver = {"kind": "local-pid", "id": "77", "host": "h1", "started_at": 1700000000000}
    got = from_xcom(SubmittedDriver, {"job": "alpha", "driver": driver, "log_path": "/tmp/x.log"})
    assert got == SubmittedDriver(kind="local-pid", id="77", host="h1", started_at=1700000000000)
    assert got.to_dict() == driver
    assert from_xcom(SubmittedDriver, {"job": "alpha", "dry_run": True, "command": "spark-submit"}) is None


def test_the_backup_taken_keeps_its_id():
    assert from_xcom(BackupTaken, {"backup_id": "b-1", "files": 3}) == BackupTaken("b-1")
    assert from_xcom(BackupTaken, {"dstream_backup": "/x"}) == BackupTaken(None)


def test_the_rollback_is_todays_json_for_both_kinds_and_reads_back_equal():
    structured = {"job": "alpha", "failed_steps": ["health_gate"], "notes": [],
                  "stopped": {"outcome": "STOPPED"}, "restored_backup_id": "b-1",
                  "restore": {"records_to_replay": 5, "pre_restore_backup_id": "b-2", "aside_location": "/a"},
                  "resubmitted": {"driver": {"kind": "local-pid", "id": "9", "host": None, "started_at": 1}}}
    dstream = {"job": "d", "failed_steps": ["submit"], "notes": ["the job was not running before this run: left "
                                                                  "stopped"],
               "restored_backup_id": None, "restored_dstream_backup": "/b", "resubmitted": None}
    for doc in (structured, dstream):
        value = from_xcom(RollbackOutcome, doc)
        assert list(value.to_dict()) == list(doc) and value.to_dict() == doc
        assert from_xcom(RollbackOutcome, _through_xcom(value.to_dict())) == value
    assert from_xcom(RollbackOutcome, structured).resubmitted_driver.id == "9"
    assert from_xcom(RollbackOutcome, dstream).restored_backup_id is None


def test_the_audits_summaries_keep_what_they_always_kept():
    assert from_xcom(VerdictSummary, {"verdict": "OK", "headline": "h", "overridden": None, "findings": []}) \
        .to_dict() == {"verdict": "OK", "headline": "h", "overridden": None}
    reset = {"dry_run": False, "operation_id": "op", "plan": {"headline": "replay 3"}, "starting_offsets": None,
             "aside_location": "/aside", "other": 1}
    assert from_xcom(ChangeSummary, reset).to_dict() == {"dry_run": False, "operation_id": "op",
                                                         "headline": "replay 3", "aside_location": "/aside"}
    stop = {"outcome": "STOPPED", "graceful": True, "killed": False, "last_committed": 3, "replay_batch": None,
            "driver": {"id": "1"}, "seconds": 2.0}
    assert from_xcom(StopSummary, stop).to_dict() == {k: v for k, v in stop.items() if k != "seconds"}
    assert from_xcom(StopSummary, {}).to_dict() == dict.fromkeys(
        ("outcome", "graceful", "killed", "last_committed", "replay_batch", "driver"))
    health = {"state": "PASSED", "reason": "2 batches", "new_batches": 2, "last_committed": 6, "lag_records": 0,
              "status": "OK", "promoted": True, "idle": False, "dry_run": False,
              "first_look": "triggerer"}
    assert from_xcom(HealthSummary, {**health, "extra": 1}).to_dict() == health
    approval = {"decision": "approved", "by": "bob", "comment": "ok", "at": "2026-01-01T00:00:00Z",
                "max_records_skipped": 10, "request": {"reasons": ["r"], "skipped": 3, "replayed": 0,
                                                         "topics": ["t"], "codes": ["C"]}}
    assert from_xcom(ApprovalSummary, approval).to_dict() == {
        "decision": "approved", "by": "bob", "comment": "ok", "at": "2026-01-01T00:00:00Z",
        "max_records_skipped": 10, "reasons": ["r"],
        "shown": {"skipped": 3, "replayed": 0, "topics": ["t"], "codes": ["C"]}}


def test_the_audit_entry_is_todays_json():
    plan = _plan(probe=PROBE)
    entry = AuditEntry(outcome="SUCCESS", job="alpha", who="alice", reason="deploy v2", plan=plan, dry_run=False,
                       run="manual__1", verdicts=(VerdictSummary("OK", "h", None), None), backup_id="b-1",
                       reset=ChangeSummary(operation_id="op"), restore=None, stop=None,
                       submitted_driver=SubmittedDriver(kind="local-pid", id="9"), health=None, rollback=None,
                       approval=None, offsets_after={"t": {"0": 11}}, failures={}, task_states={"plan": "success"})
    doc = entry.to_dict()
    assert list(doc) == ["outcome", "job", "who", "reason", "mode", "action", "why", "probe", "dry_run", "run",
                         "verdict_before", "verdict_after", "backup_id", "reset", "restore", "stop",
                         "submitted_driver", "health", "rollback", "approval", "offsets_before", "offsets_after",
                         "failures", "task_states", "pruned"]
    assert (doc["mode"], doc["action"], doc["why"]) == ("auto", "reset", plan.why)
    assert doc["probe"] == {k: v for k, v in PROBE.items() if k != "log_tail"}
    assert doc["offsets_before"] == POSITION["offsets"] and doc["reset"] == {"operation_id": "op"}
    assert doc["submitted_driver"] == {"kind": "local-pid", "id": "9", "host": None, "started_at": None}
    assert "who" not in entry.event_fields() and "task_states" not in entry.event_fields()
    refused = AuditEntry(outcome="REFUSED", job="alpha", who="bob", reason=None, plan=None, dry_run=False,
                         run="r", verdicts=(None, None), backup_id=None, reset=None, restore=None, stop=None,
                         submitted_driver=None, health=None, rollback=None, approval=None, offsets_after=None,
                         failures={"plan": "x"}, task_states={"plan": "failed"}).to_dict()
    assert all(refused[k] is None for k in ("mode", "action", "why", "probe", "offsets_before"))
