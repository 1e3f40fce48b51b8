"""The job registry's data model: one validated :class:`JobSpec` per streaming job, in a :class:`Registry`.

Why a registry at all: DAG params and ``dag_run.conf`` are typed by whoever triggers a run. If a
run could name any checkpoint or any backup folder, a typo (or a hostile trigger) could point a
reset at the wrong job's checkpoint, or a restore at ``/etc``. So runs name a *job*, and everything
that can destroy data comes from the registry file (:mod:`airflow_kafka_spark.registry.loader`
reads and checks it). This module imports nothing from Airflow.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry import locations
from airflow_kafka_spark.registry.context import Context, show

# Used with fullmatch only: ``$`` in re.match also matches before a trailing newline, which
# would let "orders\n" through.
NAME_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
_NAME = re.compile(NAME_PATTERN)
DEPLOY_MODES = ("client", "cluster")


def is_job_name(name: object) -> bool:
    """Whether ``name`` is a legal job name (a string matching :data:`NAME_PATTERN` in full)."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


class Sink(StrEnum):
    """How the job writes its output, and so what a replayed batch does to it.

    The one place that decides whether a replay is harmless (:attr:`replay_is_idempotent`); the
    verdict, reset, restore, the hourly audit and the CLI all ask it. A replay here means what a
    pending batch (``offsets/N`` written, ``commits/N`` not) does on restart: Spark re-runs batch N
    with the same id and the same offset range, in the same checkpoint.

    * ``idempotent``: the reference job's ``foreachBatch`` overwrites ``<output>/query=<id>/batch=<N>``;
      re-running batch N rewrites the same folder. Harmless.
    * ``append``: ``foreachBatch`` appends; a re-run batch adds its rows again. Duplicates.
    * ``parquet``: Spark's file sink. ``FileStreamSink.addBatch`` skips a batch whose id is not above
      the latest in ``<output>/_spark_metadata`` ("Skipping already committed batch"), and files of
      a batch that never reached that log are invisible to readers of the log. So a re-run batch
      writes nothing twice: harmless (tests/integration/test_parquet_replay.py shows it on Spark).
      Not across checkpoints: a new checkpoint (reset) restarts batch ids at 0 and the sink would
      silently skip them (S20); that is reset's and restore's sink-log check
      (:attr:`keeps_batch_log`), not a replay.
    * ``batch-keyed``: a ``foreachBatch`` that keys its output by the batch id alone
      (``<output>/batch=<N>`` overwritten, Delta's ``txnAppId``/``txnVersion`` with a fixed app id).
      A replay rewrites (or skips) the same batch: harmless. A reset is not: the new query restarts at
      batch 0, so its batches overwrite the old query's output or are skipped as already written, and
      the reset refuses with the fix (``BATCH_IDS_COLLIDE``, ops/reset_plan.py).
    """

    IDEMPOTENT = "idempotent"
    APPEND = "append"
    PARQUET = "parquet"
    BATCH_KEYED = "batch-keyed"

    @classmethod
    def named(cls, name: str) -> Sink:
        """The sink for a ``--sink`` value of the CLI (see :data:`SINK_CHOICES`)."""
        return cls.APPEND if name == "non-idempotent" else cls(name)

    @property
    def replay_is_idempotent(self) -> bool:
        """True when re-running a batch under the same id in the same checkpoint duplicates nothing."""
        return self is not Sink.APPEND

    @property
    def keyed_by_batch_id(self) -> bool:
        """True when the output remembers batch ids, so a new query's batch 0, 1, … meet the old query's."""
        return self is Sink.BATCH_KEYED

    @property
    def keeps_batch_log(self) -> bool:
        """True for Spark's file sink, whose ``<output>/_spark_metadata`` log records committed batch ids."""
        return self is Sink.PARQUET


class JobKind(StrEnum):
    """Where the job keeps its position, and so what a safe restart validates, backs up and moves.

    * ``structured``: Spark Structured Streaming; the position is the checkpoint's offset log.
    * ``dstream``: Spark Streaming's Kafka direct API (``spark-streaming-kafka-0-10``) committing its
      offset ranges to ``group`` with ``commitAsync`` (one batch late, user story 1), optionally with
      a DStream checkpoint (``dstream_checkpoint``) that only the build that wrote it can read
      (story 2; verdict/dstream.py). Receiver-based jobs (``spark-streaming-kafka-0-8``, WAL) are not
      a kind: that connector was removed in Spark 3.0 and the registry refuses them.
    """

    STRUCTURED = "structured"
    DSTREAM = "dstream"


class Integration(StrEnum):
    """What the product adds to the user's application at submit, and so how it stops and starts it.

    The application is the user's and is passed as spark-submit names it (``application``,
    ``main_class``, its own arguments verbatim); an integration only adds what Spark itself reads.
    One implementation each in :mod:`airflow_kafka_spark.runtime.integrations`:

    * ``agent`` (the default): the product's JVM agent is loaded by configuration alone
      (``spark.plugins``, a checkpoint file manager, a query listener; docs/your-jobs.md). It stops
      every query on a batch boundary when the stop marker appears and reports what it saw beside
      the checkpoint. The job's own code and arguments are untouched.
    * ``reference``: the bundled reference job's command-line contract (``--topics``,
      ``--checkpoint``, ``--stop-marker``, ``--starting-offsets-file`` ...; ``MANAGED_FLAGS``), put
      before the job's own arguments; the DStream reference job's contract for ``kind: dstream``.
    * ``none``: nothing is added. The product cannot ask such a job to stop, so a stop kills the
      driver at once and says which batch will replay; a reset's start is still exact (Spark reads
      it from the new checkpoint) and checked by the health gate.
    """

    AGENT = "agent"
    REFERENCE = "reference"
    NONE = "none"


#: What ``aks validate|restore --sink`` accepts: a registry sink, or ``non-idempotent`` (= ``append``).
SINK_CHOICES = ("idempotent", "non-idempotent", *(s.value for s in Sink if s is not Sink.IDEMPOTENT))


@dataclass(frozen=True)
class BackupRetention:
    """How many checkpoint backups to keep: the newest ``keep_last`` always survive; older ones
    go once they are older than ``max_age_days`` (None: never by age)."""

    keep_last: int = 5
    max_age_days: float | None = 30.0

    @property
    def max_age_s(self) -> float | None:
        """``max_age_days`` in seconds, as the pruning functions take it (None: never by age)."""
        return None if self.max_age_days is None else self.max_age_days * 86400.0


@dataclass(frozen=True)
class HealthGate:
    """After a (re)start, the job counts as healthy once ``min_batches`` new batches commit
    within ``timeout_s`` seconds.

    ``idle_pass_s``: Spark plans no batch while the topics are quiet, so a gate that only counts
    batches would time out (and roll back a good deploy) on a quiet topic. Once the driver has
    been alive this long and the job has nothing left to read, the gate passes as *idle* and says
    that the first batch of the new code is still unproven. ``None`` (``null``) disables it.
    """

    min_batches: int = 1
    timeout_s: float = 600.0
    idle_pass_s: float | None = 120.0


def key(doc: str, *, app: bool = False) -> dict[str, Any]:
    """A :class:`JobSpec` field's metadata: its one-line documentation (docs/registry.md is generated
    from it, :mod:`airflow_kafka_spark.registry.keys`) and whether it is part of "the application"
    (what a submit records and a rollback resubmits, :data:`APP_FIELDS`)."""
    return {"doc": doc, "app": app}


@dataclass(frozen=True)
class JobSpec:
    """One streaming job, validated. Paths are normalised (local ones resolved with realpath).

    The one declaration of the registry's job keys: the loader accepts exactly these fields
    (:data:`JOB_KEYS`), each field's ``doc`` is its line in docs/registry.md, and the fields marked
    ``app`` make up the application a submit records (:data:`APP_FIELDS`).
    """

    name: str = field(metadata=key("the job's name in DAG runs, the CLI and the UI: a lower-case letter, then "
                                   "letters, digits, `_` or `-`"))
    application: str = field(metadata=key("the user's `.jar` or `.py`, as spark-submit takes it; under "
                                          "`allowed_roots`", app=True))
    topics: tuple[str, ...] = field(metadata=key("the Kafka topics the job reads (validate, lag and reset read "
                                                 "these)", app=True))
    checkpoint: str = field(metadata=key("the job's `checkpointLocation` (a DStream job's lifecycle record lives "
                                         "there); local, `hdfs://` or `s3a://`"))
    backup_root: str = field(metadata=key("where backups go, in `<backup_root>/<job>/` (may be shared by jobs)"))
    stop_marker: str = field(metadata=key("the file whose appearance asks the job to stop on a batch boundary; "
                                          "default `<checkpoint>.stop`"))
    application_args: tuple[str, ...] = field(default=(), metadata=key(
        "the job's own arguments, verbatim but for the placeholders `{checkpoint}` `{bootstrap_servers}` "
        "`{topics}` `{output}` `{stop_marker}` `{name}` (`{{`/`}}` are literal braces; an argument with single "
        "and doubled braces both, such as nested JSON, is an error)", app=True))
    main_class: str | None = field(default=None, metadata=key("a JAR's entry point (`--class`)", app=True))
    integration: Integration = field(default=Integration.AGENT, metadata=key(
        "what the product adds at submit: `agent` (the JVM agent, by configuration alone), `reference` (the "
        "bundled jobs' flags) or `none` (docs/your-jobs.md)", app=True))
    jars: tuple[str, ...] = field(default=(), metadata=key(
        "the job's own `--jars`, under `allowed_roots` or `local:`", app=True))
    packages: tuple[str, ...] = field(default=(), metadata=key("Maven coordinates for `--packages`", app=True))
    py_files: tuple[str, ...] = field(default=(), metadata=key(
        "the job's own `--py-files`, under `allowed_roots` or `local:`", app=True))
    files: tuple[str, ...] = field(default=(), metadata=key(
        "the job's own `--files` (a config file it reads), under `allowed_roots` or `local:`", app=True))
    spark_version: str | None = field(default=None, metadata=key(
        "the Spark line the job runs on (`\"3.5\"`, `\"4.2\"`): picks the agent's build; unset, "
        "`spark-submit --version` is asked once", app=True))
    spark_conn_id: str = field(default="spark_default", metadata=key("the Airflow Spark connection to submit with"))
    spark_conf: dict[str, str] = field(default_factory=dict, metadata=key(
        "`spark.*` settings; the product appends to list-valued ones (`spark.jars`, `spark.plugins`)", app=True))
    deploy_mode: str | None = field(default=None, metadata=key(
        "`client` or `cluster`; unset, the Spark connection's", app=True))
    kafka_conn_id: str = field(default="kafka_default", metadata=key(
        "the Airflow Kafka connection (bootstrap servers and security settings; secrets stay there)"))
    output: str | None = field(default=None, metadata=key(
        "the job's output folder, for `{output}` and the file sink's `_spark_metadata` check", app=True))
    sink: Sink = field(default=Sink.IDEMPOTENT, metadata=key(
        "what a replayed batch does to the output: `idempotent`, `append`, `parquet` (Spark's file sink) or "
        "`batch-keyed` (a `foreachBatch` keyed by batch id alone: a reset refuses, as the new query's ids restart "
        "at 0)", app=True))
    backup_retention: BackupRetention = field(default_factory=BackupRetention, metadata=key(
        "`{keep_last: 5, max_age_days: 30}`: the newest `keep_last` backups always stay"))
    stop_timeout_s: float = field(default=300.0, metadata=key(
        "how long a stop waits for a batch boundary before it kills the driver"))
    compatibility_version: str = field(default="1", metadata=key(
        "bump it for a checkpoint-breaking change: `auto` then resets with `preserve`", app=True))
    compatibility_probe: bool = field(default=False, metadata=key(
        "`auto` asks Spark, by a shadow start of the new build on a copy of the checkpoint (docs/probe.md)"))
    probe_timeout_s: float = field(default=600.0, metadata=key("how long the compatibility probe may run"))
    starting_offsets_default: str = field(default="earliest", metadata=key(
        "`earliest`, `latest` or Spark offsets JSON: what the reference job starts a new query from", app=True))
    fail_on_data_loss: bool = field(default=True, metadata=key(
        "the job's `failOnDataLoss`, used to judge retention gaps", app=True))
    max_offsets_per_trigger: int | None = field(default=None, metadata=key(
        "the job's `maxOffsetsPerTrigger`, used to size the first batch after a downtime", app=True))
    max_lag_records: int | None = field(default=None, metadata=key("the lag alert threshold in records (unset: "
                                                                   "not checked)"))
    max_lag_seconds: float | None = field(default=None, metadata=key("the lag alert threshold in seconds"))
    min_headroom_s: float | None = field(default=None, metadata=key(
        "alert when retention would delete unread records within this many seconds"))
    stall_after_s: float | None = field(default=None, metadata=key(
        "alert when no batch committed for this long while records wait"))
    mirror_group: str | None = field(default=None, metadata=key(
        "a shadow consumer group that makes the job's lag visible to Kafka's tools"))
    health_gate: HealthGate = field(default_factory=HealthGate, metadata=key(
        "`{min_batches: 1, timeout_s: 600, idle_pass_s: 120}`: when a (re)started job counts as healthy"))
    kind: JobKind = field(default=JobKind.STRUCTURED, metadata=key(
        "`structured` (a Spark checkpoint holds the position) or `dstream` (its consumer group does)"))
    group: str | None = field(default=None, metadata=key(
        "kind `dstream`: the consumer group the job `commitAsync`s to"))
    dstream_checkpoint: str | None = field(default=None, metadata=key(
        "kind `dstream`: `ssc.checkpoint(dir)`, if the job uses one"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (for XCom or logs); it holds no secret by construction."""
        out = asdict(self)
        out["topics"] = list(self.topics)
        for key in ("application_args", "jars", "packages", "py_files", "files"):
            out[key] = list(getattr(self, key))
        out["sink"] = self.sink.value
        out["kind"] = self.kind.value
        out["integration"] = self.integration.value
        return out

    @property
    def replay_is_idempotent(self) -> bool:
        """Whether re-running a batch of this job's checkpoint duplicates output; see :class:`Sink`."""
        return self.sink.replay_is_idempotent

    @property
    def is_dstream(self) -> bool:
        """A DStream job (``kind: dstream``): its position is its consumer group, not a checkpoint."""
        return self.kind is JobKind.DSTREAM

    @property
    def position_source(self) -> tuple[str | None, str | None]:
        """``(checkpoint, group)``, one of them None: where the job keeps its Kafka position.

        A Structured Streaming job keeps it in its checkpoint; a DStream job in the consumer group it
        ``commitAsync``s to (its ``checkpoint`` field is only where its lifecycle record lives).
        """
        return (None, self.group) if self.is_dstream else (self.checkpoint, None)

    @property
    def sink_output(self) -> str | None:
        """The output folder reset and restore must look at, if any: a file sink's ``_spark_metadata`` batch
        log, or a batch-keyed output the new query's batch ids would collide with."""
        return self.output if self.sink.keeps_batch_log or self.sink.keyed_by_batch_id else None


#: Every registry key of a job, in the order :class:`JobSpec` declares them: the one list the loader checks.
JOB_KEYS = tuple(f.name for f in fields(JobSpec))
#: The keys that make up "the application" (marked :data:`APP`), recorded at each submit.
APP_FIELDS = tuple(f.name for f in fields(JobSpec) if f.metadata.get("app"))


@dataclass(frozen=True)
class Registry:
    """The loaded registry. Look jobs up with :meth:`get`; it never returns an unchecked name."""

    path: str
    allowed_roots: tuple[str, ...]
    jobs: Mapping[str, JobSpec]

    def get(self, name: object) -> JobSpec:
        """The job called ``name``; a :class:`UserError` for an invalid or unknown name."""
        known = ", ".join(self.names()) or "(none)"
        if not is_job_name(name):
            raise UserError(
                f"invalid job name {show(name)}: a job name matches {NAME_PATTERN} (lower-case letter, "
                f"then letters, digits, '_' or '-'); use one of the registered jobs: {known}")
        try:
            return self.jobs[name]
        except KeyError:
            raise UserError(f"unknown job {name!r}; known jobs: {known} (registry {self.path}); "
                            "add it to the registry or fix the name") from None

    def names(self) -> list[str]:
        """The job names, sorted."""
        return sorted(self.jobs)

    def check_location(self, location: str, *, what: str = "location") -> str:
        """Normalise ``location`` and require it under ``allowed_roots``; returns the normalised form.

        For locations that do not come from the registry (a restore source typed into a DAG run)
        and for re-checking right before a destructive step: a symlink planted after the registry
        was loaded is caught here.
        """
        ctx = Context(Path(self.path))
        loc = locations.location(ctx, f"{what}", location)
        roots = [locations.location(ctx, "allowed_roots", r) for r in self.allowed_roots]
        if not any(loc.within(r) for r in roots):
            raise UserError(f"{what} {loc.text!r} is outside the allowed roots "
                            f"({', '.join(self.allowed_roots)}) of {self.path}; use a path under one of them")
        return loc.text

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self.jobs[n] for n in self.names())

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, name: object) -> bool:
        return name in self.jobs
