"""Mirror a query's progress to a shadow consumer group from inside the Spark job: one line.

::

    from airflow_kafka_spark.jobs.listener import mirror_progress

    spark = SparkSession.builder.getOrCreate()
    mirror_progress(spark, group="aks-mirror-orders", bootstrap_servers="broker:9092")  # the one line
    query = df.writeStream...start()

Why from inside the job: the scheduled mirror (:func:`airflow_kafka_spark.watch.mirror.mirror_checkpoint`)
is only as fresh as its schedule, while Burrow and kafka-lag-exporter judge a group by how often it
commits. A ``StreamingQueryListener`` hears about every batch as it finishes, so the shadow group
moves exactly when the checkpoint does (S23, the metorikku KafkaLagWriter idea, for PySpark 4).

Which offsets: ``onQueryProgress`` is posted after the batch's ``commits/N`` is written, and each
Kafka source's ``endOffset`` in it is that batch's end, i.e. the checkpoint's ``C``. Progress
events also arrive for idle triggers (every ``spark.sql.streaming.noDataProgressEventInterval``,
10 s by default) with the same offsets: committing them again is what tells Burrow a caught-up
group is alive rather than stopped.

Never a risk to the query: it does not read the group's offsets (librdkafka's admin client can
segfault the process on an OffsetFetch answered NOT_COORDINATOR, see
:meth:`airflow_kafka_spark.kafka.view.KafkaView.group_offsets`); it only describes the group (a group
with live members is refused) and commits. And never in the query's way: the listener bus is
shared with Spark's own listeners and ``onQueryProgress`` must return at once, so commits happen
on one background thread that always commits the *latest* offsets it was handed (older ones are
dropped, not queued) and at most every ``min_interval_s``. A failed commit (broker down, someone
consuming with the group) is logged and retried with the next progress event; it never fails the
query. ``onQueryTerminated`` waits up to ``flush_timeout_s`` so the final position reaches Kafka
before the driver exits.

This runs in the Spark driver: it needs ``confluent-kafka`` and this package there (local and
client mode: the submitting environment; cluster mode: ship them, e.g. ``--py-files``/an image).
Spark Connect runs listeners server-side with other rules; this helper targets classic PySpark.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, parse_offsets_json

log = logging.getLogger(__name__)


def kafka_end_offsets(sources: Any) -> PartitionOffsets:
    """The merged ``endOffset`` of every Kafka source of a progress event (other sources skipped)."""
    out: PartitionOffsets = {}
    for source in sources or ():
        description = str(getattr(source, "description", "") or "")
        end = getattr(source, "endOffset", None)
        if not description.startswith("Kafka") or end in (None, "", "null", "None"):
            continue
        try:
            out.update(parse_offsets_json(end, what=f"endOffset of {description}"))
        except UserError as exc:
            log.warning("mirror: skipping an unreadable Kafka endOffset: %s", exc)
    return out


class _Committer:
    """One daemon thread committing the newest offsets it was given, at most every ``min_interval_s``."""

    def __init__(self, group: str, kafka_config: Mapping[str, Any], *, min_interval_s: float,
                 timeout: float) -> None:
        self.group = group
        self.kafka_config = dict(kafka_config)
        self.min_interval_s = min_interval_s
        self.timeout = timeout
        self._cond = threading.Condition()
        self._pending: tuple[int | None, PartitionOffsets] | None = None
        self._busy = False
        self._closed = False
        self._last_commit = 0.0
        self.committed: PartitionOffsets = {}
        self.commits = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name=f"aks-mirror-{group}", daemon=True)
        self._thread.start()

    def submit(self, batch_id: int | None, offsets: PartitionOffsets) -> None:
        with self._cond:
            self._pending = (batch_id, dict(offsets))
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending or in flight; True when everything handed over was attempted."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._last_commit = 0.0          # no throttling for the last word
            self._cond.notify_all()
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        from airflow_kafka_spark.kafka.view import KafkaView
        from airflow_kafka_spark.watch.mirror import mirror_offsets

        view: KafkaView | None = None
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None and self._closed:
                    return
                wait = self._last_commit + self.min_interval_s - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)   # newer offsets may replace the pending ones meanwhile
                    continue
                batch_id, offsets = self._pending  # type: ignore[misc]
                self._pending = None
                self._busy = True
            try:
                if view is None:
                    view = KafkaView(self.kafka_config, timeout=self.timeout)
                # Unchanged offsets are committed again on purpose: it keeps the group "alive" for Burrow.
                mirror_offsets(view, self.group, offsets, batch_id=batch_id, check_foreign=False)
                self.committed = offsets
                self.commits += 1
            except Exception as exc:  # never let mirroring hurt the query
                self.errors += 1
                log.warning("mirror: committing batch %s to group %s failed: %s", batch_id, self.group, exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._last_commit = time.monotonic()
                    self._cond.notify_all()


class OffsetMirrorListener(StreamingQueryListener):
    """Commits each finished batch's Kafka end offsets to a shadow consumer group.

    ``query_name``: only mirror the query with this name (a session running several queries must
    give one; otherwise the first query that reports progress is mirrored and the others are
    ignored with a warning, since two queries in one group would make its lag meaningless).
    """

    def __init__(self, group: str, kafka_config: Mapping[str, Any], *, query_name: str | None = None,
                 min_interval_s: float = 1.0, flush_timeout_s: float = 10.0, timeout: float = 10.0) -> None:
        from airflow_kafka_spark.watch.mirror import check_group_name

        for warning in check_group_name(group):
            log.warning("mirror: %s", warning)
        if not kafka_config.get("bootstrap.servers"):
            raise UserError("mirror_progress needs bootstrap.servers (or a kafka_config holding it)")
        self.group = group
        self.query_name = query_name
        self.flush_timeout_s = flush_timeout_s
        self._query_id: str | None = None
        self._warned: set[str] = set()
        self._committer = _Committer(group, kafka_config, min_interval_s=min_interval_s, timeout=timeout)

    # -- the listener interface -------------------------------------------------------------------

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if not self._mine(str(progress.id), progress.name):
            return
        offsets = kafka_end_offsets(progress.sources)
        if offsets:
            self._committer.submit(progress.batchId, offsets)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        mine = self._query_id is not None and str(event.id) == self._query_id
        if mine and not self._committer.flush(self.flush_timeout_s):
            log.warning("mirror: the last offsets did not reach group %s within %.0f s", self.group,
                            self.flush_timeout_s)

    # -- helpers ----------------------------------------------------------------------------------

    def _mine(self, query_id: str, name: str | None) -> bool:
        if self.query_name is not None:
            if name != self.query_name:
                return False
            self._query_id = query_id      # a restarted query (new run, same id) keeps being mirrored
            return True
        if self._query_id is None:
            self._query_id = query_id
        if query_id != self._query_id:
            if query_id not in self._warned:
                self._warned.add(query_id)
                log.warning("mirror: query %s (%s) ignored: group %s already mirrors query %s; pass query_name "
                            "to choose", query_id, name, self.group, self._query_id)
            return False
        return True

    @property
    def committed(self) -> PartitionOffsets:
        """The offsets last committed to the group (for tests and logs)."""
        return dict(self._committer.committed)

    def flush(self, timeout: float | None = None) -> bool:
        return self._committer.flush(self.flush_timeout_s if timeout is None else timeout)

    def close(self) -> None:
        self._committer.close(self.flush_timeout_s)


def mirror_progress(spark: Any, group: str, *, bootstrap_servers: str | None = None,
                    kafka_config: Mapping[str, Any] | None = None, query_name: str | None = None,
                    min_interval_s: float = 1.0) -> OffsetMirrorListener:
    """Add an :class:`OffsetMirrorListener` to ``spark`` and return it.

    ``kafka_config`` is a librdkafka dict (SASL/SSL settings); ``bootstrap_servers`` alone is enough
    for a plaintext cluster. The group should be dedicated to mirroring (``aks-mirror-<job>``).
    """
    config = dict(kafka_config or {})
    if bootstrap_servers:
        config["bootstrap.servers"] = bootstrap_servers
    listener = OffsetMirrorListener(group, config, query_name=query_name, min_interval_s=min_interval_s)
    spark.streams.addListener(listener)
    return listener


__all__ = ["OffsetMirrorListener", "kafka_end_offsets", "mirror_progress"]
