"""The health gate after a (re)start: K new committed batches, lag not growing, driver alive.

Why a gate at all: spark-submit returning (or a pid existing) says nothing about the query. A
checkpoint-breaking change, a wrong jar or a bad option only shows once Spark plans and commits a
batch, often minutes later. The gate waits for evidence instead: at least ``min_batches`` batches
committed *after* the submit (counted from the batch committed before it; after a reset, the new
query's batches), and a lag that is not growing (:func:`~airflow_kafka_spark.watch.status.evaluate_status`
over the checkpoint's offsets history and the broker samples taken while waiting). It fails at once
when the driver is gone (local pid dead, cluster application ended) or when the job rewinds, and
on timeout. After a reset it also fails when the new query's first batch did not start where the
reset planned (:mod:`~airflow_kafka_spark.runtime.start_check`): the job would run fine and silently
replay or skip.

A quiet topic: a job that gets no new records commits no batches (Spark plans no batch without
new data), so counting batches alone would time out and roll back a good deploy. With
``idle_pass_s`` set, once the driver has been alive that long with nothing left to read (its
position, the last committed offsets or the initial offsets Spark resolved in ``sources/0/0``,
equals the log end of every partition) and no batch in flight, the gate passes as **idle**: the
result says so (``idle: true``) because the first batch of the new code is still unproven, and a
failure that only shows in a batch (a state schema change) will show when records arrive.

:func:`check_health` is one synchronous look (a :class:`HealthCheck`), pure of Airflow: the sensor
calls it in poke mode, and :class:`airflow_kafka_spark.triggers.health.StreamingHealthTrigger` calls it in a thread from
the triggerer (deferrable mode), so no worker slot is held while a restarted job warms up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from airflow_kafka_spark.runtime.start_check import first_batch_mismatch, planned_start
from airflow_kafka_spark.watch.status import Status, StatusThresholds, evaluate_status


class HealthState(StrEnum):
    """Where a health gate stands; the value is what XCom and the trigger's event carry."""

    HEALTHY = "healthy"
    WAITING = "waiting"
    FAILED = "failed"


HEALTHY, WAITING, FAILED = HealthState.HEALTHY, HealthState.WAITING, HealthState.FAILED
MAX_SAMPLES = 30


@dataclass
class HealthCheck:
    """One look at a restarted job. ``samples`` are the broker log ends seen so far (JSON-able)."""

    state: HealthState
    reason: str
    new_batches: int = 0
    last_committed: int | None = None
    query_id: str | None = None
    status: str | None = None
    lag_records: int | None = None
    trend_growing: bool | None = None
    idle: bool = False
    samples: list[list[Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": str(self.state)}


def _sample_doc(latest: Mapping[TopicPartition, int]) -> list[list[Any]]:
    return [[tp.topic, tp.partition, off] for tp, off in sorted(latest.items())]


def _samples_in(samples: Sequence[Sequence[Any]]) -> list[tuple[int, dict[TopicPartition, int]]]:
    out = []
    for at, doc in samples:
        out.append((int(at), {TopicPartition(str(t), int(p)): int(o) for t, p, o in doc}))
    return out


def check_or_wait(check: Callable[[], HealthCheck], samples: list[list[Any]]) -> HealthCheck:
    """``check()``; a look that could not be taken (an unreachable broker, a store that did not answer)
    is WAITING with the error as its reason, not a verdict on the job.

    One rule for the sensor's own looks and the trigger's: a broker restarted during the gate must
    not fail (and roll back) a healthy deploy; the gate's deadline still ends a wait that never
    heals, with the last error as its reason. Only a driver on another host fails at once
    (:class:`~airflow_kafka_spark.runtime.drivers.WrongHost`): waiting cannot make it visible.
    """
    from airflow_kafka_spark.errors import UserError

    try:
        return check()
    except drivers.WrongHost:
        raise
    except UserError as exc:
        return HealthCheck(WAITING, f"probe failed: {exc}", samples=samples)   # the reason's words: as before



@dataclass(frozen=True)
class HealthLook:
    """What one health look needs: the job's checkpoint and topics, the gate's rule, the driver, the clock.

    ``baseline_batch``/``baseline_query_id``: the checkpoint's last committed batch and query id
    when the driver was submitted. A different query id (a reset left a new checkpoint) means
    every committed batch is new. ``idle_pass_s``/``submitted_at_ms``: the idle pass (module doc).
    ``samples``: the broker samples earlier looks returned (``HealthCheck.samples``).
    """

    checkpoint: str
    topics: Sequence[str]
    kafka_config: Callable[[], dict[str, Any]]
    min_batches: int
    baseline_batch: int | None
    baseline_query_id: str | None
    alive: Callable[[], bool]
    log_tail: Callable[[], str] | None = None
    samples: Sequence[Sequence[Any]] = ()
    kafka_timeout_s: float = 10.0
    idle_pass_s: float | None = None
    submitted_at_ms: int | None = None
    now_ms: int | None = None


def check_health(look: HealthLook) -> HealthCheck:
    """One health look: FAILED if the driver is gone or the job rewinds, HEALTHY once ``min_batches``
    new batches are committed and the lag is not growing, WAITING otherwise."""
    checkpoint, topics, kafka_config, min_batches = look.checkpoint, look.topics, look.kafka_config, look.min_batches
    idle_pass_s, submitted_at_ms, kafka_timeout_s = look.idle_pass_s, look.submitted_at_ms, look.kafka_timeout_s
    baseline_batch, baseline_query_id, samples = look.baseline_batch, look.baseline_query_id, look.samples
    kept = [list(s) for s in samples][-MAX_SAMPLES:]
    state = read_checkpoint(checkpoint, read_history=True)
    committed = state.latest_committed
    same_query = state.query_id is not None and state.query_id == baseline_query_id
    floor = baseline_batch if same_query and baseline_batch is not None else -1
    new = sum(1 for b in state.commit_batch_ids if b > floor)
    base = {"new_batches": new, "last_committed": committed.batch_id if committed else None,
            "query_id": state.query_id, "samples": kept}
    if not look.alive():
        tail = look.log_tail() if look.log_tail else ""
        return HealthCheck(FAILED, f"the driver exited after {new} new committed batch(es)"
                           + (f"; last driver output:\n{tail}" if tail else ""), **base)
    wrong = None if same_query or not state.offset_batch_ids else first_batch_mismatch(state, planned_start(checkpoint))
    if wrong:
        return HealthCheck(FAILED, wrong, **base)
    if new < min_batches:
        waiting = f"{new} of {min_batches} new batches committed"
        alive_s = ((look.now_ms or int(time.time() * 1000)) - submitted_at_ms) / 1000 if submitted_at_ms else None
        if idle_pass_s is None or alive_s is None or alive_s < idle_pass_s:
            return HealthCheck(WAITING, waiting, **base)
        position = _position_if_idle(state)
        if position is None:
            return HealthCheck(WAITING, f"{waiting}; not idle: a batch is in flight or no start position is "
                               "known yet", **base)
        with KafkaView(kafka_config(), timeout=kafka_timeout_s) as view:
            latest = view.broker_state(list(topics)).latest
        behind = {tp: end - position.get(tp, 0) for tp, end in latest.items() if end > position.get(tp, 0)}
        if behind:
            return HealthCheck(WAITING, f"{waiting}; {sum(behind.values())} records to read on {len(behind)} "
                               "partition(s)", **base, lag_records=sum(behind.values()))
        return HealthCheck(HEALTHY, f"idle: the driver has run {alive_s:.0f}s with nothing to read (position = "
                           f"log end on all {len(latest)} partitions) and {new} new committed batch(es); the "
                           "first batch of this code is not proven until records arrive", **base,
                           lag_records=0, idle=True)
    with KafkaView(kafka_config(), timeout=kafka_timeout_s) as view:
        broker = view.broker_state(list(topics))
    now = broker.sampled_at_ms
    st = evaluate_status(state.history, broker.latest, now, previous_latest=_samples_in(kept),
                         thresholds=StatusThresholds(), committed=committed.kafka_offsets if committed else None)
    kept = [*kept, [now, _sample_doc(broker.latest)]][-MAX_SAMPLES:]
    growing = bool(st.numbers.get("trend_growing"))
    base.update(samples=kept)
    extra = {"status": str(st.status), "lag_records": st.numbers.get("lag_records"), "trend_growing": growing}
    if st.status is Status.REWIND:
        return HealthCheck(FAILED, f"the job rewinds: {st.reason}", **base, **extra)
    if growing:
        return HealthCheck(WAITING, f"{new} new batches committed but the lag grows: {st.reason}", **base, **extra)
    return HealthCheck(HEALTHY, f"{new} new batches committed (last {base['last_committed']}), lag "
                       f"{extra['lag_records']} records, not growing ({st.status})", **base, **extra)


def _position_if_idle(state: Any) -> dict[TopicPartition, int] | None:
    """Where the job will read next, if no batch is in flight: the last committed offsets, or the
    initial offsets Spark resolved for a query that has not committed a batch yet."""
    pos = resume_position(state)
    if pos is None or pos.pending_batch is not None:
        return None
    return dict(pos.committed) or None


def make_control(driver: Mapping[str, Any], *, endpoint: Mapping[str, Any] | None) -> drivers.DriverControl:
    """The recorded driver's :class:`~airflow_kafka_spark.runtime.drivers.DriverControl` from plain values
    (what a trigger can carry): a local one by pid, a cluster one through its recorded endpoint."""
    info = DriverInfo(kind=str(driver["kind"]), id=str(driver["id"]), host=driver.get("host"),
                      started_at=driver.get("started_at"))
    return drivers.control(info, endpoint=endpoint)


def failed_gate_log(control: drivers.DriverControl, local_tail: Callable[[], str]) -> Callable[[], str]:
    """What a failed gate shows: a local driver's log file, or the cluster's final state and driver log."""
    def tail() -> str:
        return local_tail() or control.log_tail()
    return tail


def record_failed_gate(job: str, checkpoint: str, *, actor: str, state: str, reason: str,
                       lag_records: int | None = None) -> None:
    """Write ``health_gate_failed`` to the job's lifecycle record before the task fails.

    A rollback that follows, or none (``rollback_on_failure`` off), both start from this entry: the
    record, the UI's last safe restart and ``aks_gate_outcomes_total{outcome="failed"}`` then say that
    the new code ran and why it was judged unhealthy, not only that something was rolled back.
    A long reason keeps its head (the verdict) and its tail (the end of the driver's log).
    """
    if len(reason) > 2000:
        reason = f"{reason[:600]} … {reason[-1400:]}"
    record = LifecycleRecord.load_or_create(job, checkpoint)
    record.add_event(LifecycleEvent.HEALTH_GATE_FAILED, actor=actor, state=state, reason=reason,
                     lag_records=lag_records)
    record.save()


# The names before "probe" was kept for the compatibility probe alone (sensors/health.py and users' code import
# them); nothing Airflow stores names them (the trigger's path is triggers.health.StreamingHealthTrigger).
HealthProbe = HealthCheck
probe_health = check_health
probe_or_wait = check_or_wait
