"""A new, empty checkpoint next to a recent one of the same job: the path changed on deploy (S29).

A checkpoint path that contains an application id, a date or a version starts a *new* query on every
deploy: ``startingOffsets`` apply again, so ``latest`` silently skips everything the previous run had
not read, and ``earliest`` reads again everything it had. Spark cannot notice (for it the query is
new); the sibling folders can tell. :func:`find_previous_checkpoint` (I/O, called by the validate
flow only for a checkpoint without batches) looks beside the checkpoint for a folder of the same
job — named by its lifecycle record, or by the same name with other digits (``orders-v1`` /
``orders-v2``, ``orders_20261123`` / ``orders_20261124``) — that holds batches; this checkpoint's own
asides (``<name>.reset-…``, ``<name>.restore-…``) are not candidates. :func:`previous_checkpoint_finding`
is pure and counts, per partition, what the new query skips or reads twice compared with the old one.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_kafka_spark._util.fs import mtime_of, open_location
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, to_offsets_json
from airflow_kafka_spark.lifecycle.model import RECORD_SUFFIX
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.verdict.findings import BLOCK, WARN, Bound, Finding, RecordCounts
from airflow_kafka_spark.verdict.options import DeployOptions

if TYPE_CHECKING:  # types only
    from airflow_kafka_spark.kafka.model import BrokerState

#: Siblings looked at (newest first): a folder of many jobs' checkpoints is not read whole.
MAX_CANDIDATES = 5
#: A previous checkpoint whose last batch is older than this is history, not "the job's".
MAX_AGE_MS = 30 * 24 * 3600 * 1000


@dataclass(frozen=True)
class PreviousCheckpoint:
    """The sibling checkpoint the job ran on before, and where it would resume."""

    location: str
    job_name: str | None          # from its lifecycle record, if it has one
    batch_id: int | None          # its last planned batch
    batch_timestamp_ms: int | None
    position: PartitionOffsets
    named: bool = False           # its lifecycle record names this very job (not only a look-alike name)


def _stem(name: str) -> str:
    """The name with its varying parts (digits, hex ids) folded: ``orders-v2`` → ``orders-v#``."""
    return re.sub(r"[0-9a-f]{8,}|\d+", "#", name.lower())


def find_previous_checkpoint(location: str, storage_options: dict | None, job_name: str | None,
                             now_ms: int) -> PreviousCheckpoint | None:
    """The newest checkpoint with batches beside ``location`` that belongs to the same job, or None."""
    ck = open_location(location, storage_options, what="checkpoint location")
    own = posixpath.basename(ck.path.rstrip("/"))
    parent = posixpath.dirname(ck.path.rstrip("/"))
    if not own or not parent:
        return None
    try:
        listing = {posixpath.basename(str(i["name"]).rstrip("/")): i for i in ck.fs.ls(parent, detail=True)}
    except (OSError, ValueError):
        return None   # nothing to compare with is not a finding
    candidates = []
    for name, info in listing.items():
        if name == own or name.startswith((own + ".", ".", "_")) or info.get("type") != "directory":
            continue
        if _stem(name) == _stem(own) or (job_name and name + RECORD_SUFFIX in listing):
            candidates.append((mtime_of(info) or 0.0, name))
    found: list[PreviousCheckpoint] = []
    base_url = ck.url.rstrip("/")[: -len(own)]
    for _, name in sorted(candidates, reverse=True)[:MAX_CANDIDATES]:
        prev = _read(base_url + name, storage_options, job_name, same_stem=_stem(name) == _stem(own))
        if prev is not None and (prev.batch_timestamp_ms is None or now_ms - prev.batch_timestamp_ms <= MAX_AGE_MS):
            found.append(prev)
    return max(found, key=lambda p: p.batch_timestamp_ms or 0, default=None)


def _read(url: str, storage_options: dict | None, job_name: str | None, *, same_stem: bool
          ) -> PreviousCheckpoint | None:
    try:
        record = LifecycleRecord.load(url, storage_options=storage_options)
        state = read_checkpoint(url, storage_options=storage_options)
    except UserError:
        return None
    recorded = record.job_name if record is not None else None
    if job_name and recorded and recorded != job_name:
        return None      # another job's checkpoint that happens to look alike
    if not same_stem and recorded != job_name:
        return None
    pos = resume_position(state)
    if pos is None or not pos.known or not state.offset_batch_ids:
        return None
    last = state.latest_planned or state.latest_committed
    return PreviousCheckpoint(location=url, job_name=recorded, batch_id=last.batch_id if last else None,
                              batch_timestamp_ms=last.batch_timestamp_ms if last else None,
                              position=dict(pos.start), named=bool(job_name) and recorded == job_name)


def previous_checkpoint_finding(prev: PreviousCheckpoint, location: str, broker: BrokerState,
                                options: DeployOptions) -> Finding:
    """NEW_CHECKPOINT_FOR_KNOWN_QUERY with the count per partition, against the previous checkpoint's ``C``.

    BLOCK, or WARN when the deploy declared a new query and only the folder name ties the two (a
    lifecycle record naming this job is evidence enough to block a declared new query too). Counts:
    ``latest`` skips ``[max(C, LS), LE)`` (and whatever arrives before the start), ``earliest`` reads
    ``[LS, C)`` again, explicit offsets ``o`` skip ``[C, o)`` or repeat ``[o, C)``; records deleted since
    ``C`` are lost either way."""
    explicit = options.explicit_starting_offsets
    mode = options.starting_offsets if options.starting_offsets in ("earliest", "latest") else "latest"
    counts: dict[TopicPartition, RecordCounts] = {}
    for tp, c in sorted(prev.position.items()):
        ls, le = broker.earliest.get(tp), broker.latest.get(tp)
        if ls is None or le is None:
            continue
        lost = max(ls - c, 0)
        start = explicit.get(tp) if explicit is not None else (EARLIEST if mode == "earliest" else LATEST)
        if start is None:
            continue
        o = ls if start == EARLIEST else le if start == LATEST else start
        bound = Bound.AT_LEAST if start == LATEST else Bound.EXACT
        counts[tp] = RecordCounts(lost=lost, skipped=max(o - max(c, ls), 0), duplicated=max(c - max(o, ls), 0),
                                  bound=bound)
    total = RecordCounts()
    for rc in counts.values():
        total = total.plus(rc)
    origin = "the startingOffsets JSON" if explicit is not None else f"startingOffsets={mode}"
    what = total.describe() or "nothing lost, skipped or read twice"
    when = f"batch {prev.batch_id}" if prev.batch_id is not None else "its last batch"
    return Finding(
        "NEW_CHECKPOINT_FOR_KNOWN_QUERY", BLOCK if prev.named or not options.expect_new_checkpoint else WARN,
        counts=counts,
        numbers={"previous_checkpoint": prev.location, "previous_batch_id": prev.batch_id,
                 "previous_batch_timestamp_ms": prev.batch_timestamp_ms,
                 "previous_offsets": to_offsets_json(prev.position)},
        message=(f"{location} is a new checkpoint, but {prev.location} beside it holds the same job"
                 f"{' (' + prev.job_name + ')' if prev.job_name else ''} up to {when}: Spark starts a new query "
                 f"from {origin} instead of where that one stopped — records {what} (checkpoint path changed "
                 f"on deploy? S29)"),
        fix=(f"point the deploy at {prev.location}, or start the new checkpoint where it stopped (startingOffsets = "
             f"previous_offsets)"))
