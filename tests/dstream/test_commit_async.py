"""User story 1 with the real DStream job: ``commitAsync`` commits one batch late, so a restart re-reads
the last batch — and ``aks validate --group`` announces exactly that count before the restart.

The job stops right after a batch with records (``after-data``: ``stop(true, false)`` before any
further batch drains the queued commit), which is a kill or an impatient stop in the field. The
restarted job's append sink then shows the duplicates; the idempotent sink has each record once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.dstream.conftest import Sink, run_for, wait_started

pytestmark = [pytest.mark.dstream, pytest.mark.integration]

AKS = Path(sys.executable).with_name("aks")


def validate_group(bootstrap: str, group: str, topic: str) -> dict:
    """``aks validate --group`` as a user runs it, with the job's auto.offset.reset (earliest)."""
    cmd = [str(AKS)] if AKS.exists() else [sys.executable, "-m", "airflow_kafka_spark.cli"]
    res = subprocess.run(
        [
            *cmd,
            "validate",
            "--group",
            group,
            "--topics",
            topic,
            "--bootstrap-servers",
            bootstrap,
            "--starting-offsets",
            "earliest",
            "--json",
            "--no-record",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def announced_replay(doc: dict) -> int:
    [trail] = [f for f in doc["findings"] if f["code"] == "GROUP_COMMIT_TRAILS_ONE_BATCH"]
    return trail["numbers"]["records_to_replay"]


def test_restart_rereads_exactly_the_count_validate_announced(broker, dstream_v1, topic_name, tmp_path):
    bs, group = broker.bootstrap_servers, f"g-{topic_name}"
    topics.create_topic(bs, topic_name, partitions=2)
    produced = produce(bs, topic_name, 200, partitions=2)
    first = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=topic_name, group=group, name="first").start()
    wait_started(first)
    first.wait_processed(200)
    first.marker.write_text("after-data")  # stop(true, false) right after the next batch with records
    produced += produce(bs, topic_name, 120, partitions=2, start_id=200)
    assert first.wait_exit() == 0, first.tail()
    unprocessed = len(produced) - first.processed()  # > 0 only if the 120 straddled a batch boundary

    doc = validate_group(bs, group, topic_name)
    announced = announced_replay(doc)
    assert doc["verdict"] == "WARN" and doc["summary"]["records_to_replay"] == announced

    second = run_for(dstream_v1, tmp_path, bootstrap=bs, topic=topic_name, group=group, name="second").start()
    wait_started(second)
    second.wait_processed(announced)
    assert second.stop("graceful") == 0, second.tail()

    sink = Sink(tmp_path / "sink")
    rereads = sink.duplicates()
    assert rereads > 0, "the stop after a batch with records must leave that batch uncommitted"
    assert rereads == announced - unprocessed, (rereads, announced, unprocessed, first.batches()[-2:])
    assert second.processed() == announced  # the restart read exactly the announced range, nothing more
    truth = {(r.topic, r.partition, r.offset) for r in produced}
    assert set(sink.appended()) == truth and sink.idempotent() == truth  # nothing lost, nothing extra

    # a graceful stop runs one more batch; its compute() drains the queued commit: nothing to re-read now
    after = validate_group(bs, group, topic_name)
    assert announced_replay(after) == 0, after["headline"]
