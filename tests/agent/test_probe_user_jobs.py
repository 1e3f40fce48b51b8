"""The compatibility probe of users' unchanged applications, through the agent (docs/probe.md).

The old release of a users'-style PySpark job (tests/support/user_jobs/orders_report.py, which has
never heard of the product) runs on the real checkpoint and writes its real sink with its own
``foreachBatch`` code (or Spark's parquet sink); then ``probe_application`` judges the new release,
as the product runs it for an ``integration: agent`` job: the application unchanged, its arguments
from the registry with the staged copy as ``{checkpoint}``, the agent's confs added. After every
probe the real checkpoint and sink are byte-identical (sha256 of every file, and the same set of
folders). Expected answers: what Spark's own restart of the new release does (the reference job's
probe tests, tests/integration/test_probe.py, hold that oracle for the same six changes on 4.2.0).

One broker and one pair of topics for the module; every probe is one real spark-submit (local[2]).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.registry.model import Integration, JobSpec, Sink
from airflow_kafka_spark.runtime import probe
from devstack import topics
from devstack.produce import produce
from devstack.spark_runtimes import runtime
from tests.support import agent_harness as h

pytestmark = [pytest.mark.integration, pytest.mark.userjobs, pytest.mark.airflow]

APP = h.USER_JOBS / "orders_report.py"
B, C, U = probe.ProbeAnswer.BREAKING, probe.ProbeAnswer.COMPATIBLE, probe.ProbeAnswer.UNKNOWN
# case -> (old release, old sink, new release, new sink, expected answer, Spark's error class)
CASES = {
    "new-stateful-operator": ("base", "foreach", "dedup", "foreach", B,
                              "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"),
    "new-aggregation-column": ("agg", "foreach", "agg_sum", "foreach", B, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
    "changed-dropduplicates-key": ("dedup", "foreach", "dedup_key2", "foreach", B,
                                   "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"),
    "stateless-projection": ("base", "foreach", "projection", "foreach", C, None),
    "sink-only": ("base", "foreach", "base", "parquet", C, None),
    "number-of-sources": ("base", "foreach", "two_sources", "foreach", B, probe.SOURCE_COUNT_CHANGED),
}


def digest(root: Path) -> dict[str, str]:
    """Every file's sha256 and every folder (a folder the probe created would show too)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def stack(broker):
    bs = broker.bootstrap_servers
    topic, second = "probe-users", "probe-users-b"
    topics.create_topic(bs, topic, 2)
    topics.create_topic(bs, second, 1)
    produce(bs, topic, 120, partitions=2)
    produce(bs, second, 10, partitions=1)
    os.environ.setdefault("AIRFLOW_CONN_SPARK_PROBE_USERS", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return bs, topic, second


def _args(topic: str, second: str, release: str, sink: str, *extra: str) -> tuple[str, ...]:
    return ("--brokers", "{bootstrap_servers}", "--topic", topic, "--second-topic", second, "--checkpoint",
            "{checkpoint}", "--out", "{output}", "--release", release, "--sink", sink, *extra)


def _old_run(tmp: Path, bs: str, topic: str, second: str, release: str, sink: str, *extra: str) -> Path:
    """The old release on the real checkpoint and sink, plain spark-submit, until Kafka is read (availableNow)."""
    real = tmp / "real"
    args = [a.replace("{bootstrap_servers}", bs).replace("{checkpoint}", str(real / "checkpoint"))
            .replace("{output}", str(real / "sink")) for a in _args(topic, second, release, sink, *extra)]
    driver = h.submit(runtime("default"), APP, [*args, "--available-now"], tmp / "old.log")
    assert driver.wait(240) == 0, driver.text()[-3000:]
    assert h.newest(real / "checkpoint", "commits") >= 0
    return real


def _spec(tmp: Path, topic: str, args: tuple[str, ...], **conf: str) -> JobSpec:
    real = tmp / "real"
    return JobSpec(name="users-report", application=str(APP), topics=(topic,), checkpoint=str(real / "checkpoint"),
                   backup_root=str(tmp / "backups"), stop_marker=str(real / "STOP"), output=str(real / "sink"),
                   sink=Sink.IDEMPOTENT, spark_conn_id="spark_probe_users", compatibility_probe=True,
                   integration=Integration.AGENT, spark_version="4.2",
                   spark_conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "640m", **conf},
                   application_args=args)


def _probe(spec: JobSpec, bs: str, **kw) -> probe.ProbeResult:
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    return probe.probe_application(spec, kafka_config={"bootstrap.servers": bs}, target=spark_target(spec),
                                   timeout_s=300, **kw)


@pytest.mark.parametrize("case", list(CASES))
def test_probe_of_a_users_pyspark_job(case, stack, tmp_path):
    bs, topic, second = stack
    old, old_sink, new, new_sink, expected, error_class = CASES[case]
    real = _old_run(tmp_path, bs, topic, second, old, old_sink)
    before = digest(real)
    result = _probe(_spec(tmp_path, topic, _args(topic, second, new, new_sink)), bs)
    print(f"{case}: {result.answer} in {result.seconds}s, class {result.error_class}: {result.reason}")
    assert digest(real) == before, "the probe touched the real checkpoint or sink"
    assert result.answer is expected, result
    assert result.error_class == error_class, result
