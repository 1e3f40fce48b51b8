"""A rollback resubmits the recorded application: the JSON it was stored as must become a JobSpec again."""

from __future__ import annotations

import json

from airflow_kafka_spark.registry.model import JobSpec, Sink
from airflow_kafka_spark.runtime import app_versions


def test_recorded_application_round_trips_through_json_into_a_spec():
    spec = JobSpec(name="o", application="/apps/job.py", topics=("t",), checkpoint="/c", backup_root="/b",
                   stop_marker="/c.stop", sink=Sink("append"), application_args=("--stateful", "dedup"),
                   spark_conf={"spark.sql.shuffle.partitions": "2"})
    stored = json.loads(json.dumps(app_versions.app_version(spec)))   # as the lifecycle record keeps it
    back = app_versions.spec_for_app(spec, stored)
    assert back.sink is Sink.APPEND and not back.replay_is_idempotent
    assert back.application_args == ("--stateful", "dedup")
    assert app_versions.app_version(back) == stored
