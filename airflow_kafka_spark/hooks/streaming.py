"""The Kafka side of a streaming job, read from the Kafka provider's ``kafka`` connection.

Why a subclass of the Kafka provider's ``KafkaBaseHook`` and not our own connection type: the
``kafka`` connection's extra already *is* the librdkafka config, and ``KafkaBaseHook._build_config``
already does the parts that are easy to get wrong (the ``[apache_kafka] callback_allowlist`` check
for dotted-path callbacks, the Amazon MSK IAM and Google Managed Kafka OAuth callbacks). Reusing
it means a connection that works for the Kafka provider's operators works here, unchanged, and no
second connection type competes for ``kafka`` in the UI. ``_build_config`` is private API, used in
:func:`provider_config` only; the allowlist came with provider 2.0.0, the lower bound of the range.

Secrets: the config holds passwords, JAAS lines and OAuth secrets. Airflow masks the connection's
password and its extra *as one JSON string* only, so a lone ``sasl.password`` value that a library
prints in an error would reach the task log unmasked. :meth:`StreamingKafkaHook.kafka_config`
therefore registers every secret value with Airflow's masker, and everything that is logged,
returned to XCom or rendered must go through :func:`log_safe_config` / :func:`scrub_text` (the
core's :func:`~airflow_kafka_spark.kafka.secrets.redact` / ``scrub``, so the CLI and the Airflow layer
agree on what a secret is). Never return :meth:`kafka_config` from ``execute()``: that is XCom.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.hooks._provider_api import private_member
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of, redact, scrub, secret_values
from airflow_kafka_spark.kafka.view import KafkaView

DEFAULT_KAFKA_CONN_ID = "kafka_default"
KAFKA_PROVIDER = "apache-airflow-providers-apache-kafka"


def provider_config(hook: KafkaBaseHook) -> dict[str, Any]:
    """The librdkafka config the Kafka provider builds from the hook's connection (allowlist checked).

    PRIVATE API: ``KafkaBaseHook._build_config`` (``get_conn()`` would build an AdminClient from it).
    """
    return private_member(hook, KafkaBaseHook, "_build_config", KAFKA_PROVIDER)()


def log_safe_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of a librdkafka config with secrets replaced by ``***`` (callables by their name)."""
    return redact(config)


def scrub_text(text: str, config: Mapping[str, Any] | None) -> str:
    """``text`` (a spark-submit line, a librdkafka error) with the config's secret values masked."""
    return scrub(text, config)


def register_secrets(config: Mapping[str, Any]) -> None:
    """Tell Airflow's masker about every secret value in ``config``, one by one.

    ``mask_secret(dict)`` alone only catches keys whose names Airflow finds sensitive
    (``sasl.jaas.config`` and ``ssl.key.pem`` are not among them), so the values the core deems
    secret are added individually as well, including a password inside a JAAS line.
    """
    mask_secret(dict(config))
    for value in secret_values(config):
        mask_secret(value)


class StreamingKafkaHook(KafkaBaseHook):
    """Turns a ``kafka`` connection into the config dict the core's ``KafkaView`` takes.

    :param kafka_config_id: the Airflow connection id (type ``kafka``), as named by the job
        registry's ``kafka_conn_id``.
    """

    hook_name = "Apache Kafka (Spark streaming jobs)"
    # conn_type ("kafka"), conn_name_attr and default_conn_name are inherited on purpose: this
    # hook reads the Kafka provider's connections and declares no connection type of its own.

    def __init__(self, kafka_config_id: str = DEFAULT_KAFKA_CONN_ID) -> None:
        super().__init__(kafka_config_id=kafka_config_id)

    def kafka_config(self) -> dict[str, Any]:
        """The librdkafka config (secrets included, registered with the masker). Do not log it."""
        try:
            config = provider_config(self)
        except AirflowNotFoundException:
            raise UserError(
                f"Kafka connection {self.kafka_config_id!r} is not defined; create it (type kafka, extra "
                '{"bootstrap.servers": "host:9092", ...}) or fix kafka_conn_id in the job registry') from None
        except ValueError as exc:
            # the provider's own messages: a missing bootstrap.servers or a callback outside the
            # allowlist. They name keys and dotted paths, never secret values.
            raise UserError(f"Kafka connection {self.kafka_config_id!r}: {exc}; fix the connection's extra "
                            "(it is the librdkafka config)") from None
        register_secrets(config)
        return config

    def redacted_config(self) -> dict[str, Any]:
        """What :meth:`kafka_config` returns, safe to log or show."""
        return log_safe_config(self.kafka_config())

    def bootstrap_servers(self) -> str:
        """The connection's ``bootstrap.servers``, for ``spark-submit --bootstrap-servers``."""
        return bootstrap_servers_of(self.kafka_config())

    def kafka_view(self, *, timeout: float = 10.0) -> KafkaView:
        """A core :class:`KafkaView` on this connection."""
        return KafkaView(self.kafka_config(), timeout=timeout)

    def describe(self) -> str:
        """One log-safe line about the connection (id, servers, security protocol)."""
        config = self.kafka_config()
        return (f"kafka connection {self.kafka_config_id!r}: "
                f"bootstrap.servers={bootstrap_servers_of(config)} "
                f"security.protocol={config.get('security.protocol', 'PLAINTEXT')}")
