"""The provider hooks' private members the package uses (hooks/_provider_api.py), on the installed providers.

tests/support/provider_contract.py exercises each use; here it runs on the dev venv's (newest)
providers, and tests/install/test_install.py runs it on the oldest supported ones. A provider release
that renames a member must fail that script, and a user who installed such a release anyway gets
one line naming the provider version and the supported range instead of an AttributeError.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import UserError
from tests.airflow.conftest import REPO, airflow_env

pytestmark = [pytest.mark.airflow]

CONTRACT = Path(__file__).resolve().parents[1] / "support" / "provider_contract.py"


def test_private_members_work_on_the_installed_providers():
    proc = subprocess.run([sys.executable, str(CONTRACT)], capture_output=True, text=True, timeout=180,
                          cwd=REPO, env=airflow_env())
    assert proc.returncode == 0 and "provider contract ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "apache-airflow-providers-apache-spark==" in proc.stdout


def test_supported_range_is_read_from_the_package_metadata():
    from airflow_kafka_spark.hooks._provider_api import supported_range

    spark = supported_range("apache-airflow-providers-apache-spark")
    assert ">=6.0.0" in spark and "<7" in spark
    assert ">=3.2.0" in supported_range("apache-airflow") and "<4" in supported_range("apache-airflow")
    assert supported_range("no-such-dist") == "?"


def test_a_renamed_spark_member_is_one_line_naming_the_provider_and_the_range(monkeypatch):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_kafka_spark.airflow_glue.spark import build_command

    hook = object.__new__(SparkSubmitHook)   # no connection lookup: only the member matters here
    monkeypatch.delattr(SparkSubmitHook, "_build_spark_submit_command")
    with pytest.raises(UserError, match=r"^apache-airflow-providers-apache-spark \d+\.\d+\.\d+ has no "
                                        r"SparkSubmitHook\._build_spark_submit_command, which airflow-kafka-spark "
                                        r"relies on; install apache-airflow-providers-apache-spark.*>=6\.0\.0"):
        build_command(hook, "/apps/job.py")


def test_a_renamed_kafka_member_is_one_line_naming_the_provider_and_the_range(monkeypatch):
    from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    monkeypatch.delattr(KafkaBaseHook, "_build_config")
    with pytest.raises(UserError, match=r"^apache-airflow-providers-apache-kafka \d+\.\d+\.\d+ has no "
                                        r"KafkaBaseHook\._build_config, .*>=2\.0\.0"):
        StreamingKafkaHook("kafka_renamed").kafka_config()
