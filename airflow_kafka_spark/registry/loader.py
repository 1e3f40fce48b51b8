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

Job keys (required: name, application, topics, checkpoint, backup_root; the rest have defaults):
name, application (.py/.jar), application_args (extra args after the flags the operator derives
from the fields below; see ``MANAGED_FLAGS``), spark_conn_id (spark_default), spark_conf
(spark.* only), deploy_mode (client|cluster|unset = the connection's), kafka_conn_id
(kafka_default), topics, checkpoint, output, sink (idempotent|append|parquet), backup_root (may
be shared: backups live in ``<backup_root>/<job>/``), backup_retention {keep_last: 5,
max_age_days: 30}, stop_timeout_s (300), stop_marker (``<checkpoint>.stop``),
compatibility_version ("1"), compatibility_probe (false: true when the application implements
``--aks-probe``, docs/probe.md), probe_timeout_s (600), starting_offsets_default (earliest|latest|offsets JSON),
fail_on_data_loss (true), max_offsets_per_trigger, max_lag_records, max_lag_seconds,
min_headroom_s, stall_after_s (unset = not checked), mirror_group, health_gate {min_batches: 1,
timeout_s: 600, idle_pass_s: 120}, kind (structured|dstream; dstream needs group, may name
dstream_checkpoint; receiver-based kafka-0-8 jobs are refused). Unknown keys are errors (with a
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

The model is :mod:`~airflow_kafka_spark.registry.model`, single values are checked in
:mod:`~airflow_kafka_spark.registry.fields`, locations in :mod:`~airflow_kafka_spark.registry.locations`.
Every problem is one :class:`~airflow_kafka_spark.errors.UserError` line naming the file, the job,
the field, what is wrong and how to fix it. This module imports nothing from Airflow.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from airflow_kafka_spark import settings
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry import fields, locations, variables
from airflow_kafka_spark.registry.context import Context, kind, show
from airflow_kafka_spark.registry.locations import Location
from airflow_kafka_spark.registry.model import DEPLOY_MODES, NAME_PATTERN, JobSpec, Registry, Sink, is_job_name

REGISTRY_ENV = settings.BY_NAME["job_registry"].env   # AIRFLOW__KAFKA_SPARK__JOB_REGISTRY
REGISTRY_FILENAME = "streaming_jobs.yaml"
FORMAT_VERSION = 1
STOP_MARKER_SUFFIX = ".stop"
APPLICATION_SUFFIXES = (".py", ".jar")
# A registry is a hand-written list of jobs; anything bigger is a mistake (or a YAML bomb).
MAX_REGISTRY_BYTES = 1024 * 1024

TOP_LEVEL_KEYS = ("version", "vars", "allowed_roots", "defaults", "jobs")
JOB_KEYS = (
    "name", "application", "application_args", "spark_conn_id", "spark_conf", "deploy_mode",
    "kafka_conn_id", "topics", "checkpoint", "output", "sink", "backup_root", "backup_retention",
    "stop_timeout_s", "stop_marker", "compatibility_version", "compatibility_probe", "probe_timeout_s",
    "starting_offsets_default",
    "fail_on_data_loss", "max_offsets_per_trigger", "max_lag_records", "max_lag_seconds",
    "min_headroom_s", "stall_after_s", "mirror_group", "health_gate", "kind", "group", "dstream_checkpoint",
)
REQUIRED_JOB_KEYS = ("name", "application", "topics", "checkpoint", "backup_root")
PATH_FIELDS = ("application", "checkpoint", "output", "backup_root", "stop_marker", "dstream_checkpoint")


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
    candidates = [Path.cwd() / "dags" / REGISTRY_FILENAME,
                  Path(__file__).resolve().parents[2] / "dags" / REGISTRY_FILENAME]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return candidates[0]


def load_registry(path: str | os.PathLike[str] | None = None, *,
                  dags_folder: str | os.PathLike[str] | None = None) -> Registry:
    """Read, expand and validate the registry; any problem is one :class:`UserError` line."""
    reg_path = Path(path) if path is not None else default_registry_path(dags_folder)
    text = _read(reg_path)
    ctx = Context(reg_path)
    doc = _parse_yaml(ctx, text)
    if not isinstance(doc, dict):
        ctx.fail("the file", f"must be a mapping with {', '.join(TOP_LEVEL_KEYS)}, got {kind(doc)}",
                 "see the format in airflow_kafka_spark/registry/loader.py or dags/streaming_jobs.yaml")
    fields.check_keys(ctx, "the file", doc, TOP_LEVEL_KEYS)

    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION or isinstance(version, bool):
        ctx.fail("version", f"{show(version)} is not supported", f"write version: {FORMAT_VERSION}")

    ctx.vars = variables.parse_vars(ctx, doc.get("vars"))
    roots = _parse_roots(ctx, doc.get("allowed_roots"))

    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        ctx.fail("defaults", f"must be a mapping of job keys, got {kind(defaults)}",
                 "write defaults: {key: value, ...}")
    fields.check_keys(ctx, "defaults", defaults, [k for k in JOB_KEYS if k != "name"],
                      extra_hint="'name' cannot have a default" if "name" in defaults else "")

    raw_jobs = doc.get("jobs")
    if raw_jobs is None:
        ctx.fail("jobs", "is missing", "add jobs: [ {name: ..., ...} ] (an empty list is allowed)")
    if not isinstance(raw_jobs, list):
        ctx.fail("jobs", f"must be a list of job mappings, got {kind(raw_jobs)}",
                 "write each job as a '- name: ...' list item")

    jobs: dict[str, JobSpec] = {}
    for index, raw in enumerate(raw_jobs):
        spec = _parse_job(ctx, index, raw, defaults, roots)
        if spec.name in jobs:
            ctx.fail(f"job {spec.name!r}", "is defined twice",
                     "give each job a unique name, or delete the duplicate entry")
        jobs[spec.name] = spec
    _check_cross_job(ctx, list(jobs.values()))
    return Registry(path=str(reg_path), allowed_roots=tuple(r.text for r in roots),
                    jobs=MappingProxyType(jobs))


def _read(reg_path: Path) -> str:
    hint = f"create it, or point ${REGISTRY_ENV} ([kafka_spark] job_registry) at the registry file"
    try:
        size = reg_path.stat().st_size
        if not reg_path.is_file():
            raise UserError(f"job registry {reg_path} is not a file; {hint}")
        if size > MAX_REGISTRY_BYTES:
            raise UserError(f"job registry {reg_path} is {size} bytes, over the {MAX_REGISTRY_BYTES} "
                            "byte limit; a registry lists jobs, keep data elsewhere")
        return reg_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"job registry {reg_path} does not exist; {hint}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"job registry {reg_path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                        "save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"job registry {reg_path} cannot be read ({exc.strerror}); "
                        "fix its permissions or the path") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys. Plain PyYAML keeps the *last* of two ``checkpoint:``
    lines without a word, which for this file means silently pointing a job at another folder."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' entries may be overridden by explicit keys, as YAML intends
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable key: PyYAML itself reports it below
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (the second one would silently win)", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _parse_yaml(ctx: Context, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        fix = ("remove or rename one of them" if "duplicate key" in problem
               else "fix the YAML syntax there (indentation, quoting, a missing ':' or '-')")
        ctx.fail("not valid YAML" + at, problem, fix)
    except yaml.YAMLError as exc:
        ctx.fail("not valid YAML", str(exc).splitlines()[0] if str(exc) else "parse error",
                 "fix the YAML syntax")
    except RecursionError:   # PyYAML composes recursively: thousands of nested [ or { overflow it
        ctx.fail("not valid YAML", "it is nested too deeply", "a registry is a flat list of jobs: remove the nesting")


def _parse_roots(ctx: Context, raw: Any) -> list[Location]:
    if raw is None:
        ctx.fail("allowed_roots", "is missing",
                 "add allowed_roots: [a folder or URL prefix that holds your checkpoints, backups and jobs]")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        ctx.fail("allowed_roots", f"must be a non-empty list of paths or URL prefixes, got {show(raw)}",
                 "list at least one folder or URL prefix")
    roots = []
    for i, item in enumerate(raw):
        where = f"allowed_roots[{i}]"
        loc = locations.location(ctx, where, variables.expand_tree(ctx, where, item))
        if loc.path in ("", "/") and not loc.netloc:
            ctx.fail(where, f"{loc.text or item!r} would allow every path",
                     "name a dedicated folder or bucket")
        roots.append(loc)
    return roots


# --------------------------------------------------------------------------------------------------
# internals: one job
# --------------------------------------------------------------------------------------------------

def _parse_job(ctx: Context, index: int, raw: Any, defaults: dict, roots: list[Location]) -> JobSpec:
    if not isinstance(raw, dict):
        ctx.fail(f"jobs[{index}]", f"must be a mapping, got {kind(raw)}",
                 "write '- name: ...' with the job's keys")
    name = raw.get("name")
    if name is None:
        ctx.fail(f"jobs[{index}]", "has no name", "add name: <lower-case id>")
    if not is_job_name(name):
        ctx.fail(f"jobs[{index}].name", f"{show(name)} is not a valid job name",
                 f"use {NAME_PATTERN}: a lower-case letter, then up to 62 letters, digits, '_' or '-'")
    job = f"job {name!r}"
    fields.check_keys(ctx, job, raw, JOB_KEYS)

    merged: dict[str, Any] = dict(defaults)
    for key, value in raw.items():
        if key in ("spark_conf", "backup_retention", "health_gate") and isinstance(value, dict) \
                and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}   # one level deep: a job adds to the default conf
        else:
            merged[key] = value
    missing = [k for k in REQUIRED_JOB_KEYS if merged.get(k) in (None, "", [])]
    if missing:
        ctx.fail(job, f"is missing {', '.join(missing)}", "set them in the job or under defaults")

    v = {k: variables.expand_tree(ctx, f"{job}.{k}", val) for k, val in merged.items()}
    for key in PATH_FIELDS:
        if isinstance(v.get(key), str):
            v[key] = v[key].replace("{name}", name)

    def loc(key: str) -> Location:
        where = f"{job}.{key}"
        found = locations.location(ctx, where, v[key])
        if not any(found.within(r) for r in roots):
            ctx.fail(where, f"{found.text!r} is outside allowed_roots ({', '.join(r.text for r in roots)})",
                     "move it under one of the roots, or add a root for it")
        if key == "checkpoint" and any(found.path == r.path and found.within(r) for r in roots):
            # Its siblings (<checkpoint>.stop, <checkpoint>.lifecycle.json) would land outside.
            ctx.fail(where, f"{found.text!r} is an allowed root itself",
                     "use a folder below the root, e.g. <root>/checkpoints/<job>")
        return found

    application = loc("application")
    if not application.path.lower().endswith(APPLICATION_SUFFIXES):
        ctx.fail(f"{job}.application", f"{application.text!r} is not a .py or .jar file",
                 "point it at the job's .py file or .jar")
    checkpoint = loc("checkpoint")
    backup_root = loc("backup_root")
    output = loc("output") if v.get("output") not in (None, "") else None
    if v.get("stop_marker") in (None, ""):
        # A plain path for local checkpoints even if written as file://: the reference job tests
        # the marker with os.path.exists on the driver.
        base = checkpoint.path if not checkpoint.scheme else checkpoint.text
        v["stop_marker"] = base + STOP_MARKER_SUFFIX
    stop_marker = loc("stop_marker")

    if backup_root.within(checkpoint):
        ctx.fail(f"{job}.backup_root", f"{backup_root.text!r} is inside the checkpoint {checkpoint.text!r}",
                 "a reset or restore of the checkpoint would destroy its own backups; put backups beside it")
    if checkpoint.within(backup_root):
        ctx.fail(f"{job}.checkpoint", f"{checkpoint.text!r} is inside backup_root {backup_root.text!r}",
                 "backup retention would prune the live checkpoint; use separate folders")
    if output is not None and output.overlaps(checkpoint):
        ctx.fail(f"{job}.output", f"{output.text!r} and the checkpoint {checkpoint.text!r} overlap",
                 "Spark owns the checkpoint folder and a reset deletes it; use separate folders")
    if output is not None and output.overlaps(backup_root):
        ctx.fail(f"{job}.output", f"{output.text!r} and backup_root {backup_root.text!r} overlap",
                 "use separate folders")
    if stop_marker.within(checkpoint):
        ctx.fail(f"{job}.stop_marker", f"{stop_marker.text!r} is inside the checkpoint",
                 f"leave it unset (default: <checkpoint>{STOP_MARKER_SUFFIX}) "
                 "or put it beside the checkpoint")

    topics = fields.topics(ctx, f"{job}.topics", v["topics"])
    kind_, group = fields.job_kind(ctx, job, v)
    dstream_ck = loc("dstream_checkpoint") if v.get("dstream_checkpoint") not in (None, "") else None
    if dstream_ck is not None and (dstream_ck.overlaps(checkpoint) or dstream_ck.overlaps(backup_root)):
        ctx.fail(f"{job}.dstream_checkpoint", f"{dstream_ck.text!r} overlaps the checkpoint or backup_root",
                 "give the DStream checkpoint its own folder")

    sink = Sink(fields.choice(ctx, f"{job}.sink", v.get("sink", Sink.IDEMPOTENT.value),
                              tuple(s.value for s in Sink)))
    if sink.keeps_batch_log and output is None:
        ctx.fail(f"{job}.output", "is required for the parquet sink", "set output to the sink folder")

    return JobSpec(
        name=name,
        application=application.text,
        application_args=fields.application_args(ctx, f"{job}.application_args", v.get("application_args")),
        spark_conn_id=fields.conn_id(ctx, f"{job}.spark_conn_id", v.get("spark_conn_id", "spark_default")),
        spark_conf=fields.spark_conf(ctx, f"{job}.spark_conf", v.get("spark_conf")),
        deploy_mode=None if v.get("deploy_mode") is None
        else fields.choice(ctx, f"{job}.deploy_mode", v["deploy_mode"], DEPLOY_MODES),
        kafka_conn_id=fields.conn_id(ctx, f"{job}.kafka_conn_id", v.get("kafka_conn_id", "kafka_default")),
        topics=tuple(topics),
        checkpoint=checkpoint.text,
        output=output.text if output else None,
        sink=sink,
        backup_root=backup_root.text,
        backup_retention=fields.retention(ctx, f"{job}.backup_retention", v.get("backup_retention")),
        stop_timeout_s=fields.number(ctx, f"{job}.stop_timeout_s", v.get("stop_timeout_s"), 300.0, positive=True),
        stop_marker=stop_marker.text,
        compatibility_version=fields.compat(ctx, f"{job}.compatibility_version",
                                      v.get("compatibility_version", "1")),
        compatibility_probe=fields.boolean(ctx, f"{job}.compatibility_probe", v.get("compatibility_probe", False)),
        probe_timeout_s=fields.number(ctx, f"{job}.probe_timeout_s", v.get("probe_timeout_s"), 600.0, positive=True),
        starting_offsets_default=fields.starting_offsets(ctx, f"{job}.starting_offsets_default",
                                                   v.get("starting_offsets_default", "earliest"), topics),
        fail_on_data_loss=fields.boolean(ctx, f"{job}.fail_on_data_loss", v.get("fail_on_data_loss", True)),
        max_offsets_per_trigger=fields.integer(ctx, f"{job}.max_offsets_per_trigger", v.get("max_offsets_per_trigger"),
                                     minimum=1),
        # Thresholds are positive when set (as status.StatusThresholds requires); unset = not checked.
        max_lag_records=fields.integer(ctx, f"{job}.max_lag_records", v.get("max_lag_records"), minimum=1),
        max_lag_seconds=fields.number(ctx, f"{job}.max_lag_seconds", v.get("max_lag_seconds"), None, positive=True),
        min_headroom_s=fields.number(ctx, f"{job}.min_headroom_s", v.get("min_headroom_s"), None, positive=True),
        stall_after_s=fields.number(ctx, f"{job}.stall_after_s", v.get("stall_after_s"), None, positive=True),
        mirror_group=fields.group(ctx, f"{job}.mirror_group", v.get("mirror_group")),
        health_gate=fields.health_gate(ctx, f"{job}.health_gate", v.get("health_gate")),
        kind=kind_, group=group, dstream_checkpoint=dstream_ck.text if dstream_ck else None,
    )


def _check_cross_job(ctx: Context, specs: list[JobSpec]) -> None:
    """Two jobs must never share a checkpoint (Spark would interleave two queries' logs), nor may
    one job's folders sit inside another's checkpoint (a reset of one would delete the other's)."""
    locs = {s.name: {k: locations.location(ctx, f"job {s.name!r}.{k}", getattr(s, k))
                     for k in ("checkpoint", "backup_root", "output") if getattr(s, k)} for s in specs}
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            ca, cb = locs[a.name]["checkpoint"], locs[b.name]["checkpoint"]
            if ca.overlaps(cb):
                ctx.fail(f"job {b.name!r}.checkpoint",
                         f"{cb.text!r} overlaps the checkpoint of job {a.name!r}",
                         "give every job its own checkpoint folder")
            for x, y in ((a, b), (b, a)):
                cx = locs[x.name]["checkpoint"]
                for key in ("backup_root", "output"):
                    other = locs[y.name].get(key)
                    if other is not None and other.overlaps(cx):
                        ctx.fail(f"job {y.name!r}.{key}",
                                 f"{other.text!r} overlaps the checkpoint of job {x.name!r}",
                                 "keep each job's folders apart from other jobs' checkpoints")
            if a.stop_marker == b.stop_marker:
                ctx.fail(f"job {b.name!r}.stop_marker", f"is also the stop marker of job {a.name!r}",
                         "stopping one job would stop both; give each its own marker (or leave it unset)")
            if a.mirror_group and a.mirror_group == b.mirror_group:
                ctx.fail(f"job {b.name!r}.mirror_group", f"{b.mirror_group!r} is also job {a.name!r}'s",
                         "two jobs committing to one group make its lag meaningless; use one group per job")
            oa, ob = locs[a.name].get("output"), locs[b.name].get("output")
            if oa and ob and (a.sink.keeps_batch_log or b.sink.keeps_batch_log) and oa.overlaps(ob):
                ctx.fail(f"job {b.name!r}.output", f"{ob.text!r} overlaps the output of job {a.name!r}",
                         "a parquet sink's _spark_metadata log belongs to one query; use separate folders")
