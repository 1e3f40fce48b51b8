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
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.view import bootstrap_servers_of, scrub
from airflow_kafka_spark.lifecycle.record import DriverInfo, LifecycleRecord
from airflow_kafka_spark.operators._common import (
    StreamingJobOperator,
    actor,
    driver_control,
    flag,
    kafka_config,
    spark_hook,
    task_holder,
)
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import drivers, submit

DEFAULT_LEASE_TTL_S = 600.0


def driver_alive(spec: JobSpec, record: LifecycleRecord | None) -> bool:
    """Whether the driver recorded for the job runs (False when none is recorded)."""
    if record is None or record.driver is None:
        return False
    alive, _ = driver_control(spec, record.driver, submit.submitted_app(record))
    return alive()


def submit_job(spec: JobSpec, *, context: Any, log: Any, previous: bool = False, dry_run: bool = False,
               lease_ttl_s: float = DEFAULT_LEASE_TTL_S) -> dict[str, Any]:
    """Start the job's driver detached and record it; the body of :class:`SubmitStreamingJobOperator`.

    ``previous``: run the application recorded as the last one that passed a health gate instead of
    the registry's (the safe-restart rollback). Also used by the rollback task directly.
    """
    who = actor(context)
    record = LifecycleRecord.load(spec.checkpoint)
    run_spec, is_previous = spec, False
    if previous:
        good = submit.last_good_app(record)
        if good is None:
            raise UserError(f"job {spec.name}: no application has passed a health gate yet, so there is no previous "
                            "application to resubmit")
        run_spec, is_previous = submit.spec_for_app(spec, good), True
    app = submit.app_version(run_spec)
    config = kafka_config(spec)
    bootstrap = bootstrap_servers_of(config)
    probe = spark_hook(run_spec, deploy_mode=run_spec.deploy_mode) if run_spec.deploy_mode else spark_hook(run_spec)
    master = str(probe._connection["master"])
    deploy_mode = probe._connection["deploy_mode"]
    mode = submit.detach_mode(master, deploy_mode)

    def build(starting_offsets_file: str | None) -> tuple[list[str], dict[str, str]]:
        args = submit.job_arguments(run_spec, bootstrap_servers=bootstrap, starting_offsets_file=starting_offsets_file,
                                    kafka_options=submit.kafka_job_options(config))
        jars: list[str] = []
        if submit.needs_local_connector_jars(run_spec, master):
            from devstack.jars import spark_kafka_jars

            jars = [str(j) for j in spark_kafka_jars()]
        hook = spark_hook(run_spec, **submit.hook_kwargs(run_spec, args=args, jars=jars, mode=mode))
        command = submit.resolve_binary(hook._build_spark_submit_command(run_spec.application), os.environ)
        return command, submit.driver_env(command, master)

    summary: dict[str, Any] = {"job": spec.name, "application": run_spec.application,
                               "application_args": list(run_spec.application_args),
                               "compatibility_version": run_spec.compatibility_version, "previous": is_previous,
                               "master": master, "deploy_mode": deploy_mode, "detach": mode}
    if dry_run:
        pending = record.next_starting_offsets if record is not None else None
        command, _ = build(submit.starting_offsets_path(spec) if pending else None)
        return {**summary, "dry_run": True, "command": scrub(" ".join(command), config),
                "would_start_from": pending or "the checkpoint (or startingOffsets for a new one)"}

    holder = task_holder(context)
    record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
    try:
        record.acquire_lease(holder, lease_ttl_s, run_id=context["ti"].run_id)
    except UserError as exc:
        raise UserError(f"ALREADY_RUNNING: {exc}") from None
    try:
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        if record.driver is not None:
            alive, _ = driver_control(spec, record.driver, submit.submitted_app(record))
            if alive():
                d = record.driver
                raise UserError(f"ALREADY_RUNNING: job {spec.name} already has a live driver ({d.kind} {d.id}"
                                f"{' on ' + d.host if d.host else ''}); stop it first (StopStreamingJobOperator or the "
                                "streaming_safe_restart DAG) so that two drivers never share checkpoint "
                                f"{spec.checkpoint}")
        state = read_checkpoint(spec.checkpoint)
        if record.next_starting_offsets and state.offset_batch_ids:
            # A previous driver already planned a batch from them: they are baked into the checkpoint.
            record.take_next_starting_offsets(actor=who)
        starting_file = None
        if record.next_starting_offsets:
            starting_file = submit.starting_offsets_path(spec)
            submit.write_starting_offsets(starting_file, record.next_starting_offsets)
        command, env = build(starting_file)
        shown = scrub(" ".join(command), config)
        log_path = None
        if mode == submit.DETACH_LOCAL:
            log_path = submit.local_log_path(spec)
            drv = drivers.start_local(command, env=env, log_path=log_path)
            log.info("started %s driver pid %s; log %s", spec.name, drv.id, log_path)
        else:
            drv = submit.submit_cluster(command, mode, env=env, kafka_config=config).driver
            log.info("submitted %s to %s: driver %s %s", spec.name, master, drv.kind, drv.id)
        entry = submit.record_submit(
            record, app=app, driver=drv, master=master, deploy_mode=deploy_mode, mode=mode,
            committed_before=state.latest_committed.batch_id if state.latest_committed else None,
            query_id_before=state.query_id, log_path=log_path, starting_offsets_file=starting_file, actor=who,
            rollback=is_previous)
        # next_starting_offsets stays until the health gate sees the new query plan a batch from it:
        # a driver that dies at start must not use them up.
        record.save()
    finally:
        try:
            record.release_lease(holder)
        except UserError as exc:
            log.warning("lease of job %s not released: %s", spec.name, exc)
    return {**summary, "driver": entry["driver"], "log_path": log_path, "command": shown,
            "committed_before": entry["committed_before"], "query_id_before": entry["query_id_before"],
            "starting_offsets_file": starting_file, "submitted_at_ms": entry["submitted_at_ms"]}


class SubmitStreamingJobOperator(StreamingJobOperator):
    """Start the job's Spark driver detached and record it in the lifecycle record.

    :param previous: resubmit the application recorded at the last passed health gate instead of
        the registry's current one (what a rollback does).
    :param dry_run: build and show the spark-submit line, start nothing.
    :param lease_ttl_s: how long the submit's lease is held at most (it is released on return).
    """

    template_fields = ("job", "reason", "previous", "dry_run")

    def __init__(self, *, job: str, previous: bool | str = False, dry_run: bool | str = False,
                 lease_ttl_s: float = DEFAULT_LEASE_TTL_S, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.previous = previous
        self.dry_run = dry_run
        self.lease_ttl_s = lease_ttl_s

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        return submit_job(spec, context=context, log=self.log, previous=flag(self.previous, name="previous"),
                          dry_run=flag(self.dry_run, name="dry_run"), lease_ttl_s=self.lease_ttl_s)


def stop_job(spec: JobSpec, *, context: Any, log: Any, timeout_s: float | None = None, poll_s: float = 1.0,
             only_driver_id: str | None = None) -> dict[str, Any]:
    """Stop the job's recorded driver on a batch boundary; kill only after the timeout.

    ``only_driver_id``: stop only if the recorded driver is this one (a rollback stops the driver
    its own run started, never one it does not know).
    """
    record = LifecycleRecord.load(spec.checkpoint)
    drv: DriverInfo | None = record.driver if record is not None else None
    if drv is not None and only_driver_id is not None and drv.id != only_driver_id:
        log.info("recorded driver %s is not %s: left alone", drv.id, only_driver_id)
        drv = None
    is_alive: Callable[[], bool] = lambda: False  # noqa: E731
    kill: Callable[[], None] = lambda: None  # noqa: E731
    if drv is not None:
        is_alive, kill = driver_control(spec, drv, submit.submitted_app(record))
    timeout = float(timeout_s if timeout_s is not None else spec.stop_timeout_s)
    result = drivers.stop(spec.checkpoint, spec.stop_marker, is_alive=is_alive, kill=kill, timeout_s=timeout,
                          poll_s=poll_s, progress=log.info)
    log.info("job %s: %s — %s", spec.name, result.outcome, result.message)
    out = {"job": spec.name, **result.to_dict(),
           "driver": None if drv is None else {"kind": drv.kind, "id": drv.id, "host": drv.host}}
    if drv is not None and not is_alive():
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        if record.driver is not None and record.driver.id == drv.id:
            record.driver = None
        record.add_event("driver_stopped", actor=actor(context), driver_kind=drv.kind, driver_id=drv.id,
                         outcome=result.outcome, graceful=result.graceful, killed=result.killed,
                         last_committed=result.last_committed, replay_batch=result.replay_batch)
        record.save()
    return out


class StopStreamingJobOperator(StreamingJobOperator):
    """Stop the job gracefully on a batch boundary (stop marker), kill after ``timeout_s``; push the StopResult.

    :param timeout_s: how long to wait for the graceful stop; default the registry's ``stop_timeout_s``.
    :param dry_run: report whether a driver runs and what would be done; stop nothing.
    """

    template_fields = ("job", "reason", "dry_run")

    def __init__(self, *, job: str, timeout_s: float | None = None, poll_s: float = 1.0,
                 dry_run: bool | str = False, **kwargs: Any) -> None:
        super().__init__(job=job, **kwargs)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.dry_run = dry_run

    def run(self, context: Any) -> dict[str, Any]:
        _, spec = self.load()
        if flag(self.dry_run, name="dry_run"):
            record = LifecycleRecord.load(spec.checkpoint)
            alive = driver_alive(spec, record)
            d = record.driver if record is not None else None
            return {"job": spec.name, "outcome": "DRY_RUN", "driver_alive": alive,
                    "driver": None if d is None else {"kind": d.kind, "id": d.id, "host": d.host},
                    "would": (f"write {spec.stop_marker}, wait up to {self.timeout_s or spec.stop_timeout_s:.0f}s for "
                              "a batch boundary, then kill") if alive else "nothing: no driver runs"}
        out = stop_job(spec, context=context, log=self.log, timeout_s=self.timeout_s, poll_s=self.poll_s)
        if out["outcome"] == "STOPPED_MID_BATCH":
            self.log.warning("job %s was killed inside batch %s; Spark replays it on the next start", spec.name,
                             out.get("replay_batch"))
        return out


__all__ = ["StopStreamingJobOperator", "SubmitStreamingJobOperator", "driver_alive", "stop_job", "submit_job"]
