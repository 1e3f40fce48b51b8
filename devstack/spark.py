"""Run the reference job with the real ``spark-submit`` of the installed pyspark and the connector jars."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devstack import jars

REFERENCE_JOB = Path(__file__).resolve().parents[1] / "airflow_kafka_spark" / "jobs" / "reference_job.py"
STATUS_PREFIX = "REFERENCE_JOB_STATUS "


def spark_submit_binary() -> str:
    """``spark-submit`` next to the running interpreter (the venv's), else the one on PATH."""
    local = Path(sys.executable).parent / "spark-submit"
    return str(local) if local.exists() else "spark-submit"


def spark_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.pop("SPARK_HOME", None)  # the wheel's own distribution, never a stray one
    return env


def submit_command(job_args: list[str], *, master: str = "local[2]", conf: dict[str, str] | None = None,
                   application: str | Path = REFERENCE_JOB) -> list[str]:
    cmd = [spark_submit_binary(), "--master", master,
           "--jars", ",".join(str(j) for j in jars.spark_kafka_jars()),
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


def run_job(job_args: list[str], *, timeout: float = 300, **kw) -> JobRun:
    """Run the reference job to completion (availableNow, or until its stop marker appears)."""
    proc = subprocess.run(submit_command(job_args, **kw), capture_output=True, text=True, env=spark_env(),
                          timeout=timeout)
    log = proc.stdout + proc.stderr
    return JobRun(proc.returncode, parse_statuses(proc.stdout), log)


def start_job(job_args: list[str], log_path: Path, **kw) -> subprocess.Popen:
    """Start the reference job detached from the caller (own session), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(submit_command(job_args, **kw), stdout=fh, stderr=subprocess.STDOUT,
                            env=spark_env(), start_new_session=True)


def spark_submit_version() -> str:
    """The Spark version the JVM side reports (``spark-submit --version``)."""
    proc = subprocess.run([spark_submit_binary(), "--version"], capture_output=True, text=True, env=spark_env(),
                          timeout=120)
    m = re.search(r"version\s+(\d+\.\d+\.\d+\S*)", proc.stdout + proc.stderr)
    if not m:
        raise RuntimeError(f"cannot read the Spark version from spark-submit: {(proc.stdout + proc.stderr)[-300:]}")
    return m.group(1)
