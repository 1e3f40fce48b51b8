"""Write Kafka's ``sources/<id>/0`` ourselves, so a new query starts where a reset planned, whatever its code says.

Why: a user's own job hard-codes ``startingOffsets`` (often ``earliest``) and ignores the reference
job's ``--starting-offsets-file``; after a reset it would silently replay or skip. Spark's Kafka
source reads a new query's initial offsets from its source metadata log ``sources/<id>/0`` when
that file exists and looks at ``startingOffsets`` only when it does not
(``KafkaMicroBatchStream.getOrCreateInitialPartitionOffsets`` → ``KafkaSourceInitialOffsetWriter``;
see docs/exact-start.md for what real Spark 4.2.0 and 3.5.1 did with it). So the file is the one
place where the product can set a user's start position without touching the user's code.

The bytes are exactly Spark's: one 0x00 byte (written for Spark 2.1.0, SPARK-19517), ``v1\\n``, then
the offsets JSON, no trailing newline (:func:`~airflow_kafka_spark.checkpoint.formats.parse_initial_offsets_file`
reads them back). Only concrete offsets are written: Spark takes what it finds in this file
literally, so a ``-2`` here would be a seek to offset -2, not "earliest". :func:`resolve_offsets`
turns -2/-1 into the broker's numbers first.

Written atomically through ``_util.fs.write_atomic`` (Spark must never see a torn file: it would
refuse the query at start, or worse, parse a prefix). Spark itself never overwrites the file, and
neither does this module: a file already there with other offsets is an error, the same offsets
are a no-op (what a resumed reset needs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_kafka_spark._util.fs import Location, open_location, read_bytes, write_atomic
from airflow_kafka_spark.checkpoint.formats import parse_initial_offsets_file
from airflow_kafka_spark.errors import CheckpointFormatError, UserError
from airflow_kafka_spark.kafka.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition, to_offsets_json

#: Source ids are Spark's positional ``0``, ``1``, … or a 4.2 ``DataStreamReader.name()`` (ASCII letters,
#: digits, underscores). Anything else could name a path outside ``sources/``.
_SOURCE_ID = re.compile(r"^[A-Za-z0-9_]{1,64}$")
HEADER = b"\x00v1\n"


def initial_offsets_bytes(offsets: Mapping[TopicPartition, int]) -> bytes:
    """The exact bytes Spark's ``KafkaSourceInitialOffsetWriter`` writes for these offsets."""
    if not offsets:
        raise UserError("no partitions to start at: an empty sources/<id>/0 would make Spark read nothing")
    negative = sorted(tp for tp, o in offsets.items() if int(o) < 0)
    if negative:
        shown = ", ".join(f"{tp}={offsets[tp]}" for tp in negative[:5])
        raise UserError(f"sources/<id>/0 must hold concrete offsets, got {shown}: Spark reads this file "
                        "literally (a -2 is not 'earliest' here); resolve them against the broker first")
    return HEADER + to_offsets_json(dict(offsets)).encode("utf-8")


def resolve_offsets(offsets: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
                    latest: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """-2 → the log start, -1 → the log end, as the broker reports them now (before writing the file)."""
    out: PartitionOffsets = {}
    for tp, o in offsets.items():
        table = earliest if o == EARLIEST else latest if o == LATEST else None
        if table is None:
            out[tp] = int(o)
            continue
        if tp not in table:
            raise UserError(f"cannot resolve {'earliest' if o == EARLIEST else 'latest'} for {tp}: the broker "
                            "returned no offsets for it")
        out[tp] = int(table[tp])
    return out


def source_file(checkpoint: Location, source_id: str) -> Location:
    """``<checkpoint>/sources/<source_id>/0``; a source id that is not Spark's kind is refused."""
    if not _SOURCE_ID.match(str(source_id)):
        raise UserError(f"source id {source_id!r} is not one Spark writes (a number, or a source name of ASCII "
                        "letters, digits and underscores)")
    return checkpoint.child("sources", str(source_id), "0")


def write_initial_offsets(checkpoint: Location | str, source_id: str, offsets: Mapping[TopicPartition, int], *,
                          storage_options: dict | None = None) -> Location:
    """Write ``sources/<source_id>/0`` so that Spark starts this source exactly at ``offsets``.

    Idempotent: the same bytes already there are left alone (a resumed reset writes again); other
    offsets there raise (someone's query already started from them, and Spark never rereads a new
    file once it planned a batch). Returns the file's location.
    """
    ck = checkpoint if isinstance(checkpoint, Location) else open_location(checkpoint, storage_options,
                                                                            what="checkpoint location")
    loc = source_file(ck, source_id)
    data = initial_offsets_bytes(offsets)
    have = read_bytes(loc, limit=1 << 20)
    if have is not None:
        if have == data:
            return loc
        try:
            parsed = parse_initial_offsets_file(have, what=f"sources/{source_id}/0")
        except (CheckpointFormatError, ValueError):   # unreadable content is "other content" here
            parsed = None
        if parsed is not None and parsed == dict(offsets):
            return loc   # same offsets, other JSON order (Spark's HashMap order for several topics)
        raise UserError(f"{loc.url} already holds other starting offsets ({have[1:200]!r}): a query started "
                        "from it, or another reset wrote it; inspect it before writing again")
    write_atomic(loc, data)
    return loc


def read_initial_offsets(checkpoint: Location | str, source_id: str, *,
                         storage_options: dict | None = None) -> PartitionOffsets | None:
    """The offsets in ``sources/<source_id>/0``, or None when the file is not there."""
    ck = checkpoint if isinstance(checkpoint, Location) else open_location(checkpoint, storage_options,
                                                                            what="checkpoint location")
    data = read_bytes(source_file(ck, source_id), limit=1 << 20)
    if data is None:
        return None
    return parse_initial_offsets_file(data, what=f"sources/{source_id}/0")
