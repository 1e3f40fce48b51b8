"""A driver on the job's checkpoint that no lifecycle record names: this task's own is adopted, any other refused.

A submit killed between the start of spark-submit and the save of the record leaves a driver that
nothing knows of, and Airflow's retry of the task would start a second one on the same checkpoint
(S16). The soaks found both kinds: a local driver (Spark failed the new one with
``CONCURRENT_STREAM_LOG_UPDATE``) and a YARN application (two applications RUNNING, then a rollback
that could not back up a checkpoint another driver still wrote).

How they are found:

* **local and client mode**: the driver's environment names its checkpoint and its submitter
  (:data:`~airflow_kafka_spark.runtime.drivers.CHECKPOINT_ENV`, ``SUBMITTER_ENV``), read in ``/proc``.
* **cluster mode**: the spark-submit *client* carries the same environment while it runs. A retry
  waits for its own orphaned client (it may be seconds from the cluster accepting the application),
  then asks the cluster manager for the drivers with its submit tag (derived from the task, see
  :func:`~airflow_kafka_spark.runtime.detach.submit_tag`) and with the checkpoint's tag.

What it cannot see: an orphaned client on *another* host while it is still submitting. For that
window, :func:`check_after_submit` asks the cluster again once the new driver is accepted and, if
another driver runs on the checkpoint, kills the one it just started. A standalone master cannot
list drivers by tag, so there only the local clients are checked.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import detach, drivers
from airflow_kafka_spark.runtime.clusters import ClusterEndpoint

#: How long a retry waits for the spark-submit its killed first try left running (that submit's own timeout).
CLIENT_WAIT_S = 600.0
#: How long a question to the cluster manager is retried (a ResourceManager restarting, an HA failover).
ASK_WAIT_S = 180.0


def adopt_local(spec: JobSpec, holder: str, log: Any) -> DriverInfo | None:
    """A live local driver on the job's checkpoint that no record names: this task's own (adopted), or a refusal.

    None when there is none.
    """
    found = drivers.local_unrecorded(spec.checkpoint)
    if not found:
        return None
    for group, submitter in found.items():
        if submitter == holder:
            log.info("driver pid %s on %s was started by this task (%s) before it was interrupted and never "
                     "recorded: adopted", group, spec.checkpoint, holder)
            return DriverInfo(kind=drivers.LOCAL.value, id=str(group), host=socket.gethostname(),
                              started_at=int(time.time() * 1000))
    group, submitter = next(iter(found.items()))
    raise OperationBlocked(f"ALREADY_RUNNING: job {spec.name}: process group {group} on this host runs a driver on "
                           f"checkpoint {spec.checkpoint} that the lifecycle record does not name (started by "
                           f"{submitter or 'unknown'}); stop it (kill -TERM -{group}) so that two drivers never share "
                           "the checkpoint", reason=BlockReason.ALREADY_RUNNING)


class ClusterSearch:
    """The questions a cluster-mode submit asks about drivers no record names, for one job and one submitting task."""

    def __init__(self, spec: JobSpec, *, endpoint: ClusterEndpoint, mode: str, holder: str, log: Any,
                 client_wait_s: float = CLIENT_WAIT_S, ask_wait_s: float = ASK_WAIT_S, poll_s: float = 1.0) -> None:
        self.spec, self.endpoint, self.mode, self.holder, self.log = spec, endpoint, mode, holder, log
        self.tag = detach.submit_tag(spec, holder)
        self.checkpoint_tag = detach.checkpoint_tag(spec.checkpoint)
        self.client_wait_s, self.ask_wait_s, self.poll_s = client_wait_s, ask_wait_s, poll_s

    def adopt_before_submit(self) -> DriverInfo | None:
        """This task's orphaned driver (adopted), None when the checkpoint has no driver, else ALREADY_RUNNING."""
        self._wait_for_own_clients()
        mine = self._alive(self.tag)
        if mine:
            return self._adopt(mine)
        others = self._alive(self.checkpoint_tag, checkpoint=True)
        if others:
            raise self._refusal(others)
        return None

    def check_after_submit(self, started: DriverInfo, kill: Callable[[], None]) -> DriverInfo:
        """``started``, unless another driver runs on the checkpoint: then ``started`` is killed and that one
        is adopted (this task's) or refused (anyone else's)."""
        others = [d for d in self._alive(self.checkpoint_tag, checkpoint=True) or [] if d != started.id]
        if not others:
            return started
        self.log.warning("job %s: %s runs on checkpoint %s besides %s, which this task just started: killing %s",
                         self.spec.name, ", ".join(others), self.spec.checkpoint, started.id, started.id)
        kill()
        mine = [d for d in self._alive(self.tag) or [] if d != started.id]
        if mine:
            return self._adopt(mine)
        raise self._refusal(others)

    # -- internals ---------------------------------------------------------------------------------
    def _wait_for_own_clients(self) -> None:
        """Refuse while another task's spark-submit for this checkpoint runs here; wait out this task's own."""
        deadline = time.monotonic() + self.client_wait_s
        next_note = 0.0
        while found := drivers.local_unrecorded(self.spec.checkpoint):
            strangers = {g: s for g, s in found.items() if s != self.holder}
            if strangers:
                group, submitter = next(iter(strangers.items()))
                raise OperationBlocked(f"ALREADY_RUNNING: job {self.spec.name}: a spark-submit for checkpoint "
                                       f"{self.spec.checkpoint} by {submitter or 'unknown'} is running on this host "
                                       f"(process group {group}); wait for it, or stop it (kill -TERM -{group}) and "
                                       "check the cluster for the driver it started",
                                       reason=BlockReason.ALREADY_RUNNING)
            now = time.monotonic()
            if now >= deadline:
                group = next(iter(found))
                raise UserError(f"job {self.spec.name}: the spark-submit this task started before it was interrupted "
                                f"(process group {group}) still runs after {self.client_wait_s:.0f}s; stop it "
                                f"(kill -TERM -{group}), check the cluster for its driver, then retry")
            if now >= next_note:
                self.log.info("job %s: the spark-submit this task started before it was interrupted (process group "
                              "%s) is still running: waiting for it before asking the cluster for its driver",
                              self.spec.name, ", ".join(map(str, found)))
                next_note = now + 10
            time.sleep(self.poll_s)

    def _alive(self, tag: str, *, checkpoint: bool = False) -> list[str] | None:
        """Live drivers with ``tag``, oldest first; None when the cluster manager cannot tell (standalone)."""
        deadline = time.monotonic() + self.ask_wait_s
        while True:
            try:
                found = drivers.tagged_drivers(self.endpoint, tag, checkpoint=checkpoint, alive_only=True)
                return None if found is None else list(reversed(found))
            except UserError as exc:
                if time.monotonic() >= deadline:
                    raise UserError(f"job {self.spec.name}: cannot ask the cluster manager whether a driver runs on "
                                    f"checkpoint {self.spec.checkpoint} ({exc}); a submit needs that answer, so "
                                    "retry when it is reachable") from None
                time.sleep(max(self.poll_s, 2.0))

    def _adopt(self, mine: list[str]) -> DriverInfo:
        """Keep the oldest of this task's live drivers (it has run longest) and kill the others."""
        keep, extra = mine[0], mine[1:]
        for driver_id in extra:
            self.log.warning("job %s: %s is a second driver this task started: killing it", self.spec.name, driver_id)
            drivers.control(detach.cluster_driver(self.mode, driver_id), endpoint=self.endpoint).kill()
        self.log.info("job %s: driver %s was started by this task (%s, tag %s) before it was interrupted and never "
                      "recorded: adopted", self.spec.name, keep, self.holder, self.tag)
        return detach.cluster_driver(self.mode, keep)


    def _refusal(self, others: list[str]) -> OperationBlocked:
        return OperationBlocked(f"ALREADY_RUNNING: job {self.spec.name}: {', '.join(others)} runs on checkpoint "
                                f"{self.spec.checkpoint} (tag {self.checkpoint_tag}) and the lifecycle record does not "
                                "name it; stop it on the cluster (e.g. yarn application -kill) so that two drivers "
                                "never share the checkpoint", reason=BlockReason.ALREADY_RUNNING)
