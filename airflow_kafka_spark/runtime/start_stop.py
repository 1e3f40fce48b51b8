"""Start a registered job's driver detached and stop it on a batch boundary: the bodies of the Airflow operators.

Why here and not in the operator: never two drivers on one checkpoint (S16) is a product rule,
the same for the operator, the safe-restart rollback and a test. The submit's critical section
(check, start, record) runs under the lifecycle record's *lease*, so two submits racing each other
serialise and the second sees the first's driver; and every submit refuses with
``ALREADY_RUNNING`` while the recorded driver is alive, so a retry after the lease expired, or a
second DAG run, cannot start a second one either.

The Airflow layer resolves what only it can (the Kafka config from the connection, the Spark
connection as a :class:`~airflow_kafka_spark.runtime.submit.SparkTarget`, who acts) and passes
plain values.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util.fs import open_location, remove_file
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import BlockReason, OperationBlocked, UserError
from airflow_kafka_spark.kafka.offsets import parse_offsets_json
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of, scrub
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import (
    app_versions,
    clusters,
    connector,
    detach,
    drivers,
    integrations,
    local_start,
    stop_align,
    submit,
    unrecorded,
)
from airflow_kafka_spark.runtime.clusters import ClusterEndpoint
from airflow_kafka_spark.runtime.integrations.reference import kafka_job_options
from airflow_kafka_spark.runtime.kinds import KindStopJudge, runtime_kind
from airflow_kafka_spark.runtime.submit import SparkTarget

DEFAULT_LEASE_TTL_S = 600.0


@dataclass(frozen=True)
class Submitter:
    """Who submits and holds the lifecycle record's lease meanwhile, built once by the caller (the operator
    from its task instance, a test from its names).

    ``actor`` is who the record's history names; ``holder`` is this very task of this run (its retry
    adopts the driver a killed first try started, any other holder is refused); ``run_id`` is the run the
    lease names; the lease lasts ``lease_ttl_s`` at most (it is released on return).
    """

    actor: str
    holder: str
    run_id: str | None = None
    lease_ttl_s: float = DEFAULT_LEASE_TTL_S


def driver_endpoint(driver: DriverInfo, target: Callable[[], SparkTarget],
                    submitted: Mapping[str, Any] | None) -> ClusterEndpoint:
    """Where a cluster driver's manager answers: as recorded at submit, else resolved again from the connection."""
    sub = submitted or {}
    recorded = sub.get("endpoint")
    if recorded and (sub.get("driver") or {}).get("id") == driver.id:
        return ClusterEndpoint.from_dict(recorded)
    resolved = target()
    return clusters.resolve_endpoint(driver.kind, master=str(sub.get("master") or resolved.master),
                                     spark_conf=dict((sub.get("app") or {}).get("spark_conf") or {}),
                                     conn_extra=resolved.conn_extra)


def driver_control(driver: DriverInfo, target: Callable[[], SparkTarget], submitted: Mapping[str, Any] | None
                   ) -> drivers.DriverControl:
    """Control of a recorded driver: a cluster one through the endpoint recorded at submit time.

    ``target`` is called only for a cluster driver without a recorded endpoint.
    """
    if driver.kind == drivers.DriverKind.LOCAL:
        return drivers.control(driver)
    return drivers.control(driver, endpoint=driver_endpoint(driver, target, submitted))


def driver_alive(record: LifecycleRecord | None, target: Callable[[], SparkTarget]) -> bool:
    """Whether the driver recorded for the job runs (False when none is recorded)."""
    if record is None or record.driver is None:
        return False
    return driver_control(record.driver, target, app_versions.submitted_app(record)).is_alive()


def submit_job(spec: JobSpec, *, kafka_config: Mapping[str, Any], target: SparkTarget, by: Submitter, log: Any,
               previous: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Start the job's driver detached and record it.

    ``previous``: run the application recorded as the last one that passed a health gate instead of
    the registry's (the safe-restart rollback). ``by.holder`` holds the record's lease meanwhile.
    """
    actor, holder = by.actor, by.holder
    record = LifecycleRecord.load(spec.checkpoint)
    run_spec, is_previous = _run_spec(spec, record, previous)
    app = app_versions.app_version(run_spec)
    master, deploy_mode = target.master, target.deploy_mode
    mode = detach.detach_mode(master, deploy_mode)
    detach.refuse_changed_arguments(mode, spec.name, integrations.own_arguments(
        run_spec, integrations.LaunchFacts(bootstrap_servers=bootstrap_servers_of(kafka_config))))
    kind = detach.DRIVER_KIND[mode]
    # A cluster driver's manager is found now, before anything starts: a missing address fails the submit
    # here rather than the health gate on another host later.
    endpoint = None if mode == detach.DETACH_LOCAL else clusters.resolve_endpoint(
        kind, master=master, spark_conf=run_spec.spark_conf, conn_extra=target.conn_extra)
    search = None if endpoint is None else unrecorded.ClusterSearch(spec, endpoint=endpoint, mode=mode, holder=holder,
                                                                     log=log)

    summary: dict[str, Any] = {
        "job": spec.name, "application": run_spec.application, "application_args": list(run_spec.application_args),
        "compatibility_version": run_spec.compatibility_version, "previous": is_previous, "master": master,
        "deploy_mode": deploy_mode, "detach": mode, "endpoint": endpoint.to_dict() if endpoint else None}
    if dry_run:
        pending = record.next_starting_offsets if record is not None else None
        needed = pending and _starting_file_needed(run_spec, pending, read_checkpoint(spec.checkpoint))
        command, _ = _build_command(run_spec, target, kafka_config, mode, search,
                                    submit.starting_offsets_path(spec) if needed else None)
        return {**summary, "dry_run": True, "command": scrub(" ".join(command), kafka_config),
                "would_start_from": pending or "the checkpoint (or startingOffsets for a new one)"}

    record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
    try:
        record.acquire_lease(holder, by.lease_ttl_s, run_id=by.run_id)
    except OperationBlocked as exc:   # another run's live lease (a bad ttl, an unreachable store: as they are)
        raise OperationBlocked(f"ALREADY_RUNNING: {exc}", reason=BlockReason.ALREADY_RUNNING) from None
    try:
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        adopted = _adopt_or_refuse_live(spec, record, target, holder, log)
        if adopted is not None:
            return {**summary, **adopted}
        state = read_checkpoint(spec.checkpoint)
        starting_file = _starting_offsets_file(run_spec, record, state, actor)
        kind = runtime_kind(run_spec)
        if aside := kind.before_start(run_spec, previous=is_previous):
            log.info("DStream checkpoint of another build moved aside to %s: %s starts from its group", aside,
                     run_spec.application)
        command, env = _build_command(run_spec, target, kafka_config, mode, search, starting_file)
        # No live driver reads it now: a stop killed while it waited (SIGKILL skips its cleanup) left it, and the new
        # driver would stop itself after its first batch (the soak's health gates saw "driver exited").
        remove_file(open_location(run_spec.stop_marker, None, what="stop marker"))
        shown = scrub(" ".join(command), kafka_config)
        # Both kinds of driver carry who started them for which checkpoint: a retry of this task finds what its
        # killed first try left (adopted), any other submitter is refused (runtime/unrecorded.py).
        marked = {**env, drivers.CHECKPOINT_ENV: spec.checkpoint, drivers.SUBMITTER_ENV: holder}
        drv, log_path, launch_s = _launch(spec, command, marked, search, master=master, holder=holder,
                                          kafka_config=kafka_config, log=log)
        entry = app_versions.record_submit(record, app_versions.SubmittedApp(
            app=app, driver=drv, master=master, deploy_mode=deploy_mode, mode=mode,
            committed_before=state.latest_committed.batch_id if state.latest_committed else None,
            query_id_before=state.query_id, log_path=log_path, starting_offsets_file=starting_file, actor=actor,
            rollback=is_previous, endpoint=endpoint.to_dict() if endpoint else None, holder=holder))
        kind_entry = kind.at_submit(run_spec, record, kafka_config)   # e.g. a DStream job's group: the gate's baseline
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
            "starting_offsets_file": starting_file, "submitted_at_ms": entry["submitted_at_ms"], "launch_s": launch_s,
            **({"dstream": kind_entry} if kind_entry is not None else {})}


def _run_spec(spec: JobSpec, record: LifecycleRecord | None, previous: bool) -> tuple[JobSpec, bool]:
    """The job as the registry has it, or (``previous``) as its last application that passed a health gate."""
    if not previous:
        return spec, False
    good = app_versions.last_good_app(record)
    if good is None:
        raise UserError(f"job {spec.name}: no application has passed a health gate yet, so there is no previous "
                        "application to resubmit")
    return app_versions.spec_for_app(spec, good), True


def _build_command(run_spec: JobSpec, target: SparkTarget, kafka_config: Mapping[str, Any], mode: str,
                   search: unrecorded.ClusterSearch | None, starting_offsets_file: str | None
                   ) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command line and environment: the integration's launch, the connector, the tags."""
    master = target.master
    facts = integrations.LaunchFacts(
        bootstrap_servers=bootstrap_servers_of(kafka_config), kafka_options=tuple(kafka_job_options(kafka_config)),
        starting_offsets_file=starting_offsets_file,
        spark_version=lambda: submit.spark_version(submit.resolve_binary([target.spark_binary], os.environ)[0]))
    launch = integrations.integration_for(run_spec).launch(run_spec, facts)
    conn_jars = connector.local_connector(run_spec, master, os.environ)
    kwargs = submit.hook_kwargs(run_spec, args=launch.args, jars=[*conn_jars.jars, *launch.jars], mode=mode,
                                packages=conn_jars.packages, tag=search and search.tag,
                                checkpoint_tag=search and search.checkpoint_tag, extra_conf=launch.conf)
    command = submit.resolve_binary(target.build_command(kwargs, run_spec.application), os.environ)
    return command, submit.driver_env(command, master)


def _starting_offsets_file(spec: JobSpec, record: LifecycleRecord, state: Any, actor: str) -> str | None:
    """Where the new driver reads the reset's carried-over offsets, written now; None when there are none or
    nothing needs the file (:func:`_starting_file_needed`)."""
    if record.next_starting_offsets and state.offset_batch_ids:
        # A previous driver already planned a batch from them: they are baked into the checkpoint.
        record.take_next_starting_offsets(actor=actor)
    if not record.next_starting_offsets or not _starting_file_needed(spec, record.next_starting_offsets, state):
        return None
    starting_file = submit.starting_offsets_path(spec)
    submit.write_starting_offsets(starting_file, record.next_starting_offsets)
    return starting_file


def _starting_file_needed(spec: JobSpec, offsets_json: str, state: Any) -> bool:
    """Whether the job needs ``--starting-offsets-file`` to start at ``offsets_json``.

    Not when it does not read the file (only the reference contract does), nor when the checkpoint's own
    ``sources/<id>/0`` files already hold exactly these offsets: Spark's Kafka source starts a new query
    there before it looks at ``startingOffsets`` (ops/reset_start.py). Why it matters: on HDFS the file is
    a write inside the safe restart's downtime window, and a write with a body waits on the DataNode's
    close (docs/benchmarks.md, round 24).
    """
    if not integrations.integration_for(spec).reads_starting_offsets_file:
        return False
    planned = parse_offsets_json(offsets_json, what="the recorded next starting offsets")
    written = {tp: offset for offsets in state.initial_offsets.values() for tp, offset in (offsets or {}).items()}
    return written != planned


def _adopt_or_refuse_live(spec: JobSpec, record: LifecycleRecord, target: SparkTarget, holder: str, log: Any
                          ) -> dict[str, Any] | None:
    """Nothing when no recorded driver is alive; its submission when this very task started it (adopted);
    else ALREADY_RUNNING."""
    if record.driver is None or not driver_control(record.driver, lambda: target,
                                                   app_versions.submitted_app(record)).is_alive():
        return None
    d = record.driver
    mine = own_submission(record, holder)
    if mine is not None:
        # This very task started it and was killed after recording it (a worker lost, an OOM): Airflow's
        # retry adopts the driver instead of failing the run with ALREADY_RUNNING and rolling back.
        log.info("driver %s %s was started by this task (%s) before it was interrupted: adopted", d.kind,
                 d.id, holder)
        return {"driver": mine["driver"], "log_path": mine.get("log_path"), "command": None,
                "committed_before": mine.get("committed_before"), "query_id_before": mine.get("query_id_before"),
                "starting_offsets_file": mine.get("starting_offsets_file"),
                "submitted_at_ms": mine.get("submitted_at_ms"), "adopted": True}
    raise OperationBlocked(f"ALREADY_RUNNING: job {spec.name} already has a live driver ({d.kind} {d.id}"
                           f"{' on ' + d.host if d.host else ''}); stop it first (StopStreamingJobOperator or "
                           "the streaming_safe_restart DAG) so that two drivers never share checkpoint "
                           f"{spec.checkpoint}", reason=BlockReason.ALREADY_RUNNING)


def _launch(spec: JobSpec, command: list[str], env: dict[str, str], search: unrecorded.ClusterSearch | None, *,
            master: str, holder: str, kafka_config: Mapping[str, Any], log: Any
            ) -> tuple[DriverInfo, str | None, float]:
    """The driver started (local, or through the cluster manager when ``search``), its local log, and the start's
    seconds: spark-submit up to the driver's id and the checks around it, the part of a restart's window that is
    the cluster's and not this product's (``launch_s`` in the submit's result; bench/downtime_bench.py)."""
    started = time.monotonic()
    if search is None:
        log_path = submit.local_log_path(spec)
        drv = _start_local(spec, command, env, log_path, holder=holder, log=log, kafka_config=kafka_config)
    else:
        log_path = None
        drv = _submit_cluster(spec, command, env, search, master=master, kafka_config=kafka_config, log=log)
    return drv, log_path, round(time.monotonic() - started, 3)


def _start_local(spec: JobSpec, command: list[str], env: dict[str, str], log_path: str, *, holder: str, log: Any,
                 kafka_config: Mapping[str, Any]) -> DriverInfo:
    """A local driver: the one a killed first try of this task left (adopted), else a new one, once it started."""
    drv = unrecorded.adopt_local(spec, holder, log)
    if drv is None:
        drv = local_start.start_local(command, log_path=log_path, env=env)
        log.info("started %s driver pid %s; log %s", spec.name, drv.id, log_path)
        try:
            local_start.wait_started_local(drv, log_path)
        except UserError as exc:
            raise UserError(f"job {spec.name}: submit failed: {scrub(str(exc), kafka_config)}") from None
    return drv


def _submit_cluster(spec: JobSpec, command: list[str], env: dict[str, str], search: unrecorded.ClusterSearch, *,
                    master: str, kafka_config: Mapping[str, Any], log: Any) -> DriverInfo:
    """A cluster driver: one this task submitted before (adopted), else a new submit found by its tag."""
    endpoint, mode = search.endpoint, search.mode
    drv = search.adopt_before_submit()
    if drv is None:
        drv = detach.submit_cluster(command, mode, env=env, kafka_config=kafka_config,
                                    find=lambda: drivers.find_by_tag(endpoint, search.tag)).driver
        log.info("submitted %s to %s: driver %s %s (tag %s; status through %s)", spec.name, master, drv.kind,
                 drv.id, search.tag, ", ".join(endpoint.urls))
        started = drv
        drv = search.check_after_submit(started, drivers.control(started, endpoint=endpoint).kill)
    return drv


def own_submission(record: LifecycleRecord, holder: str) -> dict[str, Any] | None:
    """The recorded submission when ``holder`` (this task of this run) made it for the recorded driver."""
    sub = app_versions.submitted_app(record)
    if not holder or sub is None or record.driver is None:
        return None
    same_driver = (sub.get("driver") or {}).get("id") == record.driver.id
    return sub if sub.get("holder") == holder and same_driver else None


def stop_job(spec: JobSpec, *, target: Callable[[], SparkTarget], actor: str, log: Any, timeout_s: float | None = None,
             poll_s: float | None = None, only_driver_id: str | None = None, align: bool = True) -> dict[str, Any]:
    """Stop the job's recorded driver on a batch boundary; kill only after the timeout.

    ``align``: a stop that kills at once (a job that watches no marker, or ``timeout_s=0``) kills just
    after the job's next commit, waiting at most ``stop_align.MAX_ALIGN_S`` while the job runs
    (``runtime/stop_align.py``: the window then starts at that commit, and the kill cuts a batch that
    has barely begun); False kills at once. A job that watches the marker picks its boundary itself.

    ``poll_s``: how often the wait asks whether the driver still runs (default: its control's, 0.2 s
    for a local driver, 1 s through a cluster manager).

    ``only_driver_id``: stop only if the recorded driver is this one (a rollback stops the driver
    its own run started, never one it does not know). ``target`` is called for a cluster driver only.
    """
    record = LifecycleRecord.load(spec.checkpoint)
    drv: DriverInfo | None = record.driver if record is not None else None
    if drv is not None and only_driver_id is not None and drv.id != only_driver_id:
        log.info("recorded driver %s is not %s: left alone", drv.id, only_driver_id)
        drv = None
    ctl = drivers.DriverControl(lambda: False, lambda: None)
    if drv is not None:
        ctl = driver_control(drv, target, app_versions.submitted_app(record))
    timeout = float(timeout_s if timeout_s is not None else spec.stop_timeout_s)
    if not integrations.integration_for(spec).stops_on_marker:
        log.info("job %s (integration %s) does not watch a stop marker: its driver is killed at once", spec.name,
                 spec.integration)
        timeout = 0.0
    judge = KindStopJudge(spec, lambda: integrations.integration_for(spec).stop_witness(spec))
    alignment = None
    if align and timeout <= 0 and drv is not None and ctl.is_alive():
        alignment = stop_align.wait_for_next_commit(open_location(spec.checkpoint).child("commits"),
                                                    is_alive=ctl.is_alive)
        log.info("job %s: %s", spec.name, alignment.line())
    result = drivers.stop(spec.checkpoint, spec.stop_marker, is_alive=ctl.is_alive, kill=ctl.kill, timeout_s=timeout,
                          poll_s=ctl.poll_s if poll_s is None else poll_s, progress=log.info, judge=judge)
    witness = judge.witness
    log.info("job %s: %s — %s", spec.name, result.outcome, result.message)
    out = {"job": spec.name, **result.to_dict(),
           "driver": None if drv is None else {"kind": drv.kind, "id": drv.id, "host": drv.host},
           "alignment": None if alignment is None else alignment.to_dict()}
    if witness is not None:
        out["job_reported"] = witness
        if witness.get("stopped_on_boundary") is not None and bool(witness["stopped_on_boundary"]) != (
                result.replay_batch is None and not result.killed):
            log.warning("job %s: its agent's report (%s) disagrees with the stop's outcome (%s), which Spark's "
                        "files or the driver's exit decide", spec.name, witness, result.outcome)
    if drv is not None and not ctl.is_alive():
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        if record.driver is not None and record.driver.id == drv.id:
            record.driver = None
        record.add_event(LifecycleEvent.DRIVER_STOPPED, actor=actor, driver_kind=drv.kind, driver_id=drv.id,
                         outcome=result.outcome, graceful=result.graceful, killed=result.killed,
                         last_committed=result.last_committed, replay_batch=result.replay_batch)
        record.save()
    return out
