"""Lag, status, headroom and gate outcomes into Airflow's metrics (``Stats``: StatsD, OpenTelemetry, Datadog).

Why through ``Stats`` and not a client of our own: the deployment already says where Airflow's
metrics go (``[metrics] statsd_on`` / ``otel_on``, host, prefix, allow/block lists), and a provider
that reads those settings itself would drift from them. The samples are the ones of
:mod:`airflow_kafka_spark.watch.metrics` (the Prometheus endpoint's), so every surface agrees.

Names follow Airflow's own convention for per-object metrics (``pool.open_slots.<pool_name>``,
``ti.finish.<dag_id>.<task_id>.<state>``): the dotted stat of the family, then the label values
(group, topic, partition, status ...; ``.`` inside a value becomes ``__`` as Airflow does), under
the configured ``statsd_prefix`` (``airflow.`` by default). The same labels go as ``tags`` for the
backends that keep them (OpenTelemetry, Datadog, StatsD with InfluxDB tags). Only gauges with a
finite value are sent (StatsD has no "unknown" and no infinity): an unknown lag or an infinite
headroom is simply not sent. Counters are incremented where the event happens (:func:`gate_outcome`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_kafka_spark.watch.metrics import (
    GATE_OUTCOMES,
    MetricSample,
    MetricType,
    cluster_label,
    observation_metrics,
)

if TYPE_CHECKING:
    from airflow_kafka_spark.watch.observation import Observation

log = logging.getLogger(__name__)

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


def _part(value: str) -> str:
    return _NOT_ALLOWED.sub("_", value.replace(".", "__"))


def stat_name(stat: str, labels: Iterable[tuple[str, str]]) -> str:
    """``aks.partition_lag`` + (group orders, topic in, partition 0) → ``aks.partition_lag.orders.in.0``."""
    return ".".join([stat, *(_part(v) for k, v in labels if k != "cluster_name")])


def emit(samples: Iterable[MetricSample]) -> int:
    """Send the gauges among ``samples`` through ``Stats.gauge``; returns how many were sent.

    Never raises: a metrics backend that is down must not fail a sensor or an audit.
    """
    from airflow.sdk.observability.stats import Stats

    sent = 0
    for s in samples:
        if s.metric.type is not MetricType.GAUGE or not math.isfinite(s.value):
            continue
        try:
            Stats.gauge(stat_name(s.metric.stat, s.labels), s.value, tags=dict(s.labels))
            sent += 1
        except Exception as exc:
            log.warning("metric %s not sent: %s", s.metric.stat, exc)
    return sent


def emit_observation(obs: Observation, *, group: str, cluster_name: str | None = None) -> int:
    """The gauges of one observation (what ``aks lag`` printed for it) through ``Stats``."""
    return emit(observation_metrics(obs, group=group, cluster_name=cluster_label(obs, cluster_name)))


def gate_outcome(group: str, gate: str, outcome: str) -> None:
    """``Stats.incr`` of one gate outcome, e.g. (orders, health, passed) → ``aks.gate.orders.health.passed``."""
    from airflow.sdk.observability.stats import Stats

    labels = (("group", group), ("gate", gate), ("outcome", outcome))
    try:
        Stats.incr(stat_name(GATE_OUTCOMES.stat, labels), tags=dict(labels))
    except Exception as exc:
        log.warning("metric %s not sent: %s", GATE_OUTCOMES.stat, exc)
