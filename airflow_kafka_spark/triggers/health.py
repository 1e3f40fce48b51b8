"""The health gate's triggers: poll :func:`airflow_kafka_spark.runtime.health.check_health` from the triggerer.

The rules of the gate (what counts as healthy, idle, failed) live in :mod:`airflow_kafka_spark.runtime.health`,
shared with the sensor's poke mode. :class:`StreamingHealthTrigger` is the gate a worker deferred after its
first look; :class:`StreamingHealthStartTrigger` is the whole gate started from the triggerer, first look
included. These class paths are stored by Airflow with deferred tasks: they never move.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_spark.airflow_glue.gate import GateAsk, GateOpening, GateTarget, Opening, open_gate
from airflow_kafka_spark.airflow_glue.jobs import flag
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.runtime.drivers import WrongHost
from airflow_kafka_spark.runtime.health import (
    FAILED,
    HEALTHY,
    HealthCheck,
    check_health,
    check_or_wait,
)
from airflow_kafka_spark.triggers._pace import first_look


class StreamingHealthTrigger(BaseTrigger):
    """Polls :func:`check_health` from the triggerer until the job is healthy, failed or out of time.

    Every blocking call (checkpoint listing, Kafka admin requests, the connection lookup, process
    checks) runs in a thread (``asyncio.to_thread``): the triggerer's event loop serves every
    deferred task of the deployment and must never block. The kwargs are plain JSON values, and no
    secret is among them: the Kafka config is read from the connection inside the thread.
    """

    def __init__(self, *, checkpoint: str, topics: list[str], kafka_conn_id: str, min_batches: int,
                 baseline_batch: int | None, baseline_query_id: str | None, driver: dict[str, Any],
                 deadline_epoch_s: float, poll_interval_s: float = 15.0, master: str | None = None,
                 spark_binary: str | None = None, log_path: str | None = None,
                 idle_pass_s: float | None = None, submitted_at_ms: int | None = None,
                 endpoint: dict[str, Any] | None = None) -> None:
        super().__init__()
        # The target is what the gate watches (airflow_glue.gate); the kwargs stay flat for Airflow's row.
        self.target = GateTarget(checkpoint=checkpoint, topics=list(topics), kafka_conn_id=kafka_conn_id,
                                 min_batches=int(min_batches), baseline_batch=baseline_batch,
                                 baseline_query_id=baseline_query_id, driver=dict(driver),
                                 endpoint=dict(endpoint) if endpoint else None, log_path=log_path,
                                 idle_pass_s=idle_pass_s, submitted_at_ms=submitted_at_ms)
        self.deadline_epoch_s = float(deadline_epoch_s)
        self.poll_interval_s = float(poll_interval_s)
        self.master = master                # kept for triggers serialised by older releases; unused
        self.spark_binary = spark_binary    # idem: a cluster driver is reached through ``endpoint``

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            **self.target.trigger_kwargs(), "deadline_epoch_s": self.deadline_epoch_s,
            "poll_interval_s": self.poll_interval_s, "master": self.master, "spark_binary": self.spark_binary})

    def _check(self, samples: list[list[Any]]) -> HealthCheck:
        return check_health(self.target.look(samples))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Look every ``poll_interval_s``, the first one interval from now, until a verdict or the deadline."""
        samples: list[list[Any]] = []
        started = time.time()
        # A worker has just looked, or (started from the triggerer) the new driver is just starting.
        self.log.info("health gate: waiting in the triggerer; first look in %.0f s", self.poll_interval_s)
        await first_look(self.poll_interval_s, self.deadline_epoch_s)
        while True:
            try:   # an unreachable broker is WAITING (check_or_wait), until the deadline
                check = await asyncio.to_thread(check_or_wait, functools.partial(self._check, samples), samples)
            except WrongHost as exc:
                # Waiting cannot make a pid on another host visible: fail now, with the fix, instead of
                # timing out and rolling back a deploy that may well be healthy.
                yield TriggerEvent({"state": FAILED, "reason": str(exc), "wrong_host": True,
                                    "waited_s": round(time.time() - started, 1)})
                return
            samples = check.samples
            if check.state in (HEALTHY, FAILED):
                yield TriggerEvent({**check.to_dict(), "samples": [], "waited_s": round(time.time() - started, 1)})
                return
            if time.time() >= self.deadline_epoch_s:
                yield TriggerEvent({**check.to_dict(), "samples": [], "state": FAILED,
                                    "reason": f"timed out after {time.time() - started:.0f}s: {check.reason}",
                                    "waited_s": round(time.time() - started, 1)})
                return
            self.log.info("health gate: %s", check.reason)
            await asyncio.sleep(max(0.1, min(self.poll_interval_s, self.deadline_epoch_s - time.time())))


_FIRST_LOOK_S = 300.0


class StreamingHealthStartTrigger(BaseTrigger):
    """The whole gate in the triggerer (``start_from_trigger``): its first look, then :class:`StreamingHealthTrigger`.

    Airflow's scheduler creates this trigger straight from the operator's ``start_trigger_args``: no
    worker runs the task until the trigger's event resumes it in ``execute_complete``. ``job``,
    ``min_batches`` and ``dry_run`` are the operator's template fields, rendered here by Airflow
    (3.3+) before :meth:`run`. A dry-run flag that is another task's XCom arrives as ``dry_run_task``
    and ``dry_run_key`` and is pulled here, in a thread. The first look
    (:func:`airflow_kafka_spark.airflow_glue.gate.open_gate`: registry, lifecycle record, an earlier
    try's verdict) runs in a thread as well; anything but a checkpoint gate to watch ends the trigger
    with the opening as its event, which the worker acts on; a gate to watch looks at the job one poll
    interval later, then as :class:`StreamingHealthTrigger` does.
    """

    def __init__(self, *, job: str, min_batches: Any = None, dry_run: Any = False,
                 dry_run_task: str | None = None, dry_run_key: str | None = None, gate_timeout_s: float | None = None,
                 registry_path: str | None = None, poll_interval_s: float = 15.0) -> None:
        super().__init__()
        self.job = job
        self.min_batches = min_batches
        self.dry_run = dry_run
        self.dry_run_task = dry_run_task
        self.dry_run_key = dry_run_key
        self.gate_timeout_s = gate_timeout_s
        self.registry_path = registry_path
        self.poll_interval_s = float(poll_interval_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job": self.job, "min_batches": self.min_batches, "dry_run": self.dry_run,
            "dry_run_task": self.dry_run_task, "dry_run_key": self.dry_run_key, "gate_timeout_s": self.gate_timeout_s,
            "registry_path": self.registry_path, "poll_interval_s": self.poll_interval_s})

    def _open(self) -> GateOpening:
        ti = self.task_instance
        dry_run: Any = self.dry_run
        if self.dry_run_task and ti is not None:
            # one value by its full key (GetXCom): the triggerer's supervisor answers it, not the slices
            # a task instance's xcom_pull asks for
            from airflow.sdk.execution_time.xcom import XCom

            dry_run = XCom.get_one(key=self.dry_run_key or "return_value", dag_id=ti.dag_id,
                                   task_id=self.dry_run_task, run_id=ti.run_id, map_index=-1)
        try:
            dry = flag(dry_run, name="dry_run")
        except UserError as exc:
            return GateOpening(Opening.REFUSED, str(self.job), str(exc))
        return open_gate(GateAsk(job=self.job, min_batches=self.min_batches, gate_timeout_s=self.gate_timeout_s,
                                 registry_path=self.registry_path, dry_run=dry,
                                 run=f"{ti.dag_id}/{ti.run_id}" if ti is not None else "",
                                 try_number=int(getattr(ti, "try_number", 1) or 1)))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        started = time.time()
        try:
            opening = await asyncio.wait_for(asyncio.to_thread(self._open), timeout=_FIRST_LOOK_S)
        except TimeoutError:
            # No verdict on the job (nothing was judged): the trigger fails, Airflow fails the try, and
            # the gate's retry looks again.
            raise RuntimeError(f"health gate {self.job}: the first look (registry, lifecycle record, the plan's "
                               f"XCom) did not answer in {_FIRST_LOOK_S:.0f} s") from None
        if opening.kind is not Opening.WATCH or opening.target is None:
            self.log.info("health gate %s: %s %s", opening.job, opening.kind.value, opening.message)
            yield TriggerEvent(opening.to_event())
            return
        self.log.info("health gate %s: first look in the triggerer (no worker started the gate); its reads took "
                      "%.1f s", opening.job, time.time() - started)
        watch = StreamingHealthTrigger(**opening.target.trigger_kwargs(), deadline_epoch_s=started + opening.timeout_s,
                                       poll_interval_s=self.poll_interval_s)
        # The job is looked at one poll interval later: the gate starts as the new driver's JVMs do, and a
        # look now would find nothing to judge while taking CPU from them (a driver that dies at start is
        # still seen at the next look).
        async for event in watch.run():
            yield TriggerEvent({**event.payload, "first_look": "triggerer"})
