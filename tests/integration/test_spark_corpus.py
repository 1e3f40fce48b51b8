"""Every checkpoint Spark's own test suites ship, run through reader, verdict, backup and restore.

Spark publishes the checkpoints its suites restart in its test jars on Maven Central; ``bin/setup``
fetches them (``devstack/jvm/spark-test-resources``) and this test extracts them at test time (no
file of Spark's is in this repository). What Spark's tests do with each is the expectation:

* Spark restarts (or, for ``checkpoint-version-4.0.0/*``, reads through the state data source)
  every checkpoint but two. ``checkpoint-version-2.1.0`` has no commit log and is restarted by
  "recover from a Spark v2.1 checkpoint" (StreamingAggregationSuite): no BLOCK here either, and a
  resume position read from ``offsets/0``.
* ``checkpoint-test-offsetId-commitId-inconsistent`` (offsets 0-2,4; commits 0-2) is restarted by
  "test gaps in offset log" only with ``asyncProgressTrackingEnabled``: a BLOCK here that names it.
* ``escaped-path-2.4.0`` is refused by Spark 3+ ("detect escaped path and report the migration
  guide", StreamSuite) until the conf is turned off: LEGACY_ESCAPED_PATH here, and real Spark 4.2
  is made to refuse it too.
* ``checkpoint-version-2.4.3-kafka-include-headers-default`` is Kafka's: judged against the real
  broker holding its topic as Spark's test produces it (5 partitions, 4 records each: PASS), then
  restarted by Spark 4.2 with Spark's test query from the original and from a restored backup:
  both read exactly the one record per partition produced after the checkpoint.

Each checkpoint is also compared with an independent reading of its files (query id, batch ids,
commit log version), backed up, and restored into a fresh folder: the backup holds every file
(each left out names a reason), and the restored copy reads exactly as the original. Spark's
single log files (2.1.0 offsets, v1/v2 commit logs, the v2 offset map, Kafka's initial offsets in
2.1.0 and a future version) are parsed and checked against what Spark's tests assert about them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.checkpoint.formats import (
    UnsupportedLogVersionError,
    parse_commit_file,
    parse_initial_offsets_file,
    parse_offsets_file,
)
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.ops.backup.store import materialize
from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.verdict.evaluate import evaluate
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from devstack import jars, topics

pytestmark = pytest.mark.integration

#: The test jars (devstack/jvm/spark-test-resources/pom.xml) and how many checkpoints each ships.
JARS = {"4.2.0": ("spark-sql_2.13-4.2.0-tests.jar", "spark-sql-kafka-0-10_2.13-4.2.0-tests.jar", 40),
        "3.5.1": ("spark-sql_2.12-3.5.1-tests.jar", "spark-sql-kafka-0-10_2.12-3.5.1-tests.jar", 21)}
NO_COMMIT_LOG = "checkpoint-version-2.1.0"
ASYNC_ONLY = "checkpoint-test-offsetId-commitId-inconsistent"
KAFKA = "checkpoint-version-2.4.3-kafka-include-headers-default"
ESCAPED = "escaped-path-2.4.0"


def extract(version: str, dest: Path) -> Path:
    directory = jars.fetch("spark-test-resources").directory
    for name in JARS[version][:2]:
        with zipfile.ZipFile(directory / name) as jar:
            for member in jar.namelist():
                if member.startswith(("structured-streaming/", "kafka-source-")):
                    jar.extract(member, dest)
    return dest


def checkpoints(base: Path) -> dict[str, Path]:
    """Every folder holding a checkpoint (``metadata`` or ``offsets/``), by its path below ``base``."""
    found: dict[str, Path] = {}
    for here, dirs, files in os.walk(base / "structured-streaming"):
        dirs.sort()
        if "metadata" in files or "offsets" in dirs:
            found[os.path.relpath(here, base / "structured-streaming")] = Path(here)
            dirs.clear()
    return found


def files_below(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def independent_reading(ck: Path) -> dict:
    """What the files say, read here without the product's parser."""
    def ids(log: str) -> list[int]:
        d = ck / log
        return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []
    commits = ids("commits")
    return {"query_id": json.loads((ck / "metadata").read_text().splitlines()[0])["id"],
            "offsets": ids("offsets"), "commits": commits,
            "commit_version": int((ck / "commits" / str(commits[-1])).read_text().splitlines()[0][1:])
            if commits else None,
            "has_state": (ck / "state").is_dir() and any(p.is_file() for p in (ck / "state").rglob("*"))}


def no_kafka() -> BrokerState:
    return BrokerState(bootstrap_servers="", cluster_id=None, topics={}, missing_topics=[], earliest={},
                       latest={}, sampled_at_ms=int(time.time() * 1000))


@pytest.fixture(scope="module", params=sorted(JARS))
def corpus(request, tmp_path_factory):
    return request.param, extract(request.param, tmp_path_factory.mktemp(f"spark-{request.param}"))


def test_every_checkpoint_reads_judges_backs_up_and_restores_as_spark_says(corpus, broker, tmp_path):
    version, base = corpus
    found = checkpoints(base)
    assert len(found) == JARS[version][2], sorted(found)
    kafka_config = {"bootstrap.servers": broker.bootstrap_servers}
    outcomes: dict[str, str] = {}
    for name, original in found.items():
        ck = tmp_path / "work" / name.replace("/", "__")
        shutil.copytree(original, ck)
        state = read_checkpoint(str(ck))
        truth = independent_reading(ck)
        assert (state.query_id, state.offset_batch_ids, state.commit_batch_ids, state.has_state) == \
            (truth["query_id"], truth["offsets"], truth["commits"], truth["has_state"]), name
        assert (state.latest_commit.version if state.latest_commit else None) == truth["commit_version"], name
        pos = resume_position(state)
        assert pos is not None and pos.known == (name != ASYNC_ONLY), (name, pos)

        if name == KAFKA:
            verdict = _kafka_verdict(broker, ck, kafka_config)
        else:
            verdict = evaluate(state, no_kafka(), None, DeployOptions(idempotent_sink=True))
        blocks = [f for f in verdict.findings if f.severity == "BLOCK"]
        if name == ASYNC_ONLY:
            assert [f.code for f in blocks] == ["CHECKPOINT_CORRUPT"], name
            assert "asyncProgressTrackingEnabled" in blocks[0].message
            assert "planned without being committed" not in " ".join(f.message for f in verdict.findings)
        else:
            assert not blocks, (name, [(f.code, f.message) for f in blocks])
        if name == NO_COMMIT_LOG:
            assert pos.label == "offsets/0" and pos.pending_batch == 1

        before = files_below(ck)
        result = backup_checkpoint(str(ck), str(tmp_path / "backups"), job=f"c{len(outcomes)}", settle_s=0)
        m = result.manifest
        kept = {f.path for f in m.files}
        left_out = m.selection["excluded"]
        assert kept | set(left_out) == set(before) and not kept & set(left_out), name
        assert all(why for why in left_out.values()), name
        if name in (NO_COMMIT_LOG, ASYNC_ONLY):
            assert m.selection["mode"] == "whole" and kept == set(before), (name, m.selection)
        restored = tmp_path / "restored" / name.replace("/", "__")
        materialize(m, str(tmp_path / "backups"), open_location(str(restored)))
        assert files_below(restored) == {k: v for k, v in before.items() if k in kept}, name
        again = read_checkpoint(str(restored))
        assert (again.query_id, again.offset_batch_ids, again.commit_batch_ids, again.latest_planned,
                again.latest_committed, again.initial_offsets, again.problems) == \
            (state.query_id, state.offset_batch_ids, state.commit_batch_ids, state.latest_planned,
             state.latest_committed, state.initial_offsets, state.problems), name
        outcomes[name] = f"{m.selection['mode']} {len(kept)}/{len(before)}"
    print(f"Spark {version}: {len(outcomes)} checkpoints: " + "; ".join(f"{k} {v}" for k, v in outcomes.items()))


def test_sparks_kafka_checkpoint_restarts_from_its_restored_copy_as_from_itself(broker, tmp_path):
    """The oracle for the Kafka checkpoint: Spark 4.2 restarts it (as Spark's test does) on the broker
    the verdict passed, from the original and from a restored backup alike, reading the one record
    per partition produced after it and nothing before."""
    base = extract("4.2.0", tmp_path / "x") / "structured-streaming" / KAFKA
    ck, kafka_config = tmp_path / "ck", {"bootstrap.servers": broker.bootstrap_servers}
    shutil.copytree(base, ck)
    _kafka_verdict(broker, ck, kafka_config)
    twin = tmp_path / "original"
    shutil.copytree(ck, twin)
    m = backup_checkpoint(str(ck), str(tmp_path / "backups"), job="kafka", settle_s=0).manifest
    shutil.rmtree(ck)
    restore_checkpoint(str(ck), str(tmp_path / "backups"), m.backup_id, kafka_config, job="kafka",
                       run=RunOptions(backup_settle_s=0))
    (topic,) = {tp.topic for tp in read_checkpoint(str(ck)).latest_committed.kafka_offsets}
    from_original = _restart_kafka_query(broker.bootstrap_servers, topic, twin)
    from_restored = _restart_kafka_query(broker.bootstrap_servers, topic, ck)
    assert from_restored == from_original == [(1, 4)] * 5


def _restart_kafka_query(bootstrap: str, topic: str, checkpoint: Path) -> list[tuple]:
    """Spark's test query (KafkaMicroBatchSourceSuite, includeHeaders default): dropDuplicates over the
    Kafka rows, then value + 1; one availableNow run, the (batch id, value) rows it wrote."""
    from tests.support import spark_session

    rows: list[tuple] = []
    df = (spark_session.session().readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribePattern", topic).option("startingOffsets", "earliest").load())
    q = (df.dropDuplicates().selectExpr("CAST(CAST(value AS STRING) AS INT) + 1 AS v").writeStream
         .foreachBatch(lambda batch, batch_id: rows.extend((batch_id, r.v) for r in batch.collect()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    spark_session.drain(q)
    return sorted(rows)


def _kafka_verdict(broker, ck: Path, kafka_config: dict):
    """Spark's test creates the topic with 5 partitions and 3 records each before the checkpoint was
    written, then adds one record with headers per partition before restarting: that broker, with
    record times on either side of the checkpoint's batch (else the product rightly suspects a
    topic recreated after the checkpoint, TOPIC_RESET)."""
    state = read_checkpoint(str(ck))
    (topic,) = {tp.topic for tp in state.latest_committed.kafka_offsets}
    if topic not in topics.admin(broker.bootstrap_servers).list_topics(timeout=10).topics:
        # retention.ms=-1: the test broker deletes by record time within seconds, and these are from 2019
        topics.create_topic(broker.bootstrap_servers, topic, 5, config={"retention.ms": "-1"})
        written = state.latest_committed.batch_timestamp_ms
        for partition in range(5):   # 3 records before the checkpoint's batch, 1 after (as in Spark's test)
            _produce_to(broker.bootstrap_servers, topic, partition, [written - 60_000] * 3 + [written + 60_000])
    verdict = validate(str(ck), kafka_config=kafka_config, options=DeployOptions(idempotent_sink=True),
                       record_identity=False)
    assert verdict.severity.value in ("PASS", "WARN", "INFO"), [(f.code, f.message) for f in verdict.findings]
    assert {f.code for f in verdict.findings} >= {"OK"}
    return verdict


def _produce_to(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for i, ts in enumerate(timestamps):
        p.produce(topic, value=str(i).encode(), partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def test_legacy_escaped_path_is_named_as_spark_refuses_it(broker, tmp_path):
    base = extract("4.2.0", tmp_path / "x") / "structured-streaming" / ESCAPED
    correct = base / "chk %@#chk"
    state = read_checkpoint(str(correct))
    assert not state.exists and [p.code for p in state.problems] == ["LEGACY_ESCAPED_PATH"]
    message = state.problems[0].message
    assert "spark.sql.streaming.checkpoint.escapedPathCheck.enabled" in message
    assert str(base / "chk%252520%252525@%252523chk") in message
    for options in (DeployOptions(), DeployOptions(expect_new_checkpoint=True)):   # Spark refuses both
        verdict = validate(str(correct), kafka_config={"bootstrap.servers": broker.bootstrap_servers},
                           options=options, record_identity=False)
        assert [f.code for f in verdict.findings if f.severity.value == "BLOCK"] == ["LEGACY_ESCAPED_PATH"]

    # The oracle: Spark 4.2 refuses to start a query on that path, and names the same conf.
    from tests.support import spark_session

    spark = spark_session.session()
    with pytest.raises(Exception, match="escapedPathCheck") as refused:
        (spark.readStream.format("rate").load().writeStream.format("noop")
         .option("checkpointLocation", str(correct)).start())
    assert str(base / "chk%252520%252525@%252523chk") in str(refused.value) or "chk%252520" in str(refused.value)


def test_sparks_single_log_files_parse_as_its_tests_assert(tmp_path):
    base = extract("4.2.0", tmp_path / "x")
    ss = base / "structured-streaming"
    # OffsetSeqLogSuite "read Spark 2.1.0 log format": two sources, batch timestamp 1480981499528.
    b = parse_offsets_file(0, (ss / "offset-log-version-2.1.0" / "0").read_bytes())
    assert b.batch_timestamp_ms == 1480981499528 and b.raw_sources == {"0": '{"logOffset":345}',
                                                                        "1": '{"topic-0":{"0":1}}'}
    assert b.sources["1"] == {TopicPartition("topic-0", 0): 1}
    # The v2 offset map (Spark 4.x): source ids with their offsets, one per line.
    for i in range(4):
        m = parse_offsets_file(i, (ss / "offset-map" / str(i)).read_bytes())
        assert m.version == 2 and m.raw_sources == {"0": str(i)}
    # CommitLogSuite: v1 with a watermark, v2 with state unique ids, v2 with them empty.
    v1 = parse_commit_file(0, (ss / "testCommitLogV1" / "testCommitLog").read_bytes())
    v2 = parse_commit_file(0, (ss / "testCommitLogV2" / "testCommitLog").read_bytes())
    v2e = parse_commit_file(0, (ss / "testCommitLogV2-empty-unique-id" / "testCommitLog").read_bytes())
    assert (v1.version, v1.next_batch_watermark_ms, v2.version, v2.has_state_unique_ids,
            v2e.version, v2e.has_state_unique_ids) == (1, 1, 2, True, 2, False)
    # KafkaMicroBatchSourceSuite: Spark 2.1.0's initial offsets (a length byte, then JSON) read; a
    # future version refused with Spark's own rule (its first byte is an ASCII '0', not 0x00).
    old = parse_initial_offsets_file((base / "kafka-source-initial-offset-version-2.1.0.bin").read_bytes())
    assert old == {TopicPartition("kafka-initial-offset-2-1-0", p): p for p in range(3)}
    with pytest.raises(UnsupportedLogVersionError, match="v99999"):
        parse_initial_offsets_file((base / "kafka-source-initial-offset-future-version.bin").read_bytes())
