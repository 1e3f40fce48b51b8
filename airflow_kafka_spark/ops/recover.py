"""Finish (roll forward) or refuse an interrupted reset/restore found beside a checkpoint.

Why its own module: the journal file lives in ``lifecycle.journal`` (the verdict reads it); the
steps that finish each operation live with the operation (``reset.roll_forward``,
``restore.roll_forward``). Dispatching between them here, above both, is what keeps
backup → journal → reset/restore → backup from being a cycle. Callers hold the operation lock.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_spark._util.fs import Location
from airflow_kafka_spark.lifecycle.journal import Journal, Operation
from airflow_kafka_spark.ops.guards import refuse_stale_roll_forward


def finish_interrupted(ck: Location, *, storage_options: dict | None = None) -> dict[str, Any] | None:
    """Roll an interrupted reset/restore on this location forward to its end; its result, or None.

    Refuses (:class:`OperationBlocked`, nothing changed) when a job was deployed on the location
    since the journal was written (``guards.refuse_stale_roll_forward``).
    """
    journal = Journal.load(ck)
    if journal is None:
        return None
    refuse_stale_roll_forward(journal, ck)
    # Imported only when a journal is there: both ask Kafka, which a backup or prune never does.
    from airflow_kafka_spark.ops import reset, restore

    if journal.op == Operation.RESET:
        return reset.roll_forward(journal, ck, storage_options=storage_options)
    return restore.roll_forward(journal, ck, storage_options=storage_options)
