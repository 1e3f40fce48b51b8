"""Which checkpoint formats a Spark release reads and writes, and the findings for a deploy on another Spark.

Why its own module: the tables are version facts that change as releases are checked; they should be
found and edited in one place. Measured (tests/spark35/test_upgrade.py, tests/fixtures/checkpoints):
Spark 4.2.0 restarts checkpoints written by 3.5.1, and 3.5.1 restarts checkpoints written by 4.2.0,
stateless and with aggregation state in the HDFS-backed and the RocksDB store, with exact output and
the state carried over — both write offsets v1 and commits v1 by default and ignore pinned confs
they do not know. So a rollback is a WARN unless a log or state format the older release cannot
read is in the checkpoint (then BLOCK).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_kafka_spark.verdict.findings import BLOCK, WARN, Finding, Severity

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


# Highest log versions a Spark release reads (S27 upgrade / rollback; docs/scenarios.md, "Spark versions").
# Inferred, not confirmed against every release: offsets v2 ("OffsetMap") is read from 4.1 on (the exact
# release is unverified: only 3.5.1 and 4.2.0 run in the tests, tests/spark35/test_matrix.py); commits v2
# (checkpointFormatVersion=2) from 4.0 on.
def _max_offsets_version(spark: tuple[int, ...]) -> int:
    return 2 if spark[:2] >= (4, 1) else 1


def _max_commits_version(spark: tuple[int, ...]) -> int:
    return 2 if spark[:2] >= (4, 0) else 1


# The first Spark line that pins each of these confs in every offsets/N it writes (Spark pins all its
# "relevant" SQL confs of the session there, user confs never). Measured on offsets/0 of a stateful
# query written by 3.5.1, 4.0.0, 4.1.1 and 4.2.0 (devstack/checkpoint_fixtures.py): 4.1.1 pins the
# same keys as 4.0.0. So the newest marker in the latest offsets file bounds the Spark that wrote it.
_PINNED_FROM: dict[str, tuple[int, int]] = {
    "spark.sql.streaming.stateStore.encodingFormat": (4, 0),
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": (4, 0),
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": (4, 2),
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": (4, 2),
    "spark.sql.streaming.stateStore.rowChecksum.enabled": (4, 2),
    "spark.sql.function.protobufExtensions.enabled": (4, 2),
}
_MARKED_LINES = sorted(set(_PINNED_FROM.values()))
# Pinned by every Spark from 2.4 on: a conf holding it is Spark's whole pinned set, so a marker missing
# there means an older writer (a hand-written or truncated conf says nothing).
_FULL_CONF_WITNESS = "spark.sql.streaming.multipleWatermarkPolicy"


@dataclass(frozen=True)
class Writer:
    """The Spark line(s) that can have written the checkpoint's latest batch: ``low <= line < high``."""

    low: tuple[int, ...] | None     # None: no lower bound known
    high: tuple[int, ...] | None    # exclusive; None: no upper bound known
    shown: str                      # for messages: "4.2.0 (lifecycle record)", "Spark >= 4.2 (pinned confs)"


def checkpoint_writer(cp: CheckpointState, record: LifecycleRecord | None) -> Writer | None:
    """Who last wrote the checkpoint: the lifecycle record if it says, bounded by the pinned confs.

    The confs are facts of the latest offsets file; the record can be stale (a run outside the
    product), so where they disagree the confs win.
    """
    batch = cp.latest_planned
    conf = batch.conf if batch is not None else {}
    low = max((_PINNED_FROM[k] for k in conf if k in _PINNED_FROM), default=None)
    high = None
    if low is not None or _FULL_CONF_WITNESS in conf:  # absent markers say something only in a full conf
        later = [line for line in _MARKED_LINES if low is None or line > low]
        high = later[0] if later else None
    recorded = parse_version(getattr(record, "spark_version", None))
    if recorded is not None and (low is None or recorded[:2] >= low):
        return Writer(recorded[:2], (recorded[0], recorded[1] + 1), f"Spark {record.spark_version} (lifecycle record)")
    if low is None and high is None:
        return None
    bounds = [f">= {low[0]}.{low[1]}" if low else "", f"< {high[0]}.{high[1]}" if high else ""]
    return Writer(low, high, f"Spark {' and '.join(b for b in bounds if b)} (the confs pinned in "
                             f"offsets/{batch.batch_id})")


def _rollback_severity(cp: CheckpointState, target: tuple[int, ...]) -> tuple[Severity, str]:
    """BLOCK only for a state format the older Spark cannot read; the measured rollbacks restart exactly."""
    conf = cp.latest_planned.conf if cp.latest_planned is not None else {}
    encoding = conf.get("spark.sql.streaming.stateStore.encodingFormat", "unsaferow")
    if cp.has_state and encoding != "unsaferow" and target[:2] < (4, 0):
        return BLOCK, f"its state rows are encoded as {encoding}, which Spark before 4.0 cannot decode"
    return WARN, ("measured: Spark 3.5.1 restarts checkpoints written by 4.2.0 exactly (offsets and commits "
                  "v1, HDFS-backed and RocksDB state) and ignores the pinned confs it does not know")


def runtime_findings(cp: CheckpointState, record: LifecycleRecord | None, target_spark_version: str | None
                     ) -> list[Finding]:
    """Findings for running ``target_spark_version`` on this checkpoint (log formats, its last writer)."""
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
    writer = checkpoint_writer(cp, record)
    if writer is None or out:
        return out
    if writer.low is not None and target[:2] < writer.low[:2]:
        severity, why = _rollback_severity(cp, target)
        out.append(Finding(
            "CHECKPOINT_NEWER_THAN_RUNTIME", severity, inferred=severity is BLOCK,
            numbers={"written_by": writer.shown, "runtime": shown},
            message=f"the checkpoint was last written by {writer.shown} and the deploy runs {shown}: a "
                    f"rollback; {why}",
            fix=(f"deploy Spark {writer.low[0]}.{writer.low[1]} or newer, or restore a backup taken before the "
                 "upgrade") if severity is BLOCK else "take a verified backup before the rollback"))
    elif writer.high is not None and target[:2] >= writer.high[:2]:
        out.append(Finding(
            "SPARK_UPGRADE", WARN, numbers={"written_by": writer.shown, "runtime": shown},
            message=(f"the checkpoint was last written by {writer.shown}; the deploy runs {shown}: from its "
                     f"first batch on the checkpoint carries the newer Spark's confs and state metadata"),
            fix="take a verified backup of the checkpoint before deploying the upgrade"))
    return out
