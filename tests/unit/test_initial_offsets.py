"""The writer of ``sources/<id>/0`` (airflow_kafka_spark/checkpoint/initial_offsets.py): its bytes are
Spark's, the existing reader parses them, and it never writes what Spark would misread."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.formats import parse_initial_offsets_file
from airflow_kafka_spark.checkpoint.initial_offsets import (
    initial_offsets_bytes,
    read_initial_offsets,
    resolve_offsets,
    write_initial_offsets,
)
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
DATA = Path(__file__).resolve().parent / "data"


def tp(t: str, p: int) -> TopicPartition:
    return TopicPartition(t, p)


@pytest.mark.parametrize("written_by, path, offsets", [
    ("Spark 4.2.0", FIXTURES / "spark-4.2.0/stateless/sources/0/0", {tp("fx-orders", 0): 0, tp("fx-orders", 1): 0}),
    ("Spark 4.0.0", DATA / "spark400_kafka_two_sources/sources/0/0",
     {tp("ta", 0): 0, tp("ta", 1): 0, tp("tb", 0): 0}),
    ("Spark 4.0.0", DATA / "spark400_kafka_two_sources/sources/1/0", {tp("tc", 0): 0}),
])
def test_bytes_equal_what_spark_wrote(written_by, path, offsets):
    assert initial_offsets_bytes(offsets) == path.read_bytes(), written_by


def test_spark_351_writes_partitions_in_hash_order_and_reads_the_same_offsets():
    spark = (FIXTURES / "spark-3.5.1/stateless/sources/0/0").read_bytes()
    ours = initial_offsets_bytes({tp("fx-orders", 0): 0, tp("fx-orders", 1): 0})
    assert spark != ours   # {"1":0,"0":0}: Scala 2.12's HashMap order; Spark parses both the same
    assert parse_initial_offsets_file(spark) == parse_initial_offsets_file(ours)


def test_written_file_is_read_by_the_checkpoint_reader_as_a_new_query_start(tmp_path):
    ck = tmp_path / "ck"
    start = {tp("orders", 0): 42, tp("orders", 1): 7, tp("payments", 0): 3}
    loc = write_initial_offsets(str(ck), "0", {tp("orders", 0): 42, tp("orders", 1): 7})
    write_initial_offsets(str(ck), "1", {tp("payments", 0): 3})
    assert loc.url.endswith("sources/0/0")
    assert (ck / "sources/0/0").read_bytes() == b'\x00v1\n{"orders":{"0":42,"1":7}}'
    assert not [p.name for p in (ck / "sources/0").iterdir() if p.name != "0"], "no temp file left"
    state = read_checkpoint(str(ck))
    assert state.initial_offsets == {"0": {tp("orders", 0): 42, tp("orders", 1): 7}, "1": {tp("payments", 0): 3}}
    assert not state.problems and not state.offset_batch_ids
    merged = {k: v for offs in state.initial_offsets.values() for k, v in offs.items()}
    assert merged == start
    assert read_initial_offsets(str(ck), "1") == {tp("payments", 0): 3}
    assert read_initial_offsets(str(ck), "2") is None


def test_rewrite_is_idempotent_and_other_offsets_are_refused(tmp_path):
    ck = str(tmp_path / "ck")
    write_initial_offsets(ck, "0", {tp("o", 0): 5})
    write_initial_offsets(ck, "0", {tp("o", 0): 5})       # a resumed reset writes again: no-op
    with pytest.raises(UserError, match="already holds other starting offsets"):
        write_initial_offsets(ck, "0", {tp("o", 0): 6})


def test_same_offsets_in_sparks_other_json_order_count_as_written(tmp_path):
    ck = tmp_path / "ck"
    (ck / "sources/0").mkdir(parents=True)
    (ck / "sources/0/0").write_bytes(b'\x00v1\n{"o":{"1":0,"0":0}}')   # as Spark 3.5.1 writes it
    write_initial_offsets(str(ck), "0", {tp("o", 0): 0, tp("o", 1): 0})
    assert (ck / "sources/0/0").read_bytes() == b'\x00v1\n{"o":{"1":0,"0":0}}'


@pytest.mark.parametrize("offsets, match", [
    ({tp("o", 0): -2}, "concrete offsets"),
    ({tp("o", 0): 3, tp("o", 1): -1}, "concrete offsets"),
    ({}, "no partitions"),
])
def test_sentinels_and_empty_are_refused(offsets, match):
    with pytest.raises(UserError, match=match):
        initial_offsets_bytes(offsets)


@pytest.mark.parametrize("source_id", ["../x", "a/b", "", "x" * 65, "név"])
def test_source_ids_that_could_escape_sources_are_refused(tmp_path, source_id):
    with pytest.raises(UserError, match="source id"):
        write_initial_offsets(str(tmp_path), source_id, {tp("o", 0): 1})


def test_named_source_id_is_a_folder_name(tmp_path):
    write_initial_offsets(str(tmp_path), "orders_src", {tp("o", 0): 1})
    assert (tmp_path / "sources/orders_src/0").read_bytes() == b'\x00v1\n{"o":{"0":1}}'


def test_resolve_turns_sentinels_into_the_brokers_numbers():
    earliest, latest = {tp("o", 0): 10, tp("o", 1): 20}, {tp("o", 0): 100, tp("o", 1): 200}
    assert resolve_offsets({tp("o", 0): -2, tp("o", 1): -1}, earliest, latest) == {tp("o", 0): 10, tp("o", 1): 200}
    assert resolve_offsets({tp("o", 0): 55}, earliest, latest) == {tp("o", 0): 55}
    with pytest.raises(UserError, match="cannot resolve earliest"):
        resolve_offsets({tp("x", 0): -2}, earliest, latest)
