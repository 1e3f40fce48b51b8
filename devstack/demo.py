"""The local demo: a real broker, the reference job under spark-submit, and Airflow restarting it safely.

``./bin/demo`` runs the full story (``--basic`` runs only the first part of it, without Airflow):

1. a single-node Kafka broker (KRaft) and a topic with records flowing in;
2. Airflow 3 on SQLite in ``<workdir>/airflow-home`` (no scheduler: each run is ``dag.test()`` of the
   ``streaming_safe_restart`` DAG from ``dags/``, with a job registry written to the workdir);
3. a first run starts the reference job (``auto``: nothing recorded yet, so keep; submit; health gate);
4. the job is changed in a checkpoint-breaking way (a ``dropDuplicates`` stage; no
   ``compatibility_version`` bump): the second run's ``auto`` asks Spark through the compatibility
   probe (a shadow start of the new code on a copy of the checkpoint, noop sink), which says
   *breaking*; so it validates, stops the job on a batch boundary, backs the checkpoint up, resets
   it with ``preserve`` and starts the new code exactly where the old one stopped;
5. the job is stopped and the sink is compared record by record with what Kafka acknowledged:
   nothing lost, nothing duplicated across the change. The audit entries of both runs are printed.

Everything lives under ``demo-output/`` (or ``--workdir``); Airflow's own log lines go to
``<workdir>/airflow.log`` so the story stays readable. The broker and the job are stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airflow_kafka_spark.errors import UserError


def _step(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(workdir: Path, records: int, partitions: int) -> int:
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint
    from devstack import oracle, spark, topics
    from devstack.broker import LocalBroker
    from devstack.produce import produce

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    topic = "orders"
    _step("starting a single-node Kafka broker (KRaft) ...")
    t0 = time.monotonic()
    with LocalBroker(data_dir=workdir / "kafka") as broker:
        _step(f"broker ready at {broker.bootstrap_servers} in {time.monotonic() - t0:.1f}s")
        topics.create_topic(broker.bootstrap_servers, topic, partitions)
        produced = produce(broker.bootstrap_servers, topic, records, partitions=partitions)
        _step(f"produced {len(produced)} records to {topic} ({partitions} partitions)")
        checkpoint, output, marker = workdir / "checkpoint", workdir / "sink", workdir / "STOP"
        args = ["--topics", topic, "--bootstrap-servers", broker.bootstrap_servers, "--checkpoint", str(checkpoint),
                "--output", str(output), "--sink", "idempotent", "--trigger", "processing:1s",
                "--max-offsets-per-trigger", str(max(1, records // 4)), "--stop-marker", str(marker)]
        _step("submitting the reference job with spark-submit (local[*]) ...")
        proc = spark.start_job(args, workdir / "job.log", master="local[*]")
        ends = {tp: o for tp, o in _ends(broker.bootstrap_servers, topic).items()}
        deadline = time.monotonic() + 300
        last = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UserError(f"the streaming job exited early ({proc.returncode}); see {workdir / 'job.log'}")
            st = read_checkpoint(str(checkpoint))
            if st.latest_committed and st.latest_committed.batch_id != last:
                last = st.latest_committed.batch_id
                _step(f"batch {last} committed: {sum(st.latest_committed.kafka_offsets.values())} of "
                      f"{sum(ends.values())} records processed")
            if st.latest_committed and st.latest_committed.kafka_offsets == ends:
                break
            time.sleep(1)
        _step("writing the stop marker; the job stops on a batch boundary ...")
        marker.touch()
        rc = proc.wait(180)
        status = spark.parse_statuses((workdir / "job.log").read_text())
        st = read_checkpoint(str(checkpoint))
        cmp = oracle.compare(produced, oracle.read_sink(output, "idempotent"))
    print()
    print(f"job exit code:        {rc} ({status[-1] if status else 'no status'})")
    print(f"produced:             {cmp.produced}")
    print(f"consumed (sink rows): {cmp.consumed_rows}  missing={len(cmp.missing)} duplicated={cmp.duplicate_count}")
    print(f"checkpoint:           {checkpoint}")
    print(f"  query id            {st.query_id}")
    print(f"  last planned batch  {st.latest_planned.batch_id if st.latest_planned else None}")
    print(f"  last committed      {st.latest_committed.batch_id if st.latest_committed else None}")
    for tp, off in sorted((st.latest_committed.kafka_offsets if st.latest_committed else {}).items()):
        print(f"  {tp!s:<20} checkpoint={off:<6} kafka end={ends.get(tp)}")
    return 0 if rc == 0 and cmp.exact else 1



# --------------------------------------------------------------------------------------------------
# the Airflow story
# --------------------------------------------------------------------------------------------------

DAGS_DIR = Path(__file__).resolve().parents[1] / "dags"
V1_ARGS = ["--trigger", "processing:1s", "--shuffle-partitions", "2"]
V2_ARGS = [*V1_ARGS, "--stateful", "dedup"]


def _registry_text(topic: str, *, compat: str, args: list[str]) -> str:
    doc = {
        "version": 1,
        "vars": {"data": "${AKS_DATA_DIR}"},
        "allowed_roots": ["${data}", "${AKS_PACKAGE_DIR}/jobs"],
        "defaults": {"application": "${AKS_PACKAGE_DIR}/jobs/reference_job.py", "integration": "reference",
                     "checkpoint": "${data}/checkpoints/{name}", "output": "${data}/sinks/{name}",
                     "backup_root": "${data}/backups", "stop_timeout_s": 120,
                     "spark_conf": {"spark.sql.shuffle.partitions": "2"},
                     "health_gate": {"min_batches": 2, "timeout_s": 300}},
        "jobs": [{"name": "orders", "topics": [topic], "sink": "idempotent", "max_offsets_per_trigger": 200,
                  "compatibility_version": compat, "compatibility_probe": True, "application_args": args}],
    }
    return json.dumps(doc, indent=2)    # JSON is YAML: no quoting surprises


@contextlib.contextmanager
def _airflow_output_to(path: Path) -> Iterator[None]:
    """Send what Airflow prints while it runs tasks (a lot) to a file, at the file-descriptor level."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "ab") as fh:
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


class _Feed:
    """Keeps records flowing into the topic (a restarted job only commits batches when there is data)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.produced: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, n: int) -> None:
        from devstack.produce import produce

        self.produced += produce(self.bootstrap, self.topic, n, partitions=self.partitions,
                                 start_id=len(self.produced))

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.add(self.rate)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def run_airflow(workdir: Path, records: int, partitions: int) -> int:
    """The full story (see the module doc). Returns 0 when both runs succeed and the sink is exact."""
    if "airflow" in sys.modules:
        raise UserError("airflow was imported before the demo could point AIRFLOW_HOME at its workdir")
    if not (DAGS_DIR / "streaming_safe_restart.py").is_file():
        raise UserError(f"the DAGs folder {DAGS_DIR} is missing: run the demo from a checkout of the repository")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    home, data, registry = workdir / "airflow-home", workdir / "data", workdir / "streaming_jobs.yaml"
    airflow_log = workdir / "airflow.log"
    os.environ.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
        # the provider's [kafka_spark] settings, in Airflow's environment form
        "AIRFLOW__KAFKA_SPARK__DATA_DIR": str(data), "AIRFLOW__KAFKA_SPARK__JOB_REGISTRY": str(registry),
        "AIRFLOW__KAFKA_SPARK__HEALTH_GATE_POLL_S": "2"})
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint
    from airflow_kafka_spark.lifecycle.record import LifecycleRecord
    from airflow_kafka_spark.runtime import drivers
    from devstack import jars, oracle, topics
    from devstack.broker import LocalBroker

    topic = "orders"
    checkpoint = data / "checkpoints" / "orders"
    _step("starting a single-node Kafka broker (KRaft) ...")
    with LocalBroker(data_dir=workdir / "kafka") as broker:
        bootstrap = broker.bootstrap_servers
        topics.create_topic(bootstrap, topic, partitions)
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = json.dumps({"conn_type": "kafka",
                                                               "extra": {"bootstrap.servers": bootstrap}})
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
        os.environ.setdefault("AIRFLOW__KAFKA_SPARK__CONNECTOR_JARS", ",".join(str(j) for j in jars.spark_kafka_jars()))
        registry.write_text(_registry_text(topic, compat="1", args=V1_ARGS))
        feed = _Feed(bootstrap, topic, partitions, rate=max(1, records // 100))
        feed.add(records)
        _step(f"broker at {bootstrap}; {records} records in topic {topic}; registry {registry}")

        _step(f"Airflow 3 on SQLite in {home} (Airflow's own output: {airflow_log}) ...")
        with _airflow_output_to(airflow_log):
            from airflow.dag_processing.dagbag import DagBag
            from airflow.utils import db

            db.resetdb()
            dag = DagBag().get_dag("streaming_safe_restart")
        if dag is None:
            raise UserError(f"the streaming_safe_restart DAG did not load; see {airflow_log}")

        def trigger(mode: str, reason: str) -> dict[str, Any]:
            conf = {"job": "orders", "mode": mode, "backup_id": None, "datetime": None, "dry_run": False,
                    "accept_data_loss": False, "reason": reason}
            t0 = time.monotonic()
            with _airflow_output_to(airflow_log):
                dr = dag.test(run_conf=conf)
            rec = LifecycleRecord.load(str(checkpoint))
            audit = [e for e in (rec.history if rec else []) if e["event"] == "safe_restart"][-1]["details"]
            _step(f"run {dr.run_id}: {dr.state} in {time.monotonic() - t0:.0f}s — {audit['outcome']}: {audit['why']}")
            return audit

        feed.start()
        try:
            _step("run 1: streaming_safe_restart mode=auto (first start of the reference job) ...")
            first = trigger("auto", "first start")
            if first["outcome"] != "SUCCESS":
                raise UserError(f"the first run ended {first['outcome']}: {first.get('failures')}; see {airflow_log}")
            _step(f"  driver {first['submitted_driver']}; health gate: {first['health']['reason']}")

            _step("changing the job: a dropDuplicates stage (checkpoint-breaking); compatibility_version stays 1")
            registry.write_text(_registry_text(topic, compat="1", args=V2_ARGS))
            _step("run 2: streaming_safe_restart mode=auto (the compatibility probe asks Spark) ...")
            second = trigger("auto", "add deduplication")
            found = second.get("probe") or {}
            _step(f"  probe: {found.get('answer')} in {found.get('seconds')}s ({found.get('error_class')}), "
                  f"then {second['action']}")
            _step(f"  stop: {second['stop']['outcome']} (last committed batch {second['stop']['last_committed']}); "
                  f"backup {second['backup_id']}")
            if second.get("reset"):
                _step(f"  reset: {second['reset'].get('headline')}")
                _step(f"  new query starts at {second['reset'].get('starting_offsets')}")
            _step(f"  health gate: {(second.get('health') or {}).get('reason')}")
        finally:
            feed.stop()
        _step("waiting until the job has read every record, then stopping it on a batch boundary ...")
        ends = _ends(bootstrap, topic)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            st = read_checkpoint(str(checkpoint))
            if st.latest_committed and st.latest_committed.kafka_offsets == ends:
                break
            time.sleep(1)
        rec = LifecycleRecord.load(str(checkpoint))
        if rec is not None and rec.driver is not None:
            res = drivers.stop(str(checkpoint), str(checkpoint) + ".stop",
                               is_alive=lambda: drivers.local_alive(rec.driver),
                               kill=lambda: drivers.kill_local(rec.driver), timeout_s=120)
            _step(f"job stopped: {res.outcome} — {res.message}")
        cmp = oracle.compare(feed.produced, oracle.read_sink(data / "sinks" / "orders", "idempotent"))
    print()
    print(f"produced:             {cmp.produced}")
    print(f"consumed (sink rows): {cmp.consumed_rows}  missing={len(cmp.missing)} duplicated={cmp.duplicate_count}")
    print(f"checkpoint:           {checkpoint} (old one kept at {(second.get('reset') or {}).get('aside_location')})")
    print("audit (lifecycle record history):")
    for e in (rec.history if rec else []):
        if e["event"] == "safe_restart":
            d = e["details"]
            print(f"  {d['outcome']:<8} mode={d['mode']:<5} action={d['action']:<6} by {e['actor']}: {d['reason']!r}; "
                  f"backup {d['backup_id']}; offsets {d['offsets_before']} -> {d['offsets_after']}")
    ok = first["outcome"] == second["outcome"] == "SUCCESS" and cmp.exact
    print("result:               " + ("OK: nothing lost, nothing duplicated across the change" if ok else "FAILED"))
    return 0 if ok else 1

def _ends(bootstrap: str, topic: str):
    from airflow_kafka_spark.kafka.view import KafkaView

    return KafkaView({"bootstrap.servers": bootstrap}).broker_state([topic]).latest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("demo-output"))
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--basic", action="store_true",
                   help="only the job and a graceful stop, without Airflow (the first part of the story)")
    a = p.parse_args(argv)
    try:
        if a.basic:
            return run(a.workdir.resolve(), a.records, a.partitions)
        return run_airflow(a.workdir.resolve(), a.records, a.partitions)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
