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
