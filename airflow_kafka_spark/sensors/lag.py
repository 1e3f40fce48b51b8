"""A sensor that waits until a registered streaming job's lag is under its threshold.

Typical uses: after a restart or a reset, hold the downstream tasks until the job has caught up;
before a maintenance window, wait until the backlog is drained. Lag is measured the way every other
surface of this provider measures it (:func:`~airflow_kafka_spark.watch.observe.observe`): readable
records waiting (trailing transaction markers do not count, S25) and the age of the oldest unread
record. An unknown time lag never satisfies a seconds limit.

Three modes, one class (the accepted Airflow 3 pattern, see FileSensor): ``mode="poke"`` keeps a
worker slot and polls every ``poke_interval``; ``mode="reschedule"`` frees the slot between pokes;
``deferrable=True`` first pokes once (a job that is already caught up costs no deferral), then
hands the polling to :class:`~airflow_kafka_spark.triggers.lag.StreamingLagTrigger` in the
triggerer. ``deferrable`` defaults to ``[operators] default_deferrable``.

Limits come from the job registry (``max_lag_records`` / ``max_lag_seconds``) unless given here;
with neither, the sensor refuses to start rather than succeed on nothing. The registry is read when
the task runs, never at DAG parse time.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_kafka_spark.triggers.lag import StreamingLagTrigger
from airflow_kafka_spark.watch.observation import lag_gate

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_kafka_spark.registry.model import JobSpec
    from airflow_kafka_spark.watch.observation import Sample


class StreamingLagSensor(BaseSensorOperator):
    """Succeeds when the job's lag is within ``max_lag_records`` and/or ``max_lag_seconds``.

    :param job: name of a job in the registry (templated).
    :param registry_path: the registry file (default: ``$AKS_JOB_REGISTRY``, else
        ``<dags_folder>/streaming_jobs.yaml``).
    :param max_lag_records: override the registry's limit on readable records waiting.
    :param max_lag_seconds: override the registry's limit on the age of the oldest unread record.
    :param fail_on_alert: fail at once (no retry) when the job is STALLED, STOPPED or REWIND instead
        of waiting for the timeout. Off by default: a long first batch after downtime (S28) looks
        like a stall from the checkpoint alone.
    :param deferrable: poll in the triggerer (``poke_interval`` is its polling interval).
    :param kafka_timeout: deadline of each Kafka request, seconds.

    Returns (XCom) ``{"job", "status", "message", "observation": {...summary}}``.
    """

    template_fields = ("job", "registry_path")
    ui_color = "#e3f2fd"

    def __init__(self, *, job: str, registry_path: str | None = None, max_lag_records: int | None = None,
                 max_lag_seconds: float | None = None, fail_on_alert: bool = False,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 kafka_timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job
        self.registry_path = registry_path
        self.max_lag_records = max_lag_records
        self.max_lag_seconds = max_lag_seconds
        self.fail_on_alert = fail_on_alert
        self.deferrable = deferrable
        self.kafka_timeout = kafka_timeout
        self._samples: list[Sample] = []

    # -- resolution ------------------------------------------------------------------------------

    def _spec(self) -> JobSpec:
        from airflow_kafka_spark.airflow_glue.jobs import load_job, require_structured
        from airflow_kafka_spark.errors import UserError

        try:
            return require_structured(load_job(self.job, self.registry_path)[1], "the lag sensor")
        except UserError as exc:
            raise AirflowFailException(str(exc)) from None

    def _limits(self, spec: JobSpec) -> tuple[int | None, float | None]:
        records = self.max_lag_records if self.max_lag_records is not None else spec.max_lag_records
        seconds = self.max_lag_seconds if self.max_lag_seconds is not None else spec.max_lag_seconds
        if records is None and seconds is None:
            raise AirflowFailException(
                f"job {spec.name}: no lag limit to wait for; set max_lag_records and/or max_lag_seconds in the "
                "registry or on the sensor")
        return records, seconds

    # -- poke mode -------------------------------------------------------------------------------

    def poke(self, context: Context) -> PokeReturnValue:
        from airflow_kafka_spark.airflow_glue.stats import emit_observation
        from airflow_kafka_spark.errors import UserError
        from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
        from airflow_kafka_spark.watch.metrics import group_label
        from airflow_kafka_spark.watch.observation import keep_recent
        from airflow_kafka_spark.watch.observe import observe_job

        spec = self._spec()
        records, seconds = self._limits(spec)
        try:
            config = StreamingKafkaHook(spec.kafka_conn_id).kafka_config()
            obs = observe_job(spec, config, samples=self._samples, timeout=self.kafka_timeout)
        except UserError as exc:
            raise AirflowException(f"job {spec.name}: {exc}") from None
        self._samples = keep_recent(self._samples, obs.sample)
        emit_observation(obs, group=group_label(spec))
        event = lag_gate(obs, max_lag_records=records, max_lag_seconds=seconds, fail_on_alert=self.fail_on_alert)
        if event is not None and event["status"] == "failed":
            raise AirflowFailException(event["message"])
        if event is None:
            self.log.info("job %s: lag %s records, %s s (limits %s records, %s s), status %s", spec.name,
                          obs.lag.records_effective, "?" if obs.lag.seconds is None else f"{obs.lag.seconds:.1f}",
                          records, seconds, obs.status.reason)
            return PokeReturnValue(is_done=False)
        self.log.info("%s", event["message"])
        return PokeReturnValue(is_done=True, xcom_value=event)

    # -- deferrable mode -------------------------------------------------------------------------

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)        # cheap first look: a caught-up job needs no deferral
        if first.is_done:
            return first.xcom_value
        spec = self._spec()
        records, seconds = self._limits(spec)
        self.defer(
            trigger=StreamingLagTrigger(
                job=spec.name, checkpoint=spec.checkpoint, topics=spec.topics, kafka_conn_id=spec.kafka_conn_id,
                max_lag_records=records, max_lag_seconds=seconds, stall_after_s=spec.stall_after_s,
                fail_on_alert=self.fail_on_alert, poll_interval=self.poke_interval,
                max_offsets_per_trigger=spec.max_offsets_per_trigger, timeout=self.kafka_timeout),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        if not event:
            raise AirflowException(f"job {self.job}: the lag trigger ended without an event")
        if event.get("status") == "success":
            self.log.info("%s", event.get("message"))
            return event
        if event.get("status") == "failed":
            raise AirflowFailException(event.get("message"))
        raise AirflowException(event.get("message") or f"job {self.job}: lag trigger error")
