"""The offset mirror inside the Spark driver keeps committing across a broker restart, and never aborts the driver.

The mirror's committer thread holds one Kafka view for the life of the query. librdkafka 2.16.0
aborted a process that reused an AdminClient after abandoned requests (session 8:
``rd_kafka_enq_once_del_source_return``): inside a driver, that kills the streaming query. The view
now drops that client. Here the committer runs in a child process (an abort is exit 134, not a dead
test session) against a real broker of its own, stopped for several commits and started again; the
group must end at the last offsets handed over.

The same broker, just started, is where ``aks mirror`` first runs: a broker that has not yet loaded
``__consumer_offsets`` answers group requests NOT_COORDINATOR, then COORDINATOR_LOAD_IN_PROGRESS,
which the command used to report as "could not describe consumer group …: ConsumerGroupDescribe:".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP

from devstack import topics
from devstack.broker import LocalBroker
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COMMITTER = """
import json, sys, time
from airflow_kafka_spark.jobs.listener import _Committer
from airflow_kafka_spark.kafka.offsets import TopicPartition as TP
bs, topic, group = sys.argv[1:4]
c = _Committer(group, {"bootstrap.servers": bs}, min_interval_s=0, timeout=2)
def commit(n):
    c.submit(n, {TP(topic, 0): 10 * n, TP(topic, 1): 10 * n + 1})
    assert c.flush(60), "flush timed out"
commit(1)
print(json.dumps({"step": "first", "commits": c.commits, "errors": c.errors}), flush=True)
sys.stdin.readline()                 # the broker is down now
for n in (2, 3, 4):
    commit(n)
print(json.dumps({"step": "down", "commits": c.commits, "errors": c.errors}), flush=True)
sys.stdin.readline()                 # the broker is back
deadline = time.monotonic() + 90
n = 5
while time.monotonic() < deadline:
    before = c.commits
    commit(n)
    if c.commits > before:
        break
    n += 1
    time.sleep(1)
print(json.dumps({"step": "back", "commits": c.commits, "errors": c.errors, "last": n}), flush=True)
"""


def test_the_mirror_commits_again_after_a_broker_restart(tmp_path, topic_name):
    broker = LocalBroker(data_dir=tmp_path / "kafka").start()
    group = f"aks-mirror-{topic_name}"
    try:
        bs = broker.bootstrap_servers
        topics.create_topic(bs, topic_name, 2)
        # The first group request of this broker's life: `aks mirror` waits for the coordinator to be ready.
        write_checkpoint(tmp_path / "ck", batches=3, sources=({topic_name: 2},))
        cli = subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", "mirror", "--checkpoint",
                              str(tmp_path / "ck"), "--bootstrap-servers", bs, "--group", f"{group}-cli", "--execute"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0, cli.stderr[-2000:]
        assert committed(bs, f"{group}-cli", topic_name) == [30, 30]   # batch 2's end offsets, as checkpointed
        child = subprocess.Popen([sys.executable, "-c", COMMITTER, bs, topic_name, group], cwd=REPO, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert child.stdin is not None and child.stdout is not None

        def step() -> dict:
            line = child.stdout.readline()
            assert line, f"the committer died: exit {child.wait()} {child.stderr.read()[-2000:]}"
            return json.loads(line)

        first = step()
        assert first == {"step": "first", "commits": 1, "errors": 0}
        broker.stop()
        child.stdin.write("\n")
        child.stdin.flush()
        down = step()
        assert down["commits"] == 1 and down["errors"] == 3, down      # three commits abandoned on one view
        broker.start()
        child.stdin.write("\n")
        child.stdin.flush()
        back = step()
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, (child.returncode, err[-2000:])   # 134 was librdkafka's abort
        assert back["commits"] == 2, back
        n = back["last"]
        assert committed(bs, group, topic_name) == [10 * n, 10 * n + 1]
    finally:
        broker.stop()


def committed(bs: str, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([KTP(topic, 0), KTP(topic, 1)], timeout=30)]
    finally:
        consumer.close()
