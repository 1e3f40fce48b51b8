"""Loading the job registry: every managed streaming job, declared once, in a YAML file beside the DAGs.

Why a registry at all: DAG params and ``dag_run.conf`` are typed by whoever triggers a run. If a
run could name any checkpoint or any backup folder, a typo (or a hostile trigger) could point a
reset at the wrong job's checkpoint, or a restore at ``/etc``. So runs name a *job*, and everything
that can destroy data (checkpoint, output, backup root, stop marker, the application itself) comes
from this file, where it is reviewed like code and checked against ``allowed_roots`` at load.

File format (``dags/streaming_jobs.yaml`` by default, ``[kafka_spark] job_registry`` to override)::

    version: 1                      # optional; the only format so far
    vars:                           # optional; names usable as ${name} in every value below
      data: ${AKS_DATA_DIR:-../.aks-data}
    allowed_roots: [${data}, ${AKS_PACKAGE_DIR}/jobs]
    defaults:                       # optional; any job key except name, merged under each job
      checkpoint: ${data}/checkpoints/{name}
    jobs:
      - name: orders
        topics: [orders]
        ...

Job keys: the fields of :class:`~airflow_kafka_spark.registry.model.JobSpec`, the one declaration;
docs/registry.md lists them with their defaults, generated from it (:mod:`airflow_kafka_spark.registry.keys`).
Unknown keys are errors (with a
"did you mean"), and so are duplicate keys, which plain PyYAML would resolve silently in favour of
the last one.

Values (not keys) may use ``${VAR}`` and ``${VAR:-default}``: registry ``vars``, then the
built-ins ``AKS_PACKAGE_DIR`` (this package's folder, to reach the bundled reference job on any
install) and ``AKS_REGISTRY_DIR`` (the folder of the YAML file), then the environment. A variable
that is unset *or empty* is an error, because ``${AKS_DATA_DIR}/checkpoints`` with an empty
variable silently becomes ``/checkpoints``. ``$$`` is a literal ``$`` (write ``$${env:HOME}`` to
hand Spark its own substitution syntax). Expansion happens *after* YAML parsing, so an environment
value can never inject YAML structure. In the path fields (checkpoint, output, backup_root,
stop_marker, application) ``{name}`` is replaced with the job name, so one ``defaults`` entry can
serve every job.

Paths: a plain path is local (relative paths are relative to the registry file's folder, so they
mean the same on every worker whatever its cwd), ``file://`` is local too, anything else with a
``scheme://`` is a remote fsspec/Hadoop URL. Local paths are resolved with ``realpath`` before the
root check, which defeats ``..`` and symlinks that leave the root. Remote URLs cannot be resolved
here, so ``.``/``..`` segments (also percent-encoded), empty segments, credentials, queries and
fragments are rejected instead of interpreted.

Secrets never belong here: the registry names connection ids (``kafka_conn_id``,
``spark_conn_id``); the bootstrap servers and every credential come from those connections at
submit time. Keys that look like secrets in ``spark_conf`` or ``application_args`` are rejected.

The model is :mod:`~airflow_kafka_spark.registry.model`; the file is read in
:mod:`~airflow_kafka_spark.registry.yaml_file`, one job is checked in
:mod:`~airflow_kafka_spark.registry.job`, single values in :mod:`~airflow_kafka_spark.registry.fields`,
locations in :mod:`~airflow_kafka_spark.registry.locations`.
Every problem is one :class:`~airflow_kafka_spark.errors.UserError` line naming the file, the job,
the field, what is wrong and how to fix it. This module imports nothing from Airflow.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType
from typing import Any

from airflow_kafka_spark import settings
from airflow_kafka_spark.registry import fields, job, locations, variables, yaml_file
from airflow_kafka_spark.registry.context import Context, kind, show
from airflow_kafka_spark.registry.locations import Location
from airflow_kafka_spark.registry.model import JobSpec, Registry

REGISTRY_ENV = settings.BY_NAME["job_registry"].env  # AIRFLOW__KAFKA_SPARK__JOB_REGISTRY
REGISTRY_FILENAME = "streaming_jobs.yaml"
FORMAT_VERSION = 1
TOP_LEVEL_KEYS = ("version", "vars", "allowed_roots", "defaults", "jobs")


def default_registry_path(dags_folder: str | os.PathLike[str] | None = None) -> Path:
    """Where the registry is: ``[kafka_spark] job_registry``, else ``<dags_folder>/streaming_jobs.yaml``.

    Without ``dags_folder`` (the Airflow layer passes ``[core] dags_folder``; the core cannot ask
    Airflow), ``./dags`` and then this checkout's ``dags/`` are tried, so the ``aks`` CLI works
    from the repository without configuration.
    """
    env = settings.value("job_registry")
    if env:
        return Path(env)
    if dags_folder is not None:
        return Path(dags_folder) / REGISTRY_FILENAME
    candidates = [
        Path.cwd() / "dags" / REGISTRY_FILENAME,
        Path(__file__).resolve().parents[2] / "dags" / REGISTRY_FILENAME,
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return candidates[0]


def load_registry(
    path: str | os.PathLike[str] | None = None, *, dags_folder: str | os.PathLike[str] | None = None
) -> Registry:
    """Read, expand and validate the registry; any problem is one :class:`UserError` line."""
    reg_path = Path(path) if path is not None else default_registry_path(dags_folder)
    text = yaml_file.read_text(
        reg_path, f"create it, or point ${REGISTRY_ENV} ([kafka_spark] job_registry) at the registry file"
    )
    ctx = Context(reg_path)
    doc = yaml_file.parse_yaml(ctx, text)
    if not isinstance(doc, dict):
        ctx.fail(
            "the file",
            f"must be a mapping with {', '.join(TOP_LEVEL_KEYS)}, got {kind(doc)}",
            "see the format in airflow_kafka_spark/registry/loader.py or dags/streaming_jobs.yaml",
        )
    fields.check_keys(ctx, "the file", doc, TOP_LEVEL_KEYS)

    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION or isinstance(version, bool):
        ctx.fail("version", f"{show(version)} is not supported", f"write version: {FORMAT_VERSION}")

    ctx.vars = variables.parse_vars(ctx, doc.get("vars"))
    roots = _parse_roots(ctx, doc.get("allowed_roots"))

    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        ctx.fail(
            "defaults", f"must be a mapping of job keys, got {kind(defaults)}", "write defaults: {key: value, ...}"
        )
    fields.check_keys(
        ctx,
        "defaults",
        defaults,
        [k for k in job.JOB_KEYS if k != "name"],
        extra_hint="'name' cannot have a default" if "name" in defaults else "",
    )

    raw_jobs = doc.get("jobs")
    if raw_jobs is None:
        ctx.fail("jobs", "is missing", "add jobs: [ {name: ..., ...} ] (an empty list is allowed)")
    if not isinstance(raw_jobs, list):
        ctx.fail(
            "jobs",
            f"must be a list of job mappings, got {kind(raw_jobs)}",
            "write each job as a '- name: ...' list item",
        )

    jobs: dict[str, JobSpec] = {}
    for index, raw in enumerate(raw_jobs):
        spec = job.parse_job(ctx, index, raw, defaults, roots)
        if spec.name in jobs:
            ctx.fail(
                f"job {spec.name!r}", "is defined twice", "give each job a unique name, or delete the duplicate entry"
            )
        jobs[spec.name] = spec
    job.check_cross_job(ctx, list(jobs.values()))
    return Registry(path=str(reg_path), allowed_roots=tuple(r.text for r in roots), jobs=MappingProxyType(jobs))


def _parse_roots(ctx: Context, raw: Any) -> list[Location]:
    if raw is None:
        ctx.fail(
            "allowed_roots",
            "is missing",
            "add allowed_roots: [a folder or URL prefix that holds your checkpoints, backups and jobs]",
        )
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        ctx.fail(
            "allowed_roots",
            f"must be a non-empty list of paths or URL prefixes, got {show(raw)}",
            "list at least one folder or URL prefix",
        )
    roots = []
    for i, item in enumerate(raw):
        where = f"allowed_roots[{i}]"
        loc = locations.location(ctx, where, variables.expand_tree(ctx, where, item))
        if loc.path in ("", "/") and not loc.netloc:
            ctx.fail(where, f"{loc.text or item!r} would allow every path", "name a dedicated folder or bucket")
        roots.append(loc)
    return roots
