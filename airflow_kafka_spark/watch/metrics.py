"""Metrics of every registered job: typed samples, and the Prometheus text a scraper reads.

Why: lag, status and headroom are the first numbers Burrow and kafka-lag-exporter users put on a
dashboard and an alert, and Structured Streaming never commits a consumer group those tools could
read (S23). So the numbers :func:`~airflow_kafka_spark.watch.observe.observe` computes for ``aks lag``
leave here as metric samples, under kafka-lag-exporter's names and labels where the meaning is the
same (existing Grafana panels and alert rules keep working), plus a few ``aks_*`` product metrics.

Nothing is computed twice: :func:`observation_metrics` only reshapes an :class:`Observation`, and
:func:`registry_metrics` takes one observation per job through the same ``observe`` calls as the
CLI and the audit. For a Structured Streaming job the ``group`` label is the registry job name (a
query has no consumer group; its id changes on every reset); for a DStream job it is its Kafka group.

Three surfaces use these samples: ``aks serve-metrics`` and the Airflow plugin's ``/metrics`` route
(:func:`prometheus_text`), and Airflow's ``Stats`` (``airflow_glue/stats.py``, using :attr:`MetricDef.stat`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.watch.status import Status

if TYPE_CHECKING:
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.registry.model import JobSpec, Registry
    from airflow_kafka_spark.watch.observation import Observation, Sample

log = logging.getLogger(__name__)


class MetricType(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True)
class MetricDef:
    """One metric family: its Prometheus name, type and help, and its dotted Airflow ``Stats`` name."""

    name: str
    type: MetricType
    help: str
    stat: str


def _gauge(name: str, stat: str, help: str) -> MetricDef:
    return MetricDef(name, MetricType.GAUGE, help, stat)


# kafka-lag-exporter's families (same names, labels and meaning; no member_host/consumer_id/client_id:
# a Structured Streaming query has no group members).
GROUP_OFFSET = _gauge("kafka_consumergroup_group_offset", "aks.position",
                      "The job's position (end offsets of its last committed batch, or the group's committed offset)")
GROUP_LAG = _gauge("kafka_consumergroup_group_lag", "aks.partition_lag",
                   "Records behind: log end offset - position (as kafka-consumer-groups --describe LAG)")
GROUP_LAG_SECONDS = _gauge("kafka_consumergroup_group_lag_seconds", "aks.partition_lag_seconds",
                           "Age of the oldest unread record, seconds (read from Kafka, else interpolated)")
GROUP_MAX_LAG = _gauge("kafka_consumergroup_group_max_lag", "aks.max_lag", "Largest partition lag of the job, records")
GROUP_MAX_LAG_SECONDS = _gauge("kafka_consumergroup_group_max_lag_seconds", "aks.max_lag_seconds",
                               "Largest partition lag of the job, seconds (= aks lag's lag seconds)")
GROUP_SUM_LAG = _gauge("kafka_consumergroup_group_sum_lag", "aks.lag",
                       "Sum of the partitions' lag, records (= aks lag's lag records)")
GROUP_TOPIC_SUM_LAG = _gauge("kafka_consumergroup_group_topic_sum_lag", "aks.topic_lag",
                             "Sum of the partitions' lag per topic, records")
LATEST_OFFSET = _gauge("kafka_partition_latest_offset", "aks.partition_latest_offset",
                       "Log end offset (high watermark) of the partition")
EARLIEST_OFFSET = _gauge("kafka_partition_earliest_offset", "aks.partition_earliest_offset",
                         "Log start offset of the partition")
# product metrics
JOB_UP = _gauge("aks_job_up", "aks.up", "1 when the job could be observed at this scrape, else 0 (see the server log)")
JOB_STATUS = _gauge("aks_job_status", "aks.status",
                    "Burrow-style status of the job: 1 for the current status, 0 for the others")
LAG_READABLE = _gauge("aks_lag_readable_records", "aks.lag_readable",
                      "Readable records left (trailing transaction markers not counted): what the lag gates use")
HEADROOM = _gauge("aks_retention_headroom_seconds", "aks.headroom_seconds",
                  "Seconds until retention deletes records the job has not read, per partition (+Inf: never)")
DATA_LOSS = _gauge("aks_time_to_data_loss_seconds", "aks.time_to_data_loss_seconds",
                   "Smallest retention headroom of the job, seconds (+Inf: retention cannot delete unread records)")
LOST_RECORDS = _gauge("aks_lost_records", "aks.lost_records",
                      "Unread records already deleted by retention (S01)")
LAST_BATCH_AGE = _gauge("aks_last_batch_age_seconds", "aks.last_batch_age_seconds",
                        "Seconds since the last planned batch's batchTimestampMs")
SCRAPE_SECONDS = _gauge("aks_scrape_duration_seconds", "aks.scrape_duration_seconds",
                        "Seconds the last computation of these metrics took (every job observed once)")
GATE_OUTCOMES = MetricDef("aks_gate_outcomes_total", MetricType.COUNTER,
                          "Gate outcomes in the job's lifecycle record (its last 200 events)", "aks.gate")

#: Lifecycle events counted by ``aks_gate_outcomes_total``: event → (gate, outcome).
GATE_EVENTS: dict[LifecycleEvent, tuple[str, str]] = {
    LifecycleEvent.HEALTH_GATE_PASSED: ("health", "passed"),
    LifecycleEvent.HEALTH_GATE_FAILED: ("health", "failed"),
    LifecycleEvent.SAFE_RESTART_ROLLED_BACK: ("health", "rolled_back"),
    LifecycleEvent.SAFE_RESTART: ("safe_restart", "done"),
    LifecycleEvent.VERDICT_OVERRIDDEN: ("verdict", "overridden"),
    LifecycleEvent.DATA_LOSS_ACCEPTED: ("data_loss", "accepted"),
}


@dataclass(frozen=True)
class MetricSample:
    """One value of one metric family with its labels (in exposition order)."""

    metric: MetricDef
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def name(self) -> str:
        return self.metric.name

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _labels(**kv: object) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in kv.items())


# --------------------------------------------------------------------------------------------------
# samples from what the core computed
# --------------------------------------------------------------------------------------------------


def observation_metrics(obs: Observation, *, group: str, cluster_name: str) -> list[MetricSample]:
    """The samples of one observation. Unknown values (``None``) are left out, never sent as 0."""
    out: list[MetricSample] = []

    def add(metric: MetricDef, value: float | None, **labels: object) -> None:
        if value is not None:
            out.append(MetricSample(metric, _labels(cluster_name=cluster_name, **labels), float(value)))

    lag = obs.lag
    for p in lag.partitions:
        where = {"group": group, "topic": p.tp.topic, "partition": p.tp.partition}
        add(GROUP_OFFSET, p.position, **where)
        add(GROUP_LAG, p.records, **where)
        add(GROUP_LAG_SECONDS, p.seconds, **where)
    for tp in obs.broker.partitions:
        add(LATEST_OFFSET, obs.broker.latest.get(tp), topic=tp.topic, partition=tp.partition)
        add(EARLIEST_OFFSET, obs.broker.earliest.get(tp), topic=tp.topic, partition=tp.partition)
    known = [p.records for p in lag.partitions if p.records is not None]
    add(GROUP_MAX_LAG, max(known, default=0), group=group)
    add(GROUP_MAX_LAG_SECONDS, lag.seconds, group=group)
    add(GROUP_SUM_LAG, lag.records, group=group)
    per_topic: dict[str, int] = {}
    for p in lag.partitions:
        per_topic[p.tp.topic] = per_topic.get(p.tp.topic, 0) + max(0, p.records or 0)
    for topic, value in sorted(per_topic.items()):
        add(GROUP_TOPIC_SUM_LAG, value, group=group, topic=topic)
    add(LAG_READABLE, lag.records_effective, group=group)
    for status in Status:
        add(JOB_STATUS, 1 if obs.status.status is status else 0, group=group, status=status.value)
    for h in obs.headroom.partitions:
        add(HEADROOM, math.inf if h.infinite else h.seconds, group=group, topic=h.tp.topic, partition=h.tp.partition)
    add(DATA_LOSS, math.inf if obs.headroom.infinite else obs.headroom.seconds, group=group)
    add(LOST_RECORDS, obs.headroom.lost_records, group=group)
    add(LAST_BATCH_AGE, obs.last_batch_age_s, group=group)
    return out


def gate_metrics(record: LifecycleRecord | None, *, group: str, cluster_name: str) -> list[MetricSample]:
    """``aks_gate_outcomes_total`` from the lifecycle record's events (every gate/outcome, 0 when none)."""
    counts = dict.fromkeys(GATE_EVENTS.values(), 0)
    for entry in (record.history if record is not None else ()):
        try:
            key = GATE_EVENTS.get(LifecycleEvent(entry.get("event")))
        except ValueError:   # an event a user added: not a gate
            continue
        if key is not None:
            counts[key] += 1
    return [MetricSample(GATE_OUTCOMES, _labels(cluster_name=cluster_name, group=group, gate=gate, outcome=outcome),
                         float(n)) for (gate, outcome), n in counts.items()]


def cluster_label(obs: Observation, given: str | None = None) -> str:
    """The ``cluster_name`` label: the one given, else the Kafka cluster id, else the bootstrap servers."""
    return given or obs.broker.cluster_id or obs.broker.bootstrap_servers


def group_label(spec: JobSpec) -> str:
    """The ``group`` label of a job: its Kafka group for a DStream job, else the registry job name."""
    return spec.group if spec.group else spec.name


def registry_metrics(registry: Registry | Iterable[JobSpec],
                     kafka_config_for: Callable[[JobSpec], Mapping[str, Any]], *,
                     cluster_name: str | None = None, history: MutableMapping[str, list[Sample]] | None = None,
                     jobs: Sequence[str] | None = None, timeout: float = 10.0) -> list[MetricSample]:
    """One observation per registry job (the ``aks lag --job`` numbers), as metric samples.

    ``kafka_config_for(spec)`` gives a job's Kafka client settings (the CLI's, or its Airflow
    connection). ``history``: earlier broker samples per job, updated in place; a caller that keeps
    it between scrapes gives the status its trend (as ``aks lag --watch`` does). ``cluster_name``:
    the ``cluster_name`` label; default the Kafka cluster id. A job that cannot be observed gets
    ``aks_job_up 0`` and a log line (never a secret: only the error text), the others still report.
    """
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.watch.observation import keep_recent
    from airflow_kafka_spark.watch.observe import observe_job

    wanted = set(jobs) if jobs is not None else None
    views: dict[tuple, KafkaView] = {}
    out: list[MetricSample] = []
    try:
        for spec in registry:
            if wanted is not None and spec.name not in wanted:
                continue
            group = group_label(spec)
            past = list((history or {}).get(spec.name, ()))
            try:
                config = dict(kafka_config_for(spec))
                key = tuple(sorted((k, str(v)) for k, v in config.items()))
                if key not in views:
                    views[key] = KafkaView(config, timeout=timeout)
                view = views[key]
                obs = observe_job(spec, view=view, samples=past, timeout=timeout)
            except Exception as exc:   # one broken job must not hide the others
                log.warning("metrics: job %s not observed: %s", spec.name, " ".join(str(exc).split())[:300]
                            or type(exc).__name__)
                out.append(MetricSample(JOB_UP, _labels(cluster_name=cluster_name or "", group=group), 0.0))
                continue
            if history is not None:
                history[spec.name] = keep_recent(past, obs.sample)
            name = cluster_label(obs, cluster_name)
            out.append(MetricSample(JOB_UP, _labels(cluster_name=name, group=group), 1.0))
            out += observation_metrics(obs, group=group, cluster_name=name)
            try:
                out += gate_metrics(LifecycleRecord.load(spec.checkpoint), group=group, cluster_name=name)
            except Exception as exc:   # a corrupt record is the verdict's finding; here only the counter is missing
                log.warning("metrics: job %s: lifecycle record not read: %s", spec.name, " ".join(str(exc).split()))
    finally:
        for view in views.values():
            view.close()
    return out


# --------------------------------------------------------------------------------------------------
# Prometheus text exposition format 0.0.4
# --------------------------------------------------------------------------------------------------

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _value(value: float) -> str:
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def prometheus_text(samples: Iterable[MetricSample]) -> str:
    """The samples in the text exposition format: each family once (HELP, TYPE, then its lines).

    Families appear in first-seen order with all their samples together, as the format requires
    even when the samples of one family came from several jobs.
    """
    families: dict[str, list[MetricSample]] = {}
    defs: dict[str, MetricDef] = {}
    for s in samples:
        families.setdefault(s.metric.name, []).append(s)
        defs.setdefault(s.metric.name, s.metric)
    lines: list[str] = []
    for name, items in families.items():
        d = defs[name]
        lines.append(f"# HELP {name} {_escape_help(d.help)}")
        lines.append(f"# TYPE {name} {d.type.value}")
        for s in items:
            labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels)
            lines.append(f"{name}{{{labels}}} {_value(s.value)}" if labels else f"{name} {_value(s.value)}")
    return "\n".join(lines) + "\n" if lines else ""


__all__ = [
    "CONTENT_TYPE",
    "SCRAPE_SECONDS",
    "MetricDef",
    "MetricSample",
    "MetricType",
    "cluster_label",
    "gate_metrics",
    "group_label",
    "observation_metrics",
    "prometheus_text",
    "registry_metrics",
]
