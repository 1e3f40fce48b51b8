"""What a deploy will run with (:class:`DeployOptions`), built from a job's registry entry in one place.

Why one constructor for jobs: the operators, the safe-restart DAG, the hourly audit and the CLI all
judge a registered job; if each copied fields out of the :class:`JobSpec` by hand they would drift
apart (they did: the audit treated a parquet sink as idempotent, validate did not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.verdict.versions import parse_version


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
    * ``idempotent_sink``: True/False if known; decides whether a replay means duplicates (for a job:
      its sink's :attr:`~airflow_kafka_spark.registry.model.Sink.replay_is_idempotent`).
    * ``strict``: warnings block (WARN findings become BLOCK).
    * ``max_offsets_per_trigger``: the rate limit, to size the first batches of a backlog.
    * ``backlog_warn_records``: an unlimited first batch at least this large is a WARN.
    * ``clock_skew_ms``: tolerance of the record-timestamp identity heuristic.
    * ``owner``: who deploys (a lease held by this owner is not "someone else").
    * ``kafka_group_id``: the source's ``kafka.group.id`` if the deploy sets one (S24).
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
    kafka_group_id: str | None = None

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
        if self.target_spark_version is not None and parse_version(self.target_spark_version) is None:
            raise UserError(f"Spark version {self.target_spark_version!r} is not like 4.0.0")

    @classmethod
    def for_job(cls, spec: JobSpec, *, new_query: bool = False, expect_new_checkpoint: bool = False
                ) -> DeployOptions:
        """The options a registered job deploys with; every caller that judges a job builds them here.

        ``new_query``: the checkpoint holds no query yet, so the job's startingOffsets apply (on an
        existing checkpoint they would only add a "will be ignored" warning to every restart).
        Whether a replay duplicates output is the sink's call (:attr:`JobSpec.replay_is_idempotent`).
        """
        return cls(topics=spec.topics, fail_on_data_loss=spec.fail_on_data_loss,
                   starting_offsets=spec.starting_offsets_default if new_query else None,
                   conf=dict(spec.spark_conf), expect_new_checkpoint=expect_new_checkpoint,
                   idempotent_sink=spec.replay_is_idempotent, max_offsets_per_trigger=spec.max_offsets_per_trigger)

    @property
    def explicit_starting_offsets(self) -> PartitionOffsets | None:
        """``starting_offsets`` as offsets when it is JSON, else None."""
        if self.starting_offsets in (None, "earliest", "latest"):
            return None
        return parse_offsets_json(self.starting_offsets, what="startingOffsets")
