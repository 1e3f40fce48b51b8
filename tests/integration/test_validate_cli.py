"""``aks validate`` end to end against the real local broker, on checkpoints written byte for byte.

Spark itself is not needed to *judge* a checkpoint, only to prove the judgement right; that is the
job of test_scenarios.py (Spark as the oracle). Here the checkpoint comes from
tests/support/checkpoint_factory.py, the broker is real, and the CLI runs as a subprocess, so the
whole path — file parsing, AdminClient calls, record probes, the lifecycle record, exit codes —
is exercised as a user runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = pytest.mark.integration

AKS = Path(sys.executable).with_name("aks")


def aks(*args: str) -> subprocess.CompletedProcess:
    cmd = [str(AKS)] if AKS.exists() else [sys.executable, "-m", "airflow_kafka_spark.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)


def report(res: subprocess.CompletedProcess) -> dict:
    assert "Traceback" not in res.stderr, res.stderr
    return json.loads(res.stdout)


def codes(doc: dict) -> set[str]:
    return {f["code"] for f in doc["findings"]}


def findings(doc: dict, code: str) -> list[dict]:
    return [f for f in doc["findings"] if f["code"] == code]


@pytest.fixture
def setup(broker, tmp_path, topic_name):
    """A 2-partition topic with 30 records per partition and a checkpoint committed at 20 each.

    The checkpoint's batches are stamped *after* the records were produced, as Spark's would be.
    """
    bs = broker.bootstrap_servers

    def make(*, per_partition: int = 30, batches: int = 2, pending: bool = False, name: str = "ck",
             transactional: bool = False):
        topics.create_topic(bs, topic_name, 2)
        produce(bs, topic_name, per_partition * 2, partitions=2,
                transactional_id=f"tx-{topic_name}" if transactional else None)
        time.sleep(0.01)
        ck = write_checkpoint(tmp_path / name, batches=batches, sources=({topic_name: 2},), records_per_batch=10,
                              pending=pending, start_timestamp_ms=int(time.time() * 1000) - batches * 1000)
        return bs, topic_name, ck

    return make


def test_aligned_checkpoint_passes_and_records_the_kafka_identity(setup, broker):
    bs, topic, ck = setup()
    res = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--json")
    doc = report(res)
    assert res.returncode == 0 and doc["verdict"] == "PASS", doc
    ok = findings(doc, "OK")
    assert [(f["partition"], f["numbers"]["checkpoint_offset"], f["numbers"]["log_end"]) for f in ok] == \
        [(0, 20, 30), (1, 20, 30)]
    assert findings(doc, "BACKLOG")[0]["numbers"]["backlog"] == 20
    assert "IDENTITY_UNVERIFIED" not in codes(doc)  # the record timestamps were readable and older
    rec = LifecycleRecord.load(ck.location)
    assert rec is not None and rec.kafka_cluster_id == broker.cluster_id
    assert rec.topics[topic].topic_id and rec.topics[topic].partitions == 2

    text = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs)
    lines = text.stdout.strip().splitlines()
    assert text.returncode == 0 and lines[-1].startswith("verdict: PASS"), text.stdout
    assert any(line.startswith("SEVERITY") for line in lines)


def test_s01_retention_past_the_checkpoint_blocks_with_the_count(setup):
    bs, topic, ck = setup()
    topics.delete_records(bs, topic, {0: 25})
    res = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--fail-on-data-loss", "false",
              "--json")
    doc = report(res)
    assert res.returncode == 3 and doc["verdict"] == "BLOCK"
    [lost] = findings(doc, "OFFSET_BELOW_LOG_START")
    assert lost["partition"] == 0 and lost["numbers"]["records_lost"] == 5
    assert "FAIL_ON_DATA_LOSS_DISABLED" in codes(doc)
    human = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs)
    assert human.returncode == 3
    assert human.stdout.strip().splitlines()[-1].startswith("verdict: BLOCK — OFFSET_BELOW_LOG_START")


def test_s03_recreated_topic_is_caught_by_topic_id_after_a_validation(setup):
    bs, topic, ck = setup()
    assert aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs).returncode == 0
    topics.delete_topic(bs, topic)
    topics.create_topic(bs, topic, 2)
    produce(bs, topic, 100, partitions=2)   # 50 per partition: more than the checkpoint's 20
    doc = report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--json"))
    resets = findings(doc, "TOPIC_RESET")
    assert doc["verdict"] == "BLOCK" and len(resets) == 2
    assert all(not f["inferred"] and f["numbers"]["recorded_topic_id"] != f["numbers"]["topic_id"]
               for f in resets)
    # a BLOCK is not recorded as the new baseline: the next run still blocks
    assert report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs,
                      "--json"))["verdict"] == "BLOCK"


def test_s03_without_a_record_the_timestamps_give_it_away(setup):
    bs, topic, ck = setup()
    topics.delete_topic(bs, topic)
    topics.create_topic(bs, topic, 2)
    time.sleep(1.5)   # the new incarnation's records are newer than the last batch + 1 s tolerance
    produce(bs, topic, 100, partitions=2)
    res = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--no-record", "--json")
    doc = report(res)
    resets = findings(doc, "TOPIC_RESET")
    assert res.returncode == 3 and len(resets) == 2 and all(f["inferred"] for f in resets), doc
    assert LifecycleRecord.load(ck.location) is None  # --no-record wrote nothing


def test_s02_topic_recreated_with_fewer_records(setup):
    bs, topic, ck = setup()
    topics.delete_topic(bs, topic)
    topics.create_topic(bs, topic, 2)
    produce(bs, topic, 10, partitions=2)  # 5 per partition, below the checkpoint's 20
    doc = report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--json",
                     "--timeout", "5"))
    ahead = findings(doc, "OFFSET_AHEAD_OF_LOG_END")
    assert doc["verdict"] == "BLOCK" and len(ahead) == 2
    assert all(f["numbers"]["records_ahead"] == 15 and f["numbers"]["samples"] >= 2 for f in ahead)


def test_s04_added_partition_and_s13_added_topic(setup, topic_name):
    bs, topic, ck = setup()
    topics.add_partitions(bs, topic, 3)
    produce(bs, topic, 12, partitions=3)  # 4 land in the new partition 2
    other = f"{topic_name}-b"
    topics.create_topic(bs, other, 1)
    produce(bs, other, 7)
    doc = report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--topics",
                     f"{topic},{other}", "--json"))
    assert doc["verdict"] == "WARN" and doc["exit_code"] == 0
    [new] = findings(doc, "NEW_PARTITION")
    assert new["partition"] == 2 and new["numbers"]["records"] == 4
    [added] = findings(doc, "NEW_TOPIC_FROM_EARLIEST")
    assert added["topic"] == other and added["numbers"]["records"] == 7


def test_s07_pending_batch_replay_is_quantified(setup):
    bs, _, ck = setup(pending=True)   # offsets/2 (end 30) without commits/2; committed end 20
    doc = report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs,
                     "--sink", "non-idempotent", "--json"))
    [pending] = findings(doc, "PENDING_BATCH_REPLAY")
    assert doc["verdict"] == "WARN"
    assert pending["numbers"]["batch_id"] == 2 and pending["numbers"]["records_to_replay"] == 20
    assert pending["numbers"]["duplicates_expected"] == 20


def test_s25_transactional_topic_is_no_false_alarm(setup):
    bs, _, ck = setup(per_partition=20, transactional=True)
    # the checkpoint ends at 20, the log at 21: a commit marker follows each partition's records
    doc = report(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--json"))
    assert doc["verdict"] == "PASS", doc
    assert not codes(doc) & {"TOPIC_RESET", "OFFSET_BELOW_LOG_START", "OFFSET_AHEAD_OF_LOG_END",
                             "IDENTITY_UNVERIFIED"}


def test_consumer_group_source_explains_the_one_batch_trail(setup):
    bs, topic, _ = setup()
    group = f"dstream-{topic}"
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[KTP(topic, 0, 25), KTP(topic, 1, 30)], asynchronous=False)
    finally:
        c.close()
    res = aks("validate", "--group", group, "--topics", topic, "--bootstrap-servers", bs, "--json")
    doc = report(res)
    assert res.returncode == 0 and doc["source"] == "group" and doc["verdict"] == "WARN"
    [trail] = findings(doc, "GROUP_COMMIT_TRAILS_ONE_BATCH")
    assert trail["numbers"]["backlog"] == 5


def test_cluster_mismatch_via_the_python_api(setup):
    bs, topic, ck = setup()
    rec = LifecycleRecord.create("orders", ck.location)
    rec.set_kafka_identity("some-other-cluster", {})
    rec.save()
    v = validate(checkpoint_location=ck.location, kafka_config={"bootstrap.servers": bs},
                 options=DeployOptions(topics=[topic]))
    assert v.severity == "BLOCK" and "CLUSTER_MISMATCH" in v.codes
    assert LifecycleRecord.load(ck.location).kafka_cluster_id == "some-other-cluster"  # not overwritten


def test_new_checkpoint_declared(setup, tmp_path):
    bs, topic, _ = setup()
    res = aks("validate", "--checkpoint", str(tmp_path / "fresh"), "--new-checkpoint", "--topics", topic,
              "--bootstrap-servers", bs, "--starting-offsets", "earliest", "--json")
    doc = report(res)
    assert res.returncode == 0 and doc["verdict"] == "PASS"
    assert findings(doc, "NO_CHECKPOINT")[0]["numbers"]["records_to_read"] == 60
