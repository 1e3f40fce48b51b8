"""What a reset or a restore would do, partition by partition, before it does anything.

A :class:`Plan` is computed from what the checkpoint, Kafka and the lifecycle record say, printed
(a plan without ``--execute`` stops there), and then executed exactly: execution never re-decides. Its rows are
modelled on ``kafka-consumer-groups --reset-offsets``' plan (topic, partition, new offset), with
the columns a streaming job needs on top: where the old checkpoint would have resumed, the end of
a pending (planned, uncommitted) batch, the log bounds, and how many records the change skips or
reads again. Unlike ``kafka-consumer-groups`` nothing is clamped silently: a target outside the
log is either refused or clamped *and* counted.

Counting rules per partition (offsets are "next to read", as everywhere in this package):

* ``old`` = ``C``, the end of the last committed batch: everything below was written to the sink.
* ``skipped`` = ``new − old`` when the new run starts later: records that were never committed and
  that the new run will not read (this includes records retention already deleted). For a
  partition the checkpoint never saw, Spark's own choice would be its earliest offset, so records
  below ``new`` are counted from there.
* ``replayed`` = ``old − new`` when it starts earlier: committed records read again (duplicates in
  a non-idempotent sink).
* ``pending_replay``: records of a pending batch ``[max(old, new), P)`` that the new run reads again.
  A pending batch may have reached the sink before the query died (a kill between the sink write
  and ``commits/N``), so this is the most a non-idempotent sink can get twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark.errors import ExitCode
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition, to_offsets_json
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Finding, Severity, verdict_severity


@dataclass(frozen=True)
class PartitionMove:
    """One partition of a plan: where the old checkpoint stood and where the new run starts."""

    topic: str
    partition: int
    old: int | None              # C: end of the last committed batch (None: the checkpoint never saw it)
    new: int                     # where the new run starts reading
    log_start: int | None
    log_end: int | None
    pending_end: int | None = None   # P: end of a pending batch, if any
    source: str = ""             # how ``new`` was chosen ("committed", "earliest", "datetime", ...)
    note: str = ""               # clamping, fallbacks: never silent

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def skipped(self) -> int:
        base = self.old if self.old is not None else (self.log_start or 0)
        return max(0, self.new - base)

    @property
    def replayed(self) -> int:
        return 0 if self.old is None else max(0, self.old - self.new)

    @property
    def pending_replay(self) -> int:
        if self.pending_end is None or self.old is None:
            return 0
        return max(0, self.pending_end - max(self.old, self.new))

    @property
    def lost_to_retention(self) -> int:
        """Records below the log start that were never committed: gone whatever the plan does."""
        if self.old is None or self.log_start is None:
            return 0
        return max(0, self.log_start - self.old)

    @property
    def backlog(self) -> int:
        return 0 if self.log_end is None else max(0, self.log_end - self.new)

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "old": self.old,
                "pending_end": self.pending_end, "new": self.new, "log_start": self.log_start,
                "log_end": self.log_end, "skipped": self.skipped, "replayed": self.replayed,
                "pending_replay": self.pending_replay, "backlog": self.backlog, "source": self.source,
                "note": self.note}


@dataclass
class Plan:
    """A reset's or restore's plan: the moves, the findings that judge it, and the steps it will take."""

    kind: str                                  # "reset" or "restore"
    subject: str                               # checkpoint location
    moves: list[PartitionMove] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)   # mode, sink, query ids, backup ids, ...

    # -- numbers -----------------------------------------------------------------------------------

    @property
    def skipped(self) -> int:
        return sum(m.skipped for m in self.moves)

    @property
    def replayed(self) -> int:
        return sum(m.replayed for m in self.moves)

    @property
    def pending_replay(self) -> int:
        return sum(m.pending_replay for m in self.moves)

    @property
    def backlog(self) -> int:
        return sum(m.backlog for m in self.moves)

    @property
    def starting_offsets(self) -> PartitionOffsets:
        return {m.tp: m.new for m in self.moves}

    @property
    def starting_offsets_json(self) -> str:
        """Spark's ``startingOffsets`` JSON: every partition, concrete offsets (no -1/-2)."""
        return to_offsets_json(self.starting_offsets)

    @property
    def severity(self) -> Severity:
        return verdict_severity(self.findings)

    @property
    def blocked(self) -> bool:
        return self.severity == BLOCK

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == BLOCK]

    def add(self, code: str, severity: Severity, message: str, fix: str = "", *, tp: TopicPartition | None = None,
            topic: str | None = None, **numbers: Any) -> Finding:
        f = Finding(code, severity, topic=tp.topic if tp else topic, partition=tp.partition if tp else None,
                    numbers=numbers, message=" ".join(message.split()), fix=" ".join(fix.split()))
        self.findings.append(f)
        return f

    # -- output ------------------------------------------------------------------------------------

    @property
    def headline(self) -> str:
        parts = [f"{self.kind} plan: {self.severity}"]
        if self.blocking:
            parts.append("; ".join(dict.fromkeys(f.code for f in self.blocking)))
        parts.append(f"{len(self.moves)} partition(s), skipped {self.skipped:,}, replayed {self.replayed:,}, "
                     f"pending batch replay {self.pending_replay:,}")
        return " — ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "subject": self.subject, "verdict": str(self.severity),
                "headline": self.headline,
                "exit_code": ExitCode.BLOCKED if self.blocked else ExitCode.OK,
                "totals": {"partitions": len(self.moves), "skipped": self.skipped, "replayed": self.replayed,
                           "pending_replay": self.pending_replay, "backlog": self.backlog},
                "starting_offsets": self.starting_offsets_json if self.moves else None,
                "moves": [m.to_dict() for m in self.moves],
                "findings": [f.to_dict() for f in self.findings],
                "actions": list(self.actions), "details": dict(self.details)}

    def render(self) -> str:
        """A plain-text table and the findings, for people."""
        head = ("TOPIC", "PARTITION", "OLD(C)", "PENDING(P)", "NEW", "LOG-START", "LOG-END", "SKIPPED",
                "REPLAYED", "PENDING-REPLAY", "HOW")
        rows = [head]
        for m in self.moves:
            rows.append((m.topic, str(m.partition), _n(m.old), _n(m.pending_end), _n(m.new), _n(m.log_start),
                         _n(m.log_end), _n(m.skipped), _n(m.replayed), _n(m.pending_replay),
                         m.source + (f" ({m.note})" if m.note else "")))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = [self.headline, ""]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        shown = [f for f in self.findings if f.severity != PASS]
        if shown:
            lines.append("")
            lines += [f"{f.severity:<5} {f.code} {f.where}: {f.message}" + (f" Fix: {f.fix}" if f.fix else "")
                      for f in shown]
        if self.actions:
            lines.append("")
            lines += [f"  {i}. {a}" for i, a in enumerate(self.actions, 1)]
        if self.moves:
            lines += ["", f"startingOffsets: {self.starting_offsets_json}"]
        return "\n".join(lines)


def _n(v: int | None) -> str:
    return "-" if v is None else f"{v:,}"


__all__ = ["BLOCK", "INFO", "PASS", "WARN", "PartitionMove", "Plan", "Severity"]
