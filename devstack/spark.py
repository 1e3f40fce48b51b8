"""Run the reference job with the real ``spark-submit`` of a Spark runtime and its connector jars.

Every function takes an optional ``runtime`` (``devstack.spark_runtimes``); without one it is the
default 4.x runtime of the project venv, so existing callers are unchanged.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack import spark_runtimes
from devstack.spark_runtimes import SparkRuntime

REFERENCE_JOB = Path(__file__).resolve().parents[1] / "airflow_kafka_spark" / "jobs" / "reference_job.py"
STATUS_PREFIX = "REFERENCE_JOB_STATUS "


def _rt(runtime: SparkRuntime | None) -> SparkRuntime:
    return runtime or spark_runtimes.runtime()


def spark_submit_binary(runtime: SparkRuntime | None = None) -> str:
    """The runtime's own ``spark-submit`` (inside its pyspark package)."""
    return _rt(runtime).spark_submit()


def spark_env(runtime: SparkRuntime | None = None) -> dict[str, str]:
    """The caller's environment with the runtime's SPARK_HOME and Python (never a stray SPARK_HOME)."""
    return _rt(runtime).env()


def submit_command(job_args: list[str], *, master: str = "local[2]", conf: dict[str, str] | None = None,
                   application: str | Path = REFERENCE_JOB, runtime: SparkRuntime | None = None) -> list[str]:
    rt = _rt(runtime)
    cmd = [rt.spark_submit(), "--master", master,
           "--jars", ",".join(str(j) for j in rt.kafka_jars()),
           "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=4",
           "--driver-memory", "1g"]
    for k, v in (conf or {}).items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, str(application), *job_args]


@dataclass
class JobRun:
    returncode: int
    statuses: list[dict]
    log: str

    @property
    def last_status(self) -> dict:
        return self.statuses[-1] if self.statuses else {}


def parse_statuses(text: str) -> list[dict]:
    return [json.loads(line[len(STATUS_PREFIX):]) for line in text.splitlines() if line.startswith(STATUS_PREFIX)]


def run_job(job_args: list[str], *, timeout: float = 300, runtime: SparkRuntime | None = None, **kw) -> JobRun:
    """Run the reference job to completion (availableNow, or until its stop marker appears)."""
    proc = subprocess.run(submit_command(job_args, runtime=runtime, **kw), capture_output=True, text=True,
                          env=spark_env(runtime), timeout=timeout)
    log = proc.stdout + proc.stderr
    return JobRun(proc.returncode, parse_statuses(proc.stdout), log)


def start_job(job_args: list[str], log_path: Path, *, runtime: SparkRuntime | None = None,
              **kw) -> subprocess.Popen:
    """Start the reference job detached from the caller (own session), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(submit_command(job_args, runtime=runtime, **kw), stdout=fh, stderr=subprocess.STDOUT,
                            env=spark_env(runtime), start_new_session=True)


def spark_submit_version(runtime: SparkRuntime | None = None) -> str:
    """The Spark version the JVM side reports (``spark-submit --version``)."""
    proc = subprocess.run([spark_submit_binary(runtime), "--version"], capture_output=True, text=True,
                          env=spark_env(runtime), timeout=120)
    m = re.search(r"version\s+(\d+\.\d+\.\d+\S*)", proc.stdout + proc.stderr)
    if not m:
        raise RuntimeError(f"cannot read the Spark version from spark-submit: {(proc.stdout + proc.stderr)[-300:]}")
    return m.group(1)
