"""One job of the registry: its keys merged over ``defaults``, expanded, checked and made a :class:`JobSpec`.

Every location must lie inside ``allowed_roots``, and a job's folders must not nest in a way that
lets one operation destroy another's data: backups inside the checkpoint (a reset would delete
them), the checkpoint inside the backup root (retention would prune it), an output or stop marker
inside the checkpoint. Across jobs: no shared checkpoint, stop marker, mirror group or parquet
output. The key list and formats are in :mod:`~airflow_kafka_spark.registry.loader`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_kafka_spark.registry import fields, locations, variables
from airflow_kafka_spark.registry.context import Context, kind, show
from airflow_kafka_spark.registry.locations import Location
from airflow_kafka_spark.registry.model import DEPLOY_MODES, JOB_KEYS, NAME_PATTERN, JobSpec, Sink, is_job_name

STOP_MARKER_SUFFIX = ".stop"
APPLICATION_SUFFIXES = (".py", ".jar")
REQUIRED_JOB_KEYS = ("name", "application", "topics", "checkpoint", "backup_root")
PATH_FIELDS = ("application", "checkpoint", "output", "backup_root", "stop_marker", "dstream_checkpoint")


def parse_job(ctx: Context, index: int, raw: Any, defaults: dict, roots: list[Location]) -> JobSpec:
    name = _job_name(ctx, index, raw)
    job = f"job {name!r}"
    fields.check_keys(ctx, job, raw, JOB_KEYS)

    merged = _merged(ctx, job, raw, defaults)

    v = {k: variables.expand_tree(ctx, f"{job}.{k}", val) for k, val in merged.items()}
    for key in PATH_FIELDS:
        if isinstance(v.get(key), str):
            v[key] = v[key].replace("{name}", name)

    def loc(key: str) -> Location:
        return _location(ctx, job, v[key], key, roots)

    application, checkpoint, backup_root, output, stop_marker = _paths(ctx, job, v, loc)

    _check_nesting(ctx, job, checkpoint, backup_root, output, stop_marker)

    topics = fields.topics(ctx, f"{job}.topics", v["topics"])
    kind_, group = fields.job_kind(ctx, job, v)
    integration = fields.integration(ctx, job, v, kind_)
    shipped = {key: tuple(_shipped(ctx, f"{job}.{key}", v.get(key), roots)) for key in ("jars", "py_files", "files")}
    dstream_ck = loc("dstream_checkpoint") if v.get("dstream_checkpoint") not in (None, "") else None
    if dstream_ck is not None and (dstream_ck.overlaps(checkpoint) or dstream_ck.overlaps(backup_root)):
        ctx.fail(
            f"{job}.dstream_checkpoint",
            f"{dstream_ck.text!r} overlaps the checkpoint or backup_root",
            "give the DStream checkpoint its own folder",
        )

    sink = Sink(fields.choice(ctx, f"{job}.sink", v.get("sink", Sink.IDEMPOTENT.value), tuple(s.value for s in Sink)))
    if sink.keeps_batch_log and output is None:
        ctx.fail(f"{job}.output", "is required for the parquet sink", "set output to the sink folder")

    return JobSpec(
        name=name,
        application=application.text,
        application_args=fields.application_args(ctx, f"{job}.application_args", v.get("application_args"),
                                                 integration),
        main_class=fields.main_class(ctx, f"{job}.main_class", v.get("main_class"), application.text),
        integration=integration,
        packages=fields.packages(ctx, f"{job}.packages", v.get("packages")),
        spark_version=fields.spark_line(ctx, f"{job}.spark_version", v.get("spark_version")),
        **shipped,
        spark_conn_id=fields.conn_id(ctx, f"{job}.spark_conn_id", v.get("spark_conn_id", "spark_default")),
        spark_conf=fields.spark_conf(ctx, f"{job}.spark_conf", v.get("spark_conf")),
        deploy_mode=None
        if v.get("deploy_mode") is None
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
        compatibility_version=fields.compat(ctx, f"{job}.compatibility_version", v.get("compatibility_version", "1")),
        compatibility_probe=fields.boolean(ctx, f"{job}.compatibility_probe", v.get("compatibility_probe", False)),
        probe_timeout_s=fields.number(ctx, f"{job}.probe_timeout_s", v.get("probe_timeout_s"), 600.0, positive=True),
        starting_offsets_default=fields.starting_offsets(
            ctx, f"{job}.starting_offsets_default", v.get("starting_offsets_default", "earliest"), topics
        ),
        fail_on_data_loss=fields.boolean(ctx, f"{job}.fail_on_data_loss", v.get("fail_on_data_loss", True)),
        max_offsets_per_trigger=fields.integer(
            ctx, f"{job}.max_offsets_per_trigger", v.get("max_offsets_per_trigger"), minimum=1
        ),
        # Thresholds are positive when set (as status.StatusThresholds requires); unset = not checked.
        max_lag_records=fields.integer(ctx, f"{job}.max_lag_records", v.get("max_lag_records"), minimum=1),
        max_lag_seconds=fields.number(ctx, f"{job}.max_lag_seconds", v.get("max_lag_seconds"), None, positive=True),
        min_headroom_s=fields.number(ctx, f"{job}.min_headroom_s", v.get("min_headroom_s"), None, positive=True),
        stall_after_s=fields.number(ctx, f"{job}.stall_after_s", v.get("stall_after_s"), None, positive=True),
        mirror_group=fields.group(ctx, f"{job}.mirror_group", v.get("mirror_group")),
        health_gate=fields.health_gate(ctx, f"{job}.health_gate", v.get("health_gate")),
        kind=kind_,
        group=group,
        dstream_checkpoint=dstream_ck.text if dstream_ck else None,
    )


def _job_name(ctx: Context, index: int, raw: Any) -> str:
    if not isinstance(raw, dict):
        ctx.fail(f"jobs[{index}]", f"must be a mapping, got {kind(raw)}", "write '- name: ...' with the job's keys")
    name = raw.get("name")
    if name is None:
        ctx.fail(f"jobs[{index}]", "has no name", "add name: <lower-case id>")
    if not is_job_name(name):
        ctx.fail(
            f"jobs[{index}].name",
            f"{show(name)} is not a valid job name",
            f"use {NAME_PATTERN}: a lower-case letter, then up to 62 letters, digits, '_' or '-'",
        )
    return name


def _merged(ctx: Context, job: str, raw: dict, defaults: dict) -> dict[str, Any]:
    """The job's keys over ``defaults`` (``spark_conf``, ``backup_retention``, ``health_gate`` merged one level)."""
    merged: dict[str, Any] = dict(defaults)
    for key, value in raw.items():
        if (
            key in ("spark_conf", "backup_retention", "health_gate")
            and isinstance(value, dict)
            and isinstance(merged.get(key), dict)
        ):
            merged[key] = {**merged[key], **value}  # one level deep: a job adds to the default conf
        else:
            merged[key] = value
    missing = [k for k in REQUIRED_JOB_KEYS if merged.get(k) in (None, "", [])]
    if missing:
        ctx.fail(job, f"is missing {', '.join(missing)}", "set them in the job or under defaults")
    return merged


def _location(ctx: Context, job: str, value: Any, key: str, roots: list[Location]) -> Location:
    """The job's location ``key``: parsed, inside ``allowed_roots``, a checkpoint not a root itself."""
    where = f"{job}.{key}"
    found = locations.location(ctx, where, value)
    if not any(found.within(r) for r in roots):
        ctx.fail(
            where,
            f"{found.text!r} is outside allowed_roots ({', '.join(r.text for r in roots)})",
            "move it under one of the roots, or add a root for it",
        )
    if key == "checkpoint" and any(found.path == r.path and found.within(r) for r in roots):
        # Its siblings (<checkpoint>.stop, <checkpoint>.lifecycle.json) would land outside.
        ctx.fail(
            where,
            f"{found.text!r} is an allowed root itself",
            "use a folder below the root, e.g. <root>/checkpoints/<job>",
        )
    return found


def _paths(ctx: Context, job: str, v: dict[str, Any], loc: Callable[[str], Location]
           ) -> tuple[Location, Location, Location, Location | None, Location]:
    """The job's application, checkpoint, backup root, output and stop marker (default: beside the checkpoint)."""
    application = loc("application")
    if not application.path.lower().endswith(APPLICATION_SUFFIXES):
        ctx.fail(
            f"{job}.application",
            f"{application.text!r} is not a .py or .jar file",
            "point it at the job's .py file or .jar",
        )
    checkpoint = loc("checkpoint")
    backup_root = loc("backup_root")
    output = loc("output") if v.get("output") not in (None, "") else None
    if v.get("stop_marker") in (None, ""):
        # A plain path for local checkpoints even if written as file://: the reference job tests
        # the marker with os.path.exists on the driver.
        base = checkpoint.path if not checkpoint.scheme else checkpoint.text
        v["stop_marker"] = base + STOP_MARKER_SUFFIX
    stop_marker = loc("stop_marker")
    return application, checkpoint, backup_root, output, stop_marker


def _check_nesting(ctx: Context, job: str, checkpoint: Location, backup_root: Location,
                   output: Location | None, stop_marker: Location) -> None:
    """Refuse folders that let one operation destroy another's data (module docstring)."""
    if backup_root.within(checkpoint):
        ctx.fail(
            f"{job}.backup_root",
            f"{backup_root.text!r} is inside the checkpoint {checkpoint.text!r}",
            "a reset or restore of the checkpoint would destroy its own backups; put backups beside it",
        )
    if checkpoint.within(backup_root):
        ctx.fail(
            f"{job}.checkpoint",
            f"{checkpoint.text!r} is inside backup_root {backup_root.text!r}",
            "backup retention would prune the live checkpoint; use separate folders",
        )
    if output is not None and output.overlaps(checkpoint):
        ctx.fail(
            f"{job}.output",
            f"{output.text!r} and the checkpoint {checkpoint.text!r} overlap",
            "Spark owns the checkpoint folder and a reset deletes it; use separate folders",
        )
    if output is not None and output.overlaps(backup_root):
        ctx.fail(
            f"{job}.output", f"{output.text!r} and backup_root {backup_root.text!r} overlap", "use separate folders"
        )
    if stop_marker.within(checkpoint):
        ctx.fail(
            f"{job}.stop_marker",
            f"{stop_marker.text!r} is inside the checkpoint",
            f"leave it unset (default: <checkpoint>{STOP_MARKER_SUFFIX}) or put it beside the checkpoint",
        )


def _shipped(ctx: Context, where: str, value: Any, roots: list[Location]) -> list[str]:
    """Files the job ships with it (``--jars``, ``--py-files``, ``--files``): code it runs, so under
    ``allowed_roots`` like ``application``; ``local:`` (already on every node) is Spark's and passes."""
    out = []
    for i, item in enumerate(fields.str_list(ctx, where, value) if value is not None else []):
        if item.startswith("local:"):
            out.append(item)
            continue
        found = locations.location(ctx, f"{where}[{i}]", item)
        if not any(found.within(r) for r in roots):
            ctx.fail(f"{where}[{i}]", f"{found.text!r} is outside allowed_roots ({', '.join(r.text for r in roots)})",
                     "move it under one of the roots, add a root for it, or write local:/path for a node-local file")
        out.append(found.text)
    return out


def check_cross_job(ctx: Context, specs: list[JobSpec]) -> None:
    """Two jobs must never share a checkpoint (Spark would interleave two queries' logs), nor may
    one job's folders sit inside another's checkpoint (a reset of one would delete the other's)."""
    locs = {
        s.name: {
            k: locations.location(ctx, f"job {s.name!r}.{k}", getattr(s, k))
            for k in ("checkpoint", "backup_root", "output")
            if getattr(s, k)
        }
        for s in specs
    }
    for i, a in enumerate(specs):
        for b in specs[i + 1 :]:
            ca, cb = locs[a.name]["checkpoint"], locs[b.name]["checkpoint"]
            if ca.overlaps(cb):
                ctx.fail(
                    f"job {b.name!r}.checkpoint",
                    f"{cb.text!r} overlaps the checkpoint of job {a.name!r}",
                    "give every job its own checkpoint folder",
                )
            for x, y in ((a, b), (b, a)):
                cx = locs[x.name]["checkpoint"]
                for key in ("backup_root", "output"):
                    other = locs[y.name].get(key)
                    if other is not None and other.overlaps(cx):
                        ctx.fail(
                            f"job {y.name!r}.{key}",
                            f"{other.text!r} overlaps the checkpoint of job {x.name!r}",
                            "keep each job's folders apart from other jobs' checkpoints",
                        )
            if a.stop_marker == b.stop_marker:
                ctx.fail(
                    f"job {b.name!r}.stop_marker",
                    f"is also the stop marker of job {a.name!r}",
                    "stopping one job would stop both; give each its own marker (or leave it unset)",
                )
            if a.mirror_group and a.mirror_group == b.mirror_group:
                ctx.fail(
                    f"job {b.name!r}.mirror_group",
                    f"{b.mirror_group!r} is also job {a.name!r}'s",
                    "two jobs committing to one group make its lag meaningless; use one group per job",
                )
            oa, ob = locs[a.name].get("output"), locs[b.name].get("output")
            if oa and ob and (a.sink.keeps_batch_log or b.sink.keeps_batch_log) and oa.overlaps(ob):
                ctx.fail(
                    f"job {b.name!r}.output",
                    f"{ob.text!r} overlaps the output of job {a.name!r}",
                    "a parquet sink's _spark_metadata log belongs to one query; use separate folders",
                )
