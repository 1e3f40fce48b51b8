"""A user's own job, unchanged, after ``aks reset``: it keeps ``startingOffsets=earliest`` (and gets no
``--starting-offsets-file``) yet starts exactly where the reset planned, because the reset left
``sources/0/0`` in the new checkpoint (airflow_kafka_spark/ops/reset_start.py). Real Spark 4.2.0, the
real command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.initial_offsets import read_initial_offsets
from airflow_kafka_spark.kafka.offsets import TopicPartition
from devstack import topics
from tests.support.scenario import Job, short

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_reset_preserve_then_the_apps_own_earliest_reads_each_record_once(broker, tmp_path, topic_name):
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    j = Job(broker, tmp_path, [topic_name], partitions=2)
    j.produce(40)
    first = j.run(starting_offsets="earliest")
    assert first.ok, short(first.error, 2000)
    j.produce(20)                                            # what the new query must read, and only that

    cmd = [sys.executable, "-m", "airflow_kafka_spark.cli", "reset", "--checkpoint", str(j.checkpoint),
           "--backup-root", str(tmp_path / "backups"), "--mode", "preserve", "--bootstrap-servers", j.bootstrap,
           "--settle", "0", "--execute"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=dict(os.environ), timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "whatever startingOffsets the application sets" in out.stdout, out.stdout
    assert "BATCH_IDS_RESTART" in out.stdout
    planned = {TopicPartition(topic_name, 0): 20, TopicPartition(topic_name, 1): 20}
    assert read_initial_offsets(str(j.checkpoint), "0") == planned
    verdict = j.validate(starting_offsets="earliest")
    assert "NEW_QUERY_START" in {f.code for f in verdict.findings} and verdict.severity != "BLOCK", verdict.to_dict()

    again = j.run(starting_offsets="earliest")               # the application unchanged: its own earliest
    assert again.ok, short(again.error, 2000)
    cmp = j.compare()
    new_rows = [r for r in j.sink_rows() if int(r["offset"]) >= 20]
    print("EXACT_START " + json.dumps({"case": "aks reset preserve, app earliest", "produced": cmp.produced,
                                       "consumed": cmp.consumed_rows, "missing": len(cmp.missing),
                                       "duplicated": cmp.duplicate_count, "new_query_rows": len(new_rows)}))
    assert cmp.exact, (len(cmp.missing), cmp.duplicate_count)
    assert cmp.consumed_rows == 60 and len(new_rows) == 20
