"""Which processed end the DStream restart plan believes (runtime.dstream.processed_end_of_last_driver).

The agent's report (integration ``agent``) names every completed batch's Kafka ranges; Spark's
KafkaRDD log lines are the older source, only a local driver at INFO has them. The report wins when it
is the last submitted driver's; a report left by an earlier driver (written before that submit) or a
job on another integration falls back to the log. Files as the agent and Spark write them; no Spark run.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from airflow_kafka_spark.agent import report_path
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime.app_versions import SUBMITTED_KEY
from airflow_kafka_spark.runtime.dstream import processed_end_of_last_driver

LOG = (
    "26/11/27 13:04:12 INFO KafkaRDD: Computing topic payments, partition 0 offsets 950 -> 1000\n"
    "26/11/27 13:04:12 INFO KafkaRDD: Computing topic payments, partition 1 offsets 940 -> 990\n"
)


def _record(tmp_path, integration: str, submitted_at_ms: int) -> LifecycleRecord:
    log = tmp_path / "driver.log"
    log.write_text(LOG)
    rec = LifecycleRecord.create("payments", str(tmp_path / "state" / "payments"))
    rec.extra[SUBMITTED_KEY] = {"app": {"integration": integration}, "submitted_at_ms": submitted_at_ms,
                                "log_path": str(log)}
    return rec


def _report(rec: LifecycleRecord, started_at_ms: int) -> None:
    doc = {"schema": 1, "started_at": datetime.fromtimestamp(started_at_ms / 1000, UTC).isoformat().replace(
        "+00:00", "Z"), "dstream": {"processed_end": {"payments": {"0": 1195, "1": 1180}}}}
    path = Path(report_path(rec.checkpoint_location))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


REPORTED = {TopicPartition("payments", 0): 1195, TopicPartition("payments", 1): 1180}
LOGGED = {TopicPartition("payments", 0): 1000, TopicPartition("payments", 1): 990}


def test_the_last_drivers_report_wins_over_the_log(tmp_path):
    now = int(time.time() * 1000)
    rec = _record(tmp_path, "agent", now - 5_000)
    _report(rec, now - 3_000)     # the driver started after the submit: its report
    assert processed_end_of_last_driver(rec) == REPORTED


def test_a_report_older_than_the_submit_is_another_drivers(tmp_path):
    now = int(time.time() * 1000)
    rec = _record(tmp_path, "agent", now)
    _report(rec, now - 3_600_000)  # left by the driver before: the new one has not rewritten it yet
    assert processed_end_of_last_driver(rec) == LOGGED


def test_a_job_on_another_integration_is_judged_from_its_log(tmp_path):
    now = int(time.time() * 1000)
    rec = _record(tmp_path, "reference", now - 5_000)
    _report(rec, now - 3_000)
    assert processed_end_of_last_driver(rec) == LOGGED
