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
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_kafka_spark._util.fs import open_location, remove_file, write_atomic
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import is_secret_key, scrub
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime import dstream
from airflow_kafka_spark.runtime.detach import DETACH_K8S, DETACH_LOCAL, DETACH_YARN, WAIT_APP_COMPLETION_CONF

# Kafka connection keys forwarded to the job as ``--kafka-option kafka.<key>=<value>``: the ones
# the Java client names the same way and that are never secret. Credentials are never put on a
# command line (``ps`` shows it to every user of the host and Spark logs it); a job that needs
# SASL credentials gets them from the cluster (a JAAS file shipped with spark.files and
# ``-Djava.security.auth.login.config`` in spark_conf).
FORWARDED_KAFKA_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "ssl.endpoint.identification.algorithm",
    "client.dns.lookup",
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


def kafka_job_options(kafka_config: Mapping[str, Any]) -> list[str]:
    """``kafka.<key>=<value>`` options for the job, from the non-secret keys of the connection."""
    out = []
    for key in FORWARDED_KAFKA_KEYS:
        value = kafka_config.get(key)
        if value in (None, "") or is_secret_key(key):
            continue
        if key == "security.protocol" and str(value).upper() == "PLAINTEXT":
            continue
        out.append(f"kafka.{key}={value}")
    return out


def job_arguments(
    spec: JobSpec,
    *,
    bootstrap_servers: str,
    starting_offsets_file: str | None = None,
    kafka_options: Sequence[str] = (),
) -> list[str]:
    """The reference job's flags derived from the registry (``MANAGED_FLAGS``), then its own args.

    ``--starting-offsets-file`` replaces ``--starting-offsets`` when a reset left offsets for the
    next start; the job reads them only when its checkpoint is new (Spark ignores
    startingOffsets otherwise), which is exactly the state a reset leaves.
    """
    if not bootstrap_servers:
        raise UserError(f"job {spec.name}: the Kafka connection {spec.kafka_conn_id!r} has no bootstrap.servers")
    if spec.kind is JobKind.DSTREAM:  # another contract: the position is the consumer group
        return dstream.job_arguments(spec, bootstrap_servers=bootstrap_servers, kafka_options=kafka_options)
    args = [
        "--topics",
        ",".join(spec.topics),
        "--bootstrap-servers",
        bootstrap_servers,
        "--checkpoint",
        spec.checkpoint,
    ]
    if spec.output:
        args += ["--output", spec.output]
    args += [
        "--sink",
        spec.sink,
        "--stop-marker",
        spec.stop_marker,
        "--fail-on-data-loss",
        "true" if spec.fail_on_data_loss else "false",
    ]
    if starting_offsets_file:
        args += ["--starting-offsets-file", starting_offsets_file]
    else:
        args += ["--starting-offsets", spec.starting_offsets_default]
    if spec.max_offsets_per_trigger:
        args += ["--max-offsets-per-trigger", str(spec.max_offsets_per_trigger)]
    for option in kafka_options:
        args += ["--kafka-option", option]
    return [*args, *spec.application_args]


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
) -> dict[str, Any]:
    """Keyword arguments for the Spark provider's ``SparkSubmitHook`` (besides ``conn_id``: the job's
    ``spark_conn_id``).

    The UI is disabled on local drivers: every job on a worker would otherwise race for port 4040
    (and answer on all interfaces).
    """
    conf = dict(spec.spark_conf)
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
    if packages:
        conf.setdefault("spark.jars.packages", packages)
    kwargs: dict[str, Any] = {"conf": conf, "name": name or f"aks-{spec.name}", "application_args": list(args)}
    if jars:
        kwargs["jars"] = ",".join(str(j) for j in jars)
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
