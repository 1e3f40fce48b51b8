"""The safe restart of a DStream job (registry ``kind: dstream``): its position is a consumer group
(``commitAsync``, one batch late) and, optionally, a DStream checkpoint only its own build can read.

The steps, in the order the safe path runs them (tests/dstream/test_safe_path.py drives them with
the real job through a recompile; the safe-restart DAG does not dispatch ``kind: dstream`` jobs to
them yet — its operators are the Structured Streaming ones):

1. :func:`plan_dstream_restart` before the stop: the group against Kafka (``verdict.group``) and the
   DStream checkpoint against the build being deployed (``verdict.dstream``). A BLOCK stops here.
2. the graceful stop (the job's stop marker), then :func:`plan_dstream_restart` again: only now is
   the one-batch trail final, and its ``records_to_replay`` is the count announced for the restart
   (duplicates with an append sink; none with an idempotent one).
3. :func:`backup_dstream`: the group's committed offsets and a copy of the DStream checkpoint.
4. :func:`move_checkpoint_aside` when the plan says so (another or an unknown build wrote it): the
   new build then starts from the group's committed offsets.
5. submit, and :func:`group_progress` as the health gate: the group's commits move past the offsets
   the restart started from.
6. :func:`rollback_dstream` if anything after the stop failed: the group's offsets and the DStream
   checkpoint both come back from the backup.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.fs import (
    Location,
    exists,
    list_files,
    move_dir,
    open_location,
    read_bytes,
    remove_tree,
    write_atomic,
)
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.verdict.dstream import (
    evaluate_dstream_checkpoint,
    jar_digest,
    read_state,
    set_recorded_build,
)
from airflow_kafka_spark.verdict.findings import BLOCK, Verdict
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate

OFFSETS_FILE = "group-offsets.json"


@dataclass(frozen=True)
class DStreamPlan:
    """What a restart of a DStream job will do, decided before anything changes."""

    job: str
    group: str
    group_verdict: Verdict
    checkpoint_verdict: Verdict | None
    move_checkpoint_aside: bool
    records_to_replay: int  # read again from the group on restart (commitAsync's trail)
    duplicates_expected: int  # what the sink will hold twice: the replay, or 0 when idempotent

    @property
    def blocked(self) -> bool:
        return self.group_verdict.severity == BLOCK or (
            self.checkpoint_verdict is not None and self.checkpoint_verdict.severity == BLOCK
        )


@dataclass(frozen=True)
class DStreamBackup:
    location: str
    group_offsets: PartitionOffsets
    checkpoint_copy: str | None
    recorded_build: str | None = None  # the build that wrote the checkpoint copy
    recorded_application: str | None = None


def _require_dstream(spec: JobSpec) -> str:
    if spec.kind is not JobKind.DSTREAM or not spec.group:
        raise UserError(
            f"job {spec.name!r} is not a DStream job (kind: dstream with a group); "
            "use the Structured Streaming steps for it"
        )
    return spec.group


def plan_dstream_restart(
    spec: JobSpec, application: str, *, kafka: KafkaView, storage_options: dict[str, Any] | None = None
) -> DStreamPlan:
    """The group verdict, the DStream checkpoint verdict, and whether the checkpoint must move aside."""
    group = _require_dstream(spec)
    policy = spec.starting_offsets_default if spec.starting_offsets_default in ("earliest", "latest") else None
    options = DeployOptions(topics=spec.topics, starting_offsets=policy, idempotent_sink=spec.replay_is_idempotent)
    group_verdict = validate(group_id=group, view=kafka, options=options)
    ck_verdict, aside = None, False
    if spec.dstream_checkpoint:
        state = read_state(spec.dstream_checkpoint, storage_options)
        build = jar_digest(application, storage_options)
        aside = bool(state.files) and state.recorded_build != build  # another or an unknown build
        ck_verdict = Verdict.of(
            evaluate_dstream_checkpoint(state, build, moves_aside=aside),
            source="dstream_checkpoint",
            subject=spec.dstream_checkpoint,
        )
    replay = int(group_verdict.summary.get("records_to_replay", 0))
    return DStreamPlan(
        spec.name, group, group_verdict, ck_verdict, aside, replay, 0 if spec.replay_is_idempotent else replay
    )


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def backup_dstream(
    spec: JobSpec, *, kafka: KafkaView, stamp: str | None = None, storage_options: dict[str, Any] | None = None
) -> DStreamBackup:
    """``<backup_root>/<job>/dstream-<stamp>/``: the group's offsets and a copy of the DStream checkpoint."""
    group = _require_dstream(spec)
    root = open_location(spec.backup_root, storage_options, what="backup root").child(
        spec.name, f"dstream-{stamp or _stamp()}"
    )
    if exists(root):
        raise UserError(f"backup {root.url} already exists; wait a second and retry")
    offsets = kafka.group_offsets(group, spec.topics)
    copy, build, application = None, None, None
    if spec.dstream_checkpoint:
        src = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
        if list_files(src):
            _copy_tree(src, root.child("checkpoint"))
            copy = root.child("checkpoint").url
            state = read_state(spec.dstream_checkpoint, storage_options)
            build, application = state.recorded_build, state.recorded_application
    doc = {
        "group": group,
        "offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())],
        "checkpoint": spec.dstream_checkpoint,
        "checkpoint_copy": copy,
        "recorded_build": build,
        "recorded_application": application,
    }
    write_atomic(root.child(OFFSETS_FILE), json.dumps(doc, indent=1).encode())
    return DStreamBackup(root.url, offsets, copy, build, application)


def load_backup(location: str, storage_options: dict[str, Any] | None = None) -> DStreamBackup:
    raw = read_bytes(open_location(location, storage_options, what="DStream backup").child(OFFSETS_FILE))
    if raw is None:
        raise UserError(f"{location} has no {OFFSETS_FILE}: not a DStream backup")
    doc = load_json(raw, what=f"{location}/{OFFSETS_FILE}")
    offsets = {TopicPartition(str(t), int(p)): int(o) for t, p, o in doc["offsets"]}
    return DStreamBackup(
        location, offsets, doc.get("checkpoint_copy"), doc.get("recorded_build"), doc.get("recorded_application")
    )


def move_checkpoint_aside(
    spec: JobSpec, *, stamp: str | None = None, storage_options: dict[str, Any] | None = None
) -> str | None:
    """Move the DStream checkpoint to ``<dstream_checkpoint>.aside-<stamp>``; the job then starts from its group."""
    if not spec.dstream_checkpoint:
        return None
    src = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
    if not exists(src):
        return None
    dst = src.sibling(f".aside-{stamp or _stamp()}")
    move_dir(src, dst)
    return dst.url


def group_progress(spec: JobSpec, start: PartitionOffsets, *, kafka: KafkaView) -> int:
    """Records the group has committed past ``start``: the health gate's evidence that the new build works."""
    now = kafka.group_offsets(_require_dstream(spec), spec.topics)
    return sum(max(0, o - start.get(tp, o)) for tp, o in now.items())


def rollback_dstream(
    spec: JobSpec, backup: DStreamBackup, *, kafka: KafkaView, storage_options: dict[str, Any] | None = None
) -> None:
    """Put the group's offsets and the DStream checkpoint back as the backup has them (job stopped)."""
    group = _require_dstream(spec)
    kafka.commit_group_offsets(group, backup.group_offsets)
    if spec.dstream_checkpoint and backup.checkpoint_copy:
        live = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
        if exists(live):
            remove_tree(live)
        _copy_tree(open_location(backup.checkpoint_copy, storage_options, what="DStream backup"), live)
        if backup.recorded_build:
            set_recorded_build(
                spec.dstream_checkpoint,
                backup.recorded_build,
                backup.recorded_application,
                storage_options=storage_options,
            )


def _copy_tree(src: Location, dst: Location) -> None:
    for rel in sorted(list_files(src)):
        data = read_bytes(src.child(rel))
        if data is not None:
            write_atomic(dst.child(rel), data)
