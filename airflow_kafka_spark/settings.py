"""The provider's settings: one ``[kafka_spark]`` section of Airflow's configuration, read in one place.

Why: settings used to be ``AKS_*`` environment variables that ``airflow config list`` did not know.
Now each is an option of the ``[kafka_spark]`` section, declared to Airflow through the provider's
``config`` entry (:func:`provider_config`, used by ``provider_info.py``), so it is listed, documented
and set like any Airflow option: ``AIRFLOW__KAFKA_SPARK__JOB_REGISTRY``, ``airflow.cfg``, a secrets
backend. The old ``AKS_*`` name is still read for one release, with a one-line deprecation warning.

Order (first non-empty wins): the ``AIRFLOW__KAFKA_SPARK__<NAME>`` environment variable (read here, so
``aks`` works without Airflow), then Airflow's configuration when the Airflow layer has handed over
its reader (:func:`use_airflow_config`; the core never imports Airflow), then the old ``AKS_<NAME>``.
Option defaults are declared empty to Airflow: an empty value means "the built-in default", which
each reader documents (``health_gate_poll_s``: 15 s), so a legacy variable is never hidden by a
default Airflow fills in.

Test-only switches (``AKS_CRASH_AT``), the ``${AKS_PACKAGE_DIR}``/``${AKS_REGISTRY_DIR}`` built-ins of
the registry file, and the Kafka client-config form ``AKS_KAFKA_<KEY>`` are not settings.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SECTION = "kafka_spark"
VERSION_ADDED = "0.2.0"


class SettingDeprecationWarning(FutureWarning):
    """An old ``AKS_*`` variable was read; shown by default (FutureWarning), one line in ``aks``."""


@dataclass(frozen=True)
class Setting:
    """One option of ``[kafka_spark]`` and the ``AKS_*`` variable it replaces (None: a new option)."""

    name: str
    legacy: str | None
    description: str
    example: str
    type: str = "string"

    @property
    def env(self) -> str:
        """``AIRFLOW__KAFKA_SPARK__<NAME>``: Airflow's own environment form of the option."""
        return f"AIRFLOW__{SECTION.upper()}__{self.name.upper()}"


SETTINGS: tuple[Setting, ...] = (
    Setting("job_registry", "AKS_JOB_REGISTRY",
            "The job registry file (YAML). Empty: ``<dags_folder>/streaming_jobs.yaml`` (for ``aks``: "
            "``./dags/streaming_jobs.yaml``).", "/opt/airflow/dags/streaming_jobs.yaml"),
    Setting("data_dir", "AKS_DATA_DIR",
            "Where the registry keeps job state: the value of ``${AKS_DATA_DIR}`` in the registry file "
            "(the bundled registry: checkpoints, backups, audit under it). Empty: the registry's own default.",
            "/data/streaming"),
    Setting("audit_dir", "AKS_AUDIT_DIR",
            "Folder of the audit reports (JSON, Markdown, PNG). Empty: ``<first allowed root of the "
            "registry>/audit``.", "/data/streaming/audit"),
    Setting("seal_key_file", "AKS_SEAL_KEY_FILE",
            "File holding the key of the keyed backup-manifest seal (HMAC-SHA256); manifests without a valid "
            "keyed seal are then refused. Empty: the unkeyed sha256 seal only.", "/etc/aks/seal.key"),
    Setting("connector_jars", "AKS_CONNECTOR_JARS",
            "Comma-separated jar paths of the Spark-Kafka connector for drivers started on a local master. "
            "Empty: the connector matching the Spark version from Maven (``spark.jars.packages``).",
            "/opt/jars/spark-sql-kafka.jar,/opt/jars/kafka-clients.jar"),
    Setting("k8s_token_file", "AKS_K8S_TOKEN_FILE",
            "Bearer-token file for the Kubernetes API server of a ``k8s://`` master. Empty: the pod's "
            "service-account token.", "/var/run/secrets/aks/token"),
    Setting("health_gate_poll_s", "AKS_HEALTH_GATE_POLL_S",
            "Seconds between two looks of the safe-restart DAG's health gate at the restarted job. "
            "Empty: 15.", "15", type="float"),
    Setting("docs_url", None,
            "Base URL of this provider's docs folder, for the finding-code links on validate tasks "
            "(``<docs_url>/findings.md#<code>``). Empty: the project's published docs.",
            "https://git.example.com/platform/airflow-kafka-spark/blob/main/docs"),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_LEGACY: dict[str, Setting] = {s.legacy: s for s in SETTINGS if s.legacy}

_airflow_reader: Callable[[str, str], Any] | None = None
_warned: set[str] = set()


def use_airflow_config(reader: Callable[[str, str], Any] | None) -> None:
    """Read ``[kafka_spark]`` options through Airflow too (``reader(section, option)`` → value or None).

    Called by the Airflow layer (``airflow_glue``) with ``airflow.sdk.conf``; None turns it off.
    """
    global _airflow_reader
    _airflow_reader = reader


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The setting's value (see the module doc for the order), or None when it is not set anywhere."""
    s = BY_NAME[name]
    env = os.environ if environ is None else environ
    found = (env.get(s.env) or "").strip()
    if not found and _airflow_reader is not None and environ is None:
        try:
            found = str(_airflow_reader(SECTION, s.name) or "").strip()
        except Exception:   # an Airflow without the section (provider not registered yet): not set there
            found = ""
    if not found and s.legacy:
        found = (env.get(s.legacy) or "").strip()
        if found:
            _deprecated(s)
    return found or None


def float_value(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A float setting; a value that is not a number is one clear error."""
    from airflow_kafka_spark.errors import UserError

    text = value(name, environ)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise UserError(f"[{SECTION}] {name} must be a number of seconds, got {text!r}; fix {BY_NAME[name].env} "
                        "(or the option in airflow.cfg)") from None


def legacy_value(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value for a ``${AKS_X}`` reference in the registry file: the setting it became, if it is one."""
    s = BY_LEGACY.get(variable)
    if s is None:
        return None
    return value(s.name, environ)


def _deprecated(s: Setting) -> None:
    if s.legacy is None or s.legacy in _warned:
        return
    _warned.add(s.legacy)
    warnings.warn(f"{s.legacy} is deprecated and will be ignored in the next release: set {s.env} or "
                  f"[{SECTION}] {s.name} in airflow.cfg", SettingDeprecationWarning, stacklevel=3)


def provider_config() -> dict[str, Any]:
    """The ``config`` entry of the provider info (Airflow's ``provider_info.schema.json``)."""
    return {SECTION: {
        "description": "Settings of the airflow-kafka-spark provider (Spark Structured Streaming jobs on Kafka). "
                       "The aks command line reads the AIRFLOW__KAFKA_SPARK__* variables too.",
        "options": {s.name: {"description": s.description + (f" Replaces ${s.legacy} (still read, deprecated)."
                                                              if s.legacy else ""),
                             "version_added": VERSION_ADDED, "type": s.type, "example": s.example, "default": ""}
                    for s in SETTINGS},
    }}
