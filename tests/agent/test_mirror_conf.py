"""The product's side of the agent's shadow-group mirror: which confs an agent job with ``mirror_group`` gets,
and that no Kafka secret ever reaches them (every ``--conf`` is on spark-submit's command line, visible in ``ps``).
The agent's behaviour with them is tests/agent/test_mirror_agent.py (real broker, real spark-submit)."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark import agent
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry.model import Integration, JobSpec, Sink
from airflow_kafka_spark.runtime import integrations
from airflow_kafka_spark.runtime.submit import hook_kwargs, kafka_job_options


@pytest.fixture
def jars(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "JARS_DIR", tmp_path)
    for name in ("aks-agent-spark35_2.12.jar", "aks-agent-spark4_2.13.jar"):
        (tmp_path / name).write_bytes(b"PK")
    return tmp_path


def spec(**kw) -> JobSpec:
    base = dict(name="orders", application="/apps/orders.py", topics=("orders",), checkpoint="/d/ck/orders",
                backup_root="/d/backups", stop_marker="/d/stop/orders", output=None, sink=Sink.IDEMPOTENT,
                integration=Integration.AGENT, spark_version="4.2.0", mirror_group="aks-mirror-orders")
    return JobSpec(**{**base, **kw})


SECRET_CONFIG = {
    "bootstrap.servers": "b1:9093,b2:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "svc-orders", "sasl.password": "hunter2-very-secret",
    "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required password="hunter2";',
    "ssl.key.password": "keypass-secret", "ssl.endpoint.identification.algorithm": "https",
}


def launch(s: JobSpec, config: dict) -> integrations.Launch:
    facts = integrations.LaunchFacts(bootstrap_servers=config["bootstrap.servers"],
                                     kafka_options=tuple(kafka_job_options(config)))
    return integrations.integration_for(s).launch(s, facts)


def test_a_mirror_group_adds_the_group_and_the_non_secret_client_settings(jars):
    conf = launch(spec(), SECRET_CONFIG).conf
    mirror = {k: v for k, v in conf.items() if k.startswith(agent.PREFIX + "mirror.")}
    assert mirror == {
        "spark.aks.agent.mirror.group": "aks-mirror-orders",
        "spark.aks.agent.mirror.kafka.bootstrap.servers": "b1:9093,b2:9093",
        "spark.aks.agent.mirror.kafka.security.protocol": "SASL_SSL",
        "spark.aks.agent.mirror.kafka.sasl.mechanism": "SCRAM-SHA-512",
        "spark.aks.agent.mirror.kafka.ssl.endpoint.identification.algorithm": "https",
    }
    flat = " ".join(f"{k}={v}" for k, v in conf.items())
    for secret in ("hunter2", "keypass-secret", "svc-orders", "jaas"):
        assert secret not in flat
    assert conf["spark.aks.agent.checkpoint"] == "/d/ck/orders"   # the query the agent mirrors


def test_no_mirror_group_no_mirror_conf(jars):
    conf = launch(spec(mirror_group=None), SECRET_CONFIG).conf
    assert not [k for k in conf if ".mirror." in k]
    assert conf == agent.agent_conf("/d/stop/orders", "/d/ck/orders", "/d/ck/orders.agent.json", "4.2.0", {})


def test_a_probe_run_never_mirrors(jars):
    """The probe runs the job on a copy of its checkpoint: committing that to the group would lie."""
    conf = agent.probe_conf("/s/copy", "/s", "/d/ck/orders", "/s/r.json", "4.2.0", {})
    assert not [k for k in conf if ".mirror." in k]


def test_a_spark_generated_group_name_is_refused(jars):
    with pytest.raises(UserError, match="Spark generates"):
        launch(spec(mirror_group="spark-kafka-source-1234-driver-0"), SECRET_CONFIG)


def test_the_mirror_needs_bootstrap_servers(jars):
    with pytest.raises(UserError, match=r"bootstrap\.servers"):
        agent.agent_conf("m", "ck", "r", "4.2.0", {}, mirror_group="g-mirror", mirror_kafka={})


def test_the_stop_witness_says_where_the_group_was_left(tmp_path):
    """The stop's result carries the agent's account of the mirror: a refused or failing group shows in the task log."""
    ck = tmp_path / "ck"
    report = {"stop": {"stopped_on_boundary": True, "duration_ms": 12, "last_committed_batch": 7}, "queries": [],
              "mirror": {"group": "aks-mirror-orders", "committed_batch": 6, "commits": 5, "errors": 1, "refused": 2,
                         "last_problem": "consumer group aks-mirror-orders has 1 live member(s)", "committed": {}}}
    (tmp_path / "ck.agent.json").write_text(json.dumps(report))
    witness = integrations.integration_for(spec(checkpoint=str(ck))).stop_witness(spec(checkpoint=str(ck)))
    assert witness["last_committed_batch"] == 7
    assert witness["mirror"] == {"group": "aks-mirror-orders", "committed_batch": 6, "commits": 5, "errors": 1,
                                 "refused": 2, "last_problem": "consumer group aks-mirror-orders has 1 live member(s)"}


def test_the_jobs_own_properties_file_reaches_the_submit(jars):
    """Credentials the job keeps in its own file: the job names it in spark_conf, the product keeps it."""
    s = spec(spark_conf={agent.MIRROR_PROPERTIES_FILE: "kafka-client.properties"},
             files=("/apps/kafka-client.properties",))
    kwargs = hook_kwargs(s, args=[], extra_conf=launch(s, SECRET_CONFIG).conf)
    assert kwargs["conf"][agent.MIRROR_PROPERTIES_FILE] == "kafka-client.properties"
    assert kwargs["conf"][agent.MIRROR_GROUP] == "aks-mirror-orders"
    assert kwargs["files"] == "/apps/kafka-client.properties"
