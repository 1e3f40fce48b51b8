"""A private member of a provider's hook, or one line naming the provider release that dropped it.

The Spark and Kafka providers keep what this package needs behind private names
(``SparkSubmitHook._connection`` / ``._build_spark_submit_command``, ``KafkaBaseHook._build_config``).
Each use sits in one function (airflow_glue/spark.py, hooks/streaming.py) that fetches the member
through :func:`private_member`, so a provider release outside the declared range that renames it
fails with the provider's version and the supported range (read from this package's own metadata,
i.e. pyproject), not with an AttributeError deep in a DAG. tests/support/provider_contract.py
exercises every use against the installed providers: the newest in the dev venv, the oldest in the
install test's venv.
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any

from airflow_kafka_spark.errors import UserError

OWN_DIST = "airflow-kafka-spark"


def supported_range(dist: str) -> str:
    """The version range this package declares for ``dist`` (e.g. ``<7,>=6.0.0``), or "?" when unknown."""
    try:
        requirements = metadata.requires(OWN_DIST) or []
    except metadata.PackageNotFoundError:   # running from a source tree that was never installed
        return "?"
    for req in requirements:
        match = re.match(rf"^{re.escape(dist)}(?![\w.-])\s*(\([^)]*\)|[^;]*)", req, re.IGNORECASE)
        if match and "extra ==" not in req:
            return match.group(1).strip(" ()") or "any"
    return "?"


def private_member(obj: Any, provider_class: type, name: str, dist: str) -> Any:
    """``getattr(obj, name)`` for a private member of ``provider_class`` (a class of the provider ``dist``),
    else a :class:`UserError` naming ``dist``'s installed version and the range this package supports."""
    try:
        return getattr(obj, name)
    except AttributeError:
        try:
            installed = metadata.version(dist)
        except metadata.PackageNotFoundError:
            installed = "(not installed)"
        wanted = supported_range(dist)
        raise UserError(f"{dist} {installed} has no {provider_class.__name__}.{name}, which {OWN_DIST} relies on; "
                        f"install {dist}{wanted} (the range this release supports)") from None
