"""The safe restart of a DStream job (registry ``kind: dstream``): its position is a consumer group
(``commitAsync``, one batch late) and, optionally, a DStream checkpoint only its own build can read.

The steps, in the order the safe path runs them (the ``streaming_safe_restart`` DAG's operators hand
a DStream job to them through airflow_glue/kinds/dstream.py; tests/dstream/test_safe_restart_dag.py runs
the DAG and tests/dstream/test_safe_path.py these functions, both with the real job through a
recompile):

1. :func:`plan_dstream_restart` before the stop: the group against Kafka (``verdict.group``) and the
   DStream checkpoint against the build being deployed (``verdict.dstream``). A BLOCK stops here.
2. the graceful stop (the stop marker: the job polls it, integration ``reference``, or the agent stops
   the StreamingContext gracefully, integration ``agent``), then :func:`plan_dstream_restart` again:
   only now is the one-batch trail final, and its ``records_to_replay`` is the count announced for the
   restart (duplicates with an append sink; none with an idempotent one) — exact with the stopped
   driver's processed end (:func:`processed_end_of_last_driver`: the agent's report of every completed
   batch's Kafka ranges, else Spark's KafkaRDD log lines), else an upper bound.
3. ``ops.dstream_backup.backup_dstream``: the group's committed offsets and a copy of the DStream checkpoint.
4. :func:`move_checkpoint_aside` when the plan says so (another or an unknown build wrote it): the
   new build then starts from the group's committed offsets.
5. submit (:func:`job_arguments`, :func:`record_submit`: the build, the gate's baseline;
   :func:`checkpoint_for_start` refuses another build's checkpoint), and the health gate
   (:func:`group_sample`, :func:`judge_group_health`): the group's commits move on, lag not growing.
6. ``ops.dstream_backup.rollback_dstream`` if anything after the stop failed: the group's offsets and the DStream
   checkpoint both come back from the backup.
"""
from __future__ import annotations

import itertools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_kafka_spark import agent
from airflow_kafka_spark._util.fs import (
    exists,
    open_location,
    read_bytes,
)
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark._util.trees import move_dir
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import DSTREAM_BACKUP_OFFSETS
from airflow_kafka_spark.ops.dstream_backup import require_dstream, stamp_now
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.app_versions import submitted_app
from airflow_kafka_spark.verdict.dstream import (
    evaluate_dstream_checkpoint,
    jar_digest,
    read_state,
    record_build,
)
from airflow_kafka_spark.verdict.findings import BLOCK, Verdict
from airflow_kafka_spark.verdict.group import evaluate_group
from airflow_kafka_spark.verdict.options import DeployOptions

OFFSETS_FILE = DSTREAM_BACKUP_OFFSETS
SUBMIT_KEY = "dstream_submit"  # lifecycle record: the group's offsets when the driver was submitted
# Spark's own KafkaRDD log lines (spark-streaming-kafka-0-10, INFO): one per partition of every batch.
_COMPUTING = re.compile(r"KafkaRDD: Computing topic (?P<t>.+), partition (?P<p>\d+) offsets \d+ -> (?P<u>\d+)")
_EMPTY = re.compile(
    r"KafkaRDD: Beginning offset (?P<u>\d+) is the same as ending offset skipping (?P<t>\S+) (?P<p>\d+)"
)


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
    replay_exact: bool = False  # the job's processed end was known (else records_to_replay is an upper bound)
    group_offsets: PartitionOffsets | None = None  # where the group stood when the plan was made

    @property
    def blocked(self) -> bool:
        return self.group_verdict.severity == BLOCK or (
            self.checkpoint_verdict is not None and self.checkpoint_verdict.severity == BLOCK
        )




def plan_dstream_restart(
    spec: JobSpec,
    application: str,
    *,
    kafka: KafkaView,
    storage_options: dict[str, Any] | None = None,
    processed_end: PartitionOffsets | None = None,
    may_move_aside: bool = True,
) -> DStreamPlan:
    """The group verdict, the DStream checkpoint verdict, and whether the checkpoint must move aside.

    ``processed_end`` (:func:`processed_end_from_log` of the stopped driver) makes the announced replay
    exact; ``may_move_aside`` False (a ``keep`` restart) leaves a checkpoint of another build in place,
    which the verdict then BLOCKs.
    """
    group = require_dstream(spec)
    policy = spec.starting_offsets_default if spec.starting_offsets_default in ("earliest", "latest") else None
    options = DeployOptions(topics=spec.topics, starting_offsets=policy, idempotent_sink=spec.replay_is_idempotent)
    offsets = kafka.group_offsets(group, spec.topics)
    broker = kafka.broker_state(list(spec.topics), reference=offsets)
    group_verdict = evaluate_group(offsets, broker, options, group_id=group, processed_end=processed_end)
    ck_verdict, aside = None, False
    if spec.dstream_checkpoint:
        state = read_state(spec.dstream_checkpoint, storage_options)
        build = jar_digest(application, storage_options)
        aside = may_move_aside and bool(state.files) and state.recorded_build != build  # another or unknown build
        ck_verdict = Verdict.of(
            evaluate_dstream_checkpoint(state, build, moves_aside=aside),
            source="dstream_checkpoint",
            subject=spec.dstream_checkpoint,
        )
    replay = int(group_verdict.summary.get("records_to_replay", 0))
    exact = processed_end is not None and all(tp in processed_end for tp in offsets)
    return DStreamPlan(
        spec.name,
        group,
        group_verdict,
        ck_verdict,
        aside,
        replay,
        0 if spec.replay_is_idempotent else replay,
        exact,
        offsets,
    )


def processed_end_from_log(text: str) -> PartitionOffsets:
    """Where the job's processed ranges ended, per partition, from Spark's KafkaRDD INFO lines.

    ``commitAsync`` commits a batch's ranges only during the next batch, so after a stop the group
    trails the job by its last batch; the driver log (local mode: executors log there too) names
    every range Spark computed. Empty when the log has none (another log level, a cluster driver).
    """
    out: dict[TopicPartition, int] = {}
    for line in text.splitlines():
        m = _COMPUTING.search(line) or _EMPTY.search(line)
        if m:
            tp = TopicPartition(m["t"], int(m["p"]))
            out[tp] = max(out.get(tp, 0), int(m["u"]))
    return out


def processed_end_from_agent_report(doc: Mapping[str, Any]) -> PartitionOffsets:
    """Where the job's completed batches ended, per partition, from the agent's report (``dstream.processed_end``).

    The agent reads each batch's offset ranges from Spark's own ``BatchInfo`` (the direct stream's
    input metadata) when the batch completes, so this is what the job processed, in any deploy mode
    and at any log level; the group's commits trail it by the last batch (``commitAsync``).
    """
    end = ((doc.get("dstream") or {}).get("processed_end") or {}) if isinstance(doc, Mapping) else {}
    return {TopicPartition(str(t), int(p)): int(o) for t, parts in end.items() for p, o in (parts or {}).items()}


def agent_report_of_last_driver(record: LifecycleRecord | None) -> dict[str, Any] | None:
    """The agent's report of the last submitted driver (integration ``agent``), or None.

    A report older than that submit (another driver's, left beside the checkpoint) is not this
    driver's and is ignored.
    """
    sub = submitted_app(record) or {}
    if record is None or (sub.get("app") or {}).get("integration") != "agent":
        return None
    try:
        raw = read_bytes(open_location(agent.report_path(record.checkpoint_location), what="agent report"))
        doc = load_json(raw, what="agent report") if raw is not None else None
    except (OSError, UserError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    started, submitted = str(doc.get("started_at") or ""), sub.get("submitted_at_ms")
    if submitted and started:
        try:
            started_ms = datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000
        except ValueError:
            return None
        if started_ms < int(submitted) - 60_000:   # a minute of clock skew between worker and driver
            return None
    return doc


def processed_end_of_last_driver(record: LifecycleRecord | None) -> PartitionOffsets | None:
    """The last submitted driver's processed end: the agent's report when the job runs with it, else
    :func:`processed_end_from_log` of its local log; None when neither names a range."""
    doc = agent_report_of_last_driver(record)
    if doc is not None:
        found = processed_end_from_agent_report(doc)
        if found:
            return found
    path = (submitted_app(record) or {}).get("log_path")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            found = processed_end_from_log(fh.read())
    except OSError:
        return None
    return found or None


def checkpoint_for_start(spec: JobSpec, *, previous: bool, storage_options: dict[str, Any] | None = None) -> str | None:
    """Before a submit: never start a build on a DStream checkpoint another build wrote (it fails to deserialize).

    A rollback (``previous``) moves such a checkpoint aside — the previous build then starts from the
    group, losing nothing; any other submit is refused: the safe restart moves it aside after its backup.
    Returns where it was moved, if it was.
    """
    if not spec.dstream_checkpoint:
        return None
    state = read_state(spec.dstream_checkpoint, storage_options)
    if not state.files or state.recorded_build == jar_digest(spec.application, storage_options):
        return None
    if previous:
        return move_checkpoint_aside(spec, storage_options=storage_options)
    raise UserError(
        f"DSTREAM_CHECKPOINT_OTHER_BUILD: job {spec.name}: the DStream checkpoint {spec.dstream_checkpoint} was "
        f"written by {'build ' + state.recorded_build if state.recorded_build else 'an unknown build'}, not by "
        f"{spec.application}; Spark cannot deserialize it: restart through the streaming_safe_restart DAG "
        "(mode auto moves it aside and starts from the group)"
    )


def job_arguments(spec: JobSpec, *, bootstrap_servers: str, kafka_options: Sequence[str] = (),
                  own: Sequence[str] | None = None) -> list[str]:
    """The DStream job contract's flags (the reference job's), then the job's own arguments
    (``own``, placeholders filled; ``application_args`` as written when not given).

    The position is the group (and the job's own ``ssc.checkpoint``), never a Structured Streaming
    checkpoint or starting-offsets file: the new build starts where the group's commits are.
    """
    group = require_dstream(spec)
    if not spec.output:
        raise UserError(f"job {spec.name}: a DStream job needs output (its sink folder) in the registry")
    if kafka_options:
        raise UserError(
            f"job {spec.name}: the Kafka connection {spec.kafka_conn_id!r} sets security options, which the "
            "DStream job contract (--bootstrap/--topic/--group) does not pass yet; put them in the job's own "
            "application_args"
        )
    args = ["--bootstrap", bootstrap_servers, "--topic", ",".join(spec.topics), "--group", group]
    args += ["--sink", spec.output, "--stop-marker", spec.stop_marker]
    if spec.starting_offsets_default in ("earliest", "latest"):
        args += ["--auto-offset-reset", spec.starting_offsets_default]
    if spec.dstream_checkpoint:
        args += ["--checkpoint", spec.dstream_checkpoint]
    return [*args, *(spec.application_args if own is None else own)]


def record_submit(
    spec: JobSpec, record: LifecycleRecord, *, kafka: KafkaView, storage_options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """At submit: the build that will write the DStream checkpoint, and the group's offsets (the gate's baseline).

    Written into ``record`` (the job's lifecycle record, saved by the caller).
    """
    group, unknown = require_dstream(spec), None
    try:
        offsets = kafka.group_offsets(group, spec.topics)
    except UserError as exc:  # e.g. a fresh broker still setting up the group's coordinator
        offsets, unknown = {}, str(exc)  # the gate then counts every commit as progress
    build = None
    if spec.dstream_checkpoint:
        build = record_build(
            spec.dstream_checkpoint, spec.application, job_name=spec.name, storage_options=storage_options
        )
    entry = {
        "group_offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(offsets.items())],
        "build": build,
        "at_ms": int(time.time() * 1000),
        "offsets_unknown": unknown,
    }
    record.extra[SUBMIT_KEY] = entry
    return entry


def submitted_offsets(record: LifecycleRecord | None) -> PartitionOffsets:
    """The group's offsets when the last driver was submitted (see :func:`record_submit`)."""
    entry = (record.extra.get(SUBMIT_KEY) if record is not None else None) or {}
    return {TopicPartition(str(t), int(p)): int(o) for t, p, o in entry.get("group_offsets") or ()}


@dataclass(frozen=True)
class GroupSample:
    """One look at the group under the new driver: records committed past the baseline, and the lag."""

    at_s: float
    committed: int
    lag: int


def group_sample(spec: JobSpec, baseline: PartitionOffsets, *, kafka: KafkaView, at_s: float) -> GroupSample:
    now = kafka.group_offsets(require_dstream(spec), spec.topics)
    ends = kafka.latest_offsets(list(now))
    committed = sum(max(0, o - baseline.get(tp, o)) for tp, o in now.items())
    return GroupSample(at_s, committed, sum(max(0, ends.get(tp, o) - o) for tp, o in now.items()))


def judge_group_health(
    samples: Sequence[GroupSample], *, min_batches: int, alive: bool, alive_for_s: float, idle_pass_s: float | None
) -> tuple[str, str]:
    """``(state, reason)``: healthy once the group's commits advanced on ``min_batches`` looks and the lag
    is not growing (three rising samples); failed when the driver is gone; idle-healthy when nothing is
    left to read for ``idle_pass_s``. commitAsync commits a batch during the next one, so an advance
    proves a batch both ran and was followed by another.
    """
    if not alive:
        return "failed", "the driver is gone before the group's commits moved on"
    advances = sum(1 for a, b in itertools.pairwise(samples) if b.committed > a.committed)
    advances += 1 if samples and samples[0].committed > 0 else 0
    last = samples[-1] if samples else None
    growing = len(samples) >= 3 and samples[-1].lag > samples[-2].lag > samples[-3].lag
    if last is not None and advances >= min_batches and not growing:
        return "healthy", f"the group committed {last.committed:,} records past the restart, lag {last.lag:,}"
    if (
        last is not None
        and last.committed == 0
        and last.lag == 0
        and idle_pass_s is not None
        and alive_for_s >= idle_pass_s
    ):
        return "healthy", f"idle: nothing to read for {alive_for_s:.0f}s (the new build's first batch is unproven)"
    lag = f", lag {last.lag:,}{' and growing' if growing else ''}" if last else ""
    return "waiting", f"{advances}/{min_batches} advances of the group's commits{lag}"


def move_checkpoint_aside(
    spec: JobSpec, *, stamp: str | None = None, storage_options: dict[str, Any] | None = None
) -> str | None:
    """Move the DStream checkpoint to ``<dstream_checkpoint>.aside-<stamp>``; the job then starts from its group."""
    if not spec.dstream_checkpoint:
        return None
    src = open_location(spec.dstream_checkpoint, storage_options, what="DStream checkpoint")
    if not exists(src):
        return None
    dst = src.sibling(f".aside-{stamp or stamp_now()}")
    move_dir(src, dst)
    return dst.url


def group_progress(spec: JobSpec, start: PartitionOffsets, *, kafka: KafkaView) -> int:
    """Records the group has committed past ``start``: the health gate's evidence that the new build works."""
    now = kafka.group_offsets(require_dstream(spec), spec.topics)
    return sum(max(0, o - start.get(tp, o)) for tp, o in now.items())
