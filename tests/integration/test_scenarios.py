"""Issue 3 acceptance — Spark is the oracle.

Each scenario builds a real state (real broker, the reference query on real Spark with the real
connector), asks the validator for a verdict, then restarts the real query on that checkpoint and
checks that what Spark does matches the verdict: BLOCK ⇒ Spark fails, or loses / duplicates / skips
records (counted against the produced records); PASS ⇒ the sink is exact; WARN ⇒ the quantified
replay is what happens. The observed table is printed (``-s``) and collected in docs/scenarios.md.
"""

from __future__ import annotations

import json
import time

import pytest

from airflow_kafka_spark.jobs import reference_job
from devstack import oracle, topics
from devstack.broker import LocalBroker
from devstack.produce import produce
from tests.support import oracle_counts as oc
from tests.support import spark_session
from tests.support.scenario import Job, drop_latest, short, write_observed

pytestmark = pytest.mark.integration

OBSERVED: list[dict] = []


@pytest.fixture
def job(broker, tmp_path, topic_name):
    def make(partitions: int = 3, *, sink: str = "idempotent", extra_topics: int = 0, config: dict | None = None):
        names = [topic_name] + [f"{topic_name}-x{i}" for i in range(extra_topics)]
        for name in names:
            topics.create_topic(broker.bootstrap_servers, name, partitions, config)
        return Job(broker, tmp_path, names, sink, partitions)

    return make


def codes(verdict) -> set[str]:
    return {f.code for f in verdict.findings}


def finding(verdict, code: str):
    return [f for f in verdict.findings if f.code == code]


def record(scenario: str, verdict, spark_outcome: str, observed: str = "", announced: str = "") -> None:
    """One row of the observed table: the verdict, the count it announced, and what Spark did (counted)."""
    row = {"scenario": scenario, "verdict": verdict.severity, "codes": sorted(codes(verdict) - {"OK"}),
           "announced": announced or verdict.records.describe() or "-", "observed": observed or "-",
           "spark": spark_outcome}
    OBSERVED.append(row)
    print("SCENARIO " + json.dumps(row))


def ok_first_run(j: Job, n: int = 300, **options) -> None:
    j.produce(n)
    res = j.run(**options)
    assert res.ok, res.error
    assert j.compare().exact


# --------------------------------------------------------------------------- S01 / S31


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_s01_retention_past_checkpoint(job, fail_on_data_loss):
    j = job()
    ok_first_run(j, 300)
    j.produce(300)  # unread by the job
    # retention (delete-records) removes 40 unread records per partition
    ck = {tp.partition: off for tp, off in j.committed().items()}
    topics.delete_records(j.bootstrap, j.topics[0], {p: o + 40 for p, o in ck.items()})

    v = j.validate(fail_on_data_loss=fail_on_data_loss == "true")
    assert v.severity == "BLOCK"
    lost = finding(v, "OFFSET_BELOW_LOG_START")
    assert sum(f.numbers["records_lost"] for f in lost) == 120
    if fail_on_data_loss == "false":
        assert "FAIL_ON_DATA_LOSS_DISABLED" in codes(v)

    res = j.run(fail_on_data_loss=fail_on_data_loss)
    cmp = j.compare()
    if fail_on_data_loss == "true":
        assert not res.ok, "Spark should refuse to read deleted offsets"
        outcome = "fails: " + short(res.error)
    else:
        assert res.ok
        assert len(cmp.missing) == 120 and not cmp.duplicated, cmp.summary()
        assert oc.announced(v, "lost") == oc.missing_by_partition(cmp)       # 40 per partition, as announced
        outcome = f"silently skipped {len(cmp.missing)} records"
    record(f"S01 retention past checkpoint (failOnDataLoss={fail_on_data_loss})", v, outcome,
           f"lost {len(cmp.missing)}" if fail_on_data_loss == "false" else "")


# --------------------------------------------------------------------------- S02 / S03 / S05


def test_s02_topic_recreated_with_fewer_records(job):
    j = job()
    ok_first_run(j, 300)
    topics.delete_topic(j.bootstrap, j.topics[0])
    topics.create_topic(j.bootstrap, j.topics[0], 3)
    j.produce(90)  # 30 per partition, below the checkpoint's 100

    new = j.produced[-90:]
    first_run_batches = {r["batch_id"] for r in j.sink_rows()}
    v = j.validate()
    assert v.severity == "BLOCK"
    assert codes(v) & {"OFFSET_AHEAD_OF_LOG_END", "TOPIC_RESET"}
    assert v.records.skipped == 90 and v.records.bound == "at_least"
    res = j.run()
    assert not res.ok
    record("S02 topic recreated, fewer records", v, "fails: " + short(res.error))
    # failOnDataLoss=false: the range 100 → 30 is dropped and the query goes on from the new log end
    assert j.run(fail_on_data_loss="false").ok
    cmp = oracle.compare(new, [r for r in j.sink_rows() if r["batch_id"] not in first_run_batches])
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp), cmp.summary()
    record("S02, then restarted with failOnDataLoss=false", v, f"silently skipped {len(cmp.missing)} new records",
           f"skipped {len(cmp.missing)}")


def test_s03_topic_recreated_with_more_records_is_silently_skipped(job):
    j = job()
    ok_first_run(j, 300)
    old_rows = j.sink_rows()
    topics.delete_topic(j.bootstrap, j.topics[0])
    topics.create_topic(j.bootstrap, j.topics[0], 3)
    new = j.produce(450)  # 150 per partition, above the checkpoint's 100

    v = j.validate()
    assert v.severity == "BLOCK"
    assert "TOPIC_RESET" in codes(v)
    res = j.run()
    assert res.ok, "Spark does not notice a recreated topic with more records"
    # the sink still holds the old incarnation's rows at the same (partition, offset): compare only
    # what this restart wrote (its batches ran under the same query id, after the first run's batches)
    first_run_batches = {r["batch_id"] for r in old_rows}
    cmp = oracle.compare(new, [r for r in j.sink_rows() if r["batch_id"] not in first_run_batches])
    assert len(cmp.missing) == 300, cmp.summary()  # the first 100 of each new partition were never read
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp)
    record("S03 topic recreated, more records", v, f"starts silently, skipped {len(cmp.missing)} new records",
           f"skipped {len(cmp.missing)}")


def test_s05_partitions_gone(job):
    j = job(partitions=3)
    ok_first_run(j, 300)
    topics.delete_topic(j.bootstrap, j.topics[0])
    topics.create_topic(j.bootstrap, j.topics[0], 2)
    new = j.produce(400, partitions=2)
    first_run_batches = {r["batch_id"] for r in j.sink_rows()}

    v = j.validate()
    assert v.severity == "BLOCK"
    assert "PARTITIONS_GONE" in codes(v)
    res = j.run()
    assert not res.ok
    record("S05 partitions gone", v, "fails: " + short(res.error))
    # failOnDataLoss=false: t-2 is dropped, t-0/t-1 resume at 100 of the new log (TOPIC_RESET's count)
    assert j.run(fail_on_data_loss="false").ok
    cmp = oracle.compare(new, [r for r in j.sink_rows() if r["batch_id"] not in first_run_batches])
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp), cmp.summary()
    record("S05, then restarted with failOnDataLoss=false", v, f"silently skipped {len(cmp.missing)} new records",
           f"skipped {len(cmp.missing)}")


# --------------------------------------------------------------------------- S04


def test_s04_partitions_added_untouched(job):
    j = job(partitions=2)
    ok_first_run(j, 200)
    topics.add_partitions(j.bootstrap, j.topics[0], 3)
    j.produce(300, partitions=3)

    v = j.validate()
    assert v.severity in ("PASS", "WARN"), v.to_dict()
    assert "NEW_PARTITION" in codes(v)
    res = j.run()
    assert res.ok, res.error
    assert j.compare().exact
    record("S04 partition added (starts at 0)", v, "reads the new partition from 0; sink exact")


def test_s04_partitions_added_and_trimmed(job):
    j = job(partitions=2)
    ok_first_run(j, 200)
    topics.add_partitions(j.bootstrap, j.topics[0], 3)
    j.produce(300, partitions=3)
    topics.delete_records(j.bootstrap, j.topics[0], {2: 50})

    v = j.validate()
    assert v.severity == "BLOCK"
    assert "NEW_PARTITION_TRUNCATED" in codes(v)
    res = j.run()
    assert not res.ok
    record("S04 partition added, already trimmed", v, "fails: " + short(res.error))
    # failOnDataLoss=false: Spark starts the added partition at its log start, 50
    assert j.run(fail_on_data_loss="false").ok
    cmp = j.compare()
    assert oc.announced(v, "lost") == oc.missing_by_partition(cmp) and not cmp.duplicated, cmp.summary()
    record("S04b, then restarted with failOnDataLoss=false", v, f"read t-2 from 50: {len(cmp.missing)} records lost",
           f"lost {len(cmp.missing)}")


# --------------------------------------------------------------------------- S06


def test_s06_checkpoint_against_another_cluster(job, tmp_path):
    j = job()
    ok_first_run(j, 300)
    # the validator records what it saw (lifecycle record) when validating against cluster 1
    assert j.validate().severity in ("PASS", "WARN")
    with LocalBroker(data_dir=tmp_path / "other-cluster") as other:
        topics.create_topic(other.bootstrap_servers, j.topics[0], 3)
        theirs = produce(other.bootstrap_servers, j.topics[0], 600, partitions=3)
        v = j.validate(kafka_bootstrap=other.bootstrap_servers)
        assert v.severity == "BLOCK"
        assert "CLUSTER_MISMATCH" in codes(v)
        other_out = tmp_path / "other-out"
        res = spark_session.run_available_now(other.bootstrap_servers, j.topics[0], j.checkpoint, other_out)
        assert res.ok
        cmp = oracle.compare(theirs, oracle.read_sink(other_out, "idempotent"))
        assert len(cmp.missing) == 300, cmp.summary()
        assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp)
    record("S06 checkpoint used against another cluster", v, f"starts silently, skipped {len(cmp.missing)} records",
           f"skipped {len(cmp.missing)}")


# --------------------------------------------------------------------------- S07 – S10


def test_s07_half_written_batch_replays_exactly_the_recorded_range(job):
    j = job(sink="append")
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    last = drop_latest(j, "commits")  # crash after offsets/N, before commits/N

    v = j.validate(idempotent_sink=False)
    assert v.severity == "WARN"
    [pending] = finding(v, "PENDING_BATCH_REPLAY")
    announced = pending.numbers["records_to_replay"]
    assert announced > 0
    assert j.run().ok
    cmp = j.compare()
    assert not cmp.missing and cmp.duplicate_count == announced, cmp.summary()
    assert oc.announced(v, "duplicated") == oc.duplicated_by_partition(cmp)
    record("S07 half-written batch (non-idempotent sink)", v, f"replayed batch {last}: {cmp.duplicate_count} dups",
           f"duplicated {cmp.duplicate_count}")


def test_s07_hand_deleted_commit_keeps_its_crc(job):
    """Hand-editing a checkpoint with ``rm commits/N`` leaves Hadoop's ``.N.crc`` behind."""
    j = job()
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    drop_latest(j, "commits", keep_crc=True)

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    assert not res.ok and "FileAlreadyExistsException" in res.error
    record("S07b commits/N deleted by hand, .N.crc left", v, "fails: FileAlreadyExistsException on commits/.N.crc")


def test_s08_offset_log_gap(job):
    j = job()
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    drop_latest(j, "offsets", back=1)

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    _assert_failed_or_wrong(j, res)
    record("S08 offset log gap", v, _outcome(j, res))


def test_s09_truncated_offset_file(job):
    j = job()
    ok_first_run(j, 300)
    j.produce(60)
    last = max(int(p.name) for p in (j.checkpoint / "offsets").iterdir() if p.name.isdigit())
    (j.checkpoint / "offsets" / str(last)).write_bytes(b"")

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    _assert_failed_or_wrong(j, res)
    record("S09 empty offsets file", v, _outcome(j, res))


def test_s09_garbage_commit_file(job):
    j = job()
    ok_first_run(j, 300)
    last = max(int(p.name) for p in (j.checkpoint / "commits").iterdir() if p.name.isdigit())
    (j.checkpoint / "commits" / str(last)).write_bytes(b"\x00\xffgarbage")

    v = j.validate()
    assert v.severity == "BLOCK" and "CHECKPOINT_CORRUPT" in codes(v)
    res = j.run()
    _assert_failed_or_wrong(j, res)
    record("S09 garbage commit file", v, _outcome(j, res))


def test_s10_missing_query_id_breaks_the_idempotent_sink(job):
    j = job()
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    drop_latest(j, "commits")                               # a pending batch that will be replayed ...
    (j.checkpoint / "metadata").unlink()              # ... under a new query id
    (j.checkpoint / ".metadata.crc").unlink()         # (lost with its checksum, as storage loses files)

    # the reference idempotent sink overwrites a re-run batch, so only the new query id can duplicate it
    v = j.validate(target_spark_version=spark_session.session().version, idempotent_sink=True)
    assert v.severity == "BLOCK" and "MISSING_QUERY_ID" in codes(v)
    res = j.run()
    cmp = j.compare()
    if not _refuses_missing_metadata():
        assert res.ok, "Spark 3.5/4.0 silently create a new query id"
        assert cmp.duplicate_count > 0, "the sink keyed by (query id, batch) wrote the replayed batch twice"
        outcome = f"new query id; idempotent sink got {cmp.duplicate_count} dups"
    else:
        assert not res.ok and "STREAMING_CHECKPOINT_MISSING_METADATA_FILE" in res.error, res.error
        outcome = "fails: " + short(res.error)
    assert oc.announced(v, "duplicated") == oc.duplicated_by_partition(cmp)   # the pending batch once more, or 0
    record("S10 metadata (query id) missing", v, outcome, f"duplicated {cmp.duplicate_count}")


# --------------------------------------------------------------------------- S11 / S13 / S22


def test_s10_metadata_deleted_by_hand_keeps_its_crc(job):
    j = job()
    ok_first_run(j, 300)
    (j.checkpoint / "metadata").unlink()

    v = j.validate()
    assert v.severity == "BLOCK" and codes(v) & {"MISSING_QUERY_ID", "CHECKPOINT_CORRUPT"}
    res = j.run()
    marker = ("STREAMING_CHECKPOINT_MISSING_METADATA_FILE" if _refuses_missing_metadata() else
              "concurrently using metadata")
    assert not res.ok and marker in res.error, res.error
    record("S10b metadata deleted by hand, .metadata.crc left", v, "fails: " + short(res.error))


def _refuses_missing_metadata() -> bool:
    """Spark 4.2.0 refuses a checkpoint whose metadata is gone while batches exist; 3.5.1 and 4.0.0
    wrote a new one (a new query id, or a clash with the left-over .metadata.crc)."""
    from airflow_kafka_spark.verdict.versions import parse_version

    return parse_version(spark_session.session().version) >= (4, 2)


def test_s11_shuffle_partitions_pinned(job):
    j = job()
    j.produce(300)
    assert j.run(stateful="dedup", shuffle_partitions=2).ok
    v = j.validate(conf={"spark.sql.shuffle.partitions": "8"})
    assert v.severity == "WARN" and "CONF_PINNED_BY_CHECKPOINT" in codes(v)
    spark = spark_session.session()
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    try:
        j.produce(90)
        assert j.run(stateful="dedup").ok
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    last = max(int(p.name) for p in (j.checkpoint / "offsets").iterdir() if p.name.isdigit())
    conf = json.loads((j.checkpoint / "offsets" / str(last)).read_text().splitlines()[1])["conf"]
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert j.compare().exact
    record("S11 shuffle partitions changed", v, "Spark kept the pinned 2 partitions (8 ignored); sink exact")


def test_s13_topic_added_to_subscription(job):
    j = job(extra_topics=1)
    a, b = j.topics
    j.produce(300, topic=a)
    assert j.run(topics=[a]).ok
    j.produce(150, topic=b)

    v = j.validate(topics=[a, b])
    assert v.severity == "WARN"
    [new] = [f for f in finding(v, "NEW_TOPIC_FROM_EARLIEST")] or [None]
    assert new is not None
    announced = sum(f.numbers.get("records", 0) for f in finding(v, "NEW_TOPIC_FROM_EARLIEST"))
    res = j.run(topics=[a, b])
    assert res.ok, res.error
    cmp = j.compare()
    assert cmp.exact and announced == 150
    record("S13 topic added to subscribe", v, "new topic read from earliest; sink exact")


def test_s13_topic_removed_from_subscription(job):
    j = job(extra_topics=1)
    a, b = j.topics
    j.produce(300, topic=a)
    j.produce(150, topic=b)
    assert j.run(topics=[a, b]).ok
    j.produce(60, topic=a)                                # not read yet when the deploy drops the topic

    v = j.validate(topics=[b])
    assert v.severity == "BLOCK" and "PARTITIONS_GONE" in codes(v)
    res = j.run(topics=[b])
    assert not res.ok
    record("S13 topic removed from subscribe", v, "fails: " + short(res.error))
    # failOnDataLoss=false: the dropped topic's unread records are never read by this query
    assert j.run(topics=[b], fail_on_data_loss="false").ok
    cmp = j.compare()
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp) and len(cmp.missing) == 60, cmp.summary()
    record("S13 topic removed, then restarted with failOnDataLoss=false", v,
           f"dropped {a}: its {len(cmp.missing)} unread records never read", f"skipped {len(cmp.missing)}")


def test_s22_starting_offsets_ignored(job):
    j = job()
    ok_first_run(j, 300)
    j.produce(150)
    v = j.validate(starting_offsets="latest")
    assert v.severity == "WARN" and "STARTING_OFFSETS_IGNORED" in codes(v)
    assert j.run(starting_offsets="latest").ok
    assert j.compare().exact, "the checkpoint won: records produced in between were still read"
    record("S22 startingOffsets=latest on an existing checkpoint", v, "ignored by Spark; sink exact")


# --------------------------------------------------------------------------- S25


def test_s25_transactional_topic_no_false_alarm(job):
    j = job()
    j.produce(300, transactional_id="aks-tx-1")
    assert j.run().ok
    j.produce(150, start_id=300, transactional_id="aks-tx-2")
    v = j.validate()
    assert v.severity in ("PASS", "WARN"), v.to_dict()
    assert not (codes(v) & {"OFFSET_BELOW_LOG_START", "OFFSET_AHEAD_OF_LOG_END", "TOPIC_RESET"})
    assert j.run().ok
    assert j.compare().exact
    record("S25 transactional topic (control markers)", v, "restarts; sink exact")


# --------------------------------------------------------------------------- S24 / S28 / S29


def test_s21_new_query_from_latest_skips_what_is_there(job):
    j = job()
    j.produce(300)
    v = j.validate(expect_new_checkpoint=True, starting_offsets="latest")
    assert v.severity == "PASS" and "NO_CHECKPOINT" in codes(v)
    assert j.run(starting_offsets="latest").ok
    j.produce(60)                                         # the new query does read what comes after it started
    assert j.run(starting_offsets="latest").ok
    cmp = j.compare()
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp) and len(cmp.missing) == 300, cmp.summary()
    record("S21 new query, startingOffsets=latest", v, f"skipped the {len(cmp.missing)} records already there",
           f"skipped {len(cmp.missing)}")


def test_s24_shared_group_id_is_found_and_spark_loses_nothing(job, tmp_path):
    """Another consumer lives in the group the deploy names: the finding says so; Spark (assign(), no
    commits) reads every record anyway — nothing observable, so the finding counts nothing."""
    from confluent_kafka import Consumer

    j = job()
    j.produce(300)
    group = f"{j.topics[0]}-shared"
    other = Consumer({"bootstrap.servers": j.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    other.subscribe([j.topics[0]])
    try:
        deadline = time.monotonic() + 60
        while not other.assignment() and time.monotonic() < deadline:
            other.poll(0.5)
        assert other.assignment(), "the other consumer never joined the group"
        assert j.run(kafka_option=f"group.id={group}").ok
        v = j.validate(kafka_group_id=group)
        [shared] = finding(v, "SHARED_GROUP_ID")
        assert shared.severity == "WARN" and shared.numbers["members"] == 1 and not v.counts
        j.produce(150)
        # two queries with the same kafka.group.id at the same time, beside the live member
        second = tmp_path / "second"
        queries = [reference_job.build_query(spark_session.session(), reference_job.parse_args(
            ["--topics", j.topics[0], "--bootstrap-servers", j.bootstrap, "--checkpoint", str(ck), "--output",
             str(out), "--trigger", "availableNow", "--kafka-option", f"group.id={group}", "--query-name", name]))
            for ck, out, name in ((j.checkpoint, j.output, "s24_a"), (second / "checkpoint", second / "out", "s24_b"))]
        for q in queries:
            assert q.awaitTermination(180) and q.exception() is None
        other.poll(0.5)
    finally:
        other.close()
    cmp, cmp2 = j.compare(), oracle.compare(j.produced, oracle.read_sink(second / "out", "idempotent"))
    assert cmp.exact and cmp2.exact, (cmp.summary(), cmp2.summary())
    record("S24 kafka.group.id shared by two queries and a live consumer", v,
           "both queries read everything (assign, no commits); both sinks exact",
           "0 lost/skipped/duplicated", "0 (1 live member named)")


def test_s28_first_batch_after_downtime_is_the_whole_backlog(job):
    j = job()
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok          # the job's usual batches: 60 records
    j.produce(3000)                                       # the downtime's backlog

    v = j.validate()
    [backlog] = finding(v, "BACKLOG")
    assert backlog.severity == "WARN" and backlog.numbers["recent_largest_batch"] == 60
    announced = backlog.numbers["first_batch_records"]
    limited = j.validate(max_offsets_per_trigger=60)
    assert finding(limited, "BACKLOG")[0].numbers["batches"] == 50
    before = {r["batch_id"] for r in j.sink_rows()}
    assert j.run().ok                                      # no maxOffsetsPerTrigger: one batch takes it all
    sizes = oc.batch_sizes([r for r in j.sink_rows() if r["batch_id"] not in before])
    assert list(sizes.values()) == [announced] == [3000], sizes
    assert j.compare().exact
    record("S28 long downtime, no maxOffsetsPerTrigger", v, f"one batch of {announced:,} records (50× the usual)",
           f"first batch {next(iter(sizes.values())):,}", f"first batch {announced:,} (50× the largest recent)")


def test_s29_checkpoint_path_changed_on_deploy(broker, tmp_path, topic_name):
    """The deploy moves from orders-v1 to an empty orders-v2 with startingOffsets=latest: the 150 records
    v1 had not read yet are never read (counted per partition against v1's position)."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 3)
    cps = tmp_path / "checkpoints"
    v1 = Job(broker, tmp_path, [topic_name], spark_checkpoint=str(cps / "orders-v1"),
             checkpoint_url=str(cps / "orders-v1"))
    ok_first_run(v1, 300)
    v1.produce(150)                                       # arrives while the job is being redeployed
    v2 = Job(broker, tmp_path, [topic_name], spark_checkpoint=str(cps / "orders-v2"),
             checkpoint_url=str(cps / "orders-v2"))
    v2.produced = v1.produced
    (cps / "orders-v2").mkdir()

    v = v2.validate(starting_offsets="latest")
    [new] = finding(v, "NEW_CHECKPOINT_FOR_KNOWN_QUERY")
    assert new.severity == "BLOCK" and new.numbers["previous_checkpoint"].endswith("orders-v1")
    assert v2.run(starting_offsets="latest").ok
    cmp = v2.compare()
    assert oc.announced(v, "skipped") == oc.missing_by_partition(cmp) and len(cmp.missing) == 150, cmp.summary()
    record("S29 checkpoint path changed on deploy (startingOffsets=latest)", v,
           f"new query from latest; skipped {len(cmp.missing)} records", f"skipped {len(cmp.missing)}")


# --------------------------------------------------------------------------- helpers


def _assert_failed_or_wrong(j: Job, res) -> None:
    """A BLOCK is justified if Spark fails, or if it runs but the sink is not exact."""
    if res.ok:
        assert not j.compare().exact, "Spark restarted cleanly and the sink is exact: BLOCK was not needed"


def _outcome(j: Job, res) -> str:
    if not res.ok:
        return "fails: " + short(res.error)
    return "runs but sink wrong: " + json.dumps(j.compare().summary())


@pytest.fixture(scope="module", autouse=True)
def _write_observed_table():
    yield
    write_observed(OBSERVED, "scenarios-observed")
