"""The agent: a small JVM artifact that stops a user's unchanged streaming job on a batch boundary.

Why it exists: the product must stop jobs it did not write (a Scala/Java jar with its own ``main``, a
PySpark script with its own argparse) without asking anyone to change them, and Spark has no "stop
after this batch": ``query.stop()`` cuts the running batch (``offsets/N`` written, ``commits/N``
not), which the next run replays. The agent is switched on by configuration alone
(``spark.plugins``, ``spark.sql.streaming.streamingQueryListeners``,
``spark.sql.streaming.checkpointFileManagerClass`` and ``spark.jars``), closes a gate before the next
``offsets/N`` once a stop marker exists, stops each query between batches, and writes a JSON report
of what it observed (docs/agent.md); for a job with ``mirror_group`` it also commits each batch's
end offsets to that shadow consumer group. In a DStream application the same plugin stops the active
``StreamingContext`` gracefully and reports every batch's Kafka ranges (the report's ``dstream``
section), from which the product announces a restart's exact replay. This module is the product's
side: which jar for which Spark, and the confs to add. Core: no Airflow, no PySpark (both would
cost the command line its start-up).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from airflow_kafka_spark.errors import UserError

PREFIX = "spark.aks.agent."
STOP_MARKER = PREFIX + "stopMarker"
REPORT = PREFIX + "report"
CHECKPOINT = PREFIX + "checkpoint"
POLL_MS = PREFIX + "pollMs"
STOP_TIMEOUT_MS = PREFIX + "stopTimeoutMs"
DELEGATE_FILE_MANAGER = PREFIX + "delegateCheckpointFileManagerClass"
PROBE_COPY = PREFIX + "probe.copy"
PROBE_ROOT = PREFIX + "probe.root"
PROBE_TEST_SKIP_REWRITE = PREFIX + "probe.testSkipRewrite"   # tests only: the start check must halt
# The shadow-group mirror (aks.agent.ShadowGroupMirror): the group switches it on; Kafka's Java admin
# client settings go as MIRROR_KAFKA + <key> (bootstrap.servers and non-secret keys only: --conf is
# visible in ps); secrets, if any, from the user's own properties file (MIRROR_PROPERTIES_FILE).
MIRROR_GROUP = PREFIX + "mirror.group"
MIRROR_KAFKA = PREFIX + "mirror.kafka."
MIRROR_PROPERTIES_FILE = PREFIX + "mirror.propertiesFile"
MIRROR_MIN_INTERVAL_MS = PREFIX + "mirror.minIntervalMs"
MIRROR_FLUSH_TIMEOUT_MS = PREFIX + "mirror.flushTimeoutMs"

PLUGIN_CLASS = "aks.agent.AgentPlugin"
LISTENER_CLASS = "aks.agent.AgentListener"
FILE_MANAGER_CLASS = "aks.agent.GateCheckpointFileManager"

SPARK_PLUGINS = "spark.plugins"
SPARK_LISTENERS = "spark.sql.streaming.streamingQueryListeners"
SPARK_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
SPARK_JARS = "spark.jars"
SPARK_EXTENSIONS = "spark.sql.extensions"
PROBE_EXTENSION_CLASS = "aks.agent.ProbeExtension"
PROBE_HALT_CODE = 86       # the driver's exit code when a query's sink was not replaced (Probe.HALT_CODE)

JARS_DIR = Path(__file__).parent / "jars"
# Spark line -> the jar's name: the lines differ in Scala's binary version and in the package of
# Spark's CheckpointFileManager (moved in 4.1), so one jar per line.
_LINES = {"3.5": "aks-agent-spark35_2.12.jar", "4": "aks-agent-spark4_2.13.jar"}
REPORT_SUFFIX = ".agent.json"


def line_of(spark_version: str) -> str:
    """The agent line serving ``spark_version`` ("3.5.1" -> "3.5", "4.2.0" -> "4"; 4.0 has no line)."""
    parts = spark_version.strip().split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise UserError(f"not a Spark version: {spark_version!r} (expected e.g. 3.5.1 or 4.2.0)") from None
    if major == 3 and minor == 5:
        return "3.5"
    if major == 4 and minor >= 1:  # 4.0 still has CheckpointFileManager in the 3.5 package, with Scala 2.13
        return "4"
    raise UserError(f"the agent is built for Spark 3.5 and 4.1+, not {spark_version}: stop this job without the agent")


def jar_for(spark_version: str) -> Path:
    """The agent jar for ``spark_version``; one clear line when it was never built."""
    jar = JARS_DIR / _LINES[line_of(spark_version)]
    if not jar.is_file():
        raise UserError(f"the agent jar {jar} is missing: run bin/setup (or python -m devstack.agent_build)")
    return jar


def report_path(checkpoint: str) -> str:
    """Where the report goes by default: beside the checkpoint, never inside Spark's folders."""
    return checkpoint.rstrip("/") + REPORT_SUFFIX


def _append(existing: str | None, value: str) -> str:
    items = [v.strip() for v in (existing or "").split(",") if v.strip()]
    return ",".join(items if value in items else [*items, value])


def agent_conf(
    stop_marker: str,
    checkpoint: str,
    report_path: str,
    spark_version: str,
    user_conf: Mapping[str, str],
    *,
    mirror_group: str | None = None,
    mirror_kafka: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The Spark confs to add to the user's (``--conf k=v`` each), given the user's own ``user_conf``.

    Appends to ``spark.jars``, ``spark.plugins`` and the listeners list rather than replacing them;
    a user's own ``checkpointFileManagerClass`` is kept as the agent's delegate (the agent's manager
    wraps it). Paths are Hadoop paths as the driver sees them (``hdfs://``, ``s3a://``, local).

    ``mirror_group``: the agent also commits each batch's end offsets to this shadow group, with
    Kafka's Java admin client configured by ``mirror_kafka`` (Java client keys; ``bootstrap.servers``
    required). The caller passes non-secret keys only: every ``--conf`` is on spark-submit's command
    line, which ``ps`` shows to every user of the host (docs/agent.md, "The shadow-group mirror").
    """
    jar = jar_for(spark_version)
    conf = {
        SPARK_JARS: _append(user_conf.get(SPARK_JARS), str(jar)),
        SPARK_PLUGINS: _append(user_conf.get(SPARK_PLUGINS), PLUGIN_CLASS),
        SPARK_LISTENERS: _append(user_conf.get(SPARK_LISTENERS), LISTENER_CLASS),
        SPARK_FILE_MANAGER: FILE_MANAGER_CLASS,
        STOP_MARKER: stop_marker,
        REPORT: report_path,
        CHECKPOINT: checkpoint,
    }
    users = (user_conf.get(SPARK_FILE_MANAGER) or "").strip()
    if users and users != FILE_MANAGER_CLASS:
        conf[DELEGATE_FILE_MANAGER] = users
    if mirror_group:
        conf.update(mirror_conf(mirror_group, mirror_kafka or {}))
    return conf


def mirror_conf(group: str, kafka: Mapping[str, str]) -> dict[str, str]:
    """The agent's shadow-group settings: the group and the admin client's (non-secret) settings."""
    if not str(kafka.get("bootstrap.servers") or "").strip():
        raise UserError(f"the agent cannot mirror to group {group}: no bootstrap.servers for its Kafka client")
    return {MIRROR_GROUP: group, **{MIRROR_KAFKA + k: str(v) for k, v in sorted(kafka.items())}}


def probe_conf(
    copy: str,
    root: str,
    checkpoint: str,
    report_path: str,
    spark_version: str,
    user_conf: Mapping[str, str],
) -> dict[str, str]:
    """The confs of a compatibility-probe run of a user's unchanged application (docs/probe.md).

    The agent as for a real run, plus its session extension, which swaps every streaming query's
    sink for Spark's ``noop`` sink and the job's ``checkpoint`` for the staged ``copy``; the file
    manager refuses writes outside ``root`` (the probe's scratch folder, which holds the copy).
    The stop marker is ``<root>/STOP``: the product creates it before the submit, so the agent lets
    the one pending batch of the copy run and stops the query before it plans another.
    """
    root = root.rstrip("/")
    conf = agent_conf(f"{root}/STOP", checkpoint, report_path, spark_version, user_conf)
    conf[SPARK_EXTENSIONS] = _append(user_conf.get(SPARK_EXTENSIONS), PROBE_EXTENSION_CLASS)
    conf[PROBE_COPY] = copy
    conf[PROBE_ROOT] = root
    conf.setdefault(POLL_MS, "100")
    return conf
