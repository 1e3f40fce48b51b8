"""Offsets of many partitions (earliest, latest, for a time): ListOffsets requests in chunks.

A mixin over :class:`~airflow_kafka_spark.kafka.client.KafkaClient`; :class:`KafkaView` has it.

Why not the AdminClient's ``list_offsets``: confluent-kafka makes one Python future per partition
and librdkafka matches answers to requests by a linear search, so 5,000 partitions × 2 kinds cost
~0.45 s of CPU (measured; docs/benchmarks.md has the ``aks validate`` and ``aks lag`` figures).
A consumer's ``offsets_for_times`` takes the same request
(ListOffsets; -2 = earliest, -1 = latest, else a timestamp) and returns a plain list; asked in
chunks of :data:`CHUNK` partitions the search stays short: the same 10,000 answers in ~30 ms.
``isolation.level`` is ``read_uncommitted``, so "latest" is the high watermark, as before.

A chunk that fails as a whole (librdkafka does that when *no* partition of it has a known leader)
is asked again through the AdminClient, whose per-partition answers say which partitions do not
exist and which have no leader yet: the error cases keep the precise path.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import OffsetSpec

from airflow_kafka_spark.kafka.client import CONNECTIVITY_CODES, LOOKUP_GROUP_ID, RETRIABLE_CODES, KafkaClient, err_of
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition

#: Partitions per ListOffsets request (librdkafka's matching is quadratic in it; 250 measured best).
CHUNK = 250

#: ``(offsets, partitions to retry, partitions that do not exist, a hard error)``
Listed = tuple[PartitionOffsets, list[TopicPartition], set[TopicPartition], KafkaException | None]


class OffsetLister(KafkaClient):
    """``_fetch_offsets``: one kind of offset (``EARLIEST``, ``LATEST`` or a timestamp) for many partitions."""

    _lister: Any = None
    _lister_lock = threading.Lock()

    def close(self) -> None:
        lister, self._lister = self._lister, None
        if lister is not None:
            with contextlib.suppress(KafkaException, RuntimeError):  # nothing subscribed or committed
                lister.close()
        super().close()

    def _offsets_consumer(self) -> Any:
        """One consumer per view, never subscribed (no group join, no commits): ListOffsets only."""
        with self._lister_lock:
            if self._lister is None:
                conf = dict(self.config)
                conf.setdefault("group.id", LOOKUP_GROUP_ID)  # librdkafka wants one; nothing is committed
                conf.update({"enable.auto.commit": False, "isolation.level": "read_uncommitted",
                             "error_cb": self._errors, "logger": self._logger})
                self._lister = self._construct(Consumer, conf, "Kafka consumer")
            return self._lister

    def _fetch_offsets(self, tps: list[TopicPartition], spec: int, deadline: float, what: str, *,
                       exist: bool) -> Listed:
        """Offsets of ``spec`` for ``tps``; see :meth:`_classify` for the partitions that did not answer."""
        consumer = self._offsets_consumer()
        out: PartitionOffsets = {}
        retry: list[TopicPartition] = []
        gone: set[TopicPartition] = set()
        for start in range(0, len(tps), CHUNK):
            chunk = tps[start:start + CHUNK]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._unreachable(what, deadline - self.timeout)
            try:
                answers = consumer.offsets_for_times([KTP(t, p, spec) for t, p in chunk], remaining)
            except KafkaException as exc:
                err = err_of(exc)
                if err is None or err.code() in CONNECTIVITY_CODES:
                    raise self._user_error(exc, what) from None
                got, r, g, hard = self._admin_offsets(chunk, spec, deadline, what, exist=exist)
                if hard is not None:
                    return out, retry, gone, hard
                out.update(got)
                retry += r
                gone |= g
                continue
            for a in answers:
                tp = TopicPartition(a.topic, a.partition)
                if a.error is None:
                    out[tp] = a.offset
                elif not self._classify(tp, a.error.code(), exist, retry, gone):
                    return out, retry, gone, KafkaException(a.error)
        return out, retry, gone, None

    @staticmethod
    def _classify(tp: TopicPartition, code: int | None, exist: bool, retry: list[TopicPartition],
                  gone: set[TopicPartition]) -> bool:
        """File a partition's error under retry or gone; False for an error that ends the call.

        librdkafka answers a partition with no known leader with ``_NOENT`` or ``_UNKNOWN_PARTITION``.
        When ``exist`` (the partitions were just listed by ``describe_topics``) that means "no leader
        yet" and is retried; for partitions a caller named it means "no such partition".
        """
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
            gone.add(tp)
        elif code in (KafkaError._NOENT, KafkaError._UNKNOWN_PARTITION):
            (retry.append(tp) if exist else gone.add(tp))
        elif code in RETRIABLE_CODES:
            retry.append(tp)
        else:
            return False
        return True

    def _admin_offsets(self, tps: list[TopicPartition], spec: int, deadline: float, what: str, *,
                       exist: bool) -> Listed:
        """The same through the AdminClient: one future per partition, each with its own error."""
        kind = (OffsetSpec.earliest() if spec == EARLIEST else OffsetSpec.latest() if spec == LATEST
                else OffsetSpec.for_timestamp(spec))
        request = {KTP(tp.topic, tp.partition): kind for tp in tps}
        futs = self._call(what, lambda a, rt: a.list_offsets(
            request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=rt), deadline)
        self._wait(futs.values(), deadline, what)
        out: PartitionOffsets = {}
        retry: list[TopicPartition] = []
        gone: set[TopicPartition] = set()
        for ktp, fut in futs.items():
            tp = TopicPartition(ktp.topic, ktp.partition)
            try:
                out[tp] = self._result(fut, what, deadline, raw=True).offset
            except KafkaException as exc:
                err = err_of(exc)
                if not self._classify(tp, err.code() if err is not None else None, exist, retry, gone):
                    return out, retry, gone, exc
        return out, retry, gone, None

