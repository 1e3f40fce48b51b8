"""StreamingKafkaHook: the Kafka provider's ``kafka`` connection becomes the core's config dict,
and its secrets stay out of logs.

Connections come from ``AIRFLOW_CONN_<ID>`` (what Airflow's own tests do), so no DB row is needed.
"""

from __future__ import annotations

import pytest

from airflow_kafka_spark.errors import UserError

pytestmark = pytest.mark.airflow

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="svc" password="jaas-pw-4821";')
SECURE = {
    "bootstrap.servers": "broker-1:9093,broker-2:9093",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "svc-streaming",
    "sasl.password": "s3cr3t-sasl-pw",
    "sasl.jaas.config": JAAS,
    "ssl.key.pem": "-----BEGIN PRIVATE KEY-----abcdef",
}


def test_config_is_the_connection_extra(kafka_connection):
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    conn_id = kafka_connection("kafka_local", {"bootstrap.servers": "127.0.0.1:9092", "client.id": "aks"})
    hook = StreamingKafkaHook(conn_id)
    assert hook.kafka_config() == {"bootstrap.servers": "127.0.0.1:9092", "client.id": "aks"}
    assert hook.bootstrap_servers() == "127.0.0.1:9092"
    assert hook.describe() == ("kafka connection 'kafka_local': bootstrap.servers=127.0.0.1:9092 "
                               "security.protocol=PLAINTEXT")


def test_secrets_are_redacted_for_logs_and_masked_in_airflow_logs(kafka_connection):
    from airflow.sdk.log import redact as airflow_redact

    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook, log_safe_config, scrub_text

    hook = StreamingKafkaHook(kafka_connection("kafka_secure", SECURE))
    config = hook.kafka_config()
    assert config["sasl.password"] == "s3cr3t-sasl-pw"   # the real value, for the client only

    safe = hook.redacted_config()
    assert safe == log_safe_config(config)
    assert safe["sasl.password"] == safe["sasl.jaas.config"] == safe["ssl.key.pem"] == "***"
    assert safe["sasl.username"] == "svc-streaming"
    assert safe["bootstrap.servers"] == SECURE["bootstrap.servers"]
    shown = repr(safe)
    for secret in ("s3cr3t-sasl-pw", "jaas-pw-4821", "PRIVATE KEY"):
        assert secret not in shown

    # A library error that echoes a secret is scrubbed, and Airflow's task-log masker now knows
    # the lone values too (it masks a connection's extra only as one JSON string by itself).
    line = "auth failed for password=s3cr3t-sasl-pw (jaas-pw-4821)"
    assert "s3cr3t" not in scrub_text(line, config) and "jaas-pw-4821" not in scrub_text(line, config)
    masked = airflow_redact(line)
    assert "s3cr3t-sasl-pw" not in masked and "jaas-pw-4821" not in masked


def test_missing_connection_is_one_line_user_error():
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    with pytest.raises(UserError, match=r"Kafka connection 'kafka_missing_x' is not defined; create it"):
        StreamingKafkaHook("kafka_missing_x").kafka_config()


def test_connection_without_bootstrap_servers_is_a_user_error(kafka_connection):
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    conn_id = kafka_connection("kafka_empty", {"security.protocol": "PLAINTEXT"})
    with pytest.raises(UserError, match=r"'kafka_empty': config\['bootstrap.servers'\] must be provided"):
        StreamingKafkaHook(conn_id).kafka_config()


def test_string_callbacks_still_need_the_kafka_allowlist(kafka_connection):
    """Inherited from KafkaBaseHook: an extra cannot make the worker import arbitrary code."""
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    conn_id = kafka_connection("kafka_cb", {"bootstrap.servers": "h:9092", "error_cb": "os.system"})
    with pytest.raises(UserError, match="callback_allowlist"):
        StreamingKafkaHook(conn_id).kafka_config()
