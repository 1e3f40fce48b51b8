"""Single records, read with a short-lived consumer: offsets are not dense (S25).

Transaction markers and compaction leave gaps, so "the record at C-1" may not exist:
:meth:`RecordProbe.first_record_at_or_after` and :meth:`RecordProbe.last_record_before` read what
is physically there instead of assuming. A mixin over
:class:`~airflow_kafka_spark.kafka.client.KafkaClient`; :class:`KafkaView` has it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as KTP

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.client import PROBE_GROUP_ID, KafkaClient, clean
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.secrets import scrub

log = logging.getLogger(__name__)


class RecordProbe(KafkaClient):
    """The single-record calls of a Kafka view."""

    def record_timestamp(self, tp: TopicPartition, offset: int) -> int | None:
        """Timestamp (ms) of the record stored at exactly ``offset``; None if there is none.

        None means: below log start, at/after log end, or a gap (transaction marker, compacted
        away). The §1.3 identity heuristic needs the *physical* record, so this reads with
        ``read_uncommitted`` and never commits.
        """
        found = self._first_at_or_after(TopicPartition(*tp), int(offset), exact=True)
        return found[1] if found is not None and found[0] == offset else None

    def first_record_at_or_after(self, tp: TopicPartition, offset: int) -> tuple[int, int | None] | None:
        """``(offset, timestamp_ms)`` of the first readable record at or after ``offset``.

        Offsets below the log start begin at the log start. None when nothing is readable up to the
        log end (only markers left, or ``offset`` ≥ log end).
        """
        return self._first_at_or_after(TopicPartition(*tp), int(offset), exact=False)

    def _first_at_or_after(self, tp: TopicPartition, offset: int, *, exact: bool
                           ) -> tuple[int, int | None] | None:
        bounds = self._bounds(tp)
        if bounds is None:
            return None
        earliest, latest = bounds
        if offset >= latest or (exact and offset < earliest):
            return None
        start = max(offset, earliest)
        with self._probe() as read:
            for off, ts in read(tp, start):
                return off, ts
        return None

    def last_record_before(self, tp: TopicPartition, offset: int) -> tuple[int, int | None] | None:
        """``(offset, timestamp_ms)`` of the last readable record with an offset below ``offset``.

        This is "the record at C-1" made robust for S25: after a transaction the checkpoint's C is
        one past a commit marker, so C-1 is not a record. Reads a window before ``offset`` that
        grows (16, 128, 1024, ... records) until a record is found or the log start is reached.
        """
        tp = TopicPartition(*tp)
        bounds = self._bounds(tp)
        if bounds is None:
            return None
        earliest, latest = bounds
        end = min(int(offset), latest)
        if end <= earliest:
            return None
        window = 16
        with self._probe() as read:
            while True:
                start = max(earliest, end - window)
                best: tuple[int, int | None] | None = None
                for off, ts in read(tp, start, stop=end):
                    if off >= end:
                        break
                    best = (off, ts)
                if best is not None:
                    return best
                if start <= earliest:
                    return None
                window *= 8


    @contextlib.contextmanager
    def _probe(self) -> Iterator[Callable[[TopicPartition, int], Iterator[tuple[int, int | None]]]]:
        """A throwaway consumer positioned by ``assign`` (no subscribe, no group join, no commits).

        Yields ``read(tp, start, stop=None)``: an iterator over ``(offset, timestamp)`` from
        ``start`` to the log end (``enable.partition.eof`` ends it without waiting) or to the record
        at ``stop - 1``. The consumer is always closed.
        """
        conf = dict(self.config)
        conf.setdefault("group.id", PROBE_GROUP_ID)  # librdkafka requires one; nothing is committed
        conf.update({
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "enable.partition.eof": True, "auto.offset.reset": "error",
            "isolation.level": "read_uncommitted",
            # At the log end a fetch parks for fetch.wait.max.ms (500 ms default) before EOF is
            # reported; a probe wants the answer "nothing there" now.
            "fetch.wait.max.ms": 20,
            "error_cb": self._errors, "logger": self._logger,
        })
        consumer = self._construct(Consumer, conf, "Kafka consumer")
        deadline = self._deadline()

        def read(tp: TopicPartition, start: int, stop: int | None = None) -> Iterator[tuple[int, int | None]]:
            consumer.assign([KTP(tp.topic, tp.partition, int(start))])
            t0 = time.monotonic()
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._unreachable(f"read {tp} at offset {start}", t0)
                msg = consumer.poll(min(remaining, 0.5))
                if msg is None:
                    continue
                err = msg.error()
                if err is None:
                    if msg.offset() < start:  # left over from a previous assignment
                        continue
                    kind, ts = msg.timestamp()
                    yield msg.offset(), (ts if kind != 0 and ts >= 0 else None)
                    if stop is not None and msg.offset() >= stop - 1:
                        return
                    continue
                if err.code() == KafkaError._PARTITION_EOF:
                    if msg.offset() is not None and msg.offset() < start:
                        continue
                    return
                if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    return
                if err.fatal() or err.code() == KafkaError._AUTHENTICATION:
                    raise UserError(f"Kafka at {self.bootstrap_servers} failed to read {tp}: "
                                    f"{clean(err.str(), self.config)}")
                # transport hiccups: librdkafka retries, we keep waiting until the deadline

        try:
            yield read
        finally:
            try:
                consumer.close()
            except Exception as exc:  # closing must not hide the real result
                log.debug("closing probe consumer: %s", scrub(str(exc), self.config))
