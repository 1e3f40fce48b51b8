"""The health gate's trigger: polls :func:`airflow_kafka_spark.runtime.health.check_health` from the triggerer.

The rules of the gate (what counts as healthy, idle, failed) live in :mod:`airflow_kafka_spark.runtime.health`,
shared with the sensor's poke mode. This class path is stored by Airflow with deferred tasks: it never moves.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_spark.runtime import submit
from airflow_kafka_spark.runtime.drivers import WrongHost
from airflow_kafka_spark.runtime.health import (
    FAILED,
    HEALTHY,
    HealthCheck,
    HealthLook,
    check_health,
    check_or_wait,
    failed_gate_log,
    make_control,
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
        self.checkpoint = checkpoint
        self.topics = list(topics)
        self.kafka_conn_id = kafka_conn_id
        self.min_batches = int(min_batches)
        self.baseline_batch = baseline_batch
        self.baseline_query_id = baseline_query_id
        self.driver = dict(driver)
        self.deadline_epoch_s = float(deadline_epoch_s)
        self.poll_interval_s = float(poll_interval_s)
        self.master = master                # kept for triggers serialised by older releases; unused
        self.spark_binary = spark_binary    # idem: a cluster driver is reached through ``endpoint``
        self.endpoint = dict(endpoint) if endpoint else None
        self.log_path = log_path
        self.idle_pass_s = idle_pass_s
        self.submitted_at_ms = submitted_at_ms

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "checkpoint": self.checkpoint, "topics": list(self.topics), "kafka_conn_id": self.kafka_conn_id,
            "min_batches": self.min_batches, "baseline_batch": self.baseline_batch,
            "baseline_query_id": self.baseline_query_id, "driver": dict(self.driver),
            "deadline_epoch_s": self.deadline_epoch_s, "poll_interval_s": self.poll_interval_s,
            "master": self.master, "spark_binary": self.spark_binary, "log_path": self.log_path,
            "idle_pass_s": self.idle_pass_s, "submitted_at_ms": self.submitted_at_ms, "endpoint": self.endpoint})

    def _check(self, samples: list[list[Any]]) -> HealthCheck:
        from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

        config_cache: dict[str, Any] = {}

        def config() -> dict[str, Any]:
            if "c" not in config_cache:
                config_cache["c"] = StreamingKafkaHook(self.kafka_conn_id).kafka_config()
            return config_cache["c"]

        ctl = make_control(self.driver, endpoint=self.endpoint)
        local_tail = lambda: submit.log_tail(self.log_path, kafka_config=config_cache.get("c"))  # noqa: E731
        return check_health(HealthLook(checkpoint=self.checkpoint, topics=self.topics, kafka_config=config,
                                       min_batches=self.min_batches, baseline_batch=self.baseline_batch,
                                       baseline_query_id=self.baseline_query_id, alive=ctl.is_alive,
                                       log_tail=failed_gate_log(ctl, local_tail), samples=samples,
                                       idle_pass_s=self.idle_pass_s, submitted_at_ms=self.submitted_at_ms))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        samples: list[list[Any]] = []
        started = time.time()
        self.log.info("health gate: waiting in the triggerer; first look in %.0f s", self.poll_interval_s)
        await first_look(self.poll_interval_s, self.deadline_epoch_s)   # the worker has just looked
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
