"""Submit a registered streaming job detached, and keep track of which application version runs.

Why this module exists apart from the Airflow operator: *what* is submitted (the job's flags, the
connector jars, the detach settings, which driver id to parse from which output) and *what the
product remembers about it* (the application version that ran last, and the last one that passed
the health gate) are product rules. They must be the same whether the operator, the DAG's
rollback or a test submits, and they must be testable without Airflow. The operator only adds
what needs Airflow: the Spark provider's ``SparkSubmitHook`` turns the ``spark`` connection
(master, ``deploy-mode``, ``spark-binary``, queue, namespace, keytab...) plus the keyword
arguments built here into the command line, so a connection that works for the Spark provider's
own operator works here unchanged. This module imports nothing from Airflow.

How a driver detaches (local process, or a cluster-mode submit that returns once accepted) is
:mod:`airflow_kafka_spark.runtime.detach`; the Kafka connector of a local driver is
:mod:`airflow_kafka_spark.runtime.connector`.

What the product remembers about each submit (the application version that ran, the last one
that passed the health gate) is :mod:`airflow_kafka_spark.runtime.app_versions`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_kafka_spark._util.fs import open_location, remove_file, write_atomic
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import scrub
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.detach import DETACH_K8S, DETACH_LOCAL, DETACH_YARN, WAIT_APP_COMPLETION_CONF
from airflow_kafka_spark.runtime.integrations import merged_list
from airflow_kafka_spark.runtime.integrations.reference import (  # noqa: F401  (their old import path)
    FORWARDED_KAFKA_KEYS,
    job_arguments,
    kafka_job_options,
)

# Environment variables a driver must not inherit from the Airflow worker: connection URIs and
# variables carry secrets, and Airflow's own settings mean nothing to Spark.
_ENV_DROP_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__", "_AIRFLOW")
# = runtime.k8s.TAG_LABEL, CHECKPOINT_LABEL; not imported: that would load urllib.request into every import here
K8S_TAG_LABEL, K8S_CHECKPOINT_LABEL = "aks-tag", "aks-checkpoint"


@dataclass(frozen=True)
class SparkTarget:
    """The job's Spark connection as plain values; the Airflow layer resolves it (``airflow_glue.spark``).

    ``build_command(hook_kwargs, application)`` turns :func:`hook_kwargs` into the spark-submit argv
    the way the connection says (binary, queue, namespace, keytab...).
    """

    master: str
    deploy_mode: str | None
    spark_binary: str
    build_command: Callable[[Mapping[str, Any], str], list[str]]
    conn_extra: Mapping[str, Any] = field(default_factory=dict)  # e.g. yarn-rm-webapp, namespace


# --------------------------------------------------------------------------------------------------
# building the submit
# --------------------------------------------------------------------------------------------------


def hook_kwargs(
    spec: JobSpec,
    *,
    args: Sequence[str],
    jars: Sequence[str] = (),
    mode: str | None = None,
    name: str | None = None,
    packages: str | None = None,
    tag: str | None = None,
    checkpoint_tag: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for the Spark provider's ``SparkSubmitHook`` (besides ``conn_id``: the job's
    ``spark_conn_id``).

    The application is named as spark-submit names it: ``main_class`` is ``--class``, the job's own
    ``jars``/``packages``/``py_files``/``files`` come first in their lists and what the product adds
    (``jars``: the local Kafka connector, an integration's jar; ``extra_conf``: an integration's
    settings, already merged with the job's own by the integration) is appended, never replacing them.

    The UI is disabled on local drivers: every job on a worker would otherwise race for port 4040
    (and answer on all interfaces).
    """
    conf = {**spec.spark_conf, **(extra_conf or {})}
    if mode in WAIT_APP_COMPLETION_CONF:
        key = WAIT_APP_COMPLETION_CONF[mode]
        if str(conf.get(key, "false")).lower() != "false":
            raise UserError(
                f"job {spec.name}: spark_conf sets {key}={conf[key]}, which keeps spark-submit attached "
                "for the life of the job; remove it"
            )
        conf[key] = "false"
    if mode == DETACH_LOCAL:
        conf.setdefault("spark.ui.enabled", "false")
    if mode == DETACH_YARN:
        conf["spark.yarn.tags"] = ",".join(t for t in (conf.get("spark.yarn.tags", ""), tag, checkpoint_tag) if t)
    elif mode == DETACH_K8S:
        for label, value in ((K8S_TAG_LABEL, tag), (K8S_CHECKPOINT_LABEL, checkpoint_tag)):
            if value:
                conf[f"spark.kubernetes.driver.label.{label}"] = value
    kwargs: dict[str, Any] = {"conf": conf, "name": name or f"aks-{spec.name}", "application_args": list(args)}
    if spec.packages:   # --packages wins over spark.jars.packages in spark-submit: one merged list
        kwargs["packages"] = merged_list(spec.packages, conf.pop("spark.jars.packages", None), packages)
    elif packages:
        conf.setdefault("spark.jars.packages", packages)
    # --jars wins over spark.jars in spark-submit: a spark.jars the job (or an integration) sets joins the one list.
    all_jars = merged_list(conf.pop("spark.jars", None), spec.jars, [str(j) for j in jars])
    if all_jars:
        kwargs["jars"] = all_jars
    if spec.main_class:
        kwargs["java_class"] = spec.main_class
    if spec.py_files:
        kwargs["py_files"] = ",".join(spec.py_files)
    if spec.files:
        kwargs["files"] = ",".join(spec.files)
    if spec.deploy_mode:
        kwargs["deploy_mode"] = spec.deploy_mode
    return kwargs


def resolve_binary(command: list[str], env: Mapping[str, str]) -> list[str]:
    """The command with its first word made absolute when it is only found beside this interpreter.

    The Spark provider runs ``spark-submit`` by name. Workers started from a virtualenv without
    its ``bin`` on PATH would fail to find the ``spark-submit`` that pyspark installs there.
    """
    if not command:
        raise UserError("empty spark-submit command")
    first = command[0]
    if os.sep in first or shutil.which(first, path=env.get("PATH")):
        return list(command)
    beside = Path(sys.executable).parent / first
    if beside.exists():
        return [str(beside), *command[1:]]
    raise UserError(
        f"{first} is not on PATH ({env.get('PATH', '')[:200]}); install Spark on the worker or set the "
        "Spark connection's spark-binary extra"
    )


_VERSION_LINE = re.compile(rb"version (\d+\.\d+\.\d+)")


@functools.lru_cache(maxsize=8)
def spark_version(binary: str) -> str:
    """The Spark version ``binary`` (a ``spark-submit``) submits with, from its ``--version`` banner.

    Asked only when a job needs it and its registry entry does not say (``spark_version``): which
    build of the agent to ship depends on the Spark line (Scala 2.12 or 2.13). Once per binary and
    process: it starts a JVM (~2 s).
    """
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, timeout=120,
                              env=driver_env([binary], "local"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"could not ask {binary} for its Spark version ({exc}); set spark_version in the job's "
                        "registry entry (e.g. \"3.5\")") from None
    found = _VERSION_LINE.search(proc.stdout + proc.stderr)
    if not found:
        raise UserError(f"{binary} --version printed no Spark version; set spark_version in the job's registry entry")
    return found.group(1).decode()


def driver_env(command: Sequence[str], master: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a local driver: the worker's, minus Airflow's secrets and settings.

    With the ``spark-submit`` of the pyspark wheel (beside this interpreter) the driver's Python
    is this interpreter, which has pyspark, and a stray ``SPARK_HOME`` would point that
    spark-submit at another Spark; a cluster's spark-submit keeps its own environment.
    """
    env = {k: v for k, v in (base if base is not None else os.environ).items() if not k.startswith(_ENV_DROP_PREFIXES)}
    if Path(command[0]).parent == Path(sys.executable).parent:
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.pop("SPARK_HOME", None)
    if master.strip().lower().startswith("local"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def local_log_path(spec: JobSpec, stamp: str | None = None) -> str:
    """Where a local driver's output goes: ``<checkpoint>.logs/driver-<stamp>.log`` beside the checkpoint
    (under the registry's allowed roots), or a temp folder when the checkpoint is remote."""
    stamp = stamp or time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}"
    ck = spec.checkpoint
    if ck.startswith("file://"):
        ck = ck[len("file://") :]
    if "://" in ck:
        base = Path(os.environ.get("TMPDIR", "/tmp")) / "airflow-kafka-spark" / spec.name
    else:
        base = Path(ck.rstrip("/") + ".logs")
    return str(base / f"driver-{stamp}.log")


def starting_offsets_path(spec: JobSpec) -> str:
    """The file the next start reads ``--starting-offsets-file`` from, beside the checkpoint.

    Beside the checkpoint on its file system (HDFS, S3...): the reference job reads it through Spark
    (Hadoop's FileSystem), so a cluster-mode driver on any node finds it.
    """
    ck = spec.checkpoint
    if ck.startswith("file://"):
        ck = ck[len("file://") :]
    return ck.rstrip("/") + ".starting-offsets.json"


def write_starting_offsets(path: str, offsets_json: str) -> None:
    """Write the offsets a reset left for the next start, whole or not at all, on any file system."""
    write_atomic(open_location(path, what="starting offsets file"), (offsets_json + "\n").encode())


def remove_starting_offsets(path: str) -> None:
    """The new query planned a batch from them: the file has done its job."""
    with contextlib.suppress(OSError, UserError):
        remove_file(open_location(path, what="starting offsets file"))


def log_tail(path: str | None, *, lines: int = 15, kafka_config: Mapping[str, Any] | None = None) -> str:
    """The end of a local driver log (secrets scrubbed), for failure messages."""
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [ln for ln in text.splitlines() if ln.strip()][-lines:]
    return scrub("\n".join(kept), kafka_config)
