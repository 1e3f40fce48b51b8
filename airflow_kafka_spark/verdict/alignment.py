"""The pre-deploy verdict: a pure function of what the checkpoint, Kafka and the lifecycle record say.

Why a pure function: the same judgement serves the CLI, the Airflow operator, the sensor and the
audit DAG, and it has to be tested against hundreds of generated states without a broker. So
:func:`evaluate` does no I/O at all; :mod:`airflow_kafka_spark.verdict.validate` gathers the inputs
(checkpoint files, broker offsets, record timestamps, the lifecycle record) and calls it.

Vocabulary (failure-scenarios.md §0): every :class:`Finding` has a severity PASS < INFO < WARN <
BLOCK. The :class:`Verdict` is the worst one, except that INFO never raises a verdict above PASS
(INFO is "worth knowing", not "worth a warning"). Exit codes: 0 for PASS/WARN, 3 for BLOCK.

What is checked, per topic-partition (failure-scenarios.md §1.3), with ``C`` the position Spark
resumes from (end offsets of the last committed batch), ``P`` the end of a pending (planned but
uncommitted) batch, ``LS``/``LE`` the broker's log start/end:

* ``LS ≤ C`` (else records are gone: ``OFFSET_BELOW_LOG_START``, ``records_lost = LS − C``),
* ``C ≤ LE`` (else the log went backwards: ``OFFSET_AHEAD_OF_LOG_END``),
* ``LS ≤ C ≤ P ≤ LE`` for a pending batch (else its replay is not faithful),
* partitions of ``C`` ⊆ current partitions of subscribed topics (``PARTITIONS_GONE``), and new
  partitions start at 0 (``NEW_PARTITION`` / ``NEW_PARTITION_TRUNCATED``),
* identity: cluster id and topic ids equal the lifecycle record's, or, without a record, the record
  just below ``C`` is not newer than the batch that read it (``TOPIC_RESET``, marked inferred).

Offsets are not dense (transaction markers, compaction, S25), so nothing here counts records from
gaps: a record count is always a difference of offsets and is labelled as an upper bound where
markers or compaction may make the true number lower. A data-loss BLOCK never depends on
``failOnDataLoss`` (S31): that option only decides whether Spark fails or skips silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartition,
    parse_offsets_json,
    to_offsets_json,
)

if TYPE_CHECKING:  # imported for types only: this module must stay free of Kafka/fsspec imports
    from airflow_kafka_spark.checkpoint.reader import CheckpointState
    from airflow_kafka_spark.kafka.view import BrokerState
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord

# --------------------------------------------------------------------------------------------------
# severities, findings, verdicts
# --------------------------------------------------------------------------------------------------

_RANK = {"PASS": 0, "INFO": 1, "WARN": 2, "BLOCK": 3}


class Severity(StrEnum):
    """PASS < INFO < WARN < BLOCK. A ``str`` so that ``verdict.severity == "BLOCK"`` reads naturally
    and JSON needs no conversion; ordering is by gravity, not alphabet."""

    PASS = "PASS"
    INFO = "INFO"
    WARN = "WARN"
    BLOCK = "BLOCK"

    @property
    def rank(self) -> int:
        return _RANK[self.value]

    def _other(self, other: object) -> int:
        if isinstance(other, str) and other in _RANK:
            return _RANK[other]
        raise TypeError(f"cannot compare Severity with {other!r}")

    def __lt__(self, other: object) -> bool:
        return self.rank < self._other(other)

    def __le__(self, other: object) -> bool:
        return self.rank <= self._other(other)

    def __gt__(self, other: object) -> bool:
        return self.rank > self._other(other)

    def __ge__(self, other: object) -> bool:
        return self.rank >= self._other(other)


PASS, INFO, WARN, BLOCK = Severity.PASS, Severity.INFO, Severity.WARN, Severity.BLOCK

EXIT_OK = 0
EXIT_BLOCK = 3

#: Every finding code this module emits: default severity and what it means. The default is the
#: usual severity; some codes vary with context (see each entry).
CODES: dict[str, tuple[Severity, str]] = {
    "OK": (PASS, "partition aligned: log start ≤ checkpoint offset ≤ log end"),
    "OFFSET_BELOW_LOG_START": (BLOCK, "records the query has not read were deleted (retention, "
                                      "delete-records) (S01)"),
    "OFFSET_AHEAD_OF_LOG_END": (BLOCK, "the checkpoint is past the log end: topic recreated/truncated or "
                                       "another cluster (S02)"),
    "TOPIC_RESET": (BLOCK, "the topic was deleted and recreated: offsets point into another log (S03); "
                           "via topic id, or inferred from record timestamps without a lifecycle record"),
    "PARTITIONS_GONE": (BLOCK, "checkpoint partitions that no longer exist or are no longer subscribed "
                               "(S05, S13)"),
    "OFFSETS_UNAVAILABLE": (BLOCK, "the broker returned no offsets for a partition: nothing can be verified"),
    "NEW_PARTITION": (INFO, "a partition unknown to the checkpoint, read from offset 0 (S04); WARN for a "
                            "consumer group whose reset policy skips its records"),
    "NEW_PARTITION_TRUNCATED": (BLOCK, "a new partition whose log no longer starts at 0: Spark fails or "
                                       "skips its first records (S04)"),
    "NEW_TOPIC_FROM_EARLIEST": (WARN, "a newly subscribed topic is read from earliest (S13)"),
    "TOPIC_NOT_FOUND": (WARN, "a subscribed topic does not exist on the cluster"),
    "CLUSTER_MISMATCH": (BLOCK, "the Kafka cluster id differs from the lifecycle record (S06)"),
    "PENDING_BATCH_REPLAY": (WARN, "a planned, uncommitted batch is re-run with its recorded range (S07); "
                                   "INFO for an idempotent sink; BLOCK if the range is no longer readable"),
    "CHECKPOINT_CORRUPT": (BLOCK, "a checkpoint file Spark reads is damaged, or the logs contradict "
                                  "(S08, S09)"),
    "MISSING_QUERY_ID": (BLOCK, "metadata (query id) missing while batches exist (S10)"),
    "UNSUPPORTED_LOG_VERSION": (BLOCK, "a log file in a format newer than understood (S27)"),
    "STRAY_TEMP_FILE": (WARN, "leftover temp file of an interrupted write; Spark ignores it (S08)"),
    "LOG_GAP": (WARN, "a hole in retained history Spark does not need (history/backups affected)"),
    "INITIAL_OFFSETS_UNREADABLE": (WARN, "sources/<n>/0 damaged; only matters if offsets/ is wiped"),
    "CONF_PINNED_BY_CHECKPOINT": (WARN, "a deploy conf the checkpoint pins; Spark silently keeps the old "
                                        "value (S11)"),
    "STARTING_OFFSETS_IGNORED": (WARN, "startingOffsets only apply to a new query; the checkpoint wins "
                                       "(S22)"),
    "STARTING_OFFSETS_INCOMPLETE": (BLOCK, "explicit startingOffsets must list exactly the subscribed "
                                           "partitions"),
    "FAIL_ON_DATA_LOSS_DISABLED": (WARN, "failOnDataLoss=false turns data loss into silent skips (S31)"),
    "BACKLOG": (INFO, "records waiting to be read; WARN when one unlimited first batch would be huge (S28)"),
    "NO_CHECKPOINT": (INFO, "a new query: startingOffsets (or a reset's carried-over offsets) apply (S21); "
                            "WARN when the deploy did not say it expects a new checkpoint"),
    "CHECKPOINT_NOT_EMPTY": (BLOCK, "the deploy expects a new checkpoint but this one has batches "
                                    "(S21, S29); WARN for state files without batches"),
    "TRANSIENT_REGRESSION": (WARN, "the broker reported a regressed log end that healed on re-sampling "
                                   "(S26)"),
    "CHECKPOINT_NEWER_THAN_RUNTIME": (BLOCK, "the checkpoint was written by a newer Spark than the deploy "
                                             "runs (S27); inferred from log versions or the lifecycle "
                                             "record"),
    "SPARK_UPGRADE": (WARN, "the deploy runs a newer Spark than last wrote the checkpoint: back up "
                            "first (S27)"),
    "ALREADY_RUNNING": (BLOCK, "another run holds a live lease on this job (S16)"),
    "NO_GROUP_OFFSETS": (INFO, "the consumer group has no committed offsets: auto.offset.reset decides"),
    "GROUP_COMMIT_TRAILS_ONE_BATCH": (WARN, "commitAsync commits one batch late: the last processed batch "
                                            "replays (user story 1)"),
    # added by the I/O flow (validate.py), not by evaluate():
    "IDENTITY_UNVERIFIED": (INFO, "partitions whose topic identity could not be checked (no lifecycle "
                                  "record and no readable record below the checkpoint, or time budget)"),
    "RECORD_NOT_WRITTEN": (INFO, "the cluster/topic identity could not be saved to the lifecycle record"),
}

Number = int | float | str | None


@dataclass(frozen=True)
class Finding:
    """One observation: a stable ``code``, its ``severity``, where (``topic``/``partition``, None for
    query-level findings), the ``numbers`` behind it, one ``message`` line and one ``fix`` line.

    ``inferred`` marks findings that rest on a heuristic or on version facts not confirmed against
    Spark (record timestamps, log-version support tables): still acted on, but said so.
    """

    code: str
    severity: Severity
    topic: str | None = None
    partition: int | None = None
    numbers: Mapping[str, Number] = field(default_factory=dict)
    message: str = ""
    fix: str = ""
    inferred: bool = False

    @property
    def tp(self) -> TopicPartition | None:
        if self.topic is None or self.partition is None:
            return None
        return TopicPartition(self.topic, self.partition)

    @property
    def where(self) -> str:
        """``t-0``, ``t`` or ``-`` (query level): how tables and messages name the place."""
        if self.topic is None:
            return "-"
        return self.topic if self.partition is None else f"{self.topic}-{self.partition}"

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "severity": str(self.severity), "topic": self.topic,
                "partition": self.partition, "numbers": dict(self.numbers), "message": self.message,
                "fix": self.fix, "inferred": self.inferred}


def verdict_severity(findings: Iterable[Finding]) -> Severity:
    """The worst severity, with INFO folded into PASS (a verdict is PASS, WARN or BLOCK)."""
    worst = max((f.severity for f in findings), default=PASS)
    return PASS if worst == INFO else worst


@dataclass(frozen=True)
class Verdict:
    """All findings and their worst severity; ``exit_code`` is what a command line returns."""

    severity: Severity
    findings: tuple[Finding, ...]
    source: str = "checkpoint"          # "checkpoint" or "group"
    subject: str | None = None          # checkpoint location or group id
    summary: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, findings: Iterable[Finding], *, source: str = "checkpoint",
           subject: str | None = None) -> Verdict:
        ordered = _ordered(findings)
        counts = {s.value: 0 for s in Severity}
        for f in ordered:
            counts[f.severity.value] += 1
        summary: dict[str, int] = dict(counts)
        summary["partitions"] = len({f.tp for f in ordered if f.tp is not None})
        for key in ("records_lost", "records_to_replay"):
            summary[key] = sum(_int(f.numbers.get(key)) for f in ordered)
        summary["backlog"] = sum(_int(f.numbers.get("backlog")) for f in ordered if f.code == "BACKLOG")
        return cls(severity=verdict_severity(ordered), findings=ordered, source=source, subject=subject,
                   summary=summary)

    @property
    def exit_code(self) -> int:
        return EXIT_BLOCK if self.severity == BLOCK else EXIT_OK

    @property
    def codes(self) -> set[str]:
        return {f.code for f in self.findings}

    def by_code(self, code: str) -> list[Finding]:
        return [f for f in self.findings if f.code == code]

    @property
    def worst(self) -> list[Finding]:
        """The findings that decide the verdict (all BLOCKs, or all WARNs, or nothing for PASS)."""
        if self.severity == PASS:
            return []
        return [f for f in self.findings if f.severity == self.severity]

    @property
    def fix(self) -> str:
        """The one fix to print last: the first deciding finding's (others are in the table)."""
        worst = self.worst
        return worst[0].fix if worst else ""

    @property
    def headline(self) -> str:
        """One line: verdict, the deciding codes with places, and the totals that matter."""
        worst = self.worst
        parts = [f"verdict: {self.severity}"]
        if worst:
            seen: dict[str, list[str]] = {}
            for f in worst:
                seen.setdefault(f.code, [])
                if f.topic is not None:
                    seen[f.code].append(f.where)
            items = []
            for code, places in seen.items():
                shown = ", ".join(places[:3]) + (f" +{len(places) - 3}" if len(places) > 3 else "")
                items.append(f"{code} ({shown})" if places else code)
            parts.append("; ".join(items))
        totals = [f"{k.replace('_', ' ')} {self.summary.get(k, 0):,}"
                  for k in ("records_lost", "records_to_replay", "backlog") if self.summary.get(k)]
        if totals:
            parts.append(", ".join(totals))
        return " — ".join(parts)

    def with_findings(self, extra: Iterable[Finding]) -> Verdict:
        """A new verdict with ``extra`` findings added (e.g. the flow could not write the record)."""
        return Verdict.of([*self.findings, *extra], source=self.source, subject=self.subject)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": str(self.severity), "exit_code": self.exit_code, "source": self.source,
                "subject": self.subject, "summary": dict(self.summary), "headline": self.headline,
                "fix": self.fix, "findings": [f.to_dict() for f in self.findings]}


def _ordered(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Query-level findings first (worst first, else as emitted), then partitions in order."""
    items = list(findings)
    query = [f for f in items if f.topic is None]
    placed = [f for f in items if f.topic is not None]
    query.sort(key=lambda f: -f.severity.rank)
    placed.sort(key=lambda f: (f.topic or "", -1 if f.partition is None else f.partition, -f.severity.rank))
    return tuple(query + placed)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --------------------------------------------------------------------------------------------------
# deploy options
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeployOptions:
    """What the deploy will run with; everything the checkpoint cannot tell.

    * ``topics``: the ``subscribe`` list of the new code (None = same as the checkpoint's).
    * ``fail_on_data_loss``: the source option; False only adds a warning, it never lifts a BLOCK.
    * ``starting_offsets``: ``earliest``, ``latest`` or Spark offsets JSON, as set in the job (None =
      not set; Spark's default for a new streaming query is ``latest``).
    * ``conf``: Spark confs of the deploy (``spark.sql.shuffle.partitions`` ...), diffed against the
      confs the checkpoint pins.
    * ``expect_new_checkpoint``: the deploy means to start a new query (after a reset).
    * ``target_spark_version``: the Spark the deploy runs, for log-format compatibility.
    * ``idempotent_sink``: True/False if known; decides whether a replay means duplicates.
    * ``strict``: warnings block (WARN findings become BLOCK).
    * ``max_offsets_per_trigger``: the rate limit, to size the first batches of a backlog.
    * ``backlog_warn_records``: an unlimited first batch at least this large is a WARN.
    * ``clock_skew_ms``: tolerance of the record-timestamp identity heuristic.
    * ``owner``: who deploys (a lease held by this owner is not "someone else").
    * ``now_ms``: the clock for lease expiry (default: when the broker was sampled), so evaluation
      stays a pure function.
    """

    topics: tuple[str, ...] | None = None
    fail_on_data_loss: bool = True
    starting_offsets: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)
    expect_new_checkpoint: bool = False
    target_spark_version: str | None = None
    idempotent_sink: bool | None = None
    strict: bool = False
    max_offsets_per_trigger: int | None = None
    backlog_warn_records: int = 100_000
    clock_skew_ms: int = 1_000
    owner: str | None = None
    now_ms: int | None = None

    def __post_init__(self) -> None:
        if self.topics is not None:
            raw = [self.topics] if isinstance(self.topics, str) else list(self.topics)
            names = [t.strip() for item in raw for t in str(item).split(",") if t.strip()]
            object.__setattr__(self, "topics", tuple(dict.fromkeys(names)) or None)
        if self.starting_offsets is not None:
            text = str(self.starting_offsets).strip()
            if text.lower() in ("earliest", "latest"):
                text = text.lower()
            else:
                parse_offsets_json(text, what="startingOffsets")
            object.__setattr__(self, "starting_offsets", text)
        object.__setattr__(self, "conf", {str(k): str(v) for k, v in dict(self.conf or {}).items()})
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise UserError(f"maxOffsetsPerTrigger must be positive, got {self.max_offsets_per_trigger}")
        if self.clock_skew_ms < 0:
            raise UserError(f"clock skew tolerance must not be negative, got {self.clock_skew_ms} ms")
        if self.target_spark_version is not None and _version(self.target_spark_version) is None:
            raise UserError(f"Spark version {self.target_spark_version!r} is not like 4.0.0")

    @property
    def explicit_starting_offsets(self) -> PartitionOffsets | None:
        """``starting_offsets`` as offsets when it is JSON, else None."""
        if self.starting_offsets in (None, "earliest", "latest"):
            return None
        return parse_offsets_json(self.starting_offsets, what="startingOffsets")


# --------------------------------------------------------------------------------------------------
# the checkpoint's position
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Position:
    """Where a restart reads from: ``start`` (Spark's start offsets) and, for a pending batch,
    the recorded end ``pending`` that the re-run reads up to (failure-scenarios.md §1.2)."""

    start: PartitionOffsets
    label: str                        # where ``start`` comes from, for messages
    known: bool                       # False when the files that hold it are unreadable
    pending_batch: int | None = None
    pending: PartitionOffsets = field(default_factory=dict)
    reference_ts: int | None = None   # newest batchTimestampMs: records below ``start`` are older
    reference_batch: int | None = None


def _merged(offsets_by_source: Mapping[str, PartitionOffsets]) -> PartitionOffsets:
    out: PartitionOffsets = {}
    for offs in offsets_by_source.values():
        out.update(offs or {})
    return out


def _position(cp: CheckpointState) -> _Position | None:
    """The restart position per §2.4 of the format reference, or None for a new query."""
    if not cp.exists:
        return None
    initial = _merged(cp.initial_offsets)
    if not cp.offset_batch_ids:
        if initial:  # sources/<n>/0 without batches: Spark's initialOffset reads it, not startingOffsets
            return _Position(start=initial, label="sources/<n>/0, the resolved starting offsets", known=True)
        return None
    planned, committed = cp.latest_planned, cp.latest_committed
    batches = [b for b in (planned, committed) if b is not None and b.batch_timestamp_ms is not None]
    newest = max(batches, key=lambda b: b.batch_timestamp_ms or 0, default=None)
    ref = {"reference_ts": newest.batch_timestamp_ms if newest else None,
           "reference_batch": newest.batch_id if newest else None}
    pending = cp.pending_batch
    if pending is None:
        if committed is None:
            return _Position(start={}, label="unreadable offsets", known=False, **ref)
        return _Position(start=committed.kafka_offsets, label=f"committed offsets/{committed.batch_id}",
                         known=True, **ref)
    last = pending.batch_id
    pend = {"pending_batch": last, "pending": pending.kafka_offsets}
    if committed is not None and committed.batch_id == last - 1:
        return _Position(start=committed.kafka_offsets, label=f"committed offsets/{last - 1}", known=True,
                         **pend, **ref)
    previous = next((b for b in cp.history if b.batch_id == last - 1), None)
    if previous is not None:
        return _Position(start=previous.kafka_offsets, label=f"offsets/{last - 1}", known=True, **pend, **ref)
    if last == 0:
        return _Position(start=initial, label="sources/<n>/0, the start of batch 0", known=bool(initial),
                         **pend, **ref)
    return _Position(start={}, label=f"unreadable offsets/{last - 1}", known=False, **pend, **ref)


# --------------------------------------------------------------------------------------------------
# public entry points
# --------------------------------------------------------------------------------------------------

#: A record-timestamp probe for the identity heuristic: ``(offset, timestamp_ms)`` of the last
#: readable record below ``C`` (KafkaView.last_record_before), or None if nothing is readable.
RecordProbe = tuple[int, int | None] | None


def resume_offsets(checkpoint: CheckpointState) -> PartitionOffsets:
    """Per partition the highest offset a restart will read up to (the committed position, or a pending
    batch's end): the reference below which a broker's log end counts as a regression (S26)."""
    pos = _position(checkpoint)
    if pos is None:
        return {}
    out = dict(pos.start)
    for tp, end in pos.pending.items():
        out[tp] = max(end, out.get(tp, end))
    return out


def subscribed_topics(checkpoint: CheckpointState, record: LifecycleRecord | None,
                      options: DeployOptions) -> list[str]:
    """Every topic the verdict needs from the broker: the checkpoint's, the deploy's, a reset's."""
    names: dict[str, None] = {}
    pos = _position(checkpoint)
    if pos is not None:
        names.update(dict.fromkeys(sorted({tp.topic for tp in (*pos.start, *pos.pending)})))
    names.update(dict.fromkeys(options.topics or ()))
    for tp in (options.explicit_starting_offsets or {}):
        names[tp.topic] = None
    nso = getattr(record, "next_starting_offsets", None)
    if nso:
        names.update(dict.fromkeys(sorted({tp.topic for tp in parse_offsets_json(nso)})))
    return list(names)


def identity_probes(checkpoint: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
                    options: DeployOptions) -> dict[TopicPartition, int]:
    """Partitions whose identity must be checked by record timestamps, and the offset ``C`` to probe
    below: only where the lifecycle record cannot settle it (no record, or no topic id for that topic)
    and where a record below ``C`` can exist (``LS < C ≤ LE``). :func:`evaluate` expects the probes'
    answers in ``timestamps``."""
    pos = _position(checkpoint)
    if pos is None or not pos.known or pos.reference_ts is None or _cluster_mismatch(record, broker):
        return {}
    out: dict[TopicPartition, int] = {}
    for tp, c in sorted(pos.start.items()):
        info = broker.topics.get(tp.topic)
        if info is None or tp.partition >= info.partitions or _recorded_topic_id(record, tp.topic, info):
            continue
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is not None and le is not None and ls < c <= le:
            out[tp] = c
    return out


def evaluate(checkpoint: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
             options: DeployOptions, timestamps: Mapping[TopicPartition, RecordProbe] | None = None
             ) -> Verdict:
    """Judge whether starting the deploy on this checkpoint against this cluster is safe.

    ``timestamps`` holds the answers to :func:`identity_probes` (missing entries are simply not
    evidence). Never raises for a bad state: every problem becomes a finding.
    """
    findings: list[Finding] = []
    now = options.now_ms if options.now_ms is not None else broker.sampled_at_ms
    findings += _lease_findings(record, options, now)
    mismatch = _cluster_mismatch(record, broker)
    if mismatch:
        findings.append(mismatch)
    findings += _problem_findings(checkpoint)
    findings += _runtime_findings(checkpoint, record, options)
    findings += _empty_kafka_findings(checkpoint)
    pos = _position(checkpoint)
    if pos is None:
        findings += _new_query_findings(checkpoint, broker, record, options)
    else:
        findings += _existing_checkpoint_option_findings(checkpoint, pos, record, options)
        if pos.known:
            findings += _alignment(pos, broker, record, options, timestamps or {}, bool(mismatch))
    if not options.fail_on_data_loss:
        findings.append(_fail_on_data_loss_finding(findings))
    return Verdict.of(_strict(findings, options), source="checkpoint", subject=checkpoint.location)


def _empty_kafka_findings(cp: CheckpointState) -> list[Finding]:
    """A Kafka source whose restart offsets are ``{}``: no position at all (issue 17).

    BLOCK, like reset (which refuses to preserve it): Spark treats every partition as new and reads
    it from the earliest offset, so the restart silently replays whole topics — or, if the file was
    emptied by damage, nobody can say how far the job really got.
    """
    if not cp.exists:
        return []
    batches = [b for b in (cp.latest_committed, cp.latest_planned) if b is not None]
    where = [(f"offsets/{b.batch_id}", sid) for b in batches for sid, offs in sorted(b.sources.items())
             if offs is not None and not offs]
    if not batches:
        where = [(f"sources/{sid}/0", sid) for sid, offs in sorted(cp.initial_offsets.items()) if not offs]
    if not where:
        return []
    path, sid = where[0]
    return [Finding(
        "KAFKA_OFFSETS_EMPTY", BLOCK, numbers={"sources": len({s for _, s in where})},
        message=(f"{path} holds Kafka source {sid} with no partitions ({{}}): the checkpoint keeps no position, so "
                 "Spark would read every partition from its earliest offset (a full replay); reset refuses it too"),
        fix=("restore the checkpoint from a backup, or reset it with --topics and --mode to-offsets, to-datetime "
             "or earliest"))]


def evaluate_group(group_offsets: PartitionOffsets, broker: BrokerState, options: DeployOptions,
                   batch_trail_note: bool = True, *, group_id: str | None = None) -> Verdict:
    """The same alignment checks for a consumer group's committed offsets (DStream direct-API jobs
    that ``commitAsync``), plus the one-batch trail of ``commitAsync`` (user-stories.md story 1).

    For such a job the reset policy of the consumer (``auto.offset.reset``, given here as
    ``options.starting_offsets``; Kafka's default is ``latest``) decides where partitions without a
    committed offset start, so those are judged by that policy rather than by Spark's rules.
    """
    topics = options.topics
    start = {tp: o for tp, o in group_offsets.items() if topics is None or tp.topic in topics}
    deploy_topics = tuple(topics) if topics else tuple(sorted({tp.topic for tp in start}))
    policy = options.starting_offsets if options.starting_offsets in ("earliest", "latest") else "latest"
    findings: list[Finding] = []
    label = f"group {group_id}" if group_id else "the consumer group"
    pos = _Position(start=start, label=f"{label}'s committed offsets", known=True)
    per_partition, backlog = _check_start(pos, broker, None, options, {}, deploy_topics, True, group=True)
    findings += per_partition
    new, new_backlog = _group_new_partitions(start, broker, deploy_topics, policy, label)
    findings += new
    backlog += new_backlog
    if not start:
        findings.append(_no_group_offsets(label, broker, deploy_topics, policy, options))
    elif batch_trail_note:
        findings.append(Finding(
            "GROUP_COMMIT_TRAILS_ONE_BATCH", WARN,
            numbers={"backlog": backlog, "partitions": len(start)},
            message=(f"{label} is committed by commitAsync, which only queues offsets and commits them "
                     f"during the next batch: the last batch processed before the stop was never "
                     f"committed and will be read again on restart (at most the {backlog:,} records "
                     f"between the group's offsets and the log end; exactly the last batch's range)"),
            fix=("make the output idempotent or store offsets with the output; for a clean stop let one "
                 "more (empty) batch run after the last data so the queued commit drains")))
    if backlog:
        findings.append(_backlog_finding(backlog, options))
    return Verdict.of(_strict(findings, options), source="group", subject=group_id)


# --------------------------------------------------------------------------------------------------
# query-level checks
# --------------------------------------------------------------------------------------------------


def _lease_findings(record: LifecycleRecord | None, options: DeployOptions, now_ms: int) -> list[Finding]:
    lease = getattr(record, "lease", None)
    if lease is None or not lease.live(now_ms):
        return []
    if options.owner is not None and lease.holder == options.owner:
        return []
    left_s = max(0, (lease.expires_at_ms - now_ms) // 1000)
    return [Finding(
        "ALREADY_RUNNING", BLOCK,
        numbers={"lease_expires_at_ms": lease.expires_at_ms, "seconds_left": left_s},
        message=(f"job {record.job_name} is leased by {lease.holder} (run {lease.run_id}) for another "
                 f"{left_s}s: a second query on the same checkpoint races for the same batch files (S16)"),
        fix=f"stop run {lease.run_id} of {lease.holder} first, or wait until its lease expires")]


def _cluster_mismatch(record: LifecycleRecord | None, broker: BrokerState) -> Finding | None:
    recorded = getattr(record, "kafka_cluster_id", None)
    if not recorded or not broker.cluster_id or recorded == broker.cluster_id:
        return None
    return Finding(
        "CLUSTER_MISMATCH", BLOCK, numbers={"recorded_cluster_id": recorded, "cluster_id": broker.cluster_id},
        message=(f"{broker.bootstrap_servers} is Kafka cluster {broker.cluster_id}, but this checkpoint's "
                 f"offsets were recorded on cluster {recorded}: the same offsets name different records "
                 f"here (checkpoint copied, DR fail-over or migration, S06)"),
        fix=("point the deploy at the recorded cluster, or translate the position (reset by time with an "
             "explicit override) instead of reusing these offsets"))


def _recorded_topic_id(record: LifecycleRecord | None, topic: str, info: Any) -> str | None:
    """The record's topic id for ``topic`` if it can settle identity (both sides known)."""
    topics = getattr(record, "topics", None) or {}
    ident = topics.get(topic)
    recorded = getattr(ident, "topic_id", None)
    return recorded if recorded and getattr(info, "topic_id", None) else None


def _problem_findings(cp: CheckpointState) -> list[Finding]:
    out = []
    for p in cp.problems:
        severity = Severity(p.severity) if getattr(p, "severity", None) in _RANK else BLOCK
        out.append(Finding(p.code, severity, numbers={"path": p.path}, message=p.message,
                           fix=_repair_of(p.message)))
    return out


def _repair_of(message: str) -> str:
    """The repair clause of a checkpoint problem (its messages read ``<what>: <repair>``)."""
    _, sep, tail = message.rpartition(": ")
    return tail if sep and tail else message


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    m = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


# Highest log versions a Spark release reads (failure-scenarios S27, format reference §1.3/§1.4/§2.5).
# Inferred, not confirmed against every release: offsets v2 ("OffsetMap") is read from 4.1 on per the
# project's compatibility table (the reference calls the exact release UNVERIFIED); commits v2
# (checkpointFormatVersion=2) from 4.0 on.
def _max_offsets_version(spark: tuple[int, ...]) -> int:
    return 2 if spark[:2] >= (4, 1) else 1


def _max_commits_version(spark: tuple[int, ...]) -> int:
    return 2 if spark[:2] >= (4, 0) else 1


def _runtime_findings(cp: CheckpointState, record: LifecycleRecord | None, options: DeployOptions
                      ) -> list[Finding]:
    target = _version(options.target_spark_version)
    if target is None:
        return []
    out: list[Finding] = []
    shown = options.target_spark_version
    batches = (cp.latest_planned, cp.latest_committed, *cp.history)
    offsets_v = max((b.version for b in batches if b is not None), default=0)
    commit = getattr(cp, "latest_commit", None)
    commits_v = commit.version if commit is not None else 0
    for kind, found, limit in (("offsets", offsets_v, _max_offsets_version(target)),
                               ("commits", commits_v, _max_commits_version(target))):
        if found > limit:
            out.append(Finding(
                "CHECKPOINT_NEWER_THAN_RUNTIME", BLOCK, inferred=True,
                numbers={"log": kind, "log_version": found, "runtime_max_version": limit},
                message=(f"{kind}/ holds log format v{found} but Spark {shown} reads up to v{limit}: it "
                         f"would fail with 'maximum supported log version is v{limit}, but encountered "
                         f"v{found}' (version table inferred, S27)"),
                fix="deploy with the Spark version that wrote the checkpoint (or newer), or restore a backup "
                    "taken before the upgrade"))
    written = _version(getattr(record, "spark_version", None))
    if written is not None and not out:
        if target[:2] < written[:2]:
            sev = BLOCK if cp.has_state else WARN
            out.append(Finding(
                "CHECKPOINT_NEWER_THAN_RUNTIME", sev, inferred=True,
                numbers={"written_by": record.spark_version, "runtime": shown},
                message=(f"the checkpoint was last written by Spark {record.spark_version} and the deploy "
                         f"runs {shown}: a rollback" + (", and state-store formats are not forward "
                                                        "compatible" if cp.has_state else
                                                        "; log formats may still be readable")),
                fix=f"deploy Spark {record.spark_version} or newer, or restore a backup taken before the "
                    "upgrade"))
        elif target[:2] > written[:2]:
            out.append(Finding(
                "SPARK_UPGRADE", WARN, numbers={"written_by": record.spark_version, "runtime": shown},
                message=(f"the checkpoint was last written by Spark {record.spark_version}; the deploy runs "
                         f"{shown}: after the first batch an older Spark may no longer read it"),
                fix="take a verified backup of the checkpoint before deploying the upgrade"))
    return out


def _existing_checkpoint_option_findings(cp: CheckpointState, pos: _Position, record: LifecycleRecord | None,
                                         options: DeployOptions) -> list[Finding]:
    out: list[Finding] = []
    has_batches = bool(cp.offset_batch_ids)
    if options.expect_new_checkpoint:
        what = (f"batches up to {cp.offset_batch_ids[-1]}" if has_batches
                else "resolved starting offsets in sources/")
        out.append(Finding(
            "CHECKPOINT_NOT_EMPTY", BLOCK,
            message=(f"the deploy expects a new query but {cp.location} already holds {what}: Spark resumes "
                     f"from {pos.label} and ignores startingOffsets"),
            fix="point the deploy at an empty checkpoint location, or move this checkpoint aside (reset)"))
    if options.starting_offsets is not None:
        numbers: dict[str, Number] = {}
        explicit = options.explicit_starting_offsets
        if explicit is not None and pos.known:
            numbers["partitions_differing"] = sum(1 for tp, o in explicit.items() if pos.start.get(tp) != o)
        out.append(Finding(
            "STARTING_OFFSETS_IGNORED", WARN, numbers=numbers,
            message=(f"startingOffsets={_short(options.starting_offsets)} only applies to a new query: this "
                     f"checkpoint resumes from {pos.label}"),
            fix="drop the option from the deploy, or reset the checkpoint with the position you want"))
    nso = getattr(record, "next_starting_offsets", None)
    if nso:
        out.append(Finding(
            "STARTING_OFFSETS_IGNORED", WARN,
            message=(f"the lifecycle record carries next_starting_offsets {_short(nso)} (set by a reset) but "
                     f"the checkpoint is not empty: Spark resumes from {pos.label} instead"),
            fix="finish the reset (move the old checkpoint aside) or clear next_starting_offsets"))
    pinned = (cp.latest_planned or cp.latest_committed)
    for key, wanted in sorted(options.conf.items()):
        have = pinned.conf.get(key) if pinned is not None else None
        if have is None or have == wanted:
            continue
        note = ("state is partitioned by it" if cp.has_state else
                "the query has no state; Spark releases after SPARK-53942 may honour a new value for "
                "stateless shuffles, Spark 4.0 does not")
        out.append(Finding(
            "CONF_PINNED_BY_CHECKPOINT", WARN, numbers={"conf": key, "checkpoint_value": have,
                                                        "requested_value": wanted},
            message=(f"{key}={wanted} is requested but the checkpoint pins {have}: Spark silently keeps "
                     f"{have} on restart ({note})"),
            fix=f"keep {key}={have}, or start a new checkpoint (reset with offset carry-over) to change it"))
    return out


def _fail_on_data_loss_finding(findings: list[Finding]) -> Finding:
    lost = sum(_int(f.numbers.get("records_lost")) for f in findings if f.severity == BLOCK)
    more = (f"; here that would hide {lost:,} lost records reported above" if lost else "")
    return Finding(
        "FAIL_ON_DATA_LOSS_DISABLED", WARN, numbers={"records_silently_skipped": lost},
        message=("failOnDataLoss=false makes Spark log and skip deleted, reset or truncated ranges instead "
                 f"of failing (S31); this check still blocks them{more}"),
        fix="keep failOnDataLoss=true and handle data loss explicitly (accept it with an audited override)")


def _strict(findings: list[Finding], options: DeployOptions) -> list[Finding]:
    if not options.strict:
        return findings
    return [replace(f, severity=BLOCK, message=f"{f.message} (strict: warnings block)")
            if f.severity == WARN else f for f in findings]


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


# --------------------------------------------------------------------------------------------------
# per-partition alignment of an existing checkpoint
# --------------------------------------------------------------------------------------------------


def _alignment(pos: _Position, broker: BrokerState, record: LifecycleRecord | None, options: DeployOptions,
               timestamps: Mapping[TopicPartition, RecordProbe], cluster_mismatch: bool) -> list[Finding]:
    ckpt_topics = {tp.topic for tp in pos.start} | {tp.topic for tp in pos.pending}
    deploy_topics = options.topics or tuple(sorted(ckpt_topics))
    findings, backlog = _check_start(pos, broker, record, options, timestamps, deploy_topics,
                                     cluster_mismatch)
    new, new_backlog = _new_partitions(pos, broker, deploy_topics, ckpt_topics)
    findings += new
    backlog += new_backlog
    if backlog:
        findings.append(_backlog_finding(backlog, options))
    return findings


def _place(tp: TopicPartition) -> dict[str, Any]:
    return {"topic": tp.topic, "partition": tp.partition}


def _check_start(pos: _Position, broker: BrokerState, record: LifecycleRecord | None, options: DeployOptions,
                 timestamps: Mapping[TopicPartition, RecordProbe], deploy_topics: Iterable[str],
                 cluster_mismatch: bool, *, group: bool = False) -> tuple[list[Finding], int]:
    """Findings for every partition the position names, and the backlog after it (records)."""
    subscribed = set(deploy_topics)
    out: list[Finding] = []
    backlog = 0
    replay: list[_Replay] = []
    for tp in sorted(set(pos.start) | set(pos.pending)):
        c = pos.start.get(tp)
        p = pos.pending.get(tp)
        base: dict[str, Number] = {"checkpoint_offset": c}
        if p is not None:
            base["pending_end"] = p
        info = broker.topics.get(tp.topic)
        gone_why = None
        if tp.topic not in subscribed:
            gone_why = (f"{tp.topic} is in the checkpoint but not in the deploy's subscription: Spark "
                        f"reports {tp} as gone (KAFKA_DATA_LOSS.PARTITIONS_DELETED) and fails, or silently "
                        f"drops it with failOnDataLoss=false")
        elif info is None:
            gone_why = f"topic {tp.topic} no longer exists on {broker.bootstrap_servers} (deleted)"
        elif tp.partition >= info.partitions:
            gone_why = (f"{tp.topic} now has {info.partitions} partition(s): partition {tp.partition} is "
                        f"gone (topic recreated with fewer partitions?)")
        if gone_why:
            if p is not None:
                replay.append(_Replay(tp, c if c is not None else 0, p, None, None, readable=False))
            pending_left = p - c if p is not None and c is not None and p > c else 0
            unread = f" with {pending_left:,} records still pending" if pending_left else ""
            fix = ("keep subscribing to it, or start a new checkpoint with the position of the remaining "
                   "partitions carried over (reset)" if tp.topic not in subscribed else
                   "restore the topic/partitions, or reset the checkpoint for the current partitions with an "
                   "explicit override")
            out.append(Finding("PARTITIONS_GONE", BLOCK, **_place(tp), numbers=base,
                               message=gone_why + unread, fix=fix))
            continue
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is None or le is None:
            out.append(Finding("OFFSETS_UNAVAILABLE", BLOCK, **_place(tp), numbers=base,
                               message=f"{broker.bootstrap_servers} returned no log start/end for {tp}",
                               fix="check the partition's leader and retry the validation"))
            continue
        nums = {**base, "log_start": ls, "log_end": le}
        here: list[Finding] = []
        compacted = "compact" in (getattr(info, "cleanup_policy", "") or "")
        if not cluster_mismatch and c is not None:
            reset = _identity(tp, c, ls, le, pos, record, info, options, timestamps.get(tp), nums)
            if reset is not None:
                here.append(reset)
        if c is None:  # a partition first seen in the pending batch: the re-run reads it from earliest
            if ls > 0:
                here.append(_truncated_new_partition(tp, ls, le, nums, inferred=True))
        else:
            if ls > c:
                here.append(_below_log_start(tp, c, ls, nums, compacted, pos.label, group))
            if c > le:
                here.append(_ahead_of_log_end(tp, c, le, nums, broker))
            elif tp in broker.resampled:
                samples = broker.latest_samples.get(tp, ())
                here.append(Finding(
                    "TRANSIENT_REGRESSION", WARN, **_place(tp), numbers={**nums, "samples": len(samples)},
                    message=(f"the broker first reported log end {samples[0] if samples else '?'} for {tp}, "
                             f"below the checkpoint's {c:,}, then {le:,} on re-sampling: a transient answer "
                             f"(leader change, S26), not a reset"),
                    fix="none needed; if it recurs, check the brokers' leader elections before deploying"))
        if p is not None:
            r_from = c if c is not None else 0
            replay.append(_Replay(tp, r_from, p, ls, le, readable=ls <= r_from and p <= le))
        after = max(x for x in (c, p, ls) if x is not None)
        part_backlog = max(le - after, 0) if not any(f.severity == BLOCK for f in here) else 0
        backlog += part_backlog
        if not here:
            ok_nums = {**nums, "backlog": part_backlog}
            if p is not None:
                ok_nums.update(replay_from=c if c is not None else 0, replay_to=p)
            to_read = f"; {part_backlog:,} to read" if part_backlog else ""
            here.append(Finding("OK", PASS, **_place(tp), numbers=ok_nums,
                                message=f"{tp} resumes at {c if c is not None else ls:,} within "
                                        f"[{ls:,}, {le:,}]{to_read}"))
        out += here
    if pos.pending_batch is not None:
        out.append(_pending_replay(pos, replay, options))
    return out, backlog


def _identity(tp: TopicPartition, c: int, ls: int, le: int, pos: _Position, record: LifecycleRecord | None,
              info: Any, options: DeployOptions, probe: RecordProbe, nums: dict[str, Number]
              ) -> Finding | None:
    recorded = _recorded_topic_id(record, tp.topic, info)
    if recorded:
        if recorded == info.topic_id:
            return None
        return Finding(
            "TOPIC_RESET", BLOCK, **_place(tp),
            numbers={**nums, "recorded_topic_id": recorded, "topic_id": info.topic_id},
            message=(f"topic {tp.topic} was deleted and recreated since it was recorded (topic id "
                     f"{recorded} → {info.topic_id}): offset {c:,} of the old topic names a different record "
                     f"of the new one (Spark would silently skip or fail, S02/S03)"),
            fix=(f"do not reuse these offsets for {tp.topic}: reset its position explicitly (e.g. earliest "
                 f"of the new topic) with a backup and an audited override"))
    if probe is None or pos.reference_ts is None:
        return None
    offset, ts = probe
    if ts is None or offset >= c or ts <= pos.reference_ts + options.clock_skew_ms:
        return None
    ahead = ts - pos.reference_ts
    return Finding(
        "TOPIC_RESET", BLOCK, **_place(tp), inferred=True,
        numbers={**nums, "record_offset": offset, "record_timestamp_ms": ts, "batch_id": pos.reference_batch,
                 "batch_timestamp_ms": pos.reference_ts, "newer_by_ms": ahead,
                 "clock_skew_ms": options.clock_skew_ms},
        message=(f"suspected topic reset: the record now at offset {offset:,} of {tp} (below the "
                 f"checkpoint's {c:,}) is {ahead / 1000:,.1f}s newer than batch {pos.reference_batch}, which "
                 f"had already read past it: the offsets now name different records (recreated topic or "
                 f"another cluster; inferred from record timestamps, no lifecycle record)"),
        fix=(f"if {tp.topic} was recreated, reset its position explicitly instead of reusing these offsets; "
             f"if producers stamp future event times, raise the clock-skew tolerance"))


def _below_log_start(tp: TopicPartition, c: int, ls: int, nums: dict[str, Number], compacted: bool,
                     label: str, group: bool) -> Finding:
    lost = ls - c
    bound = ("at most " if compacted else "")
    who = "the group" if group else "the checkpoint"
    return Finding(
        "OFFSET_BELOW_LOG_START", BLOCK, **_place(tp), numbers={**nums, "records_lost": lost},
        message=(f"{who} resumes {tp} at {c:,} (from {label}) but the log now starts at {ls:,}: "
                 f"{bound}{lost:,} unread records were deleted (retention or delete-records, S01)"
                 + ("; compaction may already have removed some of them" if compacted else "")),
        fix=(f"restore offsets {c:,}–{ls - 1:,} of {tp} from an archive, or accept the loss explicitly "
             f"(reset {tp} to {ls:,} with an audited override); failOnDataLoss=false would skip them "
             f"silently"))


def _ahead_of_log_end(tp: TopicPartition, c: int, le: int, nums: dict[str, Number],
                      broker: BrokerState) -> Finding:
    samples = broker.latest_samples.get(tp, ())
    extra: dict[str, Number] = {"records_ahead": c - le}
    again = ""
    if tp in broker.resampled:
        extra["samples"] = len(samples)
        again = f", in all {len(samples)} samples"
    return Finding(
        "OFFSET_AHEAD_OF_LOG_END", BLOCK, **_place(tp), numbers={**nums, **extra},
        message=(f"the checkpoint resumes {tp} at {c:,} but the log ends at {le:,}{again}: the topic was "
                 f"recreated or truncated, or this is another cluster (Spark: offset was changed from "
                 f"{c} to {le}, S02)"),
        fix=(f"find out why {tp} went backwards; if the topic was recreated, reset its position explicitly "
             f"(its records from 0 to {le:,} are new) instead of starting on this checkpoint"))


def _truncated_new_partition(tp: TopicPartition, ls: int, le: int, nums: dict[str, Number], *,
                             inferred: bool) -> Finding:
    return Finding(
        "NEW_PARTITION_TRUNCATED", BLOCK, **_place(tp), inferred=inferred,
        numbers={**nums, "records_lost": ls, "records": le - ls},
        message=(f"{tp} is new to the checkpoint and Spark reads new partitions from earliest, but its log "
                 f"starts at {ls:,}, not 0: {ls:,} records were deleted before the query saw them (Spark: "
                 f"Added partition {tp} starts from {ls} instead of 0, S04)"),
        fix=(f"accept the loss of {tp}'s first {ls:,} records explicitly (audited override), or restore them "
             f"from an archive"))


@dataclass(frozen=True)
class _Replay:
    """One partition's share of a pending batch: Spark re-reads ``[start, end)``."""

    tp: TopicPartition
    start: int
    end: int
    log_start: int | None
    log_end: int | None
    readable: bool

    @property
    def records(self) -> int:
        return max(self.end - self.start, 0)


def _pending_replay(pos: _Position, replay: list[_Replay], options: DeployOptions) -> Finding:
    batch = pos.pending_batch
    records = sum(r.records for r in replay)
    unreadable = [r for r in replay if r.records and not r.readable]
    ranges = ", ".join(f"{r.tp} [{r.start:,}, {r.end:,})" for r in replay if r.records)
    if len(ranges) > 200:
        ranges = ranges[:199] + "…"
    numbers: dict[str, Number] = {"batch_id": batch, "records_to_replay": records,
                                  "partitions": sum(1 for r in replay if r.records)}
    if unreadable:
        numbers["unreadable_partitions"] = len(unreadable)
        r = unreadable[0]
        now = (f"the log now [{r.log_start:,}, {r.log_end:,})" if r.log_start is not None
               and r.log_end is not None else "the partition gone")
        return Finding(
            "PENDING_BATCH_REPLAY", BLOCK, numbers=numbers,
            message=(f"batch {batch} was planned but not committed, and Spark re-runs exactly its recorded "
                     f"range ({records:,} records), but {len(unreadable)} partition range(s) are no longer "
                     f"readable, e.g. {r.tp} [{r.start:,}, {r.end:,}) with {now}: the replay cannot be "
                     f"faithful (S07)"),
            fix=(f"drop the uncommitted offsets/{batch} so Spark re-plans from the committed position (after "
                 f"resolving any loss above), or restore the records"))
    if options.idempotent_sink is True:
        sev, sink = INFO, "the sink is idempotent, so the replay overwrites, it does not duplicate"
    elif options.idempotent_sink is False:
        sev, sink = WARN, f"the sink is not idempotent: up to {records:,} duplicate records expected"
        numbers["duplicates_expected"] = records
    else:
        sev, sink = WARN, f"a sink that is not idempotent gets up to {records:,} duplicate records"
    return Finding(
        "PENDING_BATCH_REPLAY", sev, numbers=numbers,
        message=(f"batch {batch} was planned but not committed: on restart Spark re-runs it with the same "
                 f"range ({records:,} records{': ' + ranges if ranges else ''}); {sink} (S07/S14)"),
        fix=("use an idempotent sink (batchId-keyed writes, MERGE) or accept the duplicates; stop queries on "
             "a batch boundary to avoid this"))


def _new_partitions(pos: _Position, broker: BrokerState, deploy_topics: Iterable[str],
                    ckpt_topics: set[str]) -> tuple[list[Finding], int]:
    """Partitions of subscribed topics the checkpoint does not know: Spark reads them from earliest."""
    out: list[Finding] = []
    backlog = 0
    known = set(pos.start) | set(pos.pending)
    for topic in deploy_topics:
        info = broker.topics.get(topic)
        if info is None:
            if topic not in ckpt_topics:
                out.append(Finding("TOPIC_NOT_FOUND", WARN, topic=topic,
                                   message=(f"subscribed topic {topic} does not exist on "
                                            f"{broker.bootstrap_servers}: the query reads nothing from it "
                                            f"until it is created"),
                                   fix="check the topic name, or create the topic before deploying"))
            continue
        tps = [TopicPartition(topic, p) for p in range(info.partitions)]
        new = [tp for tp in tps if tp not in known]
        if not new:
            continue
        is_new_topic = topic not in ckpt_topics
        total = 0
        for tp in new:
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                out.append(Finding("OFFSETS_UNAVAILABLE", BLOCK, **_place(tp),
                                   message=f"{broker.bootstrap_servers} returned no log start/end for {tp}",
                                   fix="check the partition's leader and retry the validation"))
                continue
            nums: dict[str, Number] = {"checkpoint_offset": None, "log_start": ls, "log_end": le}
            if ls > 0:
                out.append(_truncated_new_partition(tp, ls, le, nums, inferred=is_new_topic))
                continue
            total += le - ls
            if not is_new_topic:
                out.append(Finding(
                    "NEW_PARTITION", INFO, **_place(tp),
                    numbers={**nums, "records": le - ls, "backlog": le - ls},
                    message=f"{tp} is new to the checkpoint: Spark reads it from offset 0 ({le - ls:,} "
                            f"records)"))
        backlog += total
        if is_new_topic:
            out.append(Finding(
                "NEW_TOPIC_FROM_EARLIEST", WARN, topic=topic,
                numbers={"records": total, "partitions": len(new)},
                message=(f"{topic} is subscribed by the deploy but not in the checkpoint: Spark reads all of "
                         f"it from earliest ({total:,} records in {len(new)} partition(s)); changing "
                         f"subscriptions on a checkpoint is 'not allowed' per the Spark guide (S13)"),
                fix=(f"accept the full read of {topic}, or give it its own query/checkpoint with an explicit "
                     f"startingOffsets")))
    return out, backlog


def _not_found(topic: str, broker: BrokerState) -> str:
    return f"subscribed topic {topic} does not exist on {broker.bootstrap_servers}"


def _backlog_finding(backlog: int, options: DeployOptions) -> Finding:
    limit = options.max_offsets_per_trigger
    if limit:
        batches = math.ceil(backlog / limit)
        return Finding("BACKLOG", INFO, numbers={"backlog": backlog, "max_offsets_per_trigger": limit,
                                                 "batches": batches},
                       message=(f"{backlog:,} records to catch up, ≈{batches:,} batch(es) of at most "
                                f"{limit:,} (maxOffsetsPerTrigger); Trigger.Once ignores the limit"),
                       fix="")
    big = backlog >= options.backlog_warn_records
    return Finding(
        "BACKLOG", WARN if big else INFO, numbers={"backlog": backlog, "first_batch_records": backlog},
        message=(f"{backlog:,} records to catch up, all in the first batch (no maxOffsetsPerTrigger)"
                 + (f": at least {options.backlog_warn_records:,}, a long first batch (S28)" if big else "")),
        fix="set maxOffsetsPerTrigger (or use Trigger.AvailableNow) to split the catch-up" if big else "")


# --------------------------------------------------------------------------------------------------
# a new query (no checkpoint, or an empty one)
# --------------------------------------------------------------------------------------------------


def _new_query_findings(cp: CheckpointState, broker: BrokerState, record: LifecycleRecord | None,
                        options: DeployOptions) -> list[Finding]:
    out: list[Finding] = []
    if cp.exists and cp.has_state:
        out.append(Finding(
            "CHECKPOINT_NOT_EMPTY", WARN,
            message=(f"{cp.location} has state/ files but no batches: Spark 4.1+ refuses to start on it, "
                     f"older Spark starts a new query next to stale state"),
            fix="move the checkpoint aside and start with an empty location"))
    nso = getattr(record, "next_starting_offsets", None)
    explicit: PartitionOffsets | None = None
    if nso:
        explicit = parse_offsets_json(nso, what="next_starting_offsets")
        origin = "the reset's carried-over offsets"
    elif options.explicit_starting_offsets is not None:
        explicit, origin = options.explicit_starting_offsets, "startingOffsets (JSON)"
    else:
        origin = f"startingOffsets={options.starting_offsets or 'latest'}"
    mode = options.starting_offsets if options.starting_offsets in ("earliest", "latest") else "latest"
    topics = list(options.topics or sorted({tp.topic for tp in explicit or {}}))
    to_read = skipped = 0
    incomplete: list[str] = []
    if explicit is not None:
        extra = sorted({tp.topic for tp in explicit} - set(topics))
        incomplete += [f"{t} (not subscribed)" for t in extra]
    for topic in topics:
        info = broker.topics.get(topic)
        if info is None:
            out.append(Finding("TOPIC_NOT_FOUND", WARN, topic=topic,
                               message=_not_found(topic, broker),
                               fix="check the topic name, or create the topic before deploying"))
            continue
        for p in range(info.partitions):
            tp = TopicPartition(topic, p)
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                out.append(Finding("OFFSETS_UNAVAILABLE", BLOCK, **_place(tp),
                                   message=f"{broker.bootstrap_servers} returned no log start/end for {tp}",
                                   fix="check the partition's leader and retry the validation"))
                continue
            if explicit is None:
                if mode == "earliest":
                    to_read += le - ls
                else:
                    skipped += le - ls
                continue
            if tp not in explicit:
                incomplete.append(str(tp))
                continue
            o = explicit[tp]
            o = ls if o == EARLIEST else le if o == LATEST else o
            nums: dict[str, Number] = {"checkpoint_offset": o, "log_start": ls, "log_end": le}
            if o < ls:
                out.append(Finding(
                    "OFFSET_BELOW_LOG_START", BLOCK, **_place(tp), numbers={**nums, "records_lost": ls - o},
                    message=(f"{origin} start {tp} at {o:,} but the log now starts at {ls:,}: {ls - o:,} "
                             f"records were deleted since the position was taken"),
                    fix=f"accept the loss explicitly (start {tp} at {ls:,}) or restore the records"))
            elif o > le:
                out.append(Finding(
                    "OFFSET_AHEAD_OF_LOG_END", BLOCK, **_place(tp), numbers={**nums, "records_ahead": o - le},
                    message=f"{origin} start {tp} at {o:,} but the log ends at {le:,} (topic recreated?)",
                    fix=f"recompute the starting position of {tp} against the current topic"))
            else:
                to_read += le - o
                out.append(Finding("OK", PASS, **_place(tp), numbers={**nums, "backlog": le - o},
                                   message=f"{tp} starts at {o:,} within [{ls:,}, {le:,}]"))
    if incomplete:
        shown = ", ".join(incomplete[:5]) + (f" +{len(incomplete) - 5}" if len(incomplete) > 5 else "")
        out.append(Finding(
            "STARTING_OFFSETS_INCOMPLETE", BLOCK, numbers={"partitions": len(incomplete)},
            message=(f"{origin} must name exactly the subscribed partitions; mismatched: {shown} (Spark: 'If "
                     f"startingOffsets contains specific offsets, you must specify all TopicPartitions')"),
            fix="list every subscribed partition (-2 = earliest, -1 = latest) and only those"))
    expected = options.expect_new_checkpoint or bool(nso)
    numbers: dict[str, Number] = {"records_to_read": to_read}
    if explicit is None and mode == "latest":
        numbers = {"records_skipped": skipped}
    where = cp.location if cp.exists else f"{cp.location} (does not exist)"
    if explicit is not None:
        what = f"starts from {origin}: {to_read:,} records to read"
    elif mode == "earliest":
        what = f"starts from {origin}: reads the {to_read:,} records now in the topics"
    else:
        what = f"starts from {origin}: the {skipped:,} records now in the topics are skipped"
    if explicit is not None:
        numbers["starting_offsets"] = to_offsets_json(explicit)
    out.append(Finding(
        "NO_CHECKPOINT", INFO if expected else WARN, numbers=numbers,
        message=(f"no checkpoint at {where}: Spark starts a new query (new id, batch 0) that {what}"
                 + ("" if expected else "; the deploy did not say it expects a new checkpoint")),
        fix="" if expected else ("if this query ran before, point the deploy at its checkpoint (or reset "
                                 "with offset carry-over); otherwise mark the deploy as a new query")))
    return out


# --------------------------------------------------------------------------------------------------
# consumer-group specifics
# --------------------------------------------------------------------------------------------------


def _group_new_partitions(start: PartitionOffsets, broker: BrokerState, deploy_topics: Iterable[str],
                          policy: str, label: str) -> tuple[list[Finding], int]:
    if not start:
        return [], 0
    out: list[Finding] = []
    backlog = 0
    for topic in deploy_topics:
        info = broker.topics.get(topic)
        if info is None:
            if not any(tp.topic == topic for tp in start):
                out.append(Finding("TOPIC_NOT_FOUND", WARN, topic=topic,
                                   message=_not_found(topic, broker),
                                   fix="check the topic name, or create the topic before deploying"))
            continue
        for p in range(info.partitions):
            tp = TopicPartition(topic, p)
            if tp in start:
                continue
            ls, le = broker.earliest.get(tp), broker.latest.get(tp)
            if ls is None or le is None:
                continue
            nums: dict[str, Number] = {"checkpoint_offset": None, "log_start": ls, "log_end": le,
                                       "records": le - ls}
            if policy == "earliest":
                backlog += le - ls
                out.append(Finding("NEW_PARTITION", INFO, **_place(tp), numbers={**nums, "backlog": le - ls},
                                   message=(f"{label} has no committed offset for {tp}: auto.offset.reset="
                                            f"earliest reads its {le - ls:,} records from {ls:,}"), fix=""))
            else:
                out.append(Finding(
                    "NEW_PARTITION", WARN if le > ls else INFO, **_place(tp),
                    numbers={**nums, "records_skipped": le - ls},
                    message=(f"{label} has no committed offset for {tp}: auto.offset.reset=latest skips its "
                             f"{le - ls:,} records"),
                    fix="commit a starting offset for it, or run with auto.offset.reset=earliest"))
    return out, backlog


def _no_group_offsets(label: str, broker: BrokerState, topics: Iterable[str], policy: str,
                      options: DeployOptions) -> Finding:
    total = sum(broker.latest.get(tp, 0) - broker.earliest.get(tp, 0)
                for tp in broker.latest if tp.topic in set(topics))
    skip = policy != "earliest"
    return Finding(
        "NO_GROUP_OFFSETS", WARN if skip and total and not options.expect_new_checkpoint else INFO,
        numbers={"records_skipped" if skip else "records_to_read": total},
        message=(f"{label} has no committed offsets for {', '.join(topics) or 'the topics'}: the job starts "
                 f"from auto.offset.reset={policy} and " + (f"skips the {total:,} records now there" if skip
                                                            else f"reads the {total:,} records now there")),
        fix="" if not skip else "commit the intended starting offsets to the group before the first start")
