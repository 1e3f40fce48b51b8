"""How an operation on a checkpoint location runs, apart from what it does: typed values the entry points take.

``ops.commands``' entry points took up to 15 keyword arguments, most of them threaded unchanged
down to the modules that need them (the stores' fsspec options, Kafka's timeout, the seal key, the
progress callback). Grouped here, a caller builds them once at the edge (the CLI from its flags,
the Airflow layer from the job) and a misspelt option is a ``TypeError`` at that one place.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

#: Hears one short line per step of a long operation ("backing up the checkpoint"); the CLI prints
#: them once a run takes more than a second, the Airflow layer may log them.
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Stores:
    """The fsspec options of the two stores an operation touches: the checkpoint's and the backups'."""

    checkpoint: dict | None = None
    backup: dict | None = None


@dataclass(frozen=True)
class Retention:
    """Which backups a successful backup prunes: beyond the newest ``keep_last`` or older than
    ``max_age_s`` (neither: none), never those in ``keep_ids`` (a restore in the same run reads one)."""

    keep_last: int | None = None
    max_age_s: float | None = None
    keep_ids: Collection[str] = ()


@dataclass(frozen=True)
class SinkFacts:
    """What a restore knows of the job's sink: whether replaying is harmless, and a file sink's output folder
    (its ``_spark_metadata`` is compared with the backup, S19)."""

    idempotent: bool | None = None
    output: str | None = None


@dataclass(frozen=True)
class RunOptions:
    """How an operation runs: its stores, Kafka's timeout, the pre-operation backup's settle time, the seal key
    (default: ``$AKS_SEAL_KEY_FILE``'s), who hears its steps, and the Spark version a backup records when the
    lifecycle record has none (``aks backup --spark-version``)."""

    stores: Stores = Stores()
    kafka_timeout: float = 10.0
    backup_settle_s: float = 2.0
    seal_key: bytes | None = None
    progress: Progress | None = None
    spark_version: str | None = None


#: The defaults the entry points take (module-level: frozen values, shared safely).
NO_RETENTION = Retention()
NO_SINK = SinkFacts()
DEFAULT_RUN = RunOptions()


_RUN_KEYS = frozenset({"kafka_timeout", "backup_settle_s", "seal_key", "progress", "spark_version"})
_STORE_KEYS = {"storage_options": "checkpoint", "backup_storage_options": "backup"}


def with_legacy(run: RunOptions, legacy: Mapping[str, Any], *, where: str) -> RunOptions:
    """``run`` with the keyword arguments the entry points took before :class:`RunOptions`
    (``storage_options=``, ``backup_settle_s=``...), for callers not moved yet; any other name is a TypeError."""
    unknown = sorted(set(legacy) - _RUN_KEYS - set(_STORE_KEYS))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s): {', '.join(unknown)}")
    if not legacy:
        return run
    stores = replace(run.stores, **{_STORE_KEYS[k]: v for k, v in legacy.items() if k in _STORE_KEYS})
    return replace(run, stores=stores, **{k: v for k, v in legacy.items() if k in _RUN_KEYS})
