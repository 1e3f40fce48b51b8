"""Hand-built inputs for :func:`airflow_kafka_spark.verdict.evaluate.evaluate`: checkpoints, brokers, records.

The verdict is a pure function of dataclasses, so its tests build those dataclasses directly (no
files, no broker). Offsets are given as ``{(topic, partition): offset}`` to keep tests short.
"""

from __future__ import annotations

from collections.abc import Mapping

from airflow_kafka_spark.checkpoint.model import BatchCommit, BatchOffsets, CheckpointProblem, CheckpointState
from airflow_kafka_spark.kafka.model import BrokerState, TopicInfo
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.lifecycle.model import Lease, TopicIdentity
from airflow_kafka_spark.lifecycle.record import LifecycleRecord

NOW_MS = 1_750_000_000_000
BATCH_TS = NOW_MS - 3_600_000   # the last batch ran an hour before the broker was sampled
LOCATION = "/data/checkpoints/orders"
CONF = {"spark.sql.shuffle.partitions": "200",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}

Offs = Mapping[tuple[str, int], int]


def tps(offsets: Offs | None) -> PartitionOffsets:
    return {TopicPartition(t, p): o for (t, p), o in (offsets or {}).items()}


def batch(batch_id: int, offsets: Offs, *, ts: int | None = BATCH_TS, version: int = 1,
          conf: Mapping[str, str] | None = None) -> BatchOffsets:
    return BatchOffsets(batch_id=batch_id, version=version, batch_timestamp_ms=ts, batch_watermark_ms=0,
                        conf=dict(CONF if conf is None else conf), sources={"0": tps(offsets)},
                        raw_sources={"0": "{}"})


def checkpoint(committed: Offs | None = None, *, pending: Offs | None = None, batch_id: int = 5,
               ts: int | None = BATCH_TS, problems: list[CheckpointProblem] | None = None,
               has_state: bool = False, exists: bool = True, initial: Offs | None = None,
               conf: Mapping[str, str] | None = None, version: int = 1, commit_version: int = 1,
               location: str = LOCATION) -> CheckpointState:
    """Batches up to ``batch_id`` committed at ``committed``; ``pending`` adds an uncommitted batch."""
    if not exists:
        return CheckpointState(location=location, exists=False, query_id=None, offset_batch_ids=[],
                               commit_batch_ids=[], latest_planned=None, latest_committed=None,
                               initial_offsets={}, has_state=False)
    init = {"0": tps(initial)} if initial else {}
    if committed is None and pending is None:
        return CheckpointState(location=location, exists=True, query_id=None, offset_batch_ids=[],
                               commit_batch_ids=[], latest_planned=None, latest_committed=None,
                               initial_offsets=init, has_state=has_state, problems=list(problems or []))
    done = batch(batch_id, committed, ts=ts, version=version, conf=conf) if committed is not None else None
    planned = done
    offset_ids = list(range(max(0, batch_id - 3), batch_id + 1)) if committed is not None else []
    commit_ids = list(offset_ids)
    if pending is not None:
        nxt = batch_id + 1 if committed is not None else 0
        planned = batch(nxt, pending, ts=None if ts is None else ts + 1000, version=version, conf=conf)
        offset_ids.append(nxt)
    return CheckpointState(
        location=location, exists=True, query_id="q-1", offset_batch_ids=offset_ids,
        commit_batch_ids=commit_ids, latest_planned=planned, latest_committed=done, initial_offsets=init,
        has_state=has_state, problems=list(problems or []),
        latest_commit=BatchCommit(batch_id=batch_id, version=commit_version, next_batch_watermark_ms=0)
        if committed is not None else None)


def broker(ranges: Mapping[tuple[str, int], tuple[int, int]], *, partitions: Mapping[str, int] | None = None,
           topic_ids: Mapping[str, str] | None = None, cluster_id: str = "cluster-A",
           cleanup: Mapping[str, str] | None = None, resampled: Mapping[tuple[str, int], tuple[int, ...]] | None = None,
           missing: list[str] | None = None) -> BrokerState:
    """``ranges``: (topic, partition) -> (log start, log end). Partition counts default to what
    ``ranges`` names; ``resampled`` gives the latest-offset samples of re-read partitions."""
    counts: dict[str, int] = {}
    for t, p in ranges:
        counts[t] = max(counts.get(t, 0), p + 1)
    counts.update(partitions or {})
    infos = {t: TopicInfo(name=t, topic_id=(topic_ids or {}).get(t, f"id-{t}"), partitions=n,
                          retention_ms=604_800_000, retention_bytes=-1,
                          cleanup_policy=(cleanup or {}).get(t, "delete"))
             for t, n in counts.items()}
    samples = {TopicPartition(*k): tuple(v) for k, v in (resampled or {}).items()}
    return BrokerState(
        bootstrap_servers="kafka:9092", cluster_id=cluster_id, topics=infos,
        missing_topics=list(missing or []),
        earliest={TopicPartition(t, p): r[0] for (t, p), r in ranges.items()},
        latest={TopicPartition(t, p): r[1] for (t, p), r in ranges.items()},
        sampled_at_ms=NOW_MS, resampled=sorted(samples), latest_samples=samples)


def record(*, cluster_id: str | None = "cluster-A", topic_ids: Mapping[str, str] | None = None,
           spark_version: str | None = None, next_starting_offsets: str | None = None,
           lease: Lease | None = None) -> LifecycleRecord:
    """A lifecycle record (never saved: the location is only a string here)."""
    return LifecycleRecord(
        job_name="orders", checkpoint_location=LOCATION, kafka_cluster_id=cluster_id,
        topics={t: TopicIdentity(i, 1) for t, i in (topic_ids or {}).items()}, spark_version=spark_version,
        next_starting_offsets=next_starting_offsets, lease=lease)


def problem(code: str, path: str = "offsets/5", message: str | None = None) -> CheckpointProblem:
    return CheckpointProblem(code=code, path=path,
                             message=message or f"{path} is empty (a truncated write): restore {path} from a backup")
