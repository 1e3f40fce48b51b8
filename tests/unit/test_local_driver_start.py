"""A local driver that exits before Spark starts fails the submit with its log's last lines, and with the fix
when Spark's ``--packages`` resolution could not fetch a jar (real processes; no Spark needed to exit early)."""

from __future__ import annotations

import time

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.runtime import drivers, local_start

IVY_FAILURE = (":: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS\n"
               'Exception in thread "main" java.lang.RuntimeException: '
               "[download failed: org.slf4j#slf4j-api;2.0.17!slf4j-api.jar]\n")


def exited_driver(tmp_path, output: str):
    log = tmp_path / "driver.log"
    (tmp_path / "out.txt").write_text(output)
    drv = local_start.start_local(["sh", "-c", f"cat {tmp_path / 'out.txt'}; exit 1"], log_path=log)
    deadline = time.monotonic() + 30
    while drivers.local_alive(drv) or not log.read_text():   # its output is in the log once it has exited
        assert time.monotonic() < deadline, "the process never exited"
        time.sleep(0.02)
    return drv, log


def test_a_packages_download_failure_names_the_artifact_and_the_fix(tmp_path):
    drv, log = exited_driver(tmp_path, IVY_FAILURE)
    with pytest.raises(UserError) as failed:
        local_start.wait_started_local(drv, log, timeout_s=30, poll_s=0.05)
    text = str(failed.value)
    assert "exited before Spark started" in text and "download failed: org.slf4j#slf4j-api;2.0.17" in text
    assert "fix: Spark could not fetch org.slf4j:slf4j-api:2.0.17" in text
    assert "~/.m2/repository/org/slf4j/slf4j-api/2.0.17" in text and "connector_jars" in text


def test_any_other_early_exit_gets_its_log_and_no_packages_fix(tmp_path):
    drv, log = exited_driver(tmp_path, "error: unrecognized arguments: --topics\n")
    with pytest.raises(UserError) as failed:
        local_start.wait_started_local(drv, log, timeout_s=30, poll_s=0.05)
    assert "unrecognized arguments: --topics" in str(failed.value)
    assert "fix:" not in str(failed.value)
