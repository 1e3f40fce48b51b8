"""Observe one streaming job: where it is, how far behind, whether it moves, how long until data loss.

Why one function for everything that watches: the ``aks lag`` command, the lag sensor, its
deferrable trigger and the scheduled audit must agree on every number. If each of them read the
checkpoint and the broker its own way, "the sensor said 0 but the audit said 12" would be a
question about code paths instead of about the job. So they all call :func:`observe`, which does
the I/O once and hands it to the pure evaluators:

* :func:`~airflow_kafka_spark.watch.lag.compute_lag` — records (``log end − C``, what
  ``kafka-consumer-groups.sh --describe`` prints for a group committed at ``C``) and seconds (age of
  the first unread record, read from Kafka; interpolated when that record cannot be read in time);
* :func:`~airflow_kafka_spark.watch.status.evaluate_status` — Burrow's rules over the checkpoint's
  offsets history (``offsets/N`` with ``batchTimestampMs``), thresholds from the registry;
* :func:`~airflow_kafka_spark.watch.headroom.compute_headroom` and
  :func:`~airflow_kafka_spark.watch.catch_up.estimate_catch_up`.

What the checkpoint cannot tell is how the *produced* side moved; that takes broker samples taken
at earlier times. The caller keeps them (the CLI in memory between refreshes, the trigger across
polls, the audit in its history file) and passes them back as ``samples``; each observation
returns the sample it took (:attr:`Observation.sample`). Without samples the status still works
(batch sizes, stall clock), it is only blind to a rate-limited job falling behind; it says so.

Consumer-group jobs (DStream ``commitAsync``, plain consumers) have no checkpoint: their position
is the group's committed offsets, and their "history" is made of the samples, one pseudo-batch per
distinct committed position at the time it was first seen (Burrow's window, built from our polls).

Reading first-unread records takes one short-lived consumer assigned to every lagging partition at
once (one fetch serves them all). The reads stop when ``probe_budget_s`` is spent; the partitions not
answered by then fall back to interpolation, never wrong by omission (``method`` says which).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from airflow_kafka_spark.checkpoint.model import BatchOffsets, CheckpointState
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.verdict.interrupted import interrupted_finding
from airflow_kafka_spark.watch.catch_up import estimate_catch_up
from airflow_kafka_spark.watch.headroom import compute_headroom
from airflow_kafka_spark.watch.lag import FirstUnread, compute_lag
from airflow_kafka_spark.watch.observation import Observation, Sample, Source
from airflow_kafka_spark.watch.offset_time import CurveBook, OffsetSample
from airflow_kafka_spark.watch.status import StatusThresholds, evaluate_status

if TYPE_CHECKING:
    from airflow_kafka_spark.registry.model import JobSpec


# --------------------------------------------------------------------------------------------------
# observing
# --------------------------------------------------------------------------------------------------


def thresholds_for(spec: JobSpec, **overrides: Any) -> StatusThresholds:
    """The registry's thresholds for ``spec`` as status thresholds; ``overrides`` win when not None."""
    base = {"max_lag_records": spec.max_lag_records, "max_lag_seconds": spec.max_lag_seconds,
            "stall_after_s": spec.stall_after_s}
    base.update({k: v for k, v in overrides.items() if v is not None})
    return StatusThresholds.from_mapping(base)


@dataclass(frozen=True)
class ObserveTarget:
    """What to observe: exactly one of a checkpoint location and a consumer group, with the job's topics.

    ``topics``: the job's subscription; a group needs it (its offsets may cover other topics), a
    checkpoint uses its own partitions and only adds topics listed here that it does not know yet
    (no lag is invented for them: Spark would read them from ``startingOffsets``). ``basis``:
    measure from the last committed batch (default) or from the planned one, checkpoints only.
    """

    checkpoint: str | None = None
    group_id: str | None = None
    topics: Sequence[str] | None = None
    job: str | None = None
    storage_options: dict | None = None
    basis: Literal["committed", "planned"] = "committed"

    def __post_init__(self) -> None:
        if (self.checkpoint is None) == (self.group_id is None):
            raise UserError("observe exactly one job position: a checkpoint location or a consumer group id")


@dataclass(frozen=True)
class ObserveLimits:
    """How fast the job may read (rate limit, measured rate) and how long the observation may wait on Kafka.

    ``probe_budget_s``: the time for reading first-unread records (default ``timeout``).
    """

    max_offsets_per_trigger: int | None = None
    processing_rate: float | None = None
    timeout: float = 10.0
    probe_budget_s: float | None = None

    @property
    def budget_s(self) -> float:
        return self.timeout if self.probe_budget_s is None else self.probe_budget_s


@dataclass(frozen=True)
class _Ask:
    """One observation's inputs besides the position: the job, its thresholds and samples, limits, the clock."""

    job: str | None
    thresholds: StatusThresholds | None
    samples: Sequence[Sample]
    limits: ObserveLimits
    now_ms: int | None


def observe(target: ObserveTarget, kafka: KafkaView | Mapping[str, Any] | None, *,
            thresholds: StatusThresholds | None = None, samples: Sequence[Sample] = (),
            limits: ObserveLimits = ObserveLimits(), now_ms: int | None = None) -> Observation:
    """Observe a job from its checkpoint (or a consumer group's offsets) and the broker, once.

    ``kafka``: a Kafka client configuration (a view is opened and closed here) or an open
    :class:`KafkaView` (left open). ``samples``: earlier :attr:`Observation.sample` values, any age.
    ``now_ms`` pins the clock (tests); by default "now" is when the broker was sampled, so record
    ages, stall clocks and headroom all share one instant.
    """
    if kafka is None:
        raise UserError("no Kafka configuration: give at least bootstrap.servers")
    own_view = isinstance(kafka, Mapping)     # a configuration: this observation's own view
    view = KafkaView(dict(kafka), timeout=limits.timeout) if isinstance(kafka, Mapping) else kafka
    ask = _Ask(job=target.job, thresholds=thresholds, samples=samples, limits=limits, now_ms=now_ms)
    try:
        if target.checkpoint is not None:
            obs = _observe_checkpoint(view, target, ask)
            return replace(obs, interrupted=interrupted_finding(target.checkpoint, target.storage_options))
        return _observe_group(view, str(target.group_id), target.topics, ask)
    finally:
        if own_view:
            view.close()


def observe_job(spec: JobSpec, kafka_config: Mapping[str, Any] | None = None, *, view: KafkaView | None = None,
                samples: Sequence[Sample] = (), thresholds: StatusThresholds | None = None,
                storage_options: dict | None = None, timeout: float = 10.0,
                now_ms: int | None = None) -> Observation:
    """:func:`observe` for a registry job: its checkpoint, topics, rate limit and thresholds.

    A DStream job (``kind: dstream``) has no Structured Streaming checkpoint: its position is the
    group it ``commitAsync``s to, so it is observed from the group (the lag sensor, ``aks status``,
    the audit, the metrics and the UI page all come through here).
    """
    checkpoint, group = spec.position_source
    target = ObserveTarget(checkpoint=checkpoint, group_id=group, topics=spec.topics, job=spec.name,
                           storage_options=storage_options if checkpoint else None)
    return observe(target, view if view is not None else kafka_config, thresholds=thresholds or thresholds_for(spec),
                   samples=samples, limits=ObserveLimits(max_offsets_per_trigger=spec.max_offsets_per_trigger,
                                                         timeout=timeout), now_ms=now_ms)


def history_batches(window: int) -> int:
    """How many of the newest ``offsets/N`` an observation reads: ``2 × window + 1`` (21 by default).

    What each evaluator needs: the lag's offset→time curve interpolates between the last committed
    batch and the next point above the position (the planned batch or a broker sample), so C-1..L;
    the status's trend, batch sizes and rhythm use the last ``window`` batches (Burrow's window);
    catch-up the last 10. Twice the window leaves room for the REWIND scan and the median interval.
    Reading all of a 10,000-batch history (``minBatchesToRetain``) cost minutes and GiBs and
    changed no number the observation reports but REWINDs older than that window.
    """
    return 2 * max(int(window), 10) + 1


def _prev_samples(samples: Sequence[Sample], now_ms: int) -> list[OffsetSample]:
    return [(s.at_ms, dict(s.latest)) for s in sorted(samples, key=lambda s: s.at_ms) if s.at_ms < now_ms]


def _first_unread(kafka: KafkaView, positions: PartitionOffsets, broker: BrokerState, budget_s: float
                  ) -> tuple[dict[TopicPartition, FirstUnread], list[TopicPartition], float]:
    """First readable record at or after the position of every lagging partition, within a budget.

    All lagging partitions are read together by one consumer; those not answered within the budget
    fall back to interpolation.
    """
    lagging: list[tuple[int, TopicPartition, int]] = []
    topics = {tp.topic for tp in positions}
    # Partitions the checkpoint does not know yet are read from their log start (S04), as compute_lag does.
    wanted = {**{tp: broker.earliest.get(tp, 0) for tp in broker.latest if tp.topic in topics}, **positions}
    for tp, pos in wanted.items():
        end, start = broker.latest.get(tp), broker.earliest.get(tp)
        if end is None:
            continue
        readable_from = max(pos, start) if start is not None else pos
        if end > readable_from:
            lagging.append((end - readable_from, tp, readable_from))
    lagging.sort(key=lambda x: (-x[0], x[1]))
    t0 = time.monotonic()
    found: dict[TopicPartition, FirstUnread] = {}
    if lagging:
        bounds = {tp: (broker.earliest[tp], broker.latest[tp]) for _, tp, _ in lagging if tp in broker.earliest}
        found.update(kafka.first_records_at_or_after({tp: offset for _, tp, offset in lagging},
                                                     deadline=t0 + max(0.0, budget_s), bounds=bounds))
    unprobed = [tp for _, tp, _ in lagging if tp not in found]
    return found, sorted(unprobed), time.monotonic() - t0


@dataclass(frozen=True)
class _Read:
    """What the position's own source said: where it is, its history, the broker now, notes, batch ids."""

    source: Source
    subject: str
    positions: PartitionOffsets
    history: Sequence[BatchOffsets]
    committed: PartitionOffsets | None
    broker: BrokerState
    notes: list[str]
    batches: tuple[int | None, int | None, int | None]    # last planned, last committed, last batch's timestamp


def _finish(kafka: KafkaView, read: _Read, ask: _Ask) -> Observation:
    positions, history, committed, broker, notes = read.positions, read.history, read.committed, read.broker, \
        read.notes
    now = broker.sampled_at_ms if ask.now_ms is None else int(ask.now_ms)
    th = ask.thresholds or StatusThresholds()
    prev = _prev_samples(ask.samples, now)
    first_unread, unprobed, probe_s = _first_unread(kafka, positions, broker, ask.limits.budget_s)
    if unprobed:
        notes.append(f"time budget for reading first-unread records spent after {probe_s:.1f} s: "
                     f"{len(unprobed)} partition(s) interpolated")
    curves = CurveBook(history, [*prev, (broker.sampled_at_ms, broker.latest)])   # shared by lag and headroom
    lag = compute_lag(positions, broker, first_unread_ts=first_unread, history=history, now_ms=now,
                      samples=prev, basis="committed" if committed is not None else "planned",
                      include_new_partitions=True, curves=curves)
    status = evaluate_status(history, broker.latest, now, previous_latest=prev, thresholds=th,
                             committed=committed, current_lag=lag)
    # New partitions count from their log start (S04): they are unread records too.
    head_positions = {p.tp: p.position for p in lag.partitions}
    headroom = compute_headroom(head_positions, broker, now_ms=now, first_unread_ts=first_unread, samples=prev,
                                history=history, curves=curves)
    catch_up = estimate_catch_up(lag.records_effective, processing_rate=ask.limits.processing_rate, history=history,
                                 samples=[*prev, (broker.sampled_at_ms, broker.latest)],
                                 max_offsets_per_trigger=ask.limits.max_offsets_per_trigger)
    if broker.missing_topics:
        notes.append(f"topic(s) not on the cluster: {', '.join(broker.missing_topics)}")
    planned_id, committed_id, last_ts = read.batches
    return Observation(
        job=ask.job, source=read.source, subject=read.subject, observed_at_ms=now, position=dict(positions),
        broker=broker, lag=lag, status=status, headroom=headroom, catch_up=catch_up,
        sample=Sample(broker.sampled_at_ms, dict(broker.latest), dict(positions)), thresholds=th,
        last_planned_batch=planned_id, last_committed_batch=committed_id, last_batch_timestamp_ms=last_ts,
        probe_seconds=probe_s, unprobed=unprobed, notes=notes)


def _observe_checkpoint(kafka: KafkaView, target: ObserveTarget, ask: _Ask) -> Observation:
    location, topics = str(target.checkpoint), target.topics
    window = (ask.thresholds or StatusThresholds()).window
    state = read_checkpoint(location, storage_options=target.storage_options, read_history=True,
                            history_batches=history_batches(window))
    if not state.exists:
        raise UserError(f"checkpoint {location} does not exist: the job has not started yet, or its checkpoint "
                        "was moved (check the registry's checkpoint path)")
    notes: list[str] = [f"checkpoint problem {p.code} at {p.path or '.'}: {p.message}"
                        for p in state.blocking_problems]
    positions, committed = _checkpoint_positions(state, target.basis, notes)
    wanted = list(dict.fromkeys([*sorted({tp.topic for tp in positions}), *(topics or ())]))
    if not wanted:
        raise UserError(f"checkpoint {location} has no Kafka source offsets and no topics were given")
    broker = kafka.broker_state(wanted, reference=positions or None)
    last = max((b for b in state.history if b.batch_timestamp_ms is not None), key=lambda b: b.batch_id,
               default=None)
    return _finish(kafka, _Read(
        source="checkpoint", subject=location, positions=positions, history=state.history, committed=committed,
        broker=broker, notes=notes,
        batches=(state.latest_planned.batch_id if state.latest_planned else None,
                 state.latest_committed.batch_id if state.latest_committed else None,
                 last.batch_timestamp_ms if last else None)), ask)


def _checkpoint_positions(state: CheckpointState, basis: str, notes: list[str]
                          ) -> tuple[PartitionOffsets, PartitionOffsets | None]:
    """(position, committed) for the evaluators.

    ``committed`` is C, or None when lag is measured from the planned batch P on purpose (then the
    status treats the planned batch as processed). Before the first commit the position is where
    batch 0 starts: the initial offsets Spark resolved in ``sources/<n>/0``.
    """
    if basis == "planned" and state.latest_planned is not None:
        return dict(state.latest_planned.kafka_offsets), None
    pos = resume_position(state)
    committed = dict(pos.committed) if pos is not None else {}
    if pos is None or pos.committed_batch is None:
        notes.append("no committed batch yet: lag is counted from the starting offsets of batch 0")
    return committed, dict(committed)


def _group_history(samples: Sequence[Sample], now_ms: int, current: PartitionOffsets) -> list[BatchOffsets]:
    """Pseudo-batches from the positions seen in the samples: one per distinct committed position,
    stamped when it was first seen (the commit happened at or before that)."""
    seen: list[tuple[int, PartitionOffsets]] = [
        (s.at_ms, dict(s.position)) for s in sorted(samples, key=lambda s: s.at_ms)
        if s.position and s.at_ms < now_ms]
    seen.append((now_ms, dict(current)))
    history: list[BatchOffsets] = []
    previous: PartitionOffsets | None = None
    for at_ms, pos in seen:
        if pos != previous:
            history.append(BatchOffsets(batch_id=len(history), version=1, batch_timestamp_ms=at_ms,
                                        batch_watermark_ms=None, conf={}, sources={"0": pos}))
            previous = pos
    return history


def _observe_group(kafka: KafkaView, group_id: str, topics: Sequence[str] | None, ask: _Ask) -> Observation:
    # Describe first: a fetch for a group that does not exist can crash librdkafka (see mirror.py).
    wanted_topics = set(topics) if topics else None
    positions = {tp: o for tp, o in kafka.group_offsets(group_id).items()
                 if wanted_topics is None or tp.topic in wanted_topics}
    wanted = list(dict.fromkeys([*(topics or ()), *sorted({tp.topic for tp in positions})]))
    if not wanted:
        raise UserError(f"consumer group {group_id} has no committed offsets and no topics were given; "
                        "pass the topics it consumes")
    broker = kafka.broker_state(wanted, reference=positions or None)
    now = broker.sampled_at_ms if ask.now_ms is None else int(ask.now_ms)
    notes = ["position from the consumer group's committed offsets; its history is built from earlier samples "
             "(one pseudo-batch per distinct position, stamped when first seen)"]
    if not positions:
        notes.append("the group has no committed offsets: nothing to measure yet")
    history = _group_history(ask.samples, now, positions)
    return _finish(kafka, _Read(source="group", subject=group_id, positions=positions, history=history,
                                committed=positions, broker=broker, notes=notes,
                                batches=(None, None, history[-1].batch_timestamp_ms)), ask)


__all__ = ["ObserveLimits", "ObserveTarget", "observe", "observe_job", "thresholds_for"]
