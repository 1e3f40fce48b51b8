"""Mirror a checkpoint's committed offsets into a shadow consumer group, for Kafka's own lag tools.

Structured Streaming never commits to a consumer group (S23), so ``kafka-consumer-groups.sh``,
Burrow, kafka-lag-exporter, KMinion and every Grafana dashboard built on them see nothing. Teams
work around it with a listener that commits to "a dummy group" (metorikku's KafkaLagWriter, the
Spark 2.4-only offset committer). This is that workaround done carefully:

* **What is committed** is ``C``, the end offsets of the last *committed* batch — the same
  number :mod:`airflow_kafka_spark.watch.lag` measures from, so ``kafka-consumer-groups --describe``
  shows exactly our ``records`` lag per partition. Never the planned batch ``P``: a tool reading
  the group would then under-report by one batch while that batch runs, and over-report nothing.
* **A shadow group, clearly named.** The default is ``aks-mirror-<job>`` (:func:`default_group`).
  Nothing ever consumes with it; Spark's own ``kafka.group.id`` (if set) must be a different
  group. Committing while the group has live members is refused by
  :meth:`KafkaView.commit_group_offsets`, and a group that holds offsets for topics the job does
  not read is refused here: both mean a real consumer uses that name, and moving its position would
  silently re-read or skip data.
* **Going backwards is the truth.** After a checkpoint reset or restore, ``C`` moves back and the
  group follows: Burrow then reports REWIND, which is what happened.

Two ways to keep it current: from outside, :func:`mirror_checkpoint` (``aks mirror``, or a task on
a schedule) reading the checkpoint; or from inside the job,
:func:`airflow_kafka_spark.jobs.listener.mirror_progress`, one line that commits after every batch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView

GROUP_PREFIX = "aks-mirror-"
#: Spark generates ``spark-kafka-source-<uuid>-...`` group ids for its own consumers: never mirror there.
SPARK_GROUP_PREFIXES = ("spark-kafka-source-", "spark-kafka-relation-")
_GROUP = re.compile(r"[A-Za-z0-9._-]{1,249}")


def default_group(job: str) -> str:
    """``aks-mirror-<job>``: the name says what it is to whoever lists the groups."""
    return f"{GROUP_PREFIX}{job}"


def check_group_name(group: str) -> list[str]:
    """Refuse unusable names; return warnings for names that do not say they are a mirror."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise UserError(f"mirror group {group!r} is not a valid consumer group id (letters, digits, '.', '_', "
                        "'-', at most 249)")
    if group.startswith(SPARK_GROUP_PREFIXES):
        raise UserError(f"mirror group {group!r} looks like a group Spark generates for its own consumers; use a "
                        f"dedicated name such as {GROUP_PREFIX}<job>")
    if "mirror" not in group.lower() and "shadow" not in group.lower():
        return [f"mirror group {group!r} does not say it is a mirror: people listing groups may take it for a "
                f"real consumer; {GROUP_PREFIX}<job> is clearer"]
    return []


@dataclass(frozen=True)
class MirrorResult:
    group: str
    offsets: PartitionOffsets                # what was committed (empty: nothing to commit)
    previous: PartitionOffsets               # the group's offsets before
    batch_id: int | None                     # the checkpoint batch those offsets end
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def moved_back(self) -> list[TopicPartition]:
        """Partitions whose mirrored offset went backwards (a reset or restore of the checkpoint)."""
        return sorted(tp for tp, o in self.offsets.items() if tp in self.previous and o < self.previous[tp])

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "batch_id": self.batch_id, "dry_run": self.dry_run,
            "offsets": {str(tp): o for tp, o in sorted(self.offsets.items())},
            "previous": {str(tp): o for tp, o in sorted(self.previous.items())},
            "moved_back": [str(tp) for tp in self.moved_back], "warnings": list(self.warnings),
        }


def mirror_offsets(view: KafkaView, group: str, offsets: PartitionOffsets, *, batch_id: int | None = None,
                   dry_run: bool = False, check_foreign: bool = True) -> MirrorResult:
    """Commit ``offsets`` (a checkpoint's ``C``) to the shadow ``group`` after the safety checks.

    ``check_foreign``: read the group's offsets first and refuse a group that holds other topics
    (a real consumer's group). The in-job listener turns it off: see :meth:`KafkaView.group_offsets`
    for why it must not fetch offsets; it still refuses a group with live members.
    """
    warnings = check_group_name(group)
    bad = sorted(tp for tp, o in offsets.items() if o < 0)
    if bad:
        raise UserError(f"cannot mirror unresolved offsets (earliest/latest sentinels) for {', '.join(map(str, bad))}")
    previous = view.group_offsets(group) if check_foreign else {}
    foreign = sorted({tp.topic for tp in previous} - {tp.topic for tp in offsets})
    if foreign:
        raise UserError(f"consumer group {group} holds offsets for topics this job does not read "
                        f"({', '.join(foreign[:5])}): it is a real consumer's group, not a mirror; pick another "
                        "name (mirror_group in the registry)")
    if not dry_run and offsets:
        view.commit_group_offsets(group, offsets)
    return MirrorResult(group=group, offsets=dict(offsets), previous=previous, batch_id=batch_id, dry_run=dry_run,
                        warnings=warnings)


def mirror_checkpoint(checkpoint: str, group: str, kafka_config: Mapping[str, Any] | None = None, *,
                      view: KafkaView | None = None, storage_options: dict | None = None,
                      dry_run: bool = False, timeout: float = 10.0) -> MirrorResult:
    """Commit the checkpoint's last committed offsets ``C`` to ``group``.

    A checkpoint without a committed batch has nothing to mirror yet (empty result, no commit):
    committing the starting offsets would show a lag for work that has not been attempted.
    """
    state = read_checkpoint(checkpoint, storage_options=storage_options)
    if not state.exists:
        raise UserError(f"checkpoint {checkpoint} does not exist; nothing to mirror")
    committed = state.latest_committed
    own_view = view is None
    kafka = view or KafkaView(dict(kafka_config or {}), timeout=timeout)
    try:
        if committed is None:
            return MirrorResult(group=group, offsets={}, previous=kafka.group_offsets(group), batch_id=None,
                                dry_run=dry_run, warnings=[*check_group_name(group),
                                                           "no committed batch yet: nothing mirrored"])
        return mirror_offsets(kafka, group, committed.kafka_offsets, batch_id=committed.batch_id, dry_run=dry_run)
    finally:
        if own_view:
            kafka.close()


__all__ = ["GROUP_PREFIX", "MirrorResult", "check_group_name", "default_group", "mirror_checkpoint", "mirror_offsets"]
