"""Every private member of the provider hooks that the package uses, exercised on the installed providers.

Run as a script by any interpreter that has the package, Airflow and the two providers, so the same
check covers the newest providers (the dev venv: tests/airflow/test_provider_private_api.py) and the
oldest supported ones (the install test's venv: tests/install/test_install.py). It imports only the
installed ``airflow_kafka_spark``, never this repository's tests. Connections come from
``AIRFLOW_CONN_*`` variables it sets itself: no metadata DB, no network. Prints one line per check
and ``provider contract ok`` at the end; any failure is an exception naming the member.
"""

from __future__ import annotations

import json
import os
from importlib import metadata

SPARK_CONN = {"conn_type": "spark", "host": "yarn", "extra": {"queue": "streaming", "deploy-mode": "cluster"}}
KAFKA_EXTRA = {"bootstrap.servers": "127.0.0.1:9092", "client.id": "aks-contract"}


def check_spark() -> str:
    """airflow_glue/spark.py: ``SparkSubmitHook._connection`` and ``._build_spark_submit_command``."""
    from airflow_kafka_spark.airflow_glue.spark import build_command, resolved_connection, spark_hook
    from airflow_kafka_spark.registry.model import JobSpec

    os.environ["AIRFLOW_CONN_AKS_CONTRACT_SPARK"] = json.dumps(SPARK_CONN)
    spec = JobSpec(name="orders", application="/apps/job.py", topics=("orders",), checkpoint="/data/ck/orders",
                   backup_root="/data/backups", stop_marker="/data/ck/orders.stop",
                   spark_conn_id="aks_contract_spark")
    conn = resolved_connection(spark_hook(spec))
    got = {k: conn[k] for k in ("master", "deploy_mode", "queue", "spark_binary")}
    want = {"master": "yarn", "deploy_mode": "cluster", "queue": "streaming", "spark_binary": "spark-submit"}
    assert got == want, got
    argv = build_command(spark_hook(spec, conf={"a.b": "c"}, name="aks-orders"), spec.application)
    line = " ".join(argv)
    assert argv[0] == "spark-submit" and argv[-1] == "/apps/job.py", argv
    for part in ("--master yarn", "--queue streaming", "--conf a.b=c", "--deploy-mode cluster", "--name aks-orders"):
        assert part in line, f"{part!r} not in {line!r}"
    return f"SparkSubmitHook._connection {sorted(got)} and ._build_spark_submit_command: {line}"


def check_kafka() -> str:
    """hooks/streaming.py: ``KafkaBaseHook._build_config``, with its callback allowlist (provider >= 2.0.0)."""
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    os.environ["AIRFLOW_CONN_AKS_CONTRACT_KAFKA"] = json.dumps({"conn_type": "kafka", "extra": KAFKA_EXTRA})
    config = StreamingKafkaHook("aks_contract_kafka").kafka_config()
    assert config == KAFKA_EXTRA, config
    os.environ["AIRFLOW_CONN_AKS_CONTRACT_KAFKA_CB"] = json.dumps(
        {"conn_type": "kafka", "extra": {**KAFKA_EXTRA, "error_cb": "os.system"}})
    try:
        StreamingKafkaHook("aks_contract_kafka_cb").kafka_config()
    except UserError as exc:
        assert "callback_allowlist" in str(exc), exc
    else:
        raise AssertionError("a dotted-path error_cb outside [apache_kafka] callback_allowlist was accepted")
    return "KafkaBaseHook._build_config: the connection extra, a dotted-path callback refused (allowlist)"


def main() -> None:
    versions = {d: metadata.version(d) for d in ("apache-airflow", "apache-airflow-providers-apache-spark",
                                                   "apache-airflow-providers-apache-kafka")}
    print("providers:", " ".join(f"{d}=={v}" for d, v in versions.items()))
    print(check_spark())
    print(check_kafka())
    print("provider contract ok")


if __name__ == "__main__":
    main()
