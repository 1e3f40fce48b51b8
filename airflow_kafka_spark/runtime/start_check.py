"""The health gate's check of a reset's start: did the new query's first batch start where the reset planned?

Why: a reset writes ``sources/<id>/0`` so Spark starts at the plan whatever the application's
``startingOffsets`` (ops/reset_start.py); but a job pointed at another checkpoint, a file removed or
rewritten in between, or a source id the reset guessed wrong all let the application's own
``startingOffsets`` win, and the job then replays or skips silently while every batch commits and
the lag looks fine. Spark keeps its own record of where the new query started: ``sources/<id>/0``
(written before batch 0 is planned, never rewritten) and ``offsets/0`` (batch 0's end, which can
only be at or after its start). Once the new query has planned its first batch this compares them
with the plan the reset recorded (the lifecycle record's ``next_starting_offsets``, kept until the
gate passes), and a difference fails the gate, so the DAG rolls back.
"""

from __future__ import annotations

from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord


def planned_start(checkpoint: str) -> str | None:
    """The reset's planned start recorded beside ``checkpoint`` (None: no reset is waiting for its first batch)."""
    record = LifecycleRecord.load(checkpoint)
    return record.next_starting_offsets if record is not None else None


def first_batch_mismatch(state: CheckpointState, planned_json: str | None) -> str | None:
    """One line when the new query's first batch did not start at ``planned_json``; None if it did or
    cannot be told yet (no plan, or no batch planned)."""
    if not planned_json or not state.offset_batch_ids:
        return None
    planned = parse_offsets_json(planned_json, what="next_starting_offsets")
    started: PartitionOffsets = {}
    for offs in state.initial_offsets.values():
        started.update(offs or {})
    first = next((b for b in state.history if b.batch_id == 0), None)
    if state.latest_planned is not None and state.latest_planned.batch_id == 0:
        first = state.latest_planned
    ends = first.kafka_offsets if first is not None else {}
    wrong: list[str] = []
    for tp, want in sorted(planned.items()):
        got = started.get(tp)
        if got != want:
            wrong.append(f"{tp} {_n(got)} instead of {want:,}")
        elif tp in ends and ends[tp] < want:
            wrong.append(f"{tp} batch 0 ended at {ends[tp]:,}, before the planned start {want:,}")
    if not wrong:
        return None
    topics = {tp.topic for tp in planned}
    mine = {tp: o for tp, o in started.items() if tp.topic in topics}
    at = to_offsets_json(mine) if mine else "no sources/<id>/0 for these topics (no Kafka start recorded)"
    shown = "; ".join(wrong[:3]) + (f"; +{len(wrong) - 3} more" if len(wrong) > 3 else "")
    return (f"the new query's first batch started at {at}, the reset planned {to_offsets_json(planned)}: {shown} "
            "- the application's own startingOffsets won (its checkpoint did not hold the reset's "
            "sources/<id>/0) or another query wrote the checkpoint; the job replays or skips those records")


def _n(v: int | None) -> str:
    return "nothing" if v is None else f"{v:,}"
