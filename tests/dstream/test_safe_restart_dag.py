"""``streaming_safe_restart`` manages the DStream reference job through a recompile (issue 12): real Airflow
(``dag.test()`` on the DAG from the dags folder), the real broker, the real job on the Spark 3.5
``spark-submit``, records produced throughout, and both sinks compared record by record with what
Kafka acknowledged.

v1 runs (started by the product's own submit, as a first DAG run would); the registry then names the
v2 jar (a recompile: one more serialized field) and the DAG runs in ``auto``: the group verdict →
graceful stop → backup of the group's offsets and the DStream checkpoint → the checkpoint moves
aside (the recorded build is v1's) → the announced replay (exact: v1's last ranges from Spark's
KafkaRDD log) → submit v2 from the group → health gate on the group's commits. A second run then
deploys v2 with an argument the job refuses (its driver exits at start): the gate fails
(``health_gate_failed`` in the record), the rollback puts the group's offsets and the DStream
checkpoint back from that run's backup and resubmits v2 with its good arguments. The append sink then
holds exactly the duplicates both plans announced, the idempotent sink none, and nothing is missing;
the audit judges the job from its group and finds both backups.
One DAG run, two Spark starts: the whole test is one scenario. Measured on 2 shared cores: 161 s alone
(48 s of it session setup: Airflow DB reset, broker), 349 s with other helpers' Spark running; the DAG
run itself 92-209 s. Runs: 1,790 and 4,410 produced, 0 missing, 30 duplicated = 30 announced (exact).
With the rolled-back run (load 18-20): 383 s; 3,520 produced, 0 missing, 60 duplicated = 30 + 30 announced.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from airflow_kafka_spark.verdict.dstream import jar_digest, read_state
from devstack import dstream_job, topics
from devstack.spark_runtimes import runtime
from tests.airflow.conftest import TIMINGS, airflow_home  # noqa: F401 - Airflow's session fixture
from tests.airflow.test_operators import SPARK_LOCAL_CONN, collect, kafka_conn, write_registry
from tests.dstream.conftest import JOB_TIMEOUT
from tests.dstream.conftest import Sink as JobSink
from tests.dstream.test_safe_path import Producing
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.dstream, pytest.mark.airflow, pytest.mark.integration]

DAG_ID = "streaming_safe_restart"
JOB = "clicks"
GOOD_ARGS = ["--batch-ms", "2000"]


def _install(build: dstream_job.DStreamBuild, data: Path) -> Path:
    """The application jar where the registry allows it (under the data root), as a deploy would put it."""
    target = data / "apps" / build.variant / "dstream-job.jar"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(build.jar, target)
    return target


def test_safe_restart_dag_through_a_recompile(
    broker,
    airflow_home,  # noqa: F811 - the fixture imported above
    dstream_v1,
    dstream_v2,
    topic_name,
    tmp_path,
    monkeypatch,
):
    from airflow.dag_processing.dagbag import DagBag

    from airflow_kafka_spark.airflow_glue.spark import spark_target
    from airflow_kafka_spark.registry.loader import load_registry
    from airflow_kafka_spark.runtime import start_stop

    bs, group = broker.bootstrap_servers, f"g-{topic_name}"
    data = tmp_path / "data"
    data.mkdir()
    registry = tmp_path / "streaming_jobs.yaml"
    v1_jar, v2_jar = _install(dstream_v1, data), _install(dstream_v2, data)
    ck = data / "dstream-checkpoints" / JOB
    sink_root = data / "sinks" / JOB

    def write(jar: Path, args: list[str] = GOOD_ARGS) -> None:
        write_registry(
            registry,
            [
                {
                    "name": JOB,
                    "kind": "dstream",
                    "group": group,
                    "topics": [topic_name],
                    "application": str(jar),
                    "sink": "append",
                    "dstream_checkpoint": str(ck),
                    "application_args": args,
                    "stop_timeout_s": 120,
                    "health_gate": {"min_batches": 2, "timeout_s": float(JOB_TIMEOUT)},
                    "spark_conf": {
                        "spark.jars": ",".join(str(j) for j in dstream_v1.deps),
                        "spark.driver.memory": "768m",
                    },
                }
            ],
        )

    rt = runtime(dstream_job.RUNTIME)  # the job runs on Spark 3.5's spark-submit, found first on PATH
    monkeypatch.setenv("PATH", f"{rt.home / 'bin'}:{rt.env()['PATH']}")
    monkeypatch.setenv("SPARK_HOME", str(rt.home))
    monkeypatch.setenv("AKS_DATA_DIR", str(data))
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(registry))
    monkeypatch.setenv("AKS_HEALTH_GATE_POLL_S", "2")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(bs))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    topics.create_topic(bs, topic_name, partitions=2)
    write(v1_jar)

    producer = Producing(bs, topic_name)
    producer.start()
    spec = load_registry(str(registry)).get(JOB)
    log = logging.getLogger("test")
    v1 = start_stop.submit_job(
        spec,
        kafka_config={"bootstrap.servers": bs},
        target=spark_target(spec),
        by=start_stop.Submitter(actor="test", holder="test"),
        log=log,
    )
    v1_log = Path(v1["log_path"])
    assert v1["dstream"]["build"] == jar_digest(str(v1_jar))  # the submit recorded the build of the checkpoint
    try:
        wait_until(
            lambda: (
                sum(s["records"] for s in dstream_job.statuses(v1_log) if s["event"] == "batch") >= 300
                or not drivers.local_alive(LifecycleRecord.load(spec.checkpoint).driver)
            ),
            timeout=JOB_TIMEOUT,
            interval=0.5,
            what="v1 to process 300 records",
        )
        assert drivers.local_alive(LifecycleRecord.load(spec.checkpoint).driver), v1_log.read_text()[-3000:]
        assert read_state(str(ck)).files, "v1 writes its DStream checkpoint"

        write(v2_jar)  # the recompile: same job, same compatibility_version, another build
        bag = DagBag()
        assert DAG_ID in bag.dags, bag.import_errors
        conf = {
            "job": JOB,
            "mode": "auto",
            "backup_id": None,
            "datetime": None,
            "dry_run": False,
            "accept_data_loss": False,
            "reason": "recompile to v2",
        }
        started = time.perf_counter()
        dr = bag.get_dag(DAG_ID).test(run_conf=conf)
        r = collect(DAG_ID, dr.run_id, dr.state, time.perf_counter() - started)
        TIMINGS["safe restart: DStream recompile"] = r.seconds
        assert r.state == "success", (r.states, r.xcom("finish", "failure"))

        before = r.xcom("validate_before")
        assert before["kind"] == "dstream" and before["move_checkpoint_aside"]
        assert "DSTREAM_CHECKPOINT_OTHER_BUILD" in {f["code"] for f in before["findings"]}
        stop = r.xcom("stop")
        assert stop["outcome"] == "STOPPED" and stop["graceful"] and not stop["killed"]
        v1_batches = [s for s in dstream_job.statuses(v1_log) if s["event"] == "batch"]
        assert any(s["event"] == "stopped" for s in dstream_job.statuses(v1_log)), "v1 ended by its graceful stop"
        backup = r.xcom("stop", "backup")
        assert backup["checkpoint_copy"] and backup["recorded_build"] == jar_digest(str(v1_jar))
        assert backup["aside_location"] and read_state(backup["aside_location"]).files
        assert r.xcom("submit", "reset") is None  # same compatibility_version: no reset
        after = r.xcom("submit", "verdict")
        announced, exact = after["records_to_replay"], after["replay_exact"]
        assert exact and after["duplicates_expected"] == announced == backup["records_to_replay"]

        # the announcement against what v1 did: its last batch's ranges past the group's commits
        committed = {TopicPartition(t, p): o for t, p, o in backup["group_offsets"]}
        processed: dict[TopicPartition, int] = {}
        for b in v1_batches:
            for rg in b["ranges"]:
                tp = TopicPartition(rg["topic"], rg["partition"])
                processed[tp] = max(processed.get(tp, 0), rg["until"])
        assert announced == sum(end - committed[tp] for tp, end in processed.items()) > 0

        sub = r.xcom("submit")
        v2_log = Path(sub["log_path"])
        started_v2 = [s for s in dstream_job.statuses(v2_log) if s["event"] == "started"]
        assert started_v2 and started_v2[0]["build"] == "v2" and started_v2[0]["restored"] is False
        assert r.xcom("health_gate")["state"] == "healthy" and r.xcom("health_gate")["promoted"]
        assert read_state(str(ck)).recorded_build == jar_digest(str(v2_jar))

        # A broken deploy of the same build (an argument the job refuses: its driver exits before Spark
        # starts) fails the submit and is rolled back: the group's offsets and the DStream checkpoint come
        # back from this run's backup, and the previous application (v2, good arguments) is resubmitted.
        write(v2_jar, [*GOOD_ARGS, "not-a-flag", "x"])
        started = time.perf_counter()
        dr = DagBag().get_dag(DAG_ID).test(run_conf={**conf, "reason": "broken arguments"})
        r2 = collect(DAG_ID, dr.run_id, dr.state, time.perf_counter() - started)
        TIMINGS["safe restart: DStream broken deploy rolled back"] = r2.seconds
        assert r2.state == "failed", r2.states
        assert r2.states["submit"] == "failed" and r2.states["health_gate"] == "upstream_failed", r2.states
        assert r2.states["rollback"] == "success" and r2.states["finish"] == "failed", r2.states
        assert "exited before Spark started" in r2.xcom("finish", "failure")
        rollback = r2.xcom("rollback")
        assert rollback["failed_steps"] == ["submit"]
        assert rollback["restored_dstream_backup"] == r2.xcom("stop", "backup")["dstream_backup"]
        assert rollback["resubmitted"]["previous"] is True and rollback["resubmitted"]["application_args"] == GOOD_ARGS
        rec = LifecycleRecord.load(spec.checkpoint)
        assert drivers.local_alive(rec.driver) and str(rec.driver.id) == str(rollback["resubmitted"]["driver"]["id"])
        after2 = r2.xcom("submit", "verdict")
        announced2, exact2 = after2["duplicates_expected"], after2["replay_exact"]
        write(v2_jar)  # the fix: back to the good arguments

        truth = producer.stop()
        sink = JobSink(sink_root)
        wait_until(
            lambda: sink.idempotent() >= truth,
            timeout=JOB_TIMEOUT,
            interval=0.5,
            what="v2 to catch up with every acknowledged record",
        )
        spec = load_registry(str(registry)).get(JOB)
        _audit_sees_the_group(spec, bs, group)
        out = start_stop.stop_job(spec, target=lambda: spark_target(spec), actor="test", log=log)
        assert out["graceful"], out

        appended = sink.appended()
        missing = truth - set(appended)
        duplicates = sum(n - 1 for n in appended.values())
        print(
            f"DStream DAG recompile: produced {len(truth)}, missing {len(missing)}, duplicates {duplicates}, "
            f"announced {announced} (exact={exact}) + {announced2} (rolled-back run, exact={exact2}), "
            f"idempotent {len(sink.idempotent())}, run {r.seconds:.0f}s"
        )
        assert not missing and set(appended) == truth  # record by record: none lost, none invented
        # the append sink: exactly what the two plans said (the rolled-back run's replay is the group's
        # trailing batch, read again by the resubmitted v2)
        assert duplicates == announced + announced2 if exact2 else announced <= duplicates <= announced + announced2
        assert sink.idempotent() == truth  # the idempotent sink: each record once, 0 twice
    finally:
        producer.done.set()
        rec = LifecycleRecord.load(spec.checkpoint)
        if rec is not None and rec.driver is not None:
            drivers.kill_local(rec.driver, grace_s=5)


def _audit_sees_the_group(spec, bootstrap: str, group: str) -> None:
    """The hourly audit (and the lag sensor, ``aks status``, metrics, the UI: all through ``observe_job``)
    judges a DStream job from its group: the position is the group's committed offsets, the verdict is
    the group verdict (no "no checkpoint"), and the backup the safe restart took is found."""
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.watch.audit.job import audit_job

    view = KafkaView({"bootstrap.servers": bootstrap})

    def settled() -> bool:   # commitAsync trails a batch: wait until the group reaches the log end
        committed = view.group_offsets(group, spec.topics)
        return bool(committed) and committed == view.latest_offsets(committed)

    try:
        wait_until(settled, timeout=JOB_TIMEOUT, interval=1.0, what="the group to commit up to the log end")
        committed = view.group_offsets(group, spec.topics)
        audit = audit_job(spec, view=view)
    finally:
        view.close()
    obs = audit.observation
    assert audit.error is None and obs is not None, audit.to_dict()
    assert obs["source"] == "group" and obs["subject"] == group
    position = {TopicPartition(t, int(p)): int(o) for t, parts in obs["position"].items() for p, o in parts.items()}
    assert position == committed and obs["lag"]["records"] == 0, obs
    assert audit.checkpoint["verdict"] in ("OK", "WARN"), audit.checkpoint
    assert audit.backup["count"] == 2 and audit.backup["latest_id"].startswith("dstream-"), audit.backup  # 2 DAG runs
