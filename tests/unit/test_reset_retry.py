"""A retried reset task whose reset already finished reports it (soak finding: it failed "nothing to reset")."""

from __future__ import annotations

from pathlib import Path

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.journal import Journal, Operation
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.reset import finished_by
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from tests.support.checkpoint_factory import write_checkpoint

ACTOR = "admin via streaming_safe_restart/manual__1/reset"
OFFSETS = '{"orders":{"0":40,"1":42}}'
FINDING = {"code": "PENDING_BATCH_REPLAYED", "severity": "WARN", "numbers": {"records_to_replay": 12},
           "message": "the pending batch is read again", "fix": ""}


def _reset_recorded(ck: Path, actor: str = ACTOR, mode: str = "preserve") -> None:
    record = LifecycleRecord.create("orders", str(ck))
    record.set_next_starting_offsets(OFFSETS, actor=actor)
    record.add_event(LifecycleEvent.CHECKPOINT_RESET, actor=actor, operation_id="op1", mode=mode,
                     backup_id="20260101T000000000Z-b1", moved_to=str(ck) + ".reset-op1",
                     starting_offsets=record.next_starting_offsets, findings=[FINDING])
    record.save()


def test_the_same_task_retried_gets_the_finished_reset_with_its_announced_replay(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _reset_recorded(ck)
    result = finished_by(str(ck), ACTOR, ResetRequest(mode="preserve"))
    assert result is not None and result.resumed and result.operation_id == "op1"
    assert result.starting_offsets == LifecycleRecord.load(str(ck)).next_starting_offsets
    assert [f.numbers["records_to_replay"] for f in result.plan.findings] == [12]
    assert "already finished by an earlier try" in result.notes[0]


def test_a_reset_whose_journal_is_still_open_is_not_finished(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _reset_recorded(ck)
    Journal.begin(open_location(str(ck)), Operation.RESET, "op1", {"job": "orders"})
    assert finished_by(str(ck), ACTOR, ResetRequest(mode="preserve")) is None   # reset_checkpoint resumes it


def test_another_task_another_mode_or_a_started_job_is_not_a_finished_reset(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _reset_recorded(ck)
    other_run = "admin via streaming_safe_restart/manual__2/reset"
    assert finished_by(str(ck), other_run, ResetRequest(mode="preserve")) is None
    assert finished_by(str(ck), ACTOR, ResetRequest(mode="latest")) is None
    write_checkpoint(ck, batches=2)   # the new job has written batches since: a new reset is a new decision
    assert finished_by(str(ck), ACTOR, ResetRequest(mode="preserve")) is None
