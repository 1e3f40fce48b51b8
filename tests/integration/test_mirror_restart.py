"""The offset mirror inside the Spark driver keeps committing across a broker restart, and never aborts the driver.

The mirror's committer thread holds one Kafka view for the life of the query. librdkafka 2.16.0
aborted a process that reused an AdminClient after abandoned requests (session 8:
``rd_kafka_enq_once_del_source_return``): inside a driver, that kills the streaming query. The view
now drops that client. Here the committer runs in a child process (an abort is exit 134, not a dead
test session) against a real broker of its own, stopped for several commits and started again; the
group must end at the last offsets handed over.
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
        warm = Consumer({"bootstrap.servers": bs, "group.id": f"{topic_name}-warm-up"})   # the offsets topic exists
        warm.commit(offsets=[KTP(topic_name, 0, 0)], asynchronous=False)
        warm.close()
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
        consumer = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            got = consumer.committed([KTP(topic_name, 0), KTP(topic_name, 1)], timeout=30)
        finally:
            consumer.close()
        n = back["last"]
        assert [tp.offset for tp in got] == [10 * n, 10 * n + 1]
    finally:
        broker.stop()
