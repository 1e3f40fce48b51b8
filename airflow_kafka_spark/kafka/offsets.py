"""Kafka positions as Spark writes them: ``{"topic":{"partition":offset}}``.

Every offset here means what it means in a Spark checkpoint: the *next* offset to read (the
exclusive end of a processed range), the same as ``KafkaConsumer.position()`` and as a consumer
group's committed offset. In ``startingOffsets`` JSON, -2 means earliest and -1 latest.
"""

from __future__ import annotations

import json
import re
from itertools import repeat
from typing import Any, NamedTuple

from airflow_kafka_spark.errors import UserError

EARLIEST = -2
LATEST = -1
# Kafka's topic-name rule (kafka.common.internals.Topic): a name outside it never reaches librdkafka
# (a NUL in one raised "embedded null character" from the C client).
TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


PartitionOffsets = dict[TopicPartition, int]


def parse_offsets_json(text: str | bytes, *, what: str = "offsets") -> PartitionOffsets:
    """Parse Spark's Kafka offset JSON; raise :class:`UserError` naming ``what`` if it is not that."""
    from airflow_kafka_spark._util.jsonfile import UntrustedJSONError, load_json

    try:
        doc = load_json(text, what=what)
    except UntrustedJSONError as exc:
        raise UserError(f"{exc}; expected e.g. {{\"topic\":{{\"0\":23}}}}") from None
    return offsets_from_doc(doc, what=what)


def offsets_from_doc(doc: Any, *, what: str = "offsets") -> PartitionOffsets:
    """:func:`parse_offsets_json` of an already parsed document (a checkpoint reader parses each line once)."""
    if not isinstance(doc, dict):
        raise UserError(f"{what} must be a JSON object like {{\"topic\":{{\"0\":23}}}}, got {type(doc).__name__}")
    out: PartitionOffsets = {}
    for topic, parts in doc.items():
        if not TOPIC_NAME.fullmatch(topic):
            raise UserError(f"{what}: {topic[:80]!r} is not a Kafka topic name (1-249 of A-Z a-z 0-9 . _ -); "
                            "Kafka never created it, so these offsets were not written by Spark")
        if not isinstance(parts, dict):
            raise UserError(f"{what}: topic {topic!r} must map partitions to offsets, got {type(parts).__name__}")
        if _fast(topic, parts, out):
            continue
        for part, off in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                raise UserError(f"{what}: partition {part!r} of topic {topic!r} is not a number") from None
            if isinstance(off, bool) or not isinstance(off, int):
                raise UserError(f"{what}: offset of {topic}-{part} must be an integer, got {off!r}")
            if p < 0 or off < EARLIEST:
                raise UserError(f"{what}: {topic}-{part} -> {off} is out of range")
            out[TopicPartition(topic, p)] = off
    return out


def _fast(topic: str, parts: dict, out: PartitionOffsets) -> bool:
    """Add a topic's offsets in C-level loops when every key is plain digits and every offset a valid int.

    The common case (a 5,000-partition file per batch) costs a fifth of the checked loop; anything
    else returns False and the loop above checks entry by entry, so the same inputs fail the same way.
    """
    keys, values = list(parts), list(parts.values())
    if not keys or not "".join(keys).isascii() or not all(map(str.isdigit, keys)) \
            or set(map(type, values)) != {int} or min(values) < EARLIEST:
        return False
    out.update(zip(map(tuple.__new__, repeat(TopicPartition), zip(repeat(topic), map(int, keys))), values,
                   strict=True))
    return True


def to_offsets_json(offsets: PartitionOffsets) -> str:
    """Spark's JSON form, topics and partitions sorted so the text is stable."""
    doc: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return json.dumps(doc, separators=(",", ":"))


def topics_of(offsets: PartitionOffsets) -> set[str]:
    return {tp.topic for tp in offsets}
