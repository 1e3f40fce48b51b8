"""Deferrable half of the lag sensor: polls a job's lag in the triggerer, not in a worker slot.

Why a trigger: "wait until the job has caught up" after a restart or a backfill can take hours,
and a poking sensor holds a worker slot for all of them (the anchors' point about Airflow:
monitoring belongs in the triggerer). The trigger calls the same :func:`~airflow_kafka_spark.watch.observe.observe`
as the sensor's poke, so both modes decide on the same numbers.

Rules the triggerer imposes, and how they are met:

* ``run()`` must never block the event loop. Every call that does I/O (the connection lookup,
  the checkpoint read, Kafka requests) runs through ``asgiref``'s ``sync_to_async`` — as the Kafka
  provider's own ``AwaitMessageTrigger`` does — so a sync ``get_connection`` made inside it is routed
  back correctly instead of deadlocking the loop.
* The trigger must be rebuilt from its serialized kwargs alone, and those kwargs are stored in the
  metadata DB: they hold the job's *resolved* fields (checkpoint, topics, connection id,
  thresholds), never a Kafka config or a secret. The registry itself is not re-read in the
  triggerer, so what the task resolved is what is watched.
* Broker samples taken on earlier polls are kept in memory across polls: the lag trend (and so
  WARN for a rate-limited job falling behind) gets better the longer the trigger runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_kafka_spark.triggers._pace import first_look
from airflow_kafka_spark.watch.observation import Observation, Sample, lag_gate


class StreamingLagTrigger(BaseTrigger):
    """Polls one job until its lag is within ``max_lag_records`` / ``max_lag_seconds``.

    :param job: job name (for messages and XCom only).
    :param checkpoint: the job's checkpoint location (resolved from the registry by the sensor).
    :param topics: the job's subscribed topics.
    :param kafka_conn_id: Airflow connection of type ``kafka`` (its extra is the librdkafka config).
    :param max_lag_records: limit on the readable records waiting (None: not checked).
    :param max_lag_seconds: limit on the age of the oldest unread record (None: not checked).
    :param stall_after_s: the registry's stall threshold, for the status (None: derived).
    :param fail_on_alert: end with ``failed`` as soon as the job is STALLED, STOPPED or REWIND.
    :param poll_interval: seconds between observations.
    :param max_offsets_per_trigger: the job's rate limit (sizes the catch-up estimate).
    :param timeout: deadline of each Kafka request.
    """

    def __init__(self, *, job: str, checkpoint: str, topics: Sequence[str], kafka_conn_id: str,
                 max_lag_records: int | None = None, max_lag_seconds: float | None = None,
                 stall_after_s: float | None = None, fail_on_alert: bool = False, poll_interval: float = 30.0,
                 max_offsets_per_trigger: int | None = None, timeout: float = 10.0) -> None:
        super().__init__()
        self.job = job
        self.checkpoint = checkpoint
        self.topics = list(topics)
        self.kafka_conn_id = kafka_conn_id
        self.max_lag_records = max_lag_records
        self.max_lag_seconds = max_lag_seconds
        self.stall_after_s = stall_after_s
        self.fail_on_alert = fail_on_alert
        self.poll_interval = float(poll_interval)
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.timeout = float(timeout)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}", {
            "job": self.job, "checkpoint": self.checkpoint, "topics": list(self.topics),
            "kafka_conn_id": self.kafka_conn_id, "max_lag_records": self.max_lag_records,
            "max_lag_seconds": self.max_lag_seconds, "stall_after_s": self.stall_after_s,
            "fail_on_alert": self.fail_on_alert, "poll_interval": self.poll_interval,
            "max_offsets_per_trigger": self.max_offsets_per_trigger, "timeout": self.timeout,
        })

    def _observe(self, samples: list[Sample]) -> Observation:
        """Blocking: connection lookup, checkpoint read, Kafka requests (run via ``sync_to_async``)."""
        from airflow_kafka_spark.airflow_glue.stats import emit_observation
        from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
        from airflow_kafka_spark.watch.observe import ObserveLimits, ObserveTarget, observe
        from airflow_kafka_spark.watch.status import StatusThresholds

        config = StreamingKafkaHook(self.kafka_conn_id).kafka_config()
        # Only the stall threshold shapes the status here; the lag limits are the gate's (and may be 0,
        # "fully caught up", which a status threshold may not).
        thresholds = StatusThresholds.from_mapping({"stall_after_s": self.stall_after_s})
        obs = observe(ObserveTarget(checkpoint=self.checkpoint, topics=self.topics, job=self.job), config,
                      thresholds=thresholds, samples=samples,
                      limits=ObserveLimits(max_offsets_per_trigger=self.max_offsets_per_trigger, timeout=self.timeout))
        emit_observation(obs, group=self.job)      # every poll reaches the metrics, not only the sensor's first poke
        return obs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from asgiref.sync import sync_to_async

        from airflow_kafka_spark.errors import UserError
        from airflow_kafka_spark.watch.observation import keep_recent

        samples: list[Sample] = []
        await first_look(self.poll_interval)   # the sensor has just looked on the worker
        while True:
            try:
                obs = await sync_to_async(self._observe)(samples)
                event = lag_gate(obs, max_lag_records=self.max_lag_records, max_lag_seconds=self.max_lag_seconds,
                                 fail_on_alert=self.fail_on_alert)
            except UserError as exc:
                # A wrong path or connection does not heal by waiting; the task fails with this line.
                yield TriggerEvent({"status": "error", "job": self.job, "message": f"job {self.job}: {exc}"})
                return
            if event is not None:
                yield TriggerEvent(event)
                return
            samples = keep_recent(samples, obs.sample)
            self.log.info("job %s: lag %s records, %s s, status %s; next look in %.0f s", self.job,
                          obs.lag.records_effective, "?" if obs.lag.seconds is None else f"{obs.lag.seconds:.1f}",
                          obs.status.status, self.poll_interval)
            await asyncio.sleep(self.poll_interval)
