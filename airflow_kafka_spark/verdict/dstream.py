"""The verdict for a DStream job's own checkpoint (``ssc.checkpoint(dir)``; docs/scenarios.md, DStream jobs).

A DStream checkpoint (``checkpoint-<time>`` files) is the Java-serialized ``DStreamGraph``: the
job's function objects with their classes' ``serialVersionUID``. After a recompile,
``StreamingContext.getOrCreate`` fails with ``InvalidClassException ... local class incompatible``
(tests/dstream/test_safe_path.py shows it with the real job), so the only safe moves are: the same
build restarts on it, or a new build starts without it, from the consumer group the job
``commitAsync``s to. The product cannot decompile a checkpoint, but it can know which build wrote
it: after a start, :func:`record_build` keeps the application jar's digest in the lifecycle record
beside the checkpoint, and the deploy compares the new jar's digest with it before anything starts.
(The product's submit of a DStream job calls it, runtime/dstream.record_submit.) Without a record
the verdict can only warn: the checkpoint's own Java-serialized, LZ4-compressed graph is not
decoded here.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.fs import list_files, open_location, read_bytes
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import default_job_name
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Finding, Verdict

BUILD_KEY = "dstream_checkpoint_build"
JAR_LIMIT = 1 << 30  # an application jar above 1 GiB is not a jar this product should hash in memory

@dataclass(frozen=True)
class DStreamCheckpoint:
    """What the product knows about a DStream checkpoint folder before a deploy."""

    location: str
    files: tuple[str, ...]  # checkpoint-<ms> (and .bk) names Spark would try, newest last
    recorded_build: str | None  # digest of the application jar that wrote it (lifecycle record)
    recorded_application: str | None


def jar_digest(application: str, storage_options: dict[str, Any] | None = None) -> str:
    """The first 16 hex digits of the application jar's SHA-256: the identity of one build."""
    data = read_bytes(open_location(application, storage_options, what="application jar"), limit=JAR_LIMIT)
    if data is None:
        raise UserError(f"application jar {application} does not exist; build or upload it before the deploy")
    return hashlib.sha256(data).hexdigest()[:16]


def read_state(location: str, storage_options: dict[str, Any] | None = None) -> DStreamCheckpoint:
    files = tuple(
        sorted(
            (
                n
                for n in list_files(open_location(location, storage_options, what="DStream checkpoint"))
                if n.startswith("checkpoint-") and "/" not in n
            ),
            key=_checkpoint_time,
        )
    )
    rec = LifecycleRecord.load(location, storage_options=storage_options)
    entry = (rec.extra.get(BUILD_KEY) if rec else None) or {}
    return DStreamCheckpoint(location, files, entry.get("build"), entry.get("application"))


def record_build(
    location: str, application: str, *, job_name: str | None = None, storage_options: dict[str, Any] | None = None
) -> str:
    """Record which build writes the DStream checkpoint at ``location`` (called by the submit)."""
    build = jar_digest(application, storage_options)
    set_recorded_build(location, build, application, job_name=job_name, storage_options=storage_options)
    return build


def set_recorded_build(
    location: str,
    build: str,
    application: str | None,
    *,
    job_name: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Write the build entry beside the DStream checkpoint (a rollback puts the old one back)."""
    rec = LifecycleRecord.load(location, storage_options=storage_options) or LifecycleRecord.create(
        job_name or default_job_name(location), location, storage_options=storage_options
    )
    rec.extra[BUILD_KEY] = {"build": build, "application": application, "recorded_at_ms": int(time.time() * 1000)}
    rec.save()


def evaluate_dstream_checkpoint(
    state: DStreamCheckpoint, deploy_build: str, *, moves_aside: bool = False
) -> list[Finding]:
    """Whether the deploy can start from the DStream checkpoint, or must (and does) move it aside."""
    where = state.location
    if not state.files:
        return [
            Finding(
                "DSTREAM_CHECKPOINT_NONE",
                INFO,
                numbers={"files": 0},
                message=f"no DStream checkpoint files in {where}: the job starts from its consumer group",
            )
        ]
    nums = {"files": len(state.files), "recorded_build": state.recorded_build, "deploy_build": deploy_build}
    if state.recorded_build == deploy_build:
        return [
            Finding(
                "DSTREAM_CHECKPOINT_SAME_BUILD",
                PASS,
                numbers=nums,
                message=f"{where} was written by build {deploy_build}, the one being deployed",
            )
        ]
    aside = "the plan moves it aside and the job starts from its consumer group's committed offsets"
    if state.recorded_build is None:
        return [
            Finding(
                "DSTREAM_CHECKPOINT_BUILD_UNKNOWN",
                INFO if moves_aside else WARN,
                numbers=nums,
                message=(
                    f"no build is recorded for the DStream checkpoint {where}: if the job's classes changed, "
                    "getOrCreate fails with InvalidClassException" + (f"; {aside}" if moves_aside else "")
                ),
                fix=""
                if moves_aside
                else "deploy with the checkpoint moved aside (start from the group), or record the build that wrote it",
            )
        ]
    return [
        Finding(
            "DSTREAM_CHECKPOINT_OTHER_BUILD",
            INFO if moves_aside else BLOCK,
            numbers=nums,
            message=(
                f"the DStream checkpoint {where} was written by build {state.recorded_build} "
                f"({state.recorded_application}), the deploy is build {deploy_build}: Spark cannot deserialize "
                "the old graph (InvalidClassException, 'Failed to read checkpoint from directory')"
                + (f"; {aside}" if moves_aside else "")
            ),
            fix=""
            if moves_aside
            else (
                "move the DStream checkpoint aside and start from the consumer group "
                "(the safe-restart DAG's new-build path), or deploy the build that wrote it"
            ),
        )
    ]


def dstream_checkpoint_verdict(
    location: str, application: str, *, moves_aside: bool = False, storage_options: dict[str, Any] | None = None
) -> Verdict:
    """The pre-deploy verdict for starting ``application`` on the DStream checkpoint at ``location``."""
    state = read_state(location, storage_options)
    findings = evaluate_dstream_checkpoint(state, jar_digest(application, storage_options), moves_aside=moves_aside)
    return Verdict.of(findings, source="dstream_checkpoint", subject=location)


def _checkpoint_time(name: str) -> tuple[int, str]:
    stem = name.removeprefix("checkpoint-").removesuffix(".bk")
    return (int(stem) if stem.isdigit() else -1, name)
