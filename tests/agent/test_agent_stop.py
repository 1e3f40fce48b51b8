"""Spark is the oracle: the agent stops a user's unchanged application on a batch boundary.

Each test runs a users'-style application (tests/support/user_jobs: it never heard of this product)
with the real ``spark-submit`` on a local[2] master against the session broker, while a producer
keeps writing to a 3-partition topic. The only thing the product adds is ``agent_conf``'s Spark confs.
A stop is "on a boundary" when the checkpoint's newest ``offsets/N`` has its ``commits/N`` - read
from Spark's files, not from the agent - and the driver must end by itself (exit 0). After several
stop/restart cycles on one checkpoint, the sink is compared with what Kafka acknowledged, record by
record, up to the checkpoint's committed position. The last test is the contrast: the same
application without the agent, stopped by SIGTERM while a batch runs, leaves ``offsets/N``
without ``commits/N`` (the batch the next run replays).
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from airflow_kafka_spark import agent
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.view import KafkaView
from devstack import agent_build, user_jobs
from devstack.oracle import compare, read_sink
from devstack.spark_runtimes import SparkRuntime, runtime
from devstack.topics import create_topic
from tests.support import agent_harness as h
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.userjobs]

START_TIMEOUT = 150  # a spark-submit start on 2 shared cores can take a minute
STOP_TIMEOUT = 60  # marker -> driver gone


@pytest.fixture(scope="module", autouse=True)
def _agent_jars() -> None:
    agent_build.build_all()  # a no-op when bin/setup built them for these sources


@dataclass
class Tally:
    """What the cycles measured (printed for the record; the asserts are in the test)."""

    stops: int = 0
    cut: int = 0
    latencies: list[float] = field(default_factory=list)
    waited_for_batch: int = 0
    held_at_gate: int = 0
    reports: list[dict] = field(default_factory=list)


def _stop_cycle(launch, ck: Path, marker: Path, report: Path, log: Path, tally: Tally, rng: random.Random,
                held: bool = False) -> None:
    """One run: start, let at least one batch of this run commit under load, touch the marker, judge.

    ``held``: the agent's test hook delays ``stop()`` after the query is between batches, so the
    stream thread reaches the closed gate first and is released by the interrupt: the one path a
    normal stop rarely takes, made certain here.
    """
    marker.unlink(missing_ok=True)
    report.unlink(missing_ok=True)
    before = h.newest(ck, "commits")
    driver = launch(log, {agent.PREFIX + "testDelayStopMs": "3000"} if held else {})
    try:
        wait_until(lambda: driver.proc.poll() is not None or h.newest(ck, "commits") > before,
                   timeout=START_TIMEOUT, interval=0.2, what="a batch of this run to commit")
        assert driver.proc.poll() is None, f"the application ended before the stop:\n{driver.text()[-3000:]}"
        time.sleep(rng.uniform(0.0, 1.2))  # land the stop anywhere in the batch cycle
        marker.touch()
        t0 = time.monotonic()
        rc = driver.wait(STOP_TIMEOUT)
        latency = time.monotonic() - t0
        assert rc is not None, f"the driver did not end by itself within {STOP_TIMEOUT}s of the marker"
        assert rc == 0, f"the driver exited {rc}:\n{driver.text()[-3000:]}"
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    offsets, commits = h.boundary(ck)
    doc = h.read_report(report)
    tally.stops += 1
    tally.cut += offsets != commits
    tally.latencies.append(latency)
    stopped = [q for q in doc["queries"] if q.get("status") == "stopped_by_agent"]
    assert len(stopped) == 1, f"the report names one query stopped by the agent: {doc}"
    [q] = stopped
    tally.waited_for_batch += q["stop"]["waited_for_batch_ms"] > 0
    tally.held_at_gate += q["stop"]["held_before_batch"] is not None
    tally.reports.append(doc)
    assert offsets == commits, f"cut batch: offsets/{offsets} without commits/{offsets} (commits/{commits})"
    if held:
        assert q["stop"]["how"] == "held_at_gate", q["stop"]
        assert q["stop"]["held_before_batch"] == commits + 1, q["stop"]
        assert q["exception"] is None and q["stop"]["query_failed"] is False, q
        assert "InterruptedIOException" not in driver.text(), "the held batch ended as an error"
    assert doc["stop"]["stopped_on_boundary"] is True, doc["stop"]
    assert q["stop"]["last_committed_batch"] == commits
    assert q["checkpoint"].endswith(str(ck))


def _run_cycles(broker, tmp_path: Path, topic: str, rt: SparkRuntime, cycles: int, make_launch,
                mirror_group: str | None = None) -> Tally:
    """``cycles`` stop/restart runs on one checkpoint under continuous load, then the oracle.

    ``mirror_group``: the agent also mirrors to that shadow group, which must hold the checkpoint's
    committed position as soon as each run's driver is gone (tests/agent/test_mirror_agent.py has the rest).
    The mirror's throttle is set to 10 minutes: a run's first commit goes through, every later one
    waits, so a final batch past the run's first progress reaches the group only by the flush on
    query termination.

    No drain run after the load: the sink is compared with the acknowledged records *below the
    checkpoint's committed position* (where the next run resumes) - each exactly once - and none
    at or above it may be in the sink (a cut batch's partial output would be there).
    """
    create_topic(broker.bootstrap_servers, topic, 3)
    ck, out, marker = tmp_path / "ck", tmp_path / "out", tmp_path / "stop.marker"
    report = Path(agent.report_path(str(ck)))
    conf = agent.agent_conf(str(marker), str(ck), str(report), rt.version, {}, mirror_group=mirror_group,
                            mirror_kafka={"bootstrap.servers": broker.bootstrap_servers})
    if mirror_group:
        conf[agent.MIRROR_MIN_INTERVAL_MS] = "600000"
    launch = make_launch(ck, out, conf)
    mirrored, by_flush = [], 0
    rng = random.Random(25)
    tally = Tally()
    producer = h.ContinuousProducer(broker.bootstrap_servers, topic, 3, rate=100).start()
    try:
        for i in range(cycles):
            _stop_cycle(launch, ck, marker, report, tmp_path / f"driver-{i}.log", tally, rng, held=i == 1)
            if mirror_group:
                position = read_checkpoint(str(ck)).latest_committed.kafka_offsets
                with KafkaView({"bootstrap.servers": broker.bootstrap_servers}, timeout=15) as view:
                    assert view.group_offsets(mirror_group) == position, f"run {i}: the group is not at {position}"
                mirrored.append(sum(position.values()))
                [q] = [q for q in tally.reports[-1]["queries"] if q.get("status") == "stopped_by_agent"]
                by_flush += h.newest(ck, "commits") > q["first_progress"]["batch_id"]
    finally:
        produced = producer.stop()
    position = h.committed_position(ck, topic)
    below = [r for r in produced if r.offset < position.get(r.partition, 0)]
    cmp = compare(below, read_sink(out, "json"))
    print(f"\n[agent] {rt.version}: {tally.stops} stops, {tally.cut} cut, driver gone after the marker (s) "
          f"{[round(x, 2) for x in tally.latencies]}, agent stop durations (ms) "
          f"{[r['stop']['duration_ms'] for r in tally.reports]}, waited for a running batch "
          f"{tally.waited_for_batch}, held at the gate {tally.held_at_gate}; acknowledged {len(produced)}, "
          f"below the committed position {len(below)}: sink {cmp.summary()}"
          + (f"; group {mirror_group} == checkpoint after each stop, records {mirrored}, {by_flush} of them "
             "reachable only by the termination flush" if mirror_group else ""))
    assert not mirror_group or by_flush >= 1, "no run proved the flush: every final batch was its run's first"
    assert sum(end_offsets(broker.bootstrap_servers, topic, 3).values()) == len(produced)
    assert len(below) > len(produced) / 2, "the runs consumed most of what was produced"
    assert cmp.missing == [] and cmp.duplicated == {} and cmp.unexpected == [], cmp.summary()
    assert tally.cut == 0
    return tally


def test_pyspark_job_stops_on_a_boundary_under_load_spark4(broker, tmp_path, topic_name):
    rt = runtime("default")

    def make_launch(ck, out, conf):
        args = ["--brokers", broker.bootstrap_servers, "--topic", topic_name, "--checkpoint", str(ck),
                "--out", str(out)]
        return lambda log, extra: h.submit(rt, h.PY_JOB, args, log, conf={**conf, **extra})

    # 3 cycles here (5 when measured for docs/agent.md); the DAG tests of the users' jobs stop with the agent too
    tally = _run_cycles(broker, tmp_path, topic_name, rt, 3, make_launch)
    first = tally.reports[0]["queries"][0]
    assert first["batch0"]["initial_offsets"], "batch 0's starting offsets are kept for the health gate"


@pytest.mark.spark35
def test_java_job_stops_on_a_boundary_under_load_spark35(broker, tmp_path, topic_name):
    rt = runtime("3.5")
    jar = user_jobs.build("3.5", "v1")

    def make_launch(ck, out, conf):
        props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=broker.bootstrap_servers,
                                           topic=topic_name, checkpoint=ck, output=out)
        return lambda log, extra: h.submit(rt, jar, [str(props)], log, conf={**conf, **extra},
                                           main_class=user_jobs.MAIN_CLASS, jars=rt.kafka_jars())

    _run_cycles(broker, tmp_path, topic_name, rt, 2, make_launch, mirror_group=f"aks-mirror-{topic_name}")


@contextlib.contextmanager
def _job_without_agent(broker, tmp_path: Path, topic: str, batches: int):
    """The users' PySpark job run unchanged (no agent) under load, once ``batches`` batches committed:
    (its driver, its checkpoint); the load stops and the driver is killed on the way out."""
    rt = runtime("default")
    create_topic(broker.bootstrap_servers, topic, 3)
    ck, out = tmp_path / "ck", tmp_path / "out"
    producer = h.ContinuousProducer(broker.bootstrap_servers, topic, 3, rate=150).start()
    args = ["--brokers", broker.bootstrap_servers, "--topic", topic, "--checkpoint", str(ck), "--out", str(out)]
    driver = h.submit(rt, h.PY_JOB, args, tmp_path / "driver.log")
    try:
        wait_until(lambda: driver.proc.poll() is not None or h.newest(ck, "commits") >= batches - 1,
                   timeout=START_TIMEOUT, interval=0.2, what=f"{batches} committed batches")
        assert driver.proc.poll() is None, driver.text()[-3000:]
        yield driver, ck
    finally:
        producer.stop()
        if driver.proc.poll() is None:
            driver.kill()


def test_without_the_agent_a_stop_cuts_the_running_batch(broker, tmp_path, topic_name):
    """The contrast: no agent, SIGTERM while a batch runs (as a stop that gave up waiting would)."""
    with _job_without_agent(broker, tmp_path, topic_name, 2) as (driver, ck):
        # the moment a batch is planned (offsets/N written, commits/N not yet), stop the driver
        wait_until(lambda: h.newest(ck, "offsets") > h.newest(ck, "commits"), timeout=30, interval=0.01,
                   what="a batch in flight")
        driver.signal(signal.SIGTERM)
        driver.wait(STOP_TIMEOUT)
    offsets, commits = h.boundary(ck)
    print(f"\n[agent] without the agent: offsets/{offsets}, commits/{commits}")
    assert offsets == commits + 1, f"expected a cut batch, found offsets/{offsets} commits/{commits}"


def test_without_the_agent_the_stop_kills_just_after_a_commit(broker, tmp_path, topic_name):
    """A job that watches no marker (``integration: none``) is killed at once; the product's stop kills it
    just after its next commit, read from Spark's own ``commits/`` (runtime/stop_align.py)."""
    import logging
    import socket

    from airflow_kafka_spark.lifecycle.events import DriverKind
    from airflow_kafka_spark.lifecycle.model import DriverInfo
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.registry.model import Integration, JobSpec
    from airflow_kafka_spark.runtime import start_stop

    spec = JobSpec(name="orders", application=str(h.PY_JOB), topics=(topic_name,), checkpoint=str(tmp_path / "ck"),
                   backup_root=str(tmp_path / "backups"), stop_marker=str(tmp_path / "stop.marker"),
                   integration=Integration.NONE)
    with _job_without_agent(broker, tmp_path, topic_name, 4) as (driver, ck):
        record = LifecycleRecord.load_or_create(spec.name, spec.checkpoint)
        record.driver = DriverInfo(kind=DriverKind.LOCAL.value, id=str(driver.proc.pid), host=socket.gethostname(),
                                   started_at=int(time.time() * 1000))
        record.save()
        stopped = start_stop.stop_job(spec, target=lambda: None, actor="test", log=logging.getLogger("test"))
        driver.wait(STOP_TIMEOUT)
    a = stopped["alignment"]
    committed_at = (ck / "commits" / str(a["after_batch"])).stat().st_mtime
    print(f"\n[agent] without the agent, the stop's kill: {a}, {a['asked_at'] - committed_at:.3f}s after "
          f"commits/{a['after_batch']}; outcome {stopped['outcome']}, boundary {h.boundary(ck)}")
    assert a["after_batch"] == a["found_batch"] + 1 and a["waited_s"] <= a["bound_s"] + 1, a
    assert 0 <= a["asked_at"] - committed_at < 0.6, (a, committed_at)
    assert stopped["killed"] and stopped["last_committed"] == a["after_batch"], stopped
    assert stopped["outcome"] in ("KILLED", "STOPPED_MID_BATCH") and not Path(spec.stop_marker).exists()
