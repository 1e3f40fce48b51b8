"""The audit's small history file: the last runs' few numbers per job, for trends, growth and the chart.

Small on purpose (no partitions, no findings): it carries what the next run needs: the broker
sample for the status trend (so a rate-limited job falling behind is seen), checkpoint size and file
count for growth, and the series the chart draws. A damaged file restarts the trends; it never
stops the audit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.watch.audit.job import FORMAT_VERSION, JobAudit
from airflow_kafka_spark.watch.observation import Sample

HISTORY_FILE = "audit-history.json"
KEEP_RUNS = 48                      # two days of hourly runs


@dataclass
class AuditHistory:
    """The last runs, oldest first: ``{"at_ms": ..., "jobs": {name: history_entry}}`` each."""

    runs: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, out_dir: str, storage_options: dict | None = None) -> AuditHistory:
        """The history beside the reports; a missing file is an empty history, a damaged one too
        (with the damage reported by the caller's next write replacing it) — trends restart, the
        audit itself must not stop because last hour's file was cut short."""
        loc = open_location(out_dir, storage_options, what="audit folder").child(HISTORY_FILE)
        raw = read_bytes(loc)
        if not raw:
            return cls()
        try:
            doc = load_json(raw, what="audit history")
            runs = [r for r in doc.get("runs", []) if isinstance(r, dict) and "at_ms" in r]
        except (ValueError, AttributeError):
            return cls()
        return cls(sorted(runs, key=lambda r: r["at_ms"]))

    def samples_for(self, job: str) -> list[Sample]:
        out = []
        for run in self.runs:
            doc = (run.get("jobs", {}).get(job) or {}).get("sample")
            if doc:
                try:
                    out.append(Sample.from_dict(doc))
                except (KeyError, TypeError, ValueError):
                    continue
        return out

    def previous(self, job: str) -> dict[str, Any] | None:
        for run in reversed(self.runs):
            if job in run.get("jobs", {}):
                return run["jobs"][job]
        return None

    def append(self, at_ms: int, audits: Sequence[JobAudit], *, keep: int = KEEP_RUNS) -> None:
        self.runs.append({"at_ms": at_ms, "jobs": {a.job: a.history_entry() for a in audits}})
        self.runs = sorted(self.runs, key=lambda r: r["at_ms"])[-keep:]

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT_VERSION, "runs": self.runs}, indent=1, default=str).encode()


def with_growth(audit: JobAudit, previous: Mapping[str, Any] | None) -> JobAudit:
    """Add checkpoint size and file-count growth since the previous report to ``audit.checkpoint``."""
    if previous is None:
        return audit
    for key, prev_key in (("bytes", "checkpoint_bytes"), ("files", "checkpoint_files")):
        now, before = audit.checkpoint.get(key), previous.get(prev_key)
        if isinstance(now, int) and isinstance(before, int):
            audit.checkpoint[f"{key}_growth"] = now - before
    return audit
