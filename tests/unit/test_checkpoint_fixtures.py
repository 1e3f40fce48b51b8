"""The reader, the verdict and lag on checkpoints written by real Spark 3.5.1 and 4.2.0 (committed fixtures).

tests/fixtures/checkpoints/spark-<version>/{stateless,stateful}/ were written by each runtime of the
dev stack (devstack/checkpoint_fixtures.py regenerates them): 120 records on a topic of 2
partitions, 50 offsets per trigger (3 batches), 2 shuffle partitions; ``fixture.json`` says what
was produced. The two lines write different files and confs (4.x: ``state/0/_metadata/metadata``,
confs such as ``stateStore.encodingFormat``; 4.2: ``queryEvolution.enableSourceEvolution`` ...);
the product must read both the same way and tell which Spark wrote each.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.verdict.evaluate import evaluate
from airflow_kafka_spark.verdict.findings import BLOCK, PASS, WARN
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.versions import checkpoint_writer
from airflow_kafka_spark.watch.lag import compute_lag
from tests.support.verdict_states import NOW_MS, broker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints"
VERSIONS = sorted(p.name.removeprefix("spark-") for p in FIXTURES.glob("spark-*"))
QUERIES = ("stateless", "stateful")


def test_both_spark_lines_have_fixtures():
    assert {v.split(".")[0] for v in VERSIONS} == {"3", "4"}, VERSIONS


def meta(version: str) -> dict:
    return json.loads((FIXTURES / f"spark-{version}" / "fixture.json").read_text())


def ends(version: str) -> dict[TopicPartition, int]:
    m = meta(version)
    return {TopicPartition(m["topic"], int(p)): o for p, o in m["end_offsets"].items()}


def ranges(version: str, *, start: int = 0, extra: int = 0) -> dict[tuple[str, int], tuple[int, int]]:
    return {(tp.topic, tp.partition): (start, end + extra) for tp, end in ends(version).items()}


def state(version: str, query: str):
    return read_checkpoint(str(FIXTURES / f"spark-{version}" / query))


def verdict(version: str, query: str, br, **options):
    m = meta(version)
    return evaluate(state(version, query), br, None, DeployOptions(topics=(m["topic"],), **options), None)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("version", VERSIONS)
def test_reader_sees_what_spark_did(version, query):
    m = meta(version)
    st = state(version, query)
    assert st.exists and not st.problems, st.problems
    assert st.query_id and len(st.query_id) == 36
    assert st.offset_batch_ids == st.commit_batch_ids == [0, 1, 2]   # 120 records, 50 per trigger
    assert st.latest_committed.kafka_offsets == st.latest_planned.kafka_offsets == ends(version)
    assert st.latest_planned.version == 1 and st.latest_commit.version == 1
    assert st.latest_planned.conf["spark.sql.shuffle.partitions"] == str(m["shuffle_partitions"])
    assert st.initial_offsets == {"0": {tp: 0 for tp in ends(version)}}
    assert st.has_state is (query == "stateful")


@pytest.mark.parametrize("version", VERSIONS)
def test_format_differences_between_the_lines_are_read_alike(version):
    """4.x adds the operator metadata file and confs 3.5 never pinned; the reader takes both in its stride."""
    root = FIXTURES / f"spark-{version}" / "stateful"
    operator_metadata = (root / "state" / "0" / "_metadata" / "metadata").exists()
    conf = state(version, "stateful").latest_planned.conf
    assert operator_metadata is version.startswith("4.")
    assert ("spark.sql.streaming.stateStore.encodingFormat" in conf) is version.startswith("4.")
    assert (root / "state" / "0" / "0" / "_metadata" / "schema").exists()   # both lines keep the v1 schema file


@pytest.mark.parametrize("version", VERSIONS)
def test_writer_is_told_from_the_pinned_confs(version):
    writer = checkpoint_writer(state(version, "stateless"), None)
    if version.startswith("3."):
        assert writer.low is None and writer.high == (4, 0)
    else:
        assert writer.low == (4, 2) and writer.high is None
    assert f"offsets/{2}" in writer.shown


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("version", VERSIONS)
def test_verdict_caught_up_passes_and_retention_blocks_with_the_count(version, query):
    assert verdict(version, query, broker(ranges(version))).severity == PASS

    # retention deleted 15 records per partition beyond the committed end: 30 records lost
    grown = {k: (end + 15, end + 40) for k, (_, end) in ranges(version).items()}
    v = verdict(version, query, broker(grown))
    assert v.severity == BLOCK
    lost = [f for f in v.findings if f.code == "OFFSET_BELOW_LOG_START"]
    assert sum(f.numbers["records_lost"] for f in lost) == 30


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("version", VERSIONS)
def test_verdict_per_target_spark(version, query):
    """S27 on the real files: same line -> nothing; 3.5 -> 4.2 upgrade WARN; 4.2 -> 3.5 rollback WARN
    (Spark 3.5.1 restarts these exactly, tests/spark35/test_upgrade.py)."""
    br = broker(ranges(version))
    other = "4.2.0" if version.startswith("3.") else "3.5.1"
    same = verdict(version, query, br, target_spark_version=version)
    assert not {f.code for f in same.findings} & {"SPARK_UPGRADE", "CHECKPOINT_NEWER_THAN_RUNTIME"}
    v = verdict(version, query, br, target_spark_version=other)
    code = "SPARK_UPGRADE" if version.startswith("3.") else "CHECKPOINT_NEWER_THAN_RUNTIME"
    [f] = [f for f in v.findings if f.code == code]
    assert f.severity == WARN and v.severity == WARN


def test_pending_batch_on_each_line_counts_its_replay(tmp_path):
    """Drop commits/2 from a copy (a crash before the commit): the replay is batch 2's recorded range."""
    for version in VERSIONS:
        copy = tmp_path / version
        shutil.copytree(FIXTURES / f"spark-{version}" / "stateless", copy)
        (copy / "commits" / "2").unlink()
        (copy / "commits" / ".2.crc").unlink()
        st = read_checkpoint(str(copy))
        assert st.commit_batch_ids == [0, 1] and st.offset_batch_ids == [0, 1, 2]
        v = evaluate(st, broker(ranges(version)), None,
                     DeployOptions(topics=(meta(version)["topic"],), idempotent_sink=False), None)
        [pending] = [f for f in v.findings if f.code == "PENDING_BATCH_REPLAY"]
        start = sum(st.latest_committed.kafka_offsets.values())
        assert pending.numbers["records_to_replay"] == meta(version)["records"] - start == 20


@pytest.mark.parametrize("version", VERSIONS)
def test_lag_from_each_line(version):
    st = state(version, "stateless")
    lag = compute_lag(st.latest_committed.kafka_offsets, broker(ranges(version, extra=25)),
                      history=[st.latest_planned], now_ms=NOW_MS)
    assert lag.records == 25 * len(ends(version))
    caught_up = compute_lag(st.latest_committed.kafka_offsets, broker(ranges(version)), now_ms=NOW_MS)
    assert caught_up.records == 0 and caught_up.caught_up
