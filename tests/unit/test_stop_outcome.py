"""What a stop says happened is what happened: a kill is never reported as a stop on a batch boundary.

``runtime.drivers.stop`` judges the outcome from the checkpoint Spark left and from whether the
driver exited by itself; the driver here is a stand-in process state (alive until killed), the
checkpoint a Spark-shaped one (tests/support/checkpoint_factory.py).
"""

from __future__ import annotations

from airflow_kafka_spark.runtime import drivers
from tests.support.checkpoint_factory import write_checkpoint


class _Driver:
    def __init__(self, exits_after_polls: int | None) -> None:
        self.polls, self.exits_after, self.killed = 0, exits_after_polls, False

    def alive(self) -> bool:
        self.polls += 1
        return not self.killed and (self.exits_after is None or self.polls <= self.exits_after)

    def kill(self) -> None:
        self.killed = True


def _stop(tmp_path, driver: _Driver, timeout_s: float) -> drivers.StopResult:
    return drivers.stop(str(tmp_path / "ck"), str(tmp_path / "ck.stop"), is_alive=driver.alive, kill=driver.kill,
                        timeout_s=timeout_s, poll_s=0.01)


def test_a_driver_that_exits_by_itself_between_batches_stopped_on_a_boundary(tmp_path):
    write_checkpoint(tmp_path / "ck", batches=3)
    res = _stop(tmp_path, _Driver(exits_after_polls=3), timeout_s=30)
    assert (res.outcome, res.graceful, res.killed, res.last_committed) == ("STOPPED", True, False, 2)
    assert res.message.startswith("stopped on a batch boundary (last batch 2 committed)")


def test_a_kill_between_batches_says_it_was_a_kill(tmp_path):
    """The checkpoint ends on a boundary, but nobody stopped on it: the outcome is KILLED, never STOPPED."""
    write_checkpoint(tmp_path / "ck", batches=3)
    res = _stop(tmp_path, _Driver(exits_after_polls=None), timeout_s=0)
    assert (res.outcome, res.graceful, res.killed, res.replay_batch) == ("KILLED", False, True, None)
    assert "killed after" in res.message and "stopped on" not in res.message
    assert "last batch 2 committed" in res.message and "nothing will replay" in res.message


def test_a_kill_inside_a_batch_names_the_batch_that_replays(tmp_path):
    write_checkpoint(tmp_path / "ck", batches=3, pending=True)
    res = _stop(tmp_path, _Driver(exits_after_polls=None), timeout_s=0)
    assert (res.outcome, res.killed, res.replay_batch, res.last_committed) == ("STOPPED_MID_BATCH", True, 3, 2)
    assert res.message.startswith("killed after") and "batch 3 was planned" in res.message


def _dstream_spec(tmp_path):
    from airflow_kafka_spark.registry.model import JobKind, JobSpec

    return JobSpec(name="clicks", application="/apps/clicks.jar", topics=("clicks",), checkpoint=str(tmp_path / "ck"),
                   backup_root=str(tmp_path / "b"), stop_marker=str(tmp_path / "ck.stop"), kind=JobKind.DSTREAM,
                   group="g1")


def test_the_job_kind_decides_the_outcome_where_the_stop_happens(tmp_path):
    """A DStream job's checkpoint holds only its lifecycle record: its kind judges the stop (runtime/kinds.py) inside
    ``drivers.stop``, from the job's own report, read once the driver is gone."""
    from airflow_kafka_spark.runtime.kinds import KindStopJudge

    (tmp_path / "ck").mkdir()
    reads = []
    report = {"dstream": {"graceful_stop_returned": True, "batches_not_completed": [1700000000000]}}
    judge = KindStopJudge(_dstream_spec(tmp_path), lambda: reads.append("read") or report)
    res = drivers.stop(str(tmp_path / "ck"), str(tmp_path / "ck.stop"), is_alive=_Driver(exits_after_polls=2).alive,
                       kill=lambda: None, timeout_s=30, poll_s=0.01, judge=judge)
    assert (res.outcome, res.graceful, res.killed) == ("STOPPED_MID_BATCH", True, False)
    assert "batches [1700000000000] not completed" in res.message and "group g1's commits" in res.message
    assert reads == ["read"] and judge.witness == report


def test_the_job_kind_reads_no_report_when_no_driver_ran(tmp_path):
    from airflow_kafka_spark.runtime.kinds import KindStopJudge

    (tmp_path / "ck").mkdir()
    judge = KindStopJudge(_dstream_spec(tmp_path), lambda: {"dstream": {"graceful_stop_returned": True}})
    res = drivers.stop(str(tmp_path / "ck"), str(tmp_path / "ck.stop"), is_alive=lambda: False, kill=lambda: None,
                       timeout_s=30, judge=judge)
    assert (res.outcome, res.message) == ("NOT_RUNNING", "no driver was running")
    assert judge.witness is None
