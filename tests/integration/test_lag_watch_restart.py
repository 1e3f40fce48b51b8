"""``aks lag --watch`` through a broker restart: it reports the refreshes that got no answer and carries on.

A watch is left running on a screen or in a script; a broker restart must neither end it nor abort the
process. Before the fix (session 9) a refresh that got no answer ended the watch with exit 4; and
librdkafka 2.16.0 aborted a process that reused an AdminClient after abandoned requests (session 8:
``rd_kafka_enq_once_del_source_return``), which a ``--group`` watch does every refresh.

Real command line, a real broker of its own (the session's is shared) stopped, left down 4 s and started
again on the same port and data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP

from devstack import topics
from devstack.broker import LocalBroker
from devstack.produce import produce

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_lag_watch_outlives_a_broker_restart(tmp_path, topic_name):
    broker = LocalBroker(data_dir=tmp_path / "kafka").start()
    try:
        bs = broker.bootstrap_servers
        topics.create_topic(bs, topic_name, 2)
        produce(bs, topic_name, 40, partitions=2)
        consumer = Consumer({"bootstrap.servers": bs, "group.id": topic_name})
        consumer.commit(offsets=[KTP(topic_name, 0, 3), KTP(topic_name, 1, 4)], asynchronous=False)
        consumer.close()
        watch = subprocess.Popen(
            [sys.executable, "-m", "airflow_kafka_spark.cli", "lag", "--group", topic_name, "--topics", topic_name,
             "--bootstrap-servers", bs, "--timeout", "2", "--json", "--watch", "1", "--count", "16"],
            cwd=REPO, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert watch.stdout is not None
        docs = [json.loads(watch.stdout.readline())]    # a first good refresh
        broker.stop()
        time.sleep(4)
        broker.start()
        out, err = watch.communicate(timeout=180)
    finally:
        broker.stop()
    docs += [json.loads(line) for line in out.splitlines() if line.strip()]
    assert watch.returncode == 0, (watch.returncode, err[-2000:])        # 134 was librdkafka's abort
    assert "Traceback" not in err and "Assertion" not in err, err[-2000:]
    assert len(docs) == 16
    failed = [d for d in docs if "error" in d]
    assert failed and all("not reachable" in d["error"] and d["exit_code"] == 4 for d in failed), failed
    good = [d for d in docs if "error" not in d]
    assert docs.index(failed[0]) > 0 and "error" not in docs[-1]         # it came back and the last one is good
    for doc in (good[0], good[-1]):
        assert doc["lag"]["records"] == sum(p["log_end"] for p in doc["lag"]["partitions"]) - 3 - 4, doc["lag"]
    print(f"\n[lag --watch] {len(failed)} of {len(docs)} refreshes got no answer during the restart")
