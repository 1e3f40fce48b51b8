"""watch.metrics without a broker: the Prometheus text format, the samples of one observation, gate counters.

The real-broker acceptance (a scrape of ``aks serve-metrics`` against ``aks lag --json``) is
tests/integration/test_metrics_prometheus.py; StatsD through Airflow is tests/airflow/test_statsd.py.
"""

from __future__ import annotations

import math
import re

from airflow_kafka_spark.airflow_glue.stats import stat_name
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.watch import metrics as m
from airflow_kafka_spark.watch.observe import ObserveTarget, observe
from tests.support.checkpoint_factory import START_TIMESTAMP_MS, write_checkpoint
from tests.unit.test_watch import FakeView, tp

# One sample line of the text format 0.0.4: name, optional {labels}, value.
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? '
                  r'(-?[0-9.e+]+|\+Inf|-Inf|NaN)$')


def parse(text: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, dict[str, str], float]]]:
    """A strict reader of what we write: HELP/TYPE per family, then samples; fails on anything else."""
    meta: dict[str, tuple[str, str]] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_ = line[7:].split(" ", 1)
            assert name not in meta, f"HELP twice for {name}"
            meta[name] = (help_, "")
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert meta[name][1] == "", f"TYPE twice for {name}"
            meta[name] = (meta[name][0], kind)
        else:
            found = LINE.match(line)
            assert found, f"not a sample line: {line!r}"
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', found.group(2) or ""))
            samples.append((found.group(1), labels, float(found.group(3))))
    return meta, samples


def test_label_values_are_escaped_and_each_family_has_help_and_type_once():
    nasty = 'a"b\\c\nd'
    samples = [
        m.MetricSample(m.GROUP_LAG, (("cluster_name", "c"), ("group", nasty), ("topic", "t"), ("partition", "0")), 3),
        m.MetricSample(m.JOB_UP, (("cluster_name", "c"), ("group", "g")), 1),
        m.MetricSample(m.GROUP_LAG, (("cluster_name", "c"), ("group", "g"), ("topic", "t"), ("partition", "1")), 4),
        m.MetricSample(m.DATA_LOSS, (("group", "g"),), math.inf),
        m.MetricSample(m.HEADROOM, (), 12.5),
    ]
    text = m.prometheus_text(samples)
    assert 'group="a\\"b\\\\c\\nd"' in text
    meta, parsed = parse(text)
    assert text.count("# TYPE kafka_consumergroup_group_lag gauge") == 1
    lines = text.splitlines()
    # the two lag samples sit together under their family's header although a JOB_UP came between them
    first = lines.index("# TYPE kafka_consumergroup_group_lag gauge")
    assert lines[first + 1].startswith("kafka_consumergroup_group_lag{") and lines[first + 2].startswith(
        "kafka_consumergroup_group_lag{")
    assert meta["aks_job_up"][1] == "gauge" and set(meta) == {s.name for s in samples}
    assert [v for n, _, v in parsed if n == "aks_time_to_data_loss_seconds"] == [math.inf]
    assert "aks_retention_headroom_seconds 12.5" in lines
    assert "kafka_consumergroup_group_lag{cluster_name=\"c\",group=\"g\",topic=\"t\",partition=\"1\"} 4" in lines
    assert m.prometheus_text([]) == ""


def test_observation_samples_are_the_observations_numbers(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=5, sources=({"orders": 2},), records_per_batch=10)
    now = START_TIMESTAMP_MS + 60_000
    view = FakeView(latest={tp(0): 80, tp(1): 55}, record_ts={tp(0): now - 42_000, tp(1): now - 7_500}, now_ms=now)
    obs = observe(ObserveTarget(checkpoint=ck.location), view)
    samples = m.observation_metrics(obs, group="orders", cluster_name=m.cluster_label(obs))
    _, parsed = parse(m.prometheus_text(samples))

    def values(name: str, **want: str) -> list[float]:
        return [v for n, labels, v in parsed if n == name and all(labels.get(k) == x for k, x in want.items())]

    assert values("kafka_consumergroup_group_lag", partition="0") == [30]
    assert values("kafka_consumergroup_group_lag", partition="1") == [5]
    assert values("kafka_consumergroup_group_sum_lag") == [obs.lag.records] == [35]
    assert values("kafka_consumergroup_group_max_lag") == [30]
    assert values("kafka_consumergroup_group_lag_seconds", partition="0") == [42.0]
    assert values("kafka_consumergroup_group_max_lag_seconds") == [obs.lag.seconds] == [42.0]
    assert values("kafka_consumergroup_group_offset", partition="1") == [50]
    assert values("kafka_partition_latest_offset", topic="orders", partition="0") == [80]
    assert values("kafka_partition_earliest_offset", topic="orders", partition="0") == [0]
    status = {labels["status"]: v for n, labels, v in parsed if n == "aks_job_status"}
    assert status[str(obs.status.status)] == 1 and sum(status.values()) == 1 and len(status) == 7
    assert values("aks_time_to_data_loss_seconds") == [obs.headroom.seconds]
    assert {labels["cluster_name"] for _, labels, _ in parsed} == {"c1"}
    assert {labels.get("group") for n, labels, _ in parsed if n.startswith("kafka_consumergroup")} == {"orders"}


def test_gate_counters_count_the_lifecycle_events_and_show_zeroes():
    record = LifecycleRecord.create("orders", "/data/ck")
    for event in (LifecycleEvent.HEALTH_GATE_PASSED, LifecycleEvent.HEALTH_GATE_PASSED,
                  LifecycleEvent.HEALTH_GATE_FAILED, LifecycleEvent.SAFE_RESTART_ROLLED_BACK,
                  LifecycleEvent.LEASE_ACQUIRED):
        record.add_event(event)
    record.add_event("my_own_event")
    got = {(s.label("gate"), s.label("outcome")): s.value
           for s in m.gate_metrics(record, group="orders", cluster_name="c")}
    assert got[("health", "passed")] == 2 and got[("health", "rolled_back")] == 1
    assert got[("health", "failed")] == 1
    assert got[("verdict", "overridden")] == 0 and len(got) == len(m.GATE_EVENTS)
    meta, _ = parse(m.prometheus_text(m.gate_metrics(None, group="orders", cluster_name="c")))
    assert meta["aks_gate_outcomes_total"][1] == "counter"


def test_airflow_stat_names_put_label_values_in_the_name_like_airflows_per_object_metrics():
    labels = (("cluster_name", "c"), ("group", "orders"), ("topic", "in.events"), ("partition", "0"))
    assert stat_name("aks.partition_lag", labels) == "aks.partition_lag.orders.in__events.0"
    assert stat_name("aks.status", (("group", "a b/c"), ("status", "OK"))) == "aks.status.a_b_c.OK"
