"""Whether a change needs a person's approval, and what that person is shown (pure).

Why: accepting data loss used to be a checkbox ticked *before* anyone had seen the plan. Now the
safe restart computes the reset or restore plan first (the core's own :class:`~airflow_kafka_spark.ops.plan.Plan`,
from a dry run: the numbers are never recomputed here) and asks for approval when the plan would
lose or skip records, replay records into a sink that is not idempotent, or when a BLOCK verdict
is being overridden. Nothing else pauses.

The job keeps running between the approval and the stop, and producers keep writing, so the
reset that runs after the stop is planned again. What the approver grants is a **bound**: the
reset may skip at most ``max_records_skipped`` records (the approver's number, or the number
shown plus :data:`SLACK_FRACTION`, at least :data:`SLACK_MIN_RECORDS`); a re-plan above it is
refused before anything changes (and the run rolls back to the running application).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_kafka_spark.ops.plan import Plan
from airflow_kafka_spark.verdict.findings import INFO, PASS

# The bound when the approver leaves it empty: what was shown plus 10 %, at least 1,000 records
# (the records produced while the job stops and the backup is taken are skipped by reset-latest too).
SLACK_FRACTION = 0.10
SLACK_MIN_RECORDS = 1000


@dataclass(frozen=True)
class TopicNumbers:
    """One topic of the plan: records the change skips and reads again."""

    skipped: int = 0
    replayed: int = 0


@dataclass(frozen=True)
class ApprovalRequest:
    """What the approval task shows and decides on; ``needed`` False means the run does not pause."""

    needed: bool
    reasons: tuple[str, ...]
    kind: str                                   # reset | restore | none
    mode: str | None
    headline: str
    skipped: int = 0
    replayed: int = 0                           # committed records read again + a pending batch's
    topics: dict[str, TopicNumbers] = field(default_factory=dict)
    codes: tuple[str, ...] = ()                 # plan findings above PASS and overridden verdict codes

    def bound(self, entered: Any = None) -> int:
        """The most records the reset after the stop may skip under this approval."""
        if entered not in (None, ""):
            return int(entered)
        return self.skipped + max(int(self.skipped * SLACK_FRACTION), SLACK_MIN_RECORDS)

    def body(self) -> str:
        """Markdown for the approval form (Airflow's "Required actions" page)."""
        rows = "\n".join(f"| {t} | {n.skipped:,} | {n.replayed:,} |" for t, n in sorted(self.topics.items()))
        lines = ["**Why approval is needed**", "", *[f"* {r}" for r in self.reasons], "",
                 f"**{self.kind} plan** ({self.mode or 'n/a'}): {self.headline}", ""]
        if rows:
            lines += ["| topic | records skipped | records read again |", "|---|---:|---:|", rows,
                      f"| **total** | **{self.skipped:,}** | **{self.replayed:,}** |", ""]
        if self.codes:
            lines += ["Verdict codes: " + ", ".join(f"`{c}`" for c in self.codes), ""]
        if self.kind == "reset":
            lines += ["The job keeps running until the stop that follows an approval; the reset is then planned "
                      "again and refused (nothing changed, the running application is put back) if it would skip "
                      f"more than *max_records_skipped* records. Empty: {self.bound():,} (the number above plus "
                      f"{SLACK_FRACTION:.0%}, at least {SLACK_MIN_RECORDS:,}).", ""]
        elif self.kind == "restore":
            lines += ["The job keeps running until the stop that follows an approval: the restore then reads "
                      "again what the job committed meanwhile, on top of the numbers above.", ""]
        lines += ["**Reject** changes nothing: the checkpoint, the backups and the running job stay as they are."]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"], out["codes"] = list(self.reasons), list(self.codes)
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ApprovalRequest:
        return cls(needed=bool(doc["needed"]), reasons=tuple(doc.get("reasons") or ()), kind=str(doc["kind"]),
                   mode=doc.get("mode"), headline=str(doc.get("headline") or ""), skipped=int(doc.get("skipped") or 0),
                   replayed=int(doc.get("replayed") or 0),
                   topics={t: TopicNumbers(**n) for t, n in (doc.get("topics") or {}).items()},
                   codes=tuple(doc.get("codes") or ()))


def approval_request(plan: Plan | None, *, idempotent_sink: bool | None,
                     overridden_codes: Iterable[str] = ()) -> ApprovalRequest:
    """The request for a change ``plan`` (None: the run changes no offsets) and a BLOCK overridden before it."""
    overridden = tuple(sorted(set(overridden_codes)))
    reasons: list[str] = []
    if overridden:
        reasons.append(f"the BLOCK verdict before the change is overridden ({', '.join(overridden)})")
    if plan is None:
        return ApprovalRequest(needed=bool(reasons), reasons=tuple(reasons), kind="none", mode=None,
                               headline="no reset or restore in this run", codes=overridden)
    topics: dict[str, TopicNumbers] = {}
    for m in plan.moves:
        t = topics.get(m.topic, TopicNumbers())
        topics[m.topic] = TopicNumbers(t.skipped + m.skipped, t.replayed + m.replayed + m.pending_replay)
    mode = plan.details.get("mode") if plan.kind == "reset" else "restore"
    replayed = plan.replayed + plan.pending_replay
    if plan.skipped:
        reasons.append(f"the {plan.kind} skips {plan.skipped:,} records that were never committed")
    elif mode == "latest":
        reasons.append("reset-latest skips every record not read when the reset runs")
    if plan.kind == "restore" and replayed and not idempotent_sink:
        reasons.append(f"the restore reads {replayed:,} records again into a sink that is not idempotent")
    codes = tuple(dict.fromkeys([*overridden, *(f.code for f in plan.findings if f.severity not in (PASS, INFO))]))
    return ApprovalRequest(needed=bool(reasons), reasons=tuple(reasons), kind=plan.kind, mode=mode,
                           headline=plan.headline, skipped=plan.skipped, replayed=replayed, topics=topics, codes=codes)
