"""Which checkpoint log formats a Spark release reads, and the findings for a deploy on another Spark.

Why its own module: the table is inferred (failure-scenarios S27, format reference §1.3/§1.4/§2.5)
and will change as releases are checked; it should be found and edited in one place.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_kafka_spark.verdict.findings import BLOCK, WARN, Finding

if TYPE_CHECKING:  # types only: the verdict stays free of Kafka client and fsspec imports
    from airflow_kafka_spark.checkpoint.model import CheckpointState
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def parse_version(text: str | None) -> tuple[int, ...] | None:
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


def runtime_findings(cp: CheckpointState, record: LifecycleRecord | None, target_spark_version: str | None
                     ) -> list[Finding]:
    """Findings for running ``target_spark_version`` on this checkpoint (log formats, the recorded writer)."""
    target = parse_version(target_spark_version)
    if target is None:
        return []
    out: list[Finding] = []
    shown = target_spark_version
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
    written = parse_version(getattr(record, "spark_version", None))
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
