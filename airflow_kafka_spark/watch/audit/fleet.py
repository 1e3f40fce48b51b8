"""Audit many jobs at once: jobs in threads, one Kafka view and one broker sample per cluster.

Why: an audit of 50 jobs one after the other spent most of its time waiting — every job built its
own admin client and lookup consumers and asked the same cluster for the same topics twice (once for
the observation, once for the pre-deploy verdict). Here the jobs of one cluster (the same Kafka
settings) share one :class:`FleetView`, whose :meth:`~FleetView.broker_state` answers from one
sample of every topic those jobs asked for, taken at most :data:`MAX_AGE_S` seconds ago; the jobs
run in :data:`WORKERS` threads, so one job's Kafka and file waits overlap another's work.

What the shared sample changes, and why it is safe: a job's broker state can be up to
:data:`MAX_AGE_S` seconds older than its checkpoint read. Offsets only grow, so the one way that can
mislead is a log end *below* the checkpoint (a running job consumed past the sample): those
partitions are re-read at once by ``resample_if_regressed`` with the job's positions as the
reference — the same S26 path a fresh sample takes — so no verdict or lag is computed against a
log end the checkpoint has passed. Lag in seconds can read up to :data:`MAX_AGE_S` low.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import PartitionOffsets
from airflow_kafka_spark.kafka.view import KafkaView

T = TypeVar("T")
R = TypeVar("R")

#: Threads auditing jobs at once (Kafka and file waits overlap; the CPU work shares the GIL).
WORKERS = 8
#: Oldest broker sample a job is given (seconds).
MAX_AGE_S = 3.0


class FleetView(KafkaView):
    """A :class:`KafkaView` shared by the jobs of one cluster: one broker sample for all their topics."""

    def __init__(self, config: dict, *, timeout: float = 10.0, topics: Iterable[str] = (),
                 max_age_s: float = MAX_AGE_S) -> None:
        super().__init__(config, timeout=timeout)
        self._wanted: dict[str, None] = dict.fromkeys(topics)
        self._max_age_s = max_age_s
        self._sample: BrokerState | None = None
        self._taken = 0.0
        self._sample_lock = threading.Lock()

    def want(self, topics: Iterable[str]) -> None:
        """Topics a job will ask for: sampled with the first request (one describe for the fleet)."""
        with self._sample_lock:
            self._wanted.update(dict.fromkeys(topics))

    def broker_state(self, topics: Iterable[str], *, reference: BrokerState | PartitionOffsets | None = None,
                     attempts: int = 3, delay: float = 0.5) -> BrokerState:
        names = list(dict.fromkeys(topics))
        with self._sample_lock:
            self._wanted.update(dict.fromkeys(names))
            fresh = time.monotonic() - self._taken <= self._max_age_s
            have = self._sample
            if have is None or not fresh or not all(n in have.topics or n in have.missing_topics for n in names):
                have = self._sample = super().broker_state(list(self._wanted))
                self._taken = time.monotonic()
        state = _only(have, names)
        if reference is not None:
            state = self.resample_if_regressed(reference, state, attempts=attempts, delay=delay)
        return state


def _only(state: BrokerState, names: Sequence[str]) -> BrokerState:
    """``state`` cut down to the topics ``names`` (as if only they had been asked for)."""
    wanted = set(names)
    return dataclasses.replace(
        state, topics={n: state.topics[n] for n in names if n in state.topics},
        missing_topics=[n for n in names if n in state.missing_topics],
        earliest={tp: o for tp, o in state.earliest.items() if tp.topic in wanted},
        latest={tp: o for tp, o in state.latest.items() if tp.topic in wanted},
        resampled=[tp for tp in state.resampled if tp.topic in wanted],
        latest_samples={tp: s for tp, s in state.latest_samples.items() if tp.topic in wanted})


def cluster_key(config: Mapping[str, Any]) -> str:
    """Jobs with the same Kafka settings share a view (callbacks compared by identity)."""
    return json.dumps({str(k): v if isinstance(v, str | int | float | bool) or v is None else f"{id(v)}"
                       for k, v in config.items()}, sort_keys=True)


def run_parallel(items: Sequence[T], work: Callable[[T], R], workers: int = WORKERS) -> list[R]:
    """``[work(i) for i in items]`` in up to ``workers`` threads, results in the order of ``items``."""
    if len(items) <= 1 or workers <= 1:
        return [work(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="aks-audit") as pool:
        return list(pool.map(work, items))
