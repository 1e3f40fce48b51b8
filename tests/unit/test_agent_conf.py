"""The product's side of the agent (airflow_kafka_spark.agent): which jar, which confs, added not replaced."""

from __future__ import annotations

import pytest

from airflow_kafka_spark import agent
from airflow_kafka_spark.errors import UserError


@pytest.fixture
def jars(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "JARS_DIR", tmp_path)
    for name in ("aks-agent-spark35_2.12.jar", "aks-agent-spark4_2.13.jar"):
        (tmp_path / name).write_bytes(b"PK")
    return tmp_path


@pytest.mark.parametrize(("version", "name"), [
    ("3.5.1", "aks-agent-spark35_2.12.jar"), ("3.5.7", "aks-agent-spark35_2.12.jar"),
    ("4.1.0", "aks-agent-spark4_2.13.jar"), ("4.2.0", "aks-agent-spark4_2.13.jar"),
])
def test_jar_for_picks_the_line(jars, version, name):
    assert agent.jar_for(version) == jars / name


@pytest.mark.parametrize("version", ["3.4.1", "2.4.8", "4.0.1", "5.0.0", "latest"])
def test_unsupported_spark_is_one_clear_line(jars, version):
    with pytest.raises(UserError, match="Spark"):
        agent.jar_for(version)


def test_missing_jar_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "JARS_DIR", tmp_path)
    with pytest.raises(UserError, match="run bin/setup") as e:
        agent.jar_for("4.2.0")
    assert "\n" not in str(e.value)


def test_conf_adds_the_hooks_and_the_settings(jars):
    conf = agent.agent_conf("hdfs:///stop/job", "hdfs:///ck/job", "hdfs:///ck/job.agent.json", "4.2.0", {})
    assert conf == {
        "spark.jars": str(jars / "aks-agent-spark4_2.13.jar"),
        "spark.plugins": "aks.agent.AgentPlugin",
        "spark.sql.streaming.streamingQueryListeners": "aks.agent.AgentListener",
        "spark.sql.streaming.checkpointFileManagerClass": "aks.agent.GateCheckpointFileManager",
        "spark.aks.agent.stopMarker": "hdfs:///stop/job",
        "spark.aks.agent.report": "hdfs:///ck/job.agent.json",
        "spark.aks.agent.checkpoint": "hdfs:///ck/job",
    }


def test_conf_appends_to_the_users_lists_and_wraps_their_file_manager(jars):
    user = {
        "spark.jars": "/opt/a.jar, /opt/b.jar",
        "spark.plugins": "com.acme.Metrics",
        "spark.sql.streaming.streamingQueryListeners": "com.acme.Listener",
        "spark.sql.streaming.checkpointFileManagerClass": "com.acme.S3Manager",
    }
    conf = agent.agent_conf("m", "ck", "r", "3.5.1", user)
    assert conf["spark.jars"] == f"/opt/a.jar,/opt/b.jar,{jars / 'aks-agent-spark35_2.12.jar'}"
    assert conf["spark.plugins"] == "com.acme.Metrics,aks.agent.AgentPlugin"
    assert conf["spark.sql.streaming.streamingQueryListeners"] == "com.acme.Listener,aks.agent.AgentListener"
    assert conf["spark.sql.streaming.checkpointFileManagerClass"] == "aks.agent.GateCheckpointFileManager"
    assert conf["spark.aks.agent.delegateCheckpointFileManagerClass"] == "com.acme.S3Manager"


def test_conf_is_idempotent(jars):
    once = agent.agent_conf("m", "ck", "r", "4.2.0", {})
    twice = agent.agent_conf("m", "ck", "r", "4.2.0", once)
    assert twice == once


def test_report_sits_beside_the_checkpoint():
    assert agent.report_path("s3a://b/ck/orders/") == "s3a://b/ck/orders.agent.json"


def test_the_module_is_core():
    import subprocess
    import sys

    code = ("import sys, airflow_kafka_spark.agent; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'devstack')]; "
            "sys.exit(1 if bad else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
