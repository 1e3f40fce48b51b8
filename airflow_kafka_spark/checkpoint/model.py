"""What a checkpoint holds, as read: batches, commits, problems with stable codes, and the whole state.

Plain values produced by :func:`~airflow_kafka_spark.checkpoint.reader.read_checkpoint`; the verdict,
the operations and the watchers read these, never the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from airflow_kafka_spark.kafka.offsets import PartitionOffsets

CHECKPOINT_CORRUPT = "CHECKPOINT_CORRUPT"
"""A file Spark reads is damaged, or the logs contradict each other: Spark would fail or misbehave."""
MISSING_QUERY_ID = "MISSING_QUERY_ID"
"""``metadata`` missing/unreadable while batches exist: Spark would silently start under a new id (S10)."""
UNSUPPORTED_LOG_VERSION = "UNSUPPORTED_LOG_VERSION"
"""A log file newer than this tool understands (and than older Spark can read): never guess (S27)."""
STRAY_TEMP_FILE = "STRAY_TEMP_FILE"
"""A leftover ``.<name>.<uuid>.tmp`` from an interrupted write: Spark ignores it, backups must too (S08)."""
LOG_GAP = "LOG_GAP"
"""A hole in the retained history that Spark does not need to restart (history/backups are affected)."""
INITIAL_OFFSETS_UNREADABLE = "INITIAL_OFFSETS_UNREADABLE"
"""``sources/<n>/0`` is damaged but Spark will not read it again (a batch was already committed)."""

LEGACY_ESCAPED_PATH = "LEGACY_ESCAPED_PATH"
"""Spark 2.x's doubly-escaped folder of this checkpoint path exists: Spark 3+ refuses to start (SPARK-26824)."""

WARN_CODES = frozenset({STRAY_TEMP_FILE, LOG_GAP, INITIAL_OFFSETS_UNREADABLE})


@dataclass(frozen=True)
class BatchOffsets:
    """One ``offsets/<batch_id>`` file."""

    batch_id: int
    version: int                                  # 1 or 2 (the ``v<N>`` line)
    batch_timestamp_ms: int | None
    batch_watermark_ms: int | None
    conf: dict[str, str]                          # open map, as pinned by Spark
    # source id ("0", "1", ... or v2 names) -> offsets; None for "-"
    sources: dict[str, PartitionOffsets | None]
    # Every source line as written ("-" -> None), Kafka or not, in file order. Non-Kafka sources
    # (rate, files, ...) appear here only, so ``sources`` never holds something that is not Kafka.
    raw_sources: dict[str, str | None] = field(default_factory=dict)

    @cached_property
    def kafka_offsets(self) -> PartitionOffsets:
        """All Kafka partitions of all sources merged (what lag/verdict usually need).

        Computed once per batch: lag, status and headroom look it up per partition, and rebuilding
        the merged dict on every access cost partitions² × batches (27 s for 1,000 × 100). Callers
        must not mutate it (copy with ``dict(...)`` first).
        """
        out: PartitionOffsets = {}
        for offs in self.sources.values():
            if offs:
                out.update(offs)
        return out

    @property
    def source_count(self) -> int:
        """Number of source lines; Spark refuses a restart if the query's source count differs."""
        return len(self.raw_sources) if self.raw_sources else len(self.sources)


@dataclass(frozen=True)
class BatchCommit:
    """One ``commits/<batch_id>`` file: the batch finished and its sink output is durable."""

    batch_id: int
    version: int                        # 2 with ...stateStore.checkpointFormatVersion=2, else 1
    next_batch_watermark_ms: int | None
    has_state_unique_ids: bool = False  # v2 ``stateUniqueIds`` present


@dataclass(frozen=True)
class CheckpointProblem:
    """A self-consistency problem (S08–S10): a stable code, the file, one line with the repair."""

    code: str           # CHECKPOINT_CORRUPT, MISSING_QUERY_ID, STRAY_TEMP_FILE, ...
    path: str           # relative to the checkpoint location, e.g. "offsets/7" ("" = the location)
    message: str

    @property
    def severity(self) -> str:
        """``WARN`` for things Spark tolerates (stray temp files, holes in history), else ``BLOCK``."""
        return "WARN" if self.code in WARN_CODES else "BLOCK"


@dataclass(frozen=True)
class CheckpointState:
    location: str
    exists: bool
    query_id: str | None
    offset_batch_ids: list[int]                   # sorted numeric names in offsets/
    commit_batch_ids: list[int]                   # sorted numeric names in commits/
    latest_planned: BatchOffsets | None           # offsets/L
    latest_committed: BatchOffsets | None         # offsets/C where C = newest commits/ id
    initial_offsets: dict[str, PartitionOffsets]  # sources/<n>/0 by source id
    has_state: bool                               # state/ has files
    stray_files: list[str] = field(default_factory=list)
    problems: list[CheckpointProblem] = field(default_factory=list)
    history: list[BatchOffsets] = field(default_factory=list)  # filled only when asked (read_history=True)
    latest_commit: BatchCommit | None = None      # commits/C itself (version, watermark)
    before_latest: BatchOffsets | None = None     # offsets/L-1, which Spark reads on every restart
    legacy_escaped: str | None = None             # Spark 2.x's doubly-escaped folder of this location, if found
    commit_log_absent: bool = False               # no commits/ folder: Spark 2.1's layout (it wrote none)

    @property
    def pending_batch(self) -> BatchOffsets | None:
        """offsets/L without commits/L: Spark re-runs exactly this range on restart (S07)."""
        if self.latest_planned is None:
            return None
        if self.latest_committed is None or self.latest_committed.batch_id != self.latest_planned.batch_id:
            return self.latest_planned
        return None

    @property
    def blocking_problems(self) -> list[CheckpointProblem]:
        return [p for p in self.problems if p.severity == "BLOCK"]
