"""Start and stop a registered streaming job without holding a worker slot for its lifetime.

``SubmitStreamingJobOperator`` builds the spark-submit line with the Spark provider's
``SparkSubmitHook`` (so the ``spark`` connection's master, ``deploy-mode``, ``spark-binary``,
queue, namespace and keytab are honoured exactly as by ``SparkSubmitOperator``), then starts the
driver *detached* (see :mod:`airflow_kafka_spark.runtime.submit`) and returns: the task ends in seconds
while the job runs for weeks. What identifies the driver (pid, YARN application id, Kubernetes
pod, standalone driver id) goes to the lifecycle record beside the checkpoint.

Never two drivers on one checkpoint (S16). The submit's critical section (check, start, record)
runs under the lifecycle record's *lease*, so two submits racing each other serialise and the
second sees the first's driver; and every submit refuses with ``ALREADY_RUNNING`` while the
recorded driver is alive, so a retry after the lease expired, or a second DAG run, cannot start a
second one either. A retry of a submit whose driver is up is therefore a clear failure, not a
duplicate.

``StopStreamingJobOperator`` writes the job's stop marker and waits for the job to end on a batch
boundary (last ``offsets/`` == last ``commits/``); only after the registry's ``stop_timeout_s`` does
it kill the driver through its cluster manager, and then it reports ``STOPPED_MID_BATCH`` and the
batch Spark will replay.

With ``precopy_backup`` (a verified backup follows the stop; the safe-restart DAG's stop task takes
it itself, :mod:`airflow_kafka_spark.operators.restart_window`) the stop first
takes the backup's *pre-copy* while the driver still runs (``ops.backup.precopy``), in passes until
one is quick, and more passes beside the stop's wait for a batch boundary while the driver runs
(``runtime.stop_precopy``): the state files are copied and hashed before the stream stands still,
and the backup after the stop reads only the files of the batches after the last pass. A pre-copy
that fails is logged and the stop goes on: the backup then reads those files itself, as it did
before pre-copies. The passes beside the wait keep their entry list in memory
(``ops.backup.precopy.PassChain``): :meth:`StopStreamingJobOperator.stop_spec` hands it to the
backup the same task takes, never through XCom.

These operators only resolve the connections and who acts; the rules (lease, liveness, what is
recorded) live in :mod:`airflow_kafka_spark.runtime.start_stop`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark.airflow_glue.jobs import actor, flag, kafka_config, task_holder
from airflow_kafka_spark.airflow_glue.kinds import steps_for
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.operators._common import StreamingJobOperator
from airflow_kafka_spark.operators.links import SparkApplicationLink
from airflow_kafka_spark.ops.backup.manifest import Manifest
from airflow_kafka_spark.ops.backup.precopy import PassChain, passes_until_quiet
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import start_stop
from airflow_kafka_spark.runtime.start_stop import DEFAULT_LEASE_TTL_S
from airflow_kafka_spark.runtime.stop_precopy import beside_rule, stop_with_precopy


def driver_alive(spec: JobSpec, record: LifecycleRecord | None) -> bool:
    """Whether the driver recorded for the job runs (False when none is recorded)."""
    return start_stop.driver_alive(record, lambda: spark_target(spec))


def submit_job(spec: JobSpec, *, context: Any, log: Any, previous: bool = False, dry_run: bool = False,
               lease_ttl_s: float = DEFAULT_LEASE_TTL_S) -> dict[str, Any]:
    """The body of :class:`SubmitStreamingJobOperator` (also the rollback task's): connections resolved here."""
    by = start_stop.Submitter(actor=actor(context), holder=task_holder(context), run_id=context["ti"].run_id,
                              lease_ttl_s=lease_ttl_s)
    return start_stop.submit_job(spec, kafka_config=kafka_config(spec), target=spark_target(spec, context), by=by,
                                 log=log, previous=previous, dry_run=dry_run)


class SubmitStreamingJobOperator(StreamingJobOperator):
    """Start the job's Spark driver detached and record it in the lifecycle record.

    :param previous: resubmit the application recorded at the last passed health gate instead of
        the registry's current one (what a rollback does).
    :param dry_run: build and show the spark-submit line, start nothing.
    :param lease_ttl_s: how long the submit's lease is held at most (it is released on return).
    """

    template_fields = ("job", "reason", "previous", "dry_run")
    operator_extra_links = (SparkApplicationLink(),)

    def __init__(self, *, job: str, previous: bool | str = False, dry_run: bool | str = False,
                 lease_ttl_s: float = DEFAULT_LEASE_TTL_S, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.previous = previous
        self.dry_run = dry_run
        self.lease_ttl_s = lease_ttl_s

    def run(self, context: Any) -> dict[str, Any]:
        return self.submit_spec(self.load()[1], context)

    def submit_spec(self, spec: JobSpec, context: Any) -> dict[str, Any]:
        """The submit of ``spec`` (already read from the registry: a subclass that judges first reads it once)."""
        return submit_job(spec, context=context, log=self.log, previous=flag(self.previous, name="previous"),
                          dry_run=flag(self.dry_run, name="dry_run"), lease_ttl_s=self.lease_ttl_s)


def stop_job(spec: JobSpec, *, context: Any, log: Any, timeout_s: float | None = None, poll_s: float | None = None,
             only_driver_id: str | None = None, align: bool = True) -> dict[str, Any]:
    """The body of :class:`StopStreamingJobOperator` (also the rollback task's)."""
    return start_stop.stop_job(spec, target=lambda: spark_target(spec), actor=actor(context), log=log,
                               timeout_s=timeout_s, poll_s=poll_s, only_driver_id=only_driver_id, align=align)


@dataclass(frozen=True)
class StopDone:
    """A stop's XCom, and the pre-copy its passes kept in memory for the backup the same task takes
    (``precopy``: None when none found anything new; never in XCom: 20,000 entries)."""

    xcom: dict[str, Any]
    precopy: Manifest | None = None


class StopStreamingJobOperator(StreamingJobOperator):
    """Stop the job gracefully on a batch boundary (stop marker), kill after ``timeout_s``; push the StopResult.

    :param timeout_s: how long to wait for the graceful stop; default the registry's ``stop_timeout_s``.
    :param poll_s: how often the wait asks whether the driver still runs; default 0.2 s for a local
        driver, 1 s through a cluster manager (the wait is downtime).
    :param dry_run: report whether a driver runs and what would be done; stop nothing.
    :param precopy_backup: a verified backup follows the stop: pre-copy it while the driver runs, before
        the stop and (not on a local disk, ``stop_precopy.beside_rule``) beside its wait (only then;
        never in a dry run), so the backup after the stop copies only the newest files.
    :param align_to_commit: a job that watches no stop marker (killed at once) is killed just after its
        next commit (at most 1.5 of its recent batch gaps, 30 s at most: ``runtime/stop_align.py``), so
        the window starts at a commit rather than inside a batch; False kills at once.
    """

    template_fields = ("job", "reason", "dry_run")
    operator_extra_links = (SparkApplicationLink(),)

    def __init__(self, *, job: str, timeout_s: float | None = None, poll_s: float | None = None,
                 dry_run: bool | str = False, precopy_backup: bool = False, align_to_commit: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.align_to_commit = align_to_commit
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.dry_run = dry_run
        self.precopy_backup = precopy_backup

    def run(self, context: Any) -> dict[str, Any]:
        return self.stop_spec(self.load()[1], context).xcom

    def stop_spec(self, spec: JobSpec, context: Any) -> StopDone:
        """The stop of ``spec`` (already read from the registry: a subclass that backs up after reads it once)."""
        if flag(self.dry_run, name="dry_run"):
            record = LifecycleRecord.load(spec.checkpoint)
            alive = driver_alive(spec, record)
            d = record.driver if record is not None else None
            return StopDone({"job": spec.name, "outcome": "DRY_RUN", "driver_alive": alive,
                    "driver": None if d is None else {"kind": d.kind, "id": d.id, "host": d.host},
                    "would": ("pre-copy the backup (publishes nothing), then " if self._precopies(spec)
                              and alive else "")
                    + (f"write {spec.stop_marker}, wait up to {self.timeout_s or spec.stop_timeout_s:.0f}s for "
                              "a batch boundary, then kill") if alive else "nothing: no driver runs"})

        def stop() -> dict[str, Any]:
            return stop_job(spec, context=context, log=self.log, timeout_s=self.timeout_s, poll_s=self.poll_s,
                            align=self.align_to_commit)

        chain = PassChain(spec.checkpoint, spec.backup_root, job=spec.name) if self._precopies(spec) else None
        if chain is not None:
            def alive() -> bool:
                return driver_alive(spec, LifecycleRecord.load(spec.checkpoint))

            done = stop_with_precopy(
                stop, job=spec.name, log=self.log, one_pass=chain.beside, still_running=alive,
                before=lambda: passes_until_quiet(chain.before, still_running=alive),
                beside=beside_rule(spec.checkpoint))
            out = done.stop
            if done.precopy is not None:   # None: no driver ran, so nothing was pre-copied
                out["precopy"] = done.precopy.to_dict()
        else:
            out = stop()
        if out["outcome"] == "STOPPED_MID_BATCH":
            self.log.warning("job %s was killed inside batch %s; Spark replays it on the next start", spec.name,
                             out.get("replay_batch"))
        return StopDone(out, chain.newest if chain is not None else None)

    def _precopies(self, spec: JobSpec) -> bool:
        return self.precopy_backup and steps_for(spec).precopies_backup


__all__ = ["StopDone", "StopStreamingJobOperator", "SubmitStreamingJobOperator", "driver_alive", "stop_job",
           "submit_job"]
