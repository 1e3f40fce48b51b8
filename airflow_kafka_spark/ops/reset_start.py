"""Where a reset's new checkpoint makes Spark start: one ``sources/<id>/0`` per Kafka source of the old query.

Why: the lifecycle record's ``next_starting_offsets`` reaches only the reference job (through
``--starting-offsets-file``); a user's own job starts from its hard-coded ``startingOffsets`` and the
reset silently replays or skips. Spark's Kafka source reads a new query's start from
``sources/<id>/0`` before it looks at ``startingOffsets`` (airflow_kafka_spark/checkpoint/initial_offsets.py,
docs/exact-start.md), so the reset writes that file into the fresh location and Spark itself starts
at the plan, whatever the application passes.

Which id is which source: Spark numbers sources in plan order (``0``, ``1``, …; a Spark 4.2 named
source keeps ``sources/<name>/``), and a restarted query with the same code gets the same ids. The
old checkpoint's own ``sources/<id>/0`` files say which id reads which topic (their folder names are
what Spark used, names included); when they are missing, its offsets log does. A topic no old source
read (``--topics`` added it) goes to the only Kafka source if there is one; with several, nothing is
written (a wrong guess would hand one source another's topics: Spark reports those as "gone") and
the plan says the start is the application's.

This module also adds the plan's two notes on the new query: where Spark will start, and what a
restart at batch 0 does to a sink keyed by batch id.
"""

from __future__ import annotations

from airflow_kafka_spark.checkpoint.model import CheckpointState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json, to_offsets_json
from airflow_kafka_spark.ops.plan import Plan
from airflow_kafka_spark.verdict.findings import INFO, WARN

#: ``plan.details`` key: source id -> the offsets JSON its ``sources/<id>/0`` gets.
SOURCE_FILES = "source_files"


def topic_owners(state: CheckpointState) -> dict[str, str]:
    """topic -> the old query's source id that read it (``sources/<id>/0`` names first, then the offsets log)."""
    owners: dict[str, str] = {}
    for sid, offs in sorted(state.initial_offsets.items()):
        for tp in offs or {}:
            owners.setdefault(tp.topic, sid)
    kafka_dirs = set(state.initial_offsets)
    for batch in (state.latest_committed, state.latest_planned):
        if batch is None:
            continue
        for sid, offs in sorted(batch.sources.items()):
            # A v1 offsets log numbers sources by position even when the folder is a name (Spark 4.2
            # source evolution): its id counts only if it is one of the folders, or there are none.
            if kafka_dirs and sid not in kafka_dirs:
                if len(kafka_dirs) != 1:
                    continue
                sid = next(iter(kafka_dirs))
            for tp in offs or {}:
                owners.setdefault(tp.topic, sid)
    return owners


def kafka_source_ids(state: CheckpointState) -> list[str]:
    """The old query's Kafka source ids (folders of ``sources/`` holding Kafka offsets, else the offsets log's)."""
    if state.initial_offsets:
        return sorted(state.initial_offsets)
    ids: set[str] = set()
    for batch in (state.latest_committed, state.latest_planned):
        if batch is not None:
            ids.update(sid for sid, offs in batch.sources.items() if offs is not None)
    return sorted(ids)


def source_starts(state: CheckpointState, starting: PartitionOffsets) -> tuple[dict[str, PartitionOffsets], str]:
    """({source id: its start offsets}, why not) — an empty dict and a reason when it cannot be told."""
    if not starting:
        return {}, "the plan has no partitions"
    owners = topic_owners(state)
    ids = kafka_source_ids(state)
    out: dict[str, PartitionOffsets] = {}
    unowned: list[str] = []
    for tp, offset in sorted(starting.items()):
        sid = owners.get(tp.topic) or (ids[0] if len(ids) == 1 else None)
        if sid is None:
            unowned.append(tp.topic)
            continue
        out.setdefault(sid, {})[tp] = offset
    if unowned:
        topics = ", ".join(sorted(set(unowned)))
        why = (f"the old query had {len(ids)} Kafka sources and none of them read {topics}" if ids else
               "the old checkpoint names no Kafka source (no sources/<id>/0 and no offsets)")
        return {}, f"{why}: which source id reads it is unknown"
    return out, ""


def add_start_notes(plan: Plan, state: CheckpointState) -> None:
    """Record the ``sources/<id>/0`` files in ``plan.details`` and say where the new query starts."""
    if not plan.moves:
        return
    files, why = source_starts(state, plan.starting_offsets)
    plan.details[SOURCE_FILES] = {sid: to_offsets_json(offs) for sid, offs in files.items()}
    if files:
        where = ", ".join(f"sources/{sid}/0" for sid in sorted(files))
        left = [sid for sid in kafka_source_ids(state) if sid not in files]
        rest = (f"; the old query's Kafka source(s) {', '.join(left)} read none of the planned topics and get no "
                "file: they start where the application's startingOffsets say" if left else "")
        plan.add("EXACT_START", INFO,
                 f"Spark will start at {plan.starting_offsets_json}, whatever startingOffsets the application sets: "
                 f"the reset writes {where} into the new checkpoint, which Spark's Kafka source reads before "
                 f"startingOffsets{rest}", "", source_files=len(files))
    else:
        plan.add("EXACT_START_UNAVAILABLE", WARN,
                 f"no sources/<id>/0 is written ({why}): only a job that passes the recorded startingOffsets "
                 "(the reference job's --starting-offsets-file) starts at the plan; any other starts where its own "
                 "startingOffsets say",
                 "subscribe the new run to the old query's topics, or start it with the recorded startingOffsets")
    plan.add("BATCH_IDS_RESTART", INFO,
             "the new query restarts at batch 0: a sink keyed by batch id (a foreachBatch writing <out>/batch=<id>, "
             "Delta txnAppId/txnVersion) skips or overwrites the old query's batches 0, 1, … unless the key also "
             "holds the query id or the output moves", "")


def files_from_payload(doc: object) -> dict[str, PartitionOffsets]:
    """The journal's ``source_files`` back as offsets (an edited journal fails here, before any write)."""
    if not doc:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"source_files is {type(doc).__name__}, not a mapping")
    return {str(sid): parse_offsets_json(str(text), what=f"source_files[{sid}]") for sid, text in doc.items()}
