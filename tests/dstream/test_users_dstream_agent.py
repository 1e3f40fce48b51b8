"""A user's DStream jar, unchanged, stopped gracefully by the agent on Spark 4.2 (issue 25 item 4).

``com.example.payments.PaymentsStream`` (tests/support/user_jobs/payments-dstream) has its own
``main`` and ``.properties`` file, reads Kafka with ``KafkaUtils.createDirectStream`` in its own
consumer group and ``commitAsync``s each batch's ranges after writing them: it has never heard of this
product. Its registry entry says ``kind: dstream`` and nothing about an integration (the agent is the
default). Built with ``spark-streaming-kafka-0-10_2.13:4.2.0`` and submitted by the product's own
submit (``runtime.start_stop``, the Spark provider's command) on Spark 4.2's ``spark-submit``, local
master, the real broker, records produced throughout:

1. start; the stop marker → the agent stops the StreamingContext gracefully; the driver ends by
   itself; the report says every submitted batch completed (Spark's ``lastProcessedBatch`` agrees)
   and Spark's output ends exactly at the processed end the report gives;
2. the restart plan announces the replay from that report (exact): the group trails the job by its
   last batch (``commitAsync`` is sent while the next batch is generated);
3. restart; the new driver's first batch starts at the group's commits (the agent's report says
   where), the records Spark writes a second time are exactly the announced replay, and after the
   second stop the output holds every acknowledged record: 0 missing, nothing unexpected.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.registry.model import Integration
from airflow_kafka_spark.runtime import drivers, start_stop
from airflow_kafka_spark.runtime.dstream import (
    plan_dstream_restart,
    processed_end_from_log,
    processed_end_of_last_driver,
)
from devstack import spark_runtimes, topics
from tests.airflow.test_operators import SPARK_LOCAL_CONN
from tests.dstream import users_dstream as ud
from tests.support.agent_harness import ContinuousProducer
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.dstream, pytest.mark.userjobs, pytest.mark.integration]

log = logging.getLogger("test")
START_TIMEOUT = 240   # spark-submit on 2 cores shared with other Spark runs


def _submit(spec, bs: str, target, holder: str) -> dict:
    return start_stop.submit_job(spec, kafka_config={"bootstrap.servers": bs}, target=target,
                                 by=start_stop.Submitter(actor="test", holder=holder), log=log)


def _wait_batches(spec, n: int, *, with_records: bool, not_app: str | None = None) -> dict:
    """Until the running driver's report counts ``n`` completed batches (the last one with records);
    ``not_app``: the previous driver's application id, whose report is still there until the new one starts."""
    def done() -> dict | None:
        rec = LifecycleRecord.load(spec.checkpoint)
        assert rec is not None and drivers.local_alive(rec.driver), "the driver died"
        doc = ud.report(spec)
        ds = ud.dstream(doc)
        last = ds.get("last_completed_batch") or {}
        ok = (ds.get("batches_completed") or 0) >= n and (last.get("records", 0) > 0 or not with_records)
        ok = ok and doc.get("application_id") not in (None, not_app)
        return doc if ok else None
    return wait_until(done, timeout=START_TIMEOUT, interval=0.5, what=f"{n} completed batches")


def test_a_users_dstream_jar_on_spark_42_stops_gracefully_and_restarts_exactly(broker, tmp_path, monkeypatch):
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    rt = spark_runtimes.runtime("default")
    bs = broker.bootstrap_servers
    topic = f"payments42-{os.getpid()}"
    topics.create_topic(bs, topic, ud.PARTITIONS)
    staged = ud.stage(tmp_path, "default", bootstrap=bs, topic=topic, spark_version="4.2")
    monkeypatch.setenv("PATH", os.pathsep.join([str(rt.python.parent), os.environ.get("PATH", "")]))
    monkeypatch.setenv("SPARK_HOME", str(rt.home))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    spec = staged.spec()
    assert spec.integration is Integration.AGENT   # the default for kind: dstream
    target = spark_target(spec)
    producer = ContinuousProducer(bs, topic, ud.PARTITIONS, rate=100).start()
    t0 = time.monotonic()
    try:
        first = _submit(spec, bs, target, "test/first")
        assert "aks-agent-spark4_2.13.jar" in first["command"] and "aks.agent.AgentPlugin" in first["command"]
        assert f"--class {spec.main_class}" in first["command"] and first["command"].endswith(str(staged.props))
        _wait_batches(spec, 3, with_records=True)

        stop = start_stop.stop_job(spec, target=lambda: target, actor="test", log=log)
        doc = ud.report(spec)
        assert doc["spark_version"] == rt.version and doc["application_name"] == "payments-dstream"
        ds_stop = ud.check_graceful_stop(stop, doc, staged.output)
        assert ud.check_stop_witness(stop) == {(tp.topic, tp.partition): o for tp, o in ud.processed_end(doc).items()}
        ds = ud.dstream(doc)

        view = KafkaView({"bootstrap.servers": bs})
        try:
            processed = processed_end_of_last_driver(LifecycleRecord.load(spec.checkpoint))
            assert processed == ud.processed_end(doc)         # the plan reads the agent's report
            # where a local driver at INFO also has Spark's KafkaRDD lines (the older source), both agree
            from_log = processed_end_from_log(Path(first["log_path"]).read_text(errors="replace"))
            assert not from_log or from_log == processed, (from_log, processed)
            plan = plan_dstream_restart(spec, spec.application, kafka=view, processed_end=processed)
        finally:
            view.close()
        committed = dict(plan.group_offsets or {})
        assert plan.replay_exact and plan.duplicates_expected == 0 and not plan.blocked
        announced = plan.records_to_replay
        assert announced == sum(processed[tp] - committed[tp] for tp in processed) > 0, (processed, committed)
        first_written = ud.written(staged.output)

        second = _submit(spec, bs, target, "test/second")
        at_submit = [[tp.topic, tp.partition, o] for tp, o in sorted(committed.items())]
        assert second["dstream"]["group_offsets"] == at_submit   # the gate's baseline: nothing moved meanwhile
        doc2 = _wait_batches(spec, 2, with_records=True, not_app=doc["application_id"])
        # the restarted job's first batch starts where the group's commits are
        assert ud.ranges_end(ud.dstream(doc2)["first_batch"], "from") == committed
        time.sleep(4)
        produced = producer.stop()
        acked = {(r.topic, r.partition, r.offset) for r in produced}
        ud.wait_group_caught_up(bs, spec, produced, START_TIMEOUT)
        stop2 = start_stop.stop_job(spec, target=lambda: target, actor="test", log=log)
        doc2 = ud.report(spec)
        ud.check_graceful_stop(stop2, doc2, staged.output)

        out = ud.written(staged.output)
        missing, unexpected = acked - set(out), set(out) - acked
        rewritten = {k: n - 1 for k, n in out.items() if n > 1}
        assert not missing and not unexpected, (len(missing), len(unexpected))
        # what Spark wrote twice is exactly the announced replay: the last batch of the first run
        assert sum(rewritten.values()) == announced, (sum(rewritten.values()), announced)
        assert all(first_written[k] == 1 for k in rewritten)
        print(f"\n[spark 4.2] produced {len(acked)}, written {sum(out.values())} ({len(out)} distinct), "
              f"missing 0, re-written {sum(rewritten.values())} = announced {announced}; first stop: last batch "
              f"{ds['last_completed_batch']['time']} ({ds['last_completed_batch']['records']} records), graceful "
              f"stop {ds_stop['stop_call_ms']} ms, marker->exit {stop['waited_s']} s; second stop "
              f"{stop2['waited_s']} s; KafkaRDD log lines agreed: {bool(from_log)}; {time.monotonic() - t0:.0f} s")
    finally:
        producer.stop() if producer._thread.is_alive() else None
        rec = LifecycleRecord.load(spec.checkpoint)
        if rec is not None and rec.driver is not None:
            drivers.kill_local(rec.driver, grace_s=5)
