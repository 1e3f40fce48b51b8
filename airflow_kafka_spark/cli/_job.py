"""``--job NAME``: what every ``aks`` command takes from the job registry, and the ``--execute`` convention.

Why one place: an operator types ``aks reset --job orders --mode preserve`` and expects the
checkpoint, the backup root, the topics, the sink and the Kafka connection the registry names for
``orders``, exactly what the Airflow operators use. A flag given on the command line wins over the
registry; a flag that contradicts the job's kind (``--group`` for a Structured Streaming job) is one
``error:`` line. Without a registry (a laptop, a checkpoint copied elsewhere) explicit flags still work.

Destructive commands (``reset``, ``restore``, ``backups --prune``, ``mirror``) plan by default and act
only with ``--execute``, as ``kafka-consumer-groups --reset-offsets`` does; ``--dry-run`` is accepted
for one release as a no-op (it is the default) with a one-line deprecation warning.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.cli._args import UsageError, kafka_config_from_args

if TYPE_CHECKING:
    from airflow_kafka_spark.registry.model import JobSpec, Registry

EXECUTE_HELP = "act; without --execute the plan is printed and nothing is changed"


def add_registry_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", metavar="PATH",
                   help="job registry (default: [kafka_spark] job_registry, else <dags_folder>/streaming_jobs.yaml)")


def add_execute_argument(p: argparse.ArgumentParser, what: str, *, old_dry_run: bool = True) -> None:
    """``--execute`` (act) and, for commands that had it, the deprecated ``--dry-run`` (the default now)."""
    g = p.add_argument_group("plan or act").add_mutually_exclusive_group()
    g.add_argument("--execute", action="store_true", help=f"{what}; without --execute the plan is printed and "
                                                          "nothing is changed")
    if old_dry_run:
        g.add_argument("--dry-run", action="store_true",
                       help="deprecated, the default: print the plan, change nothing (removed in the next release)")


def executes(args: argparse.Namespace) -> bool:
    """True with ``--execute``; ``--dry-run`` gets the one-line deprecation warning."""
    if getattr(args, "dry_run", False):
        print("warning: --dry-run is deprecated and now the default (plan only); drop it, and pass --execute to act",
              file=sys.stderr)
    return bool(getattr(args, "execute", False))


def load_registry(args: argparse.Namespace) -> Registry:
    from airflow_kafka_spark.registry.loader import load_registry as load

    return load(getattr(args, "registry", None))


def registry_job(args: argparse.Namespace, *, needed: bool = True) -> JobSpec | None:
    """The registry entry named by ``--job``, or None without ``--job``.

    ``needed=False``: every value the command needs was given as a flag, so a registry that is
    missing or does not know the name leaves ``--job`` a plain job name (as before the registry).
    """
    from airflow_kafka_spark.errors import UserError

    name = getattr(args, "job", None)
    if not name:
        return None
    try:
        return load_registry(args).get(name)
    except UserError:
        if needed:
            raise
        return None


def pick(flag: Any, spec: JobSpec | None, attr: str, *, what: str) -> Any:
    """The flag's value, else the registry job's ``attr``; neither is one usage line."""
    if flag not in (None, "", [], ()):
        return flag
    if spec is not None and getattr(spec, attr, None) not in (None, ""):
        return getattr(spec, attr)
    raise UsageError(f"no {what} given: pass --job NAME (a registry job) or {_flag_of(attr)}")


def _flag_of(attr: str) -> str:
    return {"checkpoint": "--checkpoint PATH", "backup_root": "--backup-root URL"}.get(attr, f"--{attr}")


def refuse_conflicts(args: argparse.Namespace, spec: JobSpec | None) -> None:
    """One line for combinations that cannot mean anything: a consumer group for a checkpoint job and so on."""
    if spec is None:
        return
    from airflow_kafka_spark.watch.kinds import position_kind

    conflict = position_kind(spec).flag_conflict(spec, checkpoint=getattr(args, "checkpoint", None),
                                                 group=getattr(args, "group", None))
    if conflict is not None:
        raise UsageError(conflict)


def kafka_given(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "bootstrap_servers", None) or getattr(args, "kafka_config", None)
                or getattr(args, "kafka_property", None))


def kafka_config_for(args: argparse.Namespace, spec: JobSpec | None) -> dict[str, Any]:
    """The command line's Kafka settings, else the registry job's Airflow connection (``kafka_conn_id``).

    The connection is read through Airflow (``AIRFLOW_CONN_<ID>``, a secrets backend or the metadata
    DB: only Airflow resolves all three), imported here only, so ``aks`` runs without Airflow when
    Kafka is named on the command line.
    """
    if kafka_given(args) or spec is None:
        return kafka_config_from_args(args)
    try:
        from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook
    except ImportError:
        raise UsageError(f"job {spec.name} reads Kafka through the Airflow connection {spec.kafka_conn_id!r} and "
                         "Airflow is not installed here: pass --bootstrap-servers HOST:PORT or --kafka-config FILE"
                         ) from None
    return StreamingKafkaHook(spec.kafka_conn_id).kafka_config()
