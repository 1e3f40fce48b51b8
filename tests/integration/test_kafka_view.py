"""KafkaView against the real local broker (no mocks of Kafka)."""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTP

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.model import BrokerState
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.secrets import redact, scrub
from airflow_kafka_spark.kafka.view import KafkaView
from devstack.broker import free_port
from devstack.produce import produce
from devstack.topics import add_partitions, create_topic, delete_records, delete_topic
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

SECRET = "s3cr3t-Pa55word-do-not-print"


@pytest.fixture
def view(broker):
    with KafkaView({"bootstrap.servers": broker.bootstrap_servers}, timeout=10) as v:
        yield v


def recent_ms(minutes_ago: int = 10) -> int:
    """A pinned timestamp inside the default retention and not in the future."""
    return (int(time.time() * 1000) - minutes_ago * 60_000) // 1000 * 1000


def tp(topic: str, p: int = 0) -> TopicPartition:
    return TopicPartition(topic, p)


# -- broker_state -------------------------------------------------------------------------------------

def test_broker_state_ids_configs_offsets_and_timing(broker, view, topic_name):
    bs = broker.bootstrap_servers
    names = [f"{topic_name}-{i}" for i in range(3)]
    create_topic(bs, names[0], 3, {"retention.ms": "60000"})
    create_topic(bs, names[1], 3, {"cleanup.policy": "compact", "retention.bytes": "1048576"})
    create_topic(bs, names[2], 3)
    for n in names:
        produce(bs, n, 30, partitions=3)   # 10 per partition

    state = view.broker_state([*names, f"{topic_name}-missing", names[0]])
    assert state.cluster_id == broker.cluster_id
    assert state.bootstrap_servers == bs
    assert list(state.topics) == names
    assert state.missing_topics == [f"{topic_name}-missing"]
    assert all(t.partitions == 3 and t.topic_id for t in state.topics.values())
    assert len({t.topic_id for t in state.topics.values()}) == 3
    t0, t1, t2 = (state.topics[n] for n in names)
    assert (t0.retention_ms, t0.retention_bytes, t0.cleanup_policy) == (60000, -1, "delete")
    assert (t1.retention_bytes, t1.cleanup_policy) == (1048576, "compact")
    assert t2.retention_ms == 7 * 24 * 3600 * 1000   # broker default shows through
    assert state.earliest == {TopicPartition(n, p): 0 for n in names for p in range(3)}
    assert state.latest == {TopicPartition(n, p): 10 for n in names for p in range(3)}
    assert state.partitions == sorted(state.latest)
    assert state.resampled == [] and abs(state.sampled_at_ms - time.time() * 1000) < 10_000

    timings = []
    for _ in range(7):
        started = time.perf_counter()
        view.broker_state(names)
        timings.append(time.perf_counter() - started)
    fresh_started = time.perf_counter()
    with KafkaView({"bootstrap.servers": bs}, timeout=10) as fresh:
        fresh.broker_state(names)
    cold = time.perf_counter() - fresh_started
    print(f"\nbroker_state 3 topics x 3 partitions: warm median {statistics.median(timings) * 1000:.1f} ms "
          f"(min {min(timings) * 1000:.1f}, max {max(timings) * 1000:.1f}), "
          f"cold (new client) {cold * 1000:.1f} ms")
    assert statistics.median(timings) < 2.0


def test_empty_and_all_missing(view, topic_name):
    state = view.broker_state([topic_name])
    assert state.topics == {} and state.missing_topics == [topic_name]
    assert state.earliest == {} and state.latest == {}
    assert view.broker_state([]).cluster_id


def test_topic_id_changes_after_delete_and_recreate(broker, view, topic_name):
    """S02/S03: same name, new incarnation. The same view (and client) must not serve stale metadata."""
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    produce(bs, topic_name, 50)
    before = view.broker_state([topic_name])
    checkpoint = {tp(topic_name): 50}

    delete_topic(bs, topic_name)
    gone = view.broker_state([topic_name])
    assert gone.missing_topics == [topic_name] and gone.topics == {}

    create_topic(bs, topic_name, 1)
    produce(bs, topic_name, 20)
    after = view.broker_state([topic_name])
    assert after.topics[topic_name].topic_id != before.topics[topic_name].topic_id
    assert after.latest == {tp(topic_name): 20}

    # Against the previous state: the topic id changed, so a lower end offset is expected, not re-read.
    assert view.resample_if_regressed(before, after, attempts=2, delay=0.05).resampled == []
    # Against bare checkpoint offsets: re-read, and the regression is persistent (S02 → BLOCK upstream).
    started = time.monotonic()
    confirmed = view.broker_state([topic_name], reference=checkpoint, attempts=2, delay=0.1)
    assert time.monotonic() - started >= 0.2
    assert confirmed.resampled == [tp(topic_name)]
    assert confirmed.latest_samples == {tp(topic_name): (20, 20, 20)}
    assert confirmed.still_regressed(checkpoint) == [tp(topic_name)]


def test_earliest_moves_after_delete_records(broker, view, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 40, partitions=2)
    delete_records(bs, topic_name, {0: 15})
    state = view.broker_state([topic_name])
    assert state.earliest == {tp(topic_name, 0): 15, tp(topic_name, 1): 0}
    assert state.latest == {tp(topic_name, 0): 20, tp(topic_name, 1): 20}
    assert view.earliest_offsets([tp(topic_name, 0)]) == {tp(topic_name, 0): 15}
    # records below the log start are gone; "at or after" starts at the log start
    assert view.record_timestamp(tp(topic_name, 0), 3) is None
    assert view.first_record_at_or_after(tp(topic_name, 0), 3)[0] == 15


def test_partition_count_after_add_partitions(broker, view, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 10, partitions=2)
    before = view.broker_state([topic_name])
    add_partitions(bs, topic_name, 4)
    after = view.broker_state([topic_name])
    assert (before.topics[topic_name].partitions, after.topics[topic_name].partitions) == (2, 4)
    assert after.topics[topic_name].topic_id == before.topics[topic_name].topic_id
    assert after.earliest[tp(topic_name, 3)] == 0 and after.latest[tp(topic_name, 3)] == 0
    assert len(after.latest) == 4


# -- S26 re-sampling ----------------------------------------------------------------------------------

class RegressingView(KafkaView):
    """The admin-client seam: the first ``bad_reads`` latest reads of a partition come back low."""

    def __init__(self, *args, bad_reads: int, regressed_to: int, **kw):
        super().__init__(*args, **kw)
        self.bad_reads = bad_reads
        self.regressed_to = regressed_to
        self.reads = 0

    def latest_offsets(self, tps):
        real = super().latest_offsets(tps)
        self.reads += 1
        if self.reads <= self.bad_reads:
            return {t: min(o, self.regressed_to) for t, o in real.items()}
        return real


def test_transient_regression_heals_on_resample(broker, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 100, partitions=2)
    reference = {tp(topic_name, 0): 50, tp(topic_name, 1): 50}
    with RegressingView({"bootstrap.servers": bs}, timeout=10, bad_reads=1, regressed_to=7) as v:
        assert v.confirm_latest(list(reference), reference, attempts=3, delay=0.05) == {
            tp(topic_name, 0): 50, tp(topic_name, 1): 50}
        assert v.reads == 2   # one bad sample, one good re-read, then stop

    # A state whose first sample was regressed (as seen mid leader-change) heals against the real broker.
    with KafkaView({"bootstrap.servers": bs}, timeout=10) as v:
        real = v.broker_state([topic_name])
        regressed = dataclasses.replace(real, latest={t: 7 for t in real.latest})
        healed = v.resample_if_regressed(reference, regressed, attempts=3, delay=0.05)
        assert healed.latest == real.latest
        assert healed.resampled == sorted(reference)
        assert healed.latest_samples == {t: (7, 50) for t in reference}
        assert healed.still_regressed(reference) == []
        # previous BrokerState as the reference works the same way
        assert v.resample_if_regressed(real, regressed, delay=0.01).latest == real.latest


def test_persistent_regression_is_reported_after_all_attempts(broker, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    produce(bs, topic_name, 10)
    reference = {tp(topic_name): 40, tp("other-topic", 0): 5}   # partitions not asked for are ignored
    with RegressingView({"bootstrap.servers": bs}, timeout=10, bad_reads=99, regressed_to=3) as v:
        got = v.confirm_latest([tp(topic_name)], reference, attempts=3, delay=0.01)
        assert got == {tp(topic_name): 3} and v.reads == 4


# -- consumer groups ----------------------------------------------------------------------------------

def test_group_offsets_and_commit(broker, view, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 20, partitions=2)
    group = f"{topic_name}-dstream"
    assert view.group_offsets(group) == {}

    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[KTP(topic_name, 0, 7), KTP(topic_name, 1, 3)], asynchronous=False)
        assert view.group_offsets(group) == {tp(topic_name, 0): 7, tp(topic_name, 1): 3}
        assert view.group_offsets(group, topics=["unrelated"]) == {}
        info = view.describe_group(group)
        assert info.exists and len(info.members) == 1
        with pytest.raises(UserError, match="active member"):
            view.commit_group_offsets(group, {tp(topic_name, 0): 1})
    finally:
        consumer.close()

    view.commit_group_offsets(group, {tp(topic_name, 0): 9, tp(topic_name, 1): 10})
    assert view.group_offsets(group, topics=[topic_name]) == {tp(topic_name, 0): 9, tp(topic_name, 1): 10}
    shadow = f"{topic_name}-shadow"     # a shadow group is created by the first commit
    view.commit_group_offsets(shadow, {tp(topic_name, 1): 4})
    assert view.group_offsets(shadow) == {tp(topic_name, 1): 4}
    with pytest.raises(UserError, match="negative"):
        view.commit_group_offsets(shadow, {tp(topic_name, 0): -1})


# -- single records -----------------------------------------------------------------------------------

def test_record_timestamp_is_the_produced_one(broker, view, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    pinned = recent_ms(10)
    acked = produce(bs, topic_name, 5, timestamp_ms=pinned)
    later = produce(bs, topic_name, 1, start_id=5, timestamp_ms=pinned + 60_000)
    assert view.record_timestamp(tp(topic_name), 2) == pinned == acked[2].timestamp_ms
    assert view.record_timestamp(tp(topic_name), 5) == pinned + 60_000 == later[0].timestamp_ms
    assert view.record_timestamp(tp(topic_name), 6) is None           # = log end
    assert view.record_timestamp(tp(topic_name), 1000) is None
    assert view.record_timestamp(tp(f"{topic_name}-nope"), 0) is None
    assert view.first_record_at_or_after(tp(topic_name), 4) == (4, pinned)
    assert view.last_record_before(tp(topic_name), 6) == (5, pinned + 60_000)
    assert view.last_record_before(tp(topic_name), 0) is None
    # reading must not create or commit a consumer group
    groups = broker.consumer_groups("--list")
    assert "airflow-kafka-spark-probe" not in groups


def test_transactional_topic_markers(broker, view, topic_name):
    """S25: after a transaction the log end is one past the commit marker, so C-1 is not a record."""
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    acked = produce(bs, topic_name, 5, transactional_id=f"{topic_name}-tx")
    last_data = acked[-1].offset
    assert last_data == 4
    # commit_transaction() returns once the coordinator logged the decision; the marker itself is
    # written to the partition asynchronously, so the log end reaches last+2 a moment later.
    wait_until(lambda: view.latest_offsets([tp(topic_name)])[tp(topic_name)] == last_data + 2,
               timeout=10, interval=0.05, what="the commit marker")
    state = view.broker_state([topic_name])
    latest = state.latest[tp(topic_name)]
    assert latest == last_data + 2                                   # data 0..4, marker at 5
    marker = latest - 1
    assert view.record_timestamp(tp(topic_name), marker) is None
    assert view.first_record_at_or_after(tp(topic_name), marker) is None   # only the marker is left
    assert view.last_record_before(tp(topic_name), latest) == (last_data, acked[-1].timestamp_ms)

    more = produce(bs, topic_name, 3, start_id=5, transactional_id=f"{topic_name}-tx")
    assert more[0].offset == marker + 1
    assert view.first_record_at_or_after(tp(topic_name), marker) == (more[0].offset, more[0].timestamp_ms)
    assert view.record_timestamp(tp(topic_name), marker) is None
    wait_until(lambda: view.latest_offsets([tp(topic_name)]) == {tp(topic_name): more[-1].offset + 2},
               timeout=10, interval=0.05, what="the second commit marker")


def test_last_record_before_crosses_a_wide_gap(broker, view, topic_name):
    """Many aborted-free transactions leave a marker every record: the window must widen past them."""
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 1)
    first = produce(bs, topic_name, 1, transactional_id=f"{topic_name}-tx")
    for i in range(12):   # 12 one-record transactions: record, marker, record, marker, ...
        produce(bs, topic_name, 1, start_id=i + 1, transactional_id=f"{topic_name}-tx")
    end = wait_until(lambda: view.latest_offsets([tp(topic_name)])[tp(topic_name)] == 26,
                     timeout=10, interval=0.05, what="the last commit marker") and 26
    assert view.last_record_before(tp(topic_name), end)[0] == 24
    assert view.last_record_before(tp(topic_name), 1) == (0, first[0].timestamp_ms)


def test_offsets_for_time(broker, view, topic_name):
    bs = broker.bootstrap_servers
    create_topic(bs, topic_name, 2)
    t1, t2 = recent_ms(30), recent_ms(20)
    produce(bs, topic_name, 10, partitions=2, timestamp_ms=t1)              # offsets 0..4 per partition
    produce(bs, topic_name, 10, partitions=2, start_id=10, timestamp_ms=t2)  # offsets 5..9
    assert view.offsets_for_time([topic_name], t1) == {tp(topic_name, 0): 0, tp(topic_name, 1): 0}
    assert view.offsets_for_time([topic_name], t1 + 1) == {tp(topic_name, 0): 5, tp(topic_name, 1): 5}
    future = int(time.time() * 1000) + 3_600_000
    assert view.offsets_for_time([topic_name], future) == {tp(topic_name, 0): 10, tp(topic_name, 1): 10}
    with pytest.raises(UserError, match="do not exist"):
        view.offsets_for_time([topic_name, f"{topic_name}-nope"], t1)


# -- errors and secrets -------------------------------------------------------------------------------

def test_unreachable_broker_fails_fast_with_one_line(capfd, caplog):
    port = free_port()   # bound and released: nothing listens there
    servers = f"127.0.0.1:{port}"
    caplog.set_level(logging.DEBUG)
    v = KafkaView({"bootstrap.servers": servers, "sasl.password": SECRET}, timeout=3)
    started = time.monotonic()
    with pytest.raises(UserError) as info:
        v.broker_state(["anything"])
    elapsed = time.monotonic() - started
    assert elapsed < 3 + 2, elapsed
    msg = str(info.value)
    assert servers in msg and "not reachable" in msg and "bootstrap.servers" in msg
    assert "\n" not in msg and SECRET not in msg
    assert info.value.__cause__ is None and info.value.__suppress_context__
    # librdkafka's per-retry lines go to logging (debug after the first), never raw to stderr
    out = capfd.readouterr()
    assert "Connection refused" not in out.err
    assert SECRET not in caplog.text
    loud = [r for r in caplog.records if r.levelno >= logging.INFO and "librdkafka" in r.name]
    assert len(loud) <= 3
    v.close()


def test_unreachable_for_every_method():
    v = KafkaView({"bootstrap.servers": f"127.0.0.1:{free_port()}"}, timeout=1)
    for call in (lambda: v.group_offsets("g"), lambda: v.cluster_id(),
                 lambda: v.latest_offsets([tp("t")]), lambda: v.record_timestamp(tp("t"), 0)):
        started = time.monotonic()
        with pytest.raises(UserError, match="not reachable"):
            call()
        assert time.monotonic() - started < 1 + 2


def test_secrets_never_appear_in_errors_or_repr(broker, caplog):
    caplog.set_level(logging.DEBUG)
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="u" password="{SECRET}";')
    conf = {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "svc-user", "sasl.password": SECRET}
    # SASL against a PLAINTEXT listener: the handshake fails; the message must name servers, not secrets.
    v = KafkaView(conf, timeout=2)
    with pytest.raises(UserError) as info:
        v.broker_state(["t"])
    assert SECRET not in str(info.value) and broker.bootstrap_servers in str(info.value)
    assert SECRET not in repr(v) and "svc-user" in repr(v)
    assert SECRET not in caplog.text
    v.close()

    # librdkafka itself quotes invalid values in its messages: they are scrubbed.
    bad = {"bootstrap.servers": broker.bootstrap_servers, "sasl.oauthbearer.method": SECRET}
    with pytest.raises(UserError) as info:
        KafkaView(bad, timeout=2).cluster_id()
    assert "invalid Kafka client configuration" in str(info.value) and SECRET not in str(info.value)
    assert "***" in str(info.value)

    assert redact({"sasl.password": SECRET, "ssl.key.password": SECRET,
                   "sasl.oauthbearer.client.secret": SECRET, "kafka.sasl.jaas.config": jaas,
                   "bootstrap.servers": "b:1", "sasl.username": "u"}) == {
        "sasl.password": "***", "ssl.key.password": "***", "sasl.oauthbearer.client.secret": "***",
        "kafka.sasl.jaas.config": "***", "bootstrap.servers": "b:1", "sasl.username": "u"}
    assert scrub(f"login failed for {SECRET}", {"kafka.sasl.jaas.config": jaas}) == "login failed for ***"


def test_missing_bootstrap_servers_is_a_user_error():
    with pytest.raises(UserError, match=r"bootstrap\.servers"):
        KafkaView({"security.protocol": "SSL"})


def test_broker_state_is_frozen_contract():
    fields = [f.name for f in dataclasses.fields(BrokerState)]
    assert fields[:8] == ["bootstrap_servers", "cluster_id", "topics", "missing_topics", "earliest", "latest",
                          "sampled_at_ms", "resampled"]


def test_one_view_outlives_a_broker_restart_without_crashing_the_process(broker, topic_name):
    """Every loop over one view (the DStream gate, ``aks lag --watch``, the mirror listener inside the
    Spark driver, a metrics scrape) keeps calling it while a broker restarts. librdkafka 2.x aborted the
    whole process (``rd_kafka_enq_once_del_source_return: eonce->refcnt > 0``) on the call after an
    admin request that was abandoned as unreachable; the view now drops that client."""
    from tests.support.proxy import LateProxy

    create_topic(broker.bootstrap_servers, topic_name, 2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic_name})
    consumer.commit(offsets=[KTP(topic_name, 0, 3), KTP(topic_name, 1, 4)], asynchronous=False)
    consumer.close()
    with LateProxy(broker.bootstrap_servers, delay_s=12.0) as proxy, \
            KafkaView({"bootstrap.servers": f"127.0.0.1:{proxy.port}"}, timeout=2.0) as view:
        failures = 0
        started = time.monotonic()
        while time.monotonic() - started < 60:
            try:
                got = view.group_offsets(topic_name, [topic_name])
                break
            except UserError as exc:
                assert "not reachable" in str(exc)
                failures += 1
        else:
            pytest.fail("the broker behind the proxy never answered")
    assert failures >= 3, failures         # several abandoned requests on the same view, then an answer
    assert got == {TopicPartition(topic_name, 0): 3, TopicPartition(topic_name, 1): 4}
