"""The safe-restart steps for a ``kind: dstream`` job, as the DAG's operators and sensor dispatch them.

A DStream job's position is its consumer group (``commitAsync``, one batch late) plus, optionally,
a DStream checkpoint only its own build can read; the Structured Streaming steps (checkpoint offset
log, Spark's commits) would judge, back up or reset the wrong thing. So each operator of the
``streaming_safe_restart`` DAG hands such a job to :class:`DStreamSteps` here (the job's kind,
:mod:`airflow_kafka_spark.airflow_glue.kinds`), which resolves the Airflow things (Kafka connection,
trigger form, who acts) and calls :mod:`airflow_kafka_spark.runtime.dstream`:

* ``validate_before`` and the submit's judgement before it starts → :func:`validate_step`: the group
  against Kafka and the DStream checkpoint against the build being deployed. After the graceful stop
  the replay it announces is exact when the stopped driver's log names its last ranges (Spark's
  KafkaRDD lines), an upper bound otherwise; ``duplicates_expected`` is 0 with an idempotent sink.
* ``stop``: the generic graceful stop (the job's stop marker), unchanged.
* ``backup`` → :func:`backup_step`: the group's committed offsets and a copy of the DStream checkpoint;
  then, on a new build (the checkpoint's recorded build is not the registry's jar; ``auto`` and the
  reset modes, never ``keep``), the checkpoint moves aside and the new build starts from the group's
  committed offsets, with the replay announced.
* ``reset`` → :func:`reset_step`: ``preserve`` (a changed ``compatibility_version``) moves the
  checkpoint aside too; the other reset modes are refused (the position is the group).
* ``submit``: the generic submit, with the DStream job contract's flags (runtime/submit.py).
* ``health_gate`` → :func:`health_gate`: the group's commits advance under the new driver, lag not growing.
* rollback → :func:`rollback_step`: both the group's offsets and the DStream checkpoint come back
  from this run's backup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from airflow.sdk.exceptions import AirflowSkipException

from airflow_kafka_spark.airflow_glue.jobs import actor, fail, fail_health_gate, kafka_config, optional_text
from airflow_kafka_spark.airflow_glue.kinds.base import BackupStep, GateStep, ResetStep, RestoreStep, ValidateStep
from airflow_kafka_spark.airflow_glue.spark import spark_target
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.dstream_backup import (
    backup_dstream,
    load_backup,
    prune_dstream_backups,
    rollback_dstream,
)
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import app_versions, start_stop
from airflow_kafka_spark.runtime.dstream import (
    DStreamPlan,
    GroupSample,
    group_sample,
    judge_group_health,
    move_checkpoint_aside,
    plan_dstream_restart,
    processed_end_of_last_driver,
    submitted_offsets,
)
from airflow_kafka_spark.verdict.dstream import read_state
from airflow_kafka_spark.verdict.findings import BLOCK, Verdict

BACKUP_KEY = "dstream_backup"  # XCom of the backup task: where this run's DStream backup is


def _view(spec: JobSpec) -> KafkaView:
    return KafkaView(kafka_config(spec))


def _mode(context: Any) -> str:
    """The trigger form's mode (``auto`` when the operator runs outside the safe-restart DAG)."""
    return str(optional_text((context.get("params") or {}).get("mode")) or "auto")


def _plan(spec: JobSpec, context: Any, view: KafkaView) -> DStreamPlan:
    processed = processed_end_of_last_driver(LifecycleRecord.load(spec.checkpoint))
    return plan_dstream_restart(
        spec, spec.application, kafka=view, processed_end=processed, may_move_aside=_mode(context) != "keep"
    )


def plan_doc(plan: DStreamPlan) -> dict[str, Any]:
    """One verdict for XCom and the audit: the group's and the DStream checkpoint's findings together."""
    findings = [*plan.group_verdict.findings, *(plan.checkpoint_verdict.findings if plan.checkpoint_verdict else ())]
    merged = Verdict.of(findings, source="group", subject=plan.group)
    return {
        **merged.to_dict(),
        "kind": "dstream",
        "group": plan.group,
        "records_to_replay": plan.records_to_replay,
        "duplicates_expected": plan.duplicates_expected,
        "replay_exact": plan.replay_exact,
        "move_checkpoint_aside": plan.move_checkpoint_aside,
        "group_offsets": [[tp.topic, tp.partition, o] for tp, o in sorted((plan.group_offsets or {}).items())],
    }


def validate_step(spec: JobSpec, context: Any, *, override: bool, dry_run: bool, log: Any) -> dict[str, Any]:
    view = _view(spec)
    try:
        plan = _plan(spec, context, view)
    finally:
        view.close()
    doc = {"job": spec.name, **plan_doc(plan), "overridden": False, "dry_run": dry_run}
    log.info("%s (DStream, group %s): %s", spec.name, plan.group, doc["headline"])
    for f in doc["findings"]:
        if f["severity"] != "PASS":
            log.info("  %-5s %-32s %s", f["severity"], f["code"], f["message"])
    log.info(
        "records read again on restart: %s%d (duplicates expected in the sink: %d)",
        "" if plan.replay_exact else "at most ",
        plan.records_to_replay,
        plan.duplicates_expected,
    )
    if plan.blocked:
        if not override:
            context["ti"].xcom_push(key="verdict", value=doc)
            fail(context, f"job {spec.name}: {doc['headline']}" + (f"; fix: {doc['fix']}" if doc.get("fix") else ""))
        doc["overridden"] = True
        if not dry_run:
            rec = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
            rec.add_event(
                LifecycleEvent.VERDICT_OVERRIDDEN,
                actor=actor(context),
                headline=doc["headline"],
                codes=sorted({f["code"] for f in doc["findings"] if f["severity"] == BLOCK}),
            )
            rec.save()
    return doc


def _apply_retention(spec: JobSpec, keep: str, log: Any) -> list[str]:
    """The registry's ``backup_retention`` over the job's DStream backups, this run's one kept.

    Retention is housekeeping: a store that refuses a delete is logged, and the restart goes on.
    """
    retention = spec.backup_retention
    try:
        pruned = prune_dstream_backups(spec, keep_last=retention.keep_last, max_age_s=retention.max_age_s,
                                       dry_run=False, keep=[keep])
    except Exception as exc:   # housekeeping: an unreachable store or a refused delete never fails the run
        log.warning("job %s: DStream backups not pruned: %s", spec.name, exc)
        return []
    if pruned.removed or pruned.incomplete_removed:
        log.info("job %s: retention removed DStream backups %s", spec.name,
                 ", ".join(pruned.removed + pruned.incomplete_removed))
    return pruned.removed


def backup_step(spec: JobSpec, context: Any, *, dry_run: bool, log: Any, prune: bool = True) -> dict[str, Any]:
    """Back up the group's offsets and the DStream checkpoint; then, on a new build, move the checkpoint aside.

    The move happens here, right after the backup that holds it, and not in the ``reset`` task: a new
    build must never start on another build's DStream checkpoint whatever the mode's reset says, and
    the ``reset`` task only runs when the plan asks for a reset (a changed ``compatibility_version``).
    """
    view = _view(spec)
    try:
        plan = _plan(spec, context, view)  # after the graceful stop: the announced replay is final
        if dry_run:
            return {
                "job": spec.name,
                "backup_id": None,
                "dry_run": True,
                "would_back_up": [f"group {spec.group}", spec.dstream_checkpoint],
                "to": spec.backup_root,
                **_aside_doc(spec, plan, "new build", dry_run=True),
            }
        backup = backup_dstream(spec, kafka=view)
    finally:
        view.close()
    log.info(
        "job %s: group %s offsets%s backed up to %s",
        spec.name,
        spec.group,
        " and the DStream checkpoint" if backup.checkpoint_copy else "",
        backup.location,
    )
    context["ti"].xcom_push(key=BACKUP_KEY, value=backup.location)
    pruned = _apply_retention(spec, backup.location, log) if prune else []
    moved = _move_aside(spec, context, plan, "new build", log) if plan.move_checkpoint_aside else {}
    # backup_id stays None: it names Structured Streaming backups (ops/backup), which this is not.
    return {
        "job": spec.name,
        "backup_id": None,
        BACKUP_KEY: backup.location,
        "pruned": pruned,
        "group_offsets": [[tp.topic, tp.partition, o] for tp, o in sorted(backup.group_offsets.items())],
        "checkpoint_copy": backup.checkpoint_copy,
        "recorded_build": backup.recorded_build,
        "records_to_replay": plan.records_to_replay,
        "duplicates_expected": plan.duplicates_expected,
        "replay_exact": plan.replay_exact,
        **moved,
    }


def reset_step(spec: JobSpec, context: Any, *, mode: str | None, dry_run: bool, log: Any) -> dict[str, Any]:
    """``preserve`` (a changed ``compatibility_version``): the DStream checkpoint moves aside, the job starts
    from the group. A new build's checkpoint was already moved by :func:`backup_step`."""
    if mode is None:
        raise AirflowSkipException("no reset in this run")
    if mode != "preserve":
        raise UserError(
            f"job {spec.name} is a DStream job: reset {mode} is not supported (its position is group "
            f"{spec.group}); use mode auto or reset-preserve, which start from the group's commits"
        )
    view = _view(spec)
    try:
        plan = _plan(spec, context, view)
    finally:
        view.close()
    if not spec.dstream_checkpoint or not read_state(spec.dstream_checkpoint).files:
        return {"job": spec.name, "mode": mode, "aside_location": None, **_aside_doc(spec, plan, mode, dry_run)}
    if dry_run:
        return _aside_doc(spec, plan, mode, dry_run=True)
    return _move_aside(spec, context, plan, mode, log)


def _aside_doc(spec: JobSpec, plan: DStreamPlan, why: str, dry_run: bool) -> dict[str, Any]:
    bound = "" if plan.replay_exact else "at most "
    return {
        "job": spec.name,
        "dry_run": dry_run,
        "mode": why,
        "starting_offsets": plan_doc(plan)["group_offsets"],
        "records_to_replay": plan.records_to_replay,
        "duplicates_expected": plan.duplicates_expected,
        "replay_exact": plan.replay_exact,
        "plan": {
            "headline": (
                f"{why}: DStream checkpoint {spec.dstream_checkpoint} moves aside; {spec.application} starts "
                f"from group {spec.group}'s commits, re-reading {bound}{plan.records_to_replay} records "
                f"({plan.duplicates_expected} duplicated in the sink)"
            )
        },
    }


def _move_aside(spec: JobSpec, context: Any, plan: DStreamPlan, why: str, log: Any) -> dict[str, Any]:
    doc = _aside_doc(spec, plan, why, dry_run=False)
    aside = move_checkpoint_aside(spec)
    log.info("job %s: %s (moved to %s)", spec.name, doc["plan"]["headline"], aside)
    rec = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
    rec.add_event(
        LifecycleEvent.CHECKPOINT_RESET,
        actor=actor(context),
        kind="dstream",
        mode=why,
        aside_location=aside,
        records_to_replay=plan.records_to_replay,
        replay_exact=plan.replay_exact,
    )
    rec.save()
    return {**doc, "aside_location": aside}


def restore_step(spec: JobSpec) -> dict[str, Any]:
    raise UserError(
        f"job {spec.name} is a DStream job: restore of a named backup is not supported; its safe "
        "restart backs up and rolls back the group's offsets and DStream checkpoint itself"
    )


def health_gate(
    spec: JobSpec, context: Any, *, min_batches: int, timeout_s: float, poll_s: float, promote: bool, log: Any
) -> dict[str, Any]:
    """Wait (on the worker) until the group's commits advance ``min_batches`` times with a lag that is not growing."""
    record = LifecycleRecord.load(spec.checkpoint)
    sub = app_versions.submitted_app(record)
    if record is None or sub is None or record.driver is None:
        raise UserError(
            f"job {spec.name}: no submitted driver is recorded beside {spec.checkpoint}; submit the "
            "job before gating it"
        )
    baseline = submitted_offsets(record)
    started_at_ms = record.driver.started_at
    started = time.monotonic()
    samples: list[GroupSample] = []
    state, reason = "waiting", "no look yet"
    view = _view(spec)
    try:
        while True:
            now = time.monotonic()
            alive = start_stop.driver_alive(record, lambda: spark_target(spec))
            try:
                samples.append(group_sample(spec, baseline, kafka=view, at_s=now - started))
            except UserError as exc:   # as runtime.health.probe_or_wait: an unreachable broker is no verdict
                state, reason = "waiting", f"probe failed: {exc}"
            else:
                alive_for = time.time() - started_at_ms / 1000 if started_at_ms else now - started
                state, reason = judge_group_health(
                    samples,
                    min_batches=min_batches,
                    alive=alive,
                    alive_for_s=alive_for,
                    idle_pass_s=spec.health_gate.idle_pass_s,
                )
            log.info("health gate %s (group %s): %s", spec.name, spec.group, reason)
            if state != "waiting" or now - started >= timeout_s:
                break
            time.sleep(poll_s)
    finally:
        view.close()
    last = samples[-1] if samples else None   # None: the broker never answered before the deadline
    result = {
        "job": spec.name,
        "state": state,
        "reason": reason,
        "group": spec.group,
        "committed_past_restart": last.committed if last else None,
        "lag_records": last.lag if last else None,
        "new_batches": None,
        "samples": len(samples),
        "waited_s": round(time.monotonic() - started, 1),
    }
    if state != "healthy":
        fail_health_gate(context, spec, state=state, reason=reason, lag_records=result["lag_records"], log=log,
                         message=f"health gate of job {spec.name} "
                                 f"{'failed' if state == 'failed' else 'timed out'}: {reason}")
    rec = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
    good = app_versions.promote_submitted(rec, actor=actor(context)) if promote else None
    rec.add_event(
        LifecycleEvent.HEALTH_GATE_PASSED,
        actor=actor(context),
        group=spec.group,
        committed_past_restart=last.committed,
        lag_records=last.lag,
        promoted=bool(good),
    )
    rec.save()
    return {**result, "promoted": good is not None, "compatibility_version": (good or {}).get("compatibility_version")}


def rollback_step(spec: JobSpec, context: Any, backup_task: Mapping[str, Any] | None, log: Any) -> dict[str, Any]:
    """Put the group's offsets and the DStream checkpoint back from this run's backup (driver already stopped).

    ``restored_backup_id`` stays None: it names Structured Streaming backups; this one is ``restored_dstream_backup``.
    """
    location = (backup_task or {}).get(BACKUP_KEY)
    if not location:
        return {"restored_backup_id": None, "restored_dstream_backup": None,
                "notes": ["no DStream backup was taken in this run: nothing restored"]}
    backup = load_backup(str(location))
    view = _view(spec)
    try:
        rollback_dstream(spec, backup, kafka=view)
    finally:
        view.close()
    log.info("job %s: group %s offsets and DStream checkpoint restored from %s", spec.name, spec.group, location)
    return {"restored_backup_id": None, "restored_dstream_backup": location, "notes": []}


class DStreamSteps:
    """The steps on a consumer group and a DStream checkpoint (see the module docstring)."""

    plans_offsets = False
    precopies_backup = False   # nothing to pre-copy: the group's offsets are a few bytes
    commits_to_checkpoint = False   # its progress is the group's commits

    def validate(self, spec: JobSpec, context: Any, step: ValidateStep, log: Any) -> dict[str, Any]:
        return validate_step(spec, context, override=step.override, dry_run=step.dry_run, log=log)

    def backup(self, spec: JobSpec, context: Any, step: BackupStep, log: Any) -> dict[str, Any]:
        return backup_step(spec, context, dry_run=step.dry_run, log=log, prune=step.prune)

    def restore(self, spec: JobSpec, context: Any, step: RestoreStep, log: Any) -> dict[str, Any]:
        return restore_step(spec)

    def reset(self, spec: JobSpec, context: Any, step: ResetStep, log: Any) -> dict[str, Any]:
        # a new build moves its DStream checkpoint aside in the backup step, even when the mode says keep
        return reset_step(spec, context, mode=step.mode, dry_run=step.dry_run, log=log)

    def rollback(self, spec: JobSpec, context: Any, backup_task: Mapping[str, Any], log: Any) -> dict[str, Any]:
        return rollback_step(spec, context, backup_task, log)

    def prune(self, spec: JobSpec, backup_task: Mapping[str, Any], seal_key: bytes | None, log: Any) -> list[str]:
        taken = backup_task.get(BACKUP_KEY)
        return _apply_retention(spec, taken, log) if taken else []

    def worker_gate(self, spec: JobSpec, context: Any, step: GateStep, log: Any) -> dict[str, Any]:
        # the group's commits, polled on the worker (no trigger for groups yet)
        return health_gate(spec, context, min_batches=step.min_batches, timeout_s=step.timeout_s,
                           poll_s=step.poll_s, promote=step.promote, log=log)


STEPS = DStreamSteps()
