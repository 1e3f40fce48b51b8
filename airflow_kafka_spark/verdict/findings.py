"""Findings and verdicts: what the pre-deploy check says, with a stable code, a severity and numbers.

Vocabulary (docs/findings.md lists every code): every :class:`Finding` has a severity PASS < INFO < WARN <
BLOCK. The :class:`Verdict` is the worst one, except that INFO never raises a verdict above PASS
(INFO is "worth knowing", not "worth a warning"). Exit codes: 0 for PASS/WARN, 3 for BLOCK.
:data:`CODES` lists every code with its usual severity; the codes are part of the JSON output and
must not change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.kafka.offsets import TopicPartition

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
    "LEGACY_ESCAPED_PATH": (BLOCK, "Spark 2.x's escaped folder of this checkpoint path exists; Spark 3+ "
                                   "refuses to start until it is moved"),
    "CONF_PINNED_BY_CHECKPOINT": (WARN, "a deploy conf the checkpoint pins; Spark silently keeps the old "
                                        "value (S11)"),
    "STARTING_OFFSETS_IGNORED": (WARN, "startingOffsets only apply to a new query; the checkpoint wins "
                                       "(S22)"),
    "STARTING_OFFSETS_INCOMPLETE": (BLOCK, "explicit startingOffsets must list exactly the subscribed "
                                           "partitions"),
    "FAIL_ON_DATA_LOSS_DISABLED": (WARN, "failOnDataLoss=false turns data loss into silent skips (S31)"),
    "BACKLOG": (INFO, "records waiting to be read; WARN when one unlimited first batch would be huge (S28)"),
    "NEW_QUERY_START": (INFO, "the checkpoint holds only sources/<id>/0 (a reset wrote it): Spark starts a new "
                              "query there, whatever startingOffsets the application sets"),
    "NO_CHECKPOINT": (INFO, "a new query: startingOffsets (or a reset's carried-over offsets) apply (S21); "
                            "WARN when the deploy did not say it expects a new checkpoint"),
    "NEW_CHECKPOINT_FOR_KNOWN_QUERY": (BLOCK, "a new empty checkpoint next to a recent one of the same job: "
                                              "startingOffsets skip or repeat what that one read (S29); WARN "
                                              "when the deploy declared a new query"),
    "SHARED_GROUP_ID": (WARN, "the deploy sets kafka.group.id and the group has live members that are not "
                              "this query (S24); INFO without members"),
    "CHECKPOINT_NOT_EMPTY": (BLOCK, "the deploy expects a new checkpoint but this one has batches "
                                    "(S21, S29); WARN for state files without batches"),
    "TRANSIENT_REGRESSION": (WARN, "the broker reported a regressed log end that healed on re-sampling "
                                   "(S26)"),
    "CHECKPOINT_NEWER_THAN_RUNTIME": (WARN, "the checkpoint was written by a newer Spark than the deploy runs "
                                            "(S27; inferred from the confs it pins): 3.5 restarts 4.x "
                                            "checkpoints; BLOCK for log versions or state the older Spark "
                                            "cannot read"),
    "SPARK_UPGRADE": (WARN, "the deploy runs a newer Spark than last wrote the checkpoint: back up "
                            "first (S27)"),
    "ALREADY_RUNNING": (BLOCK, "another run holds a live lease on this job (S16)"),
    "NO_GROUP_OFFSETS": (INFO, "the consumer group has no committed offsets: auto.offset.reset decides"),
    "GROUP_COMMIT_TRAILS_ONE_BATCH": (WARN, "commitAsync commits one batch late: the last processed batch "
                                            "replays (docs/scenarios.md, DStream jobs)"),
    # the DStream checkpoint beside a consumer group (verdict/dstream.py):
    "DSTREAM_CHECKPOINT_SAME_BUILD": (PASS, "the DStream checkpoint was written by the build being deployed"),
    "DSTREAM_CHECKPOINT_OTHER_BUILD": (BLOCK, "the DStream checkpoint holds another build's serialized classes: "
                                              "getOrCreate fails (InvalidClassException); INFO when the plan "
                                              "moves it aside and starts from the consumer group"),
    "DSTREAM_CHECKPOINT_BUILD_UNKNOWN": (WARN, "no build was recorded for the DStream checkpoint: a recompiled "
                                               "job may fail to start from it"),
    "DSTREAM_CHECKPOINT_NONE": (INFO, "no DStream checkpoint: the job starts from its consumer group"),
    # added by the I/O flow (validate.py), not by evaluate():
    "IDENTITY_UNVERIFIED": (INFO, "partitions whose topic identity could not be checked (no lifecycle "
                                  "record and no readable record below the checkpoint, or time budget)"),
    "RECORD_NOT_WRITTEN": (INFO, "the cluster/topic identity could not be saved to the lifecycle record"),
}

Number = int | float | str | None


class Bound(StrEnum):
    """How exact a :class:`RecordCounts` is: ``exact``; ``at_most`` (offsets are sparse — compaction,
    transaction markers — or the sink may dedupe); ``at_least`` (records produced before the restart add
    to it, or part of it cannot be seen any more, e.g. a deleted partition's unread tail)."""

    EXACT = "exact"
    AT_MOST = "at_most"
    AT_LEAST = "at_least"

    @property
    def prefix(self) -> str:
        return {"exact": "", "at_most": "≤", "at_least": "≥"}[self.value]


@dataclass(frozen=True)
class RecordCounts:
    """What a restart does to the records of one partition, counted (docs/scenarios.md, "Announced vs
    observed record counts"):

    * ``lost``: deleted from Kafka before the query read them — no restart can read them;
    * ``skipped``: Spark will never read them although they are (or were, when planned) in the log;
    * ``duplicated``: written to the sink a second time.

    Findings carry one per partition; the verdict merges them per partition by taking the largest of
    each kind (two findings about one partition describe the same records from two angles).
    """

    lost: int = 0
    skipped: int = 0
    duplicated: int = 0
    bound: Bound = Bound.EXACT

    def __post_init__(self) -> None:
        lost, skipped, dup = self.lost, self.skipped, self.duplicated
        if type(lost) is int and type(skipped) is int and type(dup) is int and min(lost, skipped, dup) >= 0:
            return   # the common case, built once per partition (5,000 per validate): nothing to clamp
        for kind in ("lost", "skipped", "duplicated"):
            object.__setattr__(self, kind, max(int(getattr(self, kind)), 0))

    @property
    def total(self) -> int:
        return self.lost + self.skipped + self.duplicated

    def merged(self, other: RecordCounts) -> RecordCounts:
        """The larger of each kind (``exact`` only if both are)."""
        mine, theirs = (self.lost, self.skipped, self.duplicated), (other.lost, other.skipped, other.duplicated)
        return RecordCounts(*(max(a, b) for a, b in zip(mine, theirs, strict=True)), bound=self._bound_with(other))

    def plus(self, other: RecordCounts) -> RecordCounts:
        """Sum over partitions."""
        return RecordCounts(self.lost + other.lost, self.skipped + other.skipped,
                            self.duplicated + other.duplicated, self._bound_with(other))

    def _bound_with(self, other: RecordCounts) -> Bound:
        """A loose bound wins over ``exact``; ``at_most`` with ``at_least`` is only ``at_least``-ish: say so."""
        loose = {c.bound for c in (self, other) if c.total or c.bound == Bound.AT_LEAST} - {Bound.EXACT}
        return loose.pop() if len(loose) == 1 else Bound.AT_LEAST if loose else Bound.EXACT

    def describe(self) -> str:
        """``lost 120``, ``skipped ≥30, duplicated 60``; empty when nothing is counted."""
        p = self.bound.prefix
        return ", ".join(f"{kind} {p}{n:,}" for kind, n in
                         (("lost", self.lost), ("skipped", self.skipped), ("duplicated", self.duplicated)) if n)

    def to_dict(self) -> dict[str, Any]:
        return {"lost": self.lost, "skipped": self.skipped, "duplicated": self.duplicated, "bound": str(self.bound)}


Counts = Mapping[TopicPartition, RecordCounts]


def total_counts(counts: Counts) -> RecordCounts:
    out = RecordCounts()
    for c in counts.values():
        out = out.plus(c)
    return out


def counts_to_list(counts: Counts) -> list[dict[str, Any]]:
    """JSON form: one object per partition, in partition order."""
    return [{"topic": tp.topic, "partition": tp.partition, **c.to_dict()} for tp, c in sorted(counts.items())]


@dataclass(frozen=True)
class Finding:
    """One observation: a stable ``code``, its ``severity``, where (``topic``/``partition``, None for
    query-level findings), the ``numbers`` behind it, one ``message`` line and one ``fix`` line.

    ``inferred`` marks findings that rest on a heuristic or on version facts not confirmed against
    Spark (record timestamps, log-version support tables): still acted on, but said so.
    ``counts``: for findings that predict loss, skip or duplication, the records per partition
    (:class:`RecordCounts`); the oracle tests compare them with what Spark then did.
    """

    code: str
    severity: Severity
    topic: str | None = None
    partition: int | None = None
    numbers: Mapping[str, Number] = field(default_factory=dict)
    message: str = ""
    fix: str = ""
    inferred: bool = False
    counts: Counts = field(default_factory=dict)

    @property
    def records(self) -> RecordCounts:
        """The counts summed over partitions (all zero for a finding that counts nothing)."""
        return total_counts(self.counts)

    def __post_init__(self) -> None:
        # A partition finding that states records_lost / records_skipped counts them: findings built
        # elsewhere (reset plans, the consumer-group checks) need no second field for the same number.
        if not self.counts and self.tp is not None:
            lost, skipped = count_of(self.numbers.get("records_lost")), count_of(self.numbers.get("records_skipped"))
            if lost or skipped:
                object.__setattr__(self, "counts", {self.tp: RecordCounts(lost=lost, skipped=skipped)})

    def with_counts(self, counts: Counts) -> Finding:
        return replace(self, counts=dict(counts))

    @cached_property
    def tp(self) -> TopicPartition | None:
        """Built once per finding (a verdict asks ~3 times per partition); not a field, so not compared."""
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
                "fix": self.fix, "inferred": self.inferred, "records": self.records.to_dict(),
                "counts": counts_to_list(self.counts)}


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
    counts: Counts = field(default_factory=dict)   # per partition, merged over findings

    @classmethod
    def of(cls, findings: Iterable[Finding], *, source: str = "checkpoint",
           subject: str | None = None) -> Verdict:
        ordered = _ordered(findings)
        counts = {s.value: 0 for s in Severity}
        for f in ordered:
            counts[f.severity.value] += 1
        summary: dict[str, int] = dict(counts)
        summary["partitions"] = len({f.tp for f in ordered if f.tp is not None})
        counts = merged_counts(ordered)
        total = total_counts(counts)
        summary.update(records_lost=total.lost, records_skipped=total.skipped, records_duplicated=total.duplicated)
        summary["records_to_replay"] = sum(count_of(f.numbers.get("records_to_replay")) for f in ordered)
        summary["backlog"] = sum(count_of(f.numbers.get("backlog")) for f in ordered if f.code == "BACKLOG")
        return cls(severity=verdict_severity(ordered), findings=ordered, source=source, subject=subject,
                   summary=summary, counts=counts)

    @property
    def records(self) -> RecordCounts:
        """What the restart loses, skips and duplicates in all (with the loosest bound)."""
        return total_counts(self.counts)

    @property
    def exit_code(self) -> int:
        return ExitCode.BLOCKED if self.severity == BLOCK else ExitCode.OK

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
        counted = self.records.describe()
        totals = [f"records {counted}"] if counted else []
        totals += [f"{k.replace('_', ' ')} {self.summary.get(k, 0):,}"
                   for k in ("records_to_replay", "backlog") if self.summary.get(k)]
        if totals:
            parts.append(", ".join(totals))
        return " — ".join(parts)

    def with_findings(self, extra: Iterable[Finding]) -> Verdict:
        """A new verdict with ``extra`` findings added (e.g. the flow could not write the record)."""
        return Verdict.of([*self.findings, *extra], source=self.source, subject=self.subject)

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": str(self.severity), "exit_code": self.exit_code, "source": self.source,
                "subject": self.subject, "summary": dict(self.summary), "headline": self.headline,
                "fix": self.fix, "records": self.records.to_dict(), "counts": counts_to_list(self.counts),
                "findings": [f.to_dict() for f in self.findings]}


def _ordered(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Query-level findings first (worst first, else as emitted), then partitions in order."""
    items = list(findings)
    query = [f for f in items if f.topic is None]
    placed = [f for f in items if f.topic is not None]
    query.sort(key=lambda f: -f.severity.rank)
    placed.sort(key=lambda f: (f.topic or "", -1 if f.partition is None else f.partition, -f.severity.rank))
    return tuple(query + placed)


def count_of(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def merged_counts(findings: Iterable[Finding]) -> dict[TopicPartition, RecordCounts]:
    """Per partition, the largest count of each kind over all findings (see :class:`RecordCounts`)."""
    out: dict[TopicPartition, RecordCounts] = {}
    for f in findings:
        for tp, c in f.counts.items():
            out[tp] = out[tp].merged(c) if tp in out else c
    return {tp: c for tp, c in sorted(out.items()) if c.total}
