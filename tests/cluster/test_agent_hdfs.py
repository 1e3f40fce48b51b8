"""The agent with everything on HDFS: checkpoint, stop marker and report are ``hdfs://`` paths.

Why: the agent looks for the marker and writes its report through Hadoop's FileSystem from
wherever the driver runs, and its checkpoint file manager delegates to Spark's FileContext-based
manager, whose HDFS behaviour (atomic rename) differs from the local disk's. The driver is a
local spark-submit of the users' PySpark application (Spark 4.2) that reaches the minicluster
through ``HADOOP_CONF_DIR``; the test side reads HDFS through WebHDFS.
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_kafka_spark import agent
from devstack import agent_build
from devstack.spark_runtimes import runtime
from devstack.topics import create_topic
from tests.support import agent_harness as h
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.userjobs]


def _newest(webhdfs, path: str) -> int:
    if not webhdfs.exists(path):
        return -1
    names = [p.rstrip("/").rsplit("/", 1)[-1] for p in webhdfs.ls(path, detail=False)]
    return max((int(n) for n in names if n.isdigit()), default=-1)


def test_agent_stops_on_a_boundary_with_checkpoint_marker_and_report_on_hdfs(broker, hadoop, webhdfs, tmp_path,
                                                                             topic_name):
    agent_build.build_all()
    rt = runtime("default")
    create_topic(broker.bootstrap_servers, topic_name, 3)
    producer = h.ContinuousProducer(broker.bootstrap_servers, topic_name, 3, rate=100).start()
    base = f"/agent-{uuid.uuid4().hex[:8]}"
    ck, marker, report = f"{base}/ck", f"{base}/stop.marker", f"{base}/ck.agent.json"
    url = hadoop.default_fs.rstrip("/")
    conf = agent.agent_conf(url + marker, url + ck, url + report, rt.version, {})
    args = ["--brokers", broker.bootstrap_servers, "--topic", topic_name, "--checkpoint", url + ck,
            "--out", str(tmp_path / "out")]
    driver = h.submit(rt, h.PY_JOB, args, tmp_path / "driver.log", conf=conf, env=hadoop.env())
    try:
        wait_until(lambda: driver.proc.poll() is not None or _newest(webhdfs, f"{ck}/commits") >= 1,
                   timeout=180, interval=0.5, what="two committed batches on HDFS")
        assert driver.proc.poll() is None, driver.text()[-3000:]
        webhdfs.touch(marker)
        assert driver.wait(90) == 0, driver.text()[-3000:]
    finally:
        producer.stop()
        if driver.proc.poll() is None:
            driver.kill()
    offsets, commits = _newest(webhdfs, f"{ck}/offsets"), _newest(webhdfs, f"{ck}/commits")
    doc = json.loads(webhdfs.cat(report))
    print(f"\n[agent] HDFS: offsets/{offsets} commits/{commits}, stop {doc['stop']}")
    assert offsets == commits >= 1
    assert doc["stop"]["stopped_on_boundary"] is True and doc["stop"]["last_committed_batch"] == commits
    assert doc["file_manager_delegate"].endswith("FileContextBasedCheckpointFileManager")
    [q] = doc["queries"]
    assert q["checkpoint"].startswith("hdfs://") and q["checkpoint"].endswith(ck)
