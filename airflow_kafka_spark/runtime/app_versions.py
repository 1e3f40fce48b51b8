"""Which application version a job runs, and which one last passed its health gate.

The lifecycle record (beside the checkpoint) keeps two entries in its
``extra`` section, both written here:

* ``submitted_app``: what the last submit started (application, arguments, topics, sink, Spark
  conf, compatibility version), the driver, the batch committed before it started (the health
  gate counts new batches from there) and where its log is.
* ``last_good_app``: the submitted application copied over once it passed the health gate. It is
  "the previous application" a rollback resubmits, and its ``compatibility_version`` is what the
  safe-restart DAG's ``auto`` mode compares with the registry to decide whether a reset is needed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import APP_FIELDS, Integration, JobSpec, Sink

SUBMITTED_KEY = "submitted_app"
LAST_GOOD_KEY = "last_good_app"
_TUPLE_FIELDS = ("application_args", "topics", "jars", "packages", "py_files", "files")


def app_version(spec: JobSpec) -> dict[str, Any]:
    """The parts of a job entry that make up "the application": enough to resubmit it later."""
    d = spec.to_dict()
    return {k: d[k] for k in APP_FIELDS}


def spec_for_app(spec: JobSpec, app: Mapping[str, Any]) -> JobSpec:
    """``spec`` running the recorded application ``app`` (checkpoint, stop marker and connections
    stay the registry's: a rollback reruns the old code on the same job)."""
    values: dict[str, Any] = {}
    for key in APP_FIELDS:
        if key not in app:
            continue
        value = app[key]
        if key in _TUPLE_FIELDS:
            value = tuple(str(v) for v in value or ())
        elif key == "spark_conf":
            value = {str(k): str(v) for k, v in (value or {}).items()}
        elif key == "sink":
            value = Sink(value)   # stored as its string value; JobSpec holds the enum (to_dict needs .value)
        elif key == "integration":
            value = Integration(value)
        values[key] = value
    return dataclasses.replace(spec, **values)


def submitted_app(record: LifecycleRecord | None) -> dict[str, Any] | None:
    entry = (record.extra.get(SUBMITTED_KEY) if record is not None else None)
    return dict(entry) if isinstance(entry, dict) else None


def last_good_app(record: LifecycleRecord | None) -> dict[str, Any] | None:
    entry = (record.extra.get(LAST_GOOD_KEY) if record is not None else None)
    return dict(entry) if isinstance(entry, dict) else None


@dataclass(frozen=True)
class SubmittedApp:
    """What a submit started, as the record keeps it under ``submitted_app``.

    ``mode``: how the driver was detached (``detach``); ``committed_before`` / ``query_id_before``:
    where the checkpoint stood, for the health gate's "new batches" count; ``holder`` (the
    submitting task, ``dag/run/task``) lets a retry of that task recognise its own driver.
    """

    app: Mapping[str, Any]
    driver: DriverInfo
    master: str
    deploy_mode: str | None
    mode: str
    committed_before: int | None
    query_id_before: str | None
    log_path: str | None = None
    starting_offsets_file: str | None = None
    actor: str | None = None
    rollback: bool = False
    endpoint: Mapping[str, Any] | None = None
    holder: str | None = None


def record_submit(record: LifecycleRecord, submitted: SubmittedApp) -> dict[str, Any]:
    """Write what was started into ``record`` (not saved): the driver and ``submitted_app``; returns the entry."""
    s, driver, app = submitted, submitted.driver, submitted.app
    record.set_driver(driver.kind, driver.id, host=driver.host, started_at=driver.started_at)
    entry = {"app": dict(app), "driver": dataclasses.asdict(driver), "master": s.master,
             "deploy_mode": s.deploy_mode, "detach": s.mode, "committed_before": s.committed_before,
             "query_id_before": s.query_id_before, "log_path": s.log_path,
             "starting_offsets_file": s.starting_offsets_file, "submitted_at_ms": int(time.time() * 1000),
             "actor": s.actor, "rollback": s.rollback, "endpoint": dict(s.endpoint) if s.endpoint else None,
             "holder": s.holder}
    record.extra[SUBMITTED_KEY] = entry
    record.add_event(LifecycleEvent.DRIVER_SUBMITTED, actor=s.actor, driver_kind=driver.kind, driver_id=driver.id,
                     application=app.get("application"), application_args=list(app.get("application_args") or []),
                     compatibility_version=app.get("compatibility_version"), master=s.master, detach=s.mode,
                     committed_before=s.committed_before, rollback=s.rollback)
    return entry


def promote_submitted(record: LifecycleRecord, *, actor: str | None) -> dict[str, Any] | None:
    """The submitted application passed its health gate: make it ``last_good_app`` (not saved)."""
    sub = submitted_app(record)
    if sub is None:
        return None
    app = dict(sub.get("app") or {})
    good = {**app, "driver_id": (sub.get("driver") or {}).get("id"), "promoted_at_ms": int(time.time() * 1000)}
    record.extra[LAST_GOOD_KEY] = good
    record.compatibility_version = app.get("compatibility_version")
    record.add_event(LifecycleEvent.APPLICATION_PROMOTED, actor=actor, application=app.get("application"),
                     application_args=list(app.get("application_args") or []),
                     compatibility_version=app.get("compatibility_version"))
    return good
