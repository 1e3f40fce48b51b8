"""Soak on YARN + HDFS: the local soak's sequence and checks, with the job in YARN cluster mode and its
checkpoint, lifecycle record, stop marker, backups and sink on HDFS, and the faults clusters have.

Real everything: the HDFS + YARN minicluster (``devstack/hadoop.py`` with ``recovery=True``: the RM
keeps its applications in a file state store and recovers them work-preserving; the NodeManager is a
JVM of its own), a broker of its own, Airflow's api-server + scheduler (LocalExecutor) + triggerer
running the soak copy of the safe-restart DAG (retries 3), spark-submit of the reference job to YARN
through the Spark provider's hook, and a producer that never stops.

Events (each at least once; the rest seeded): safe restart ``keep``; ``auto`` after a checkpoint-
breaking change (reset ``preserve``); SIGKILL of task runners inside the DAG runs and of the triggerer
while the health gate is deferred (the local soak's :class:`TaskKiller`); SIGKILL of the driver (the
ApplicationMaster container's process group) while a batch is planned and not committed;
**ResourceManager restart** (the RM service stopped for 1-5 s and a new one started: the running
application must survive it); **NodeManager loss** (the NM JVM and every container it runs SIGKILLed,
a new NM started on the same address: YARN ends the application, which has one attempt, and the next
safe restart brings the job back); **NameNode restart** (HDFS unreachable for 2-8 s while the job
runs: the job rides it out or dies, and the next safe restart must converge either way).

At the end, as in the local soak: 0 missing, duplicates ≤ announced, never two RUNNING applications of
the job in any once-a-second sample of the RM's REST API, every backup verifies. Knobs: ``AKS_SOAK_SEED``,
``AKS_SOAK_EVENTS`` (default 12), ``AKS_SOAK_MAX_S``, ``AKS_SOAK_REPORT``.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime.yarn import ResourceManager, YarnError
from devstack import topics
from devstack.airflow_services import AirflowServices
from devstack.broker import LocalBroker
from devstack.hadoop import HadoopCluster
from devstack.spark_yarn import prepare
from tests.cluster.test_safe_restart_yarn import SPARK_YARN_CONN
from tests.soak.feeder import Feeder
from tests.soak.figures import Figures, finish
from tests.soak.harness import AppCounter
from tests.soak.stage import JOB, PARTITIONS, RATE, airflow_env, knobs, soak_dag, start_airflow
from tests.soak.test_soak import Soak, run_sequence
from tests.support.airflow_env import write_registry
from tests.support.processes import processes
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.timeout(3600), pytest.mark.soak, pytest.mark.cluster, pytest.mark.airflow,
              pytest.mark.integration]

APP_NAME = f"aks-{JOB}"


class YarnSoak(Soak):
    """The local soak's events on YARN, plus the cluster's own: RM restart, NM loss, NameNode restart."""

    NEEDS_JOB = ("driver_kill", "nm_loss", "rm_restart", "nn_restart")

    def __init__(self, *args, cluster: HadoopCluster, rm: ResourceManager, job_conf: dict[str, str], **kw) -> None:
        super().__init__(*args, **kw)
        self.cluster, self.rm, self.job_conf = cluster, rm, job_conf

    def job_entry(self) -> dict:
        entry = super().job_entry()
        entry["application_args"] = ["--trigger", "processing:2s", "--shuffle-partitions", "2"]
        # a YARN batch takes 2-12 s on a loaded machine: 200 records a batch would barely keep up with 20 a second
        entry.update(
            spark_conn_id="spark_yarn", deploy_mode="cluster", spark_conf=self.job_conf, max_offsets_per_trigger=1000
        )
        return entry

    def write_registry(self) -> None:
        write_registry(self.registry, [self.job_entry()], stop_timeout_s=240)

    def app_id(self) -> str | None:
        rec = LifecycleRecord.load(self.checkpoint)
        return rec.driver.id if rec is not None and rec.driver is not None else None

    def app_alive(self, app_id: str) -> bool:
        for _attempt in range(30):  # the RM may be restarting
            try:
                return self.rm.app(app_id).alive
            except YarnError:
                time.sleep(2)
        raise AssertionError(f"the ResourceManager did not answer about {app_id} for 60 s")

    def driver_alive(self) -> bool:
        app = self.app_id()
        return app is not None and self.app_alive(app)

    def committed(self) -> int:
        from airflow_kafka_spark.checkpoint.reader import read_checkpoint

        st = read_checkpoint(self.checkpoint)
        return -1 if st.latest_committed is None else st.latest_committed.batch_id

    def job_survived(self, app: str, what: str) -> str:
        """After a fault: the same application still RUNNING and committing, or the job down (noted)."""
        before = self.committed()
        with contextlib.suppress(AssertionError):
            wait_until(
                lambda: not self.app_alive(app) or self.committed() > before,
                timeout=180,
                interval=2,
                what=f"the job to commit a batch after the {what}",
            )
        if self.app_alive(app) and self.committed() > before:
            return f"{app} still running, committed batch {self.committed()}"
        self.job_down = True
        return f"{self.rm.app(app).summary()} (the next safe restart brings the job back)"

    # -- the cluster's faults ------------------------------------------------------------------
    def driver_kill(self) -> None:
        """SIGKILL the ApplicationMaster container (the driver) while a batch is planned and not committed."""
        app = self.app_id()
        assert app is not None
        if not self.app_alive(app):
            self.job_down = True
            return
        mid = self.wait_mid_batch(30)
        am = [p for p, cmd in processes(app) if "org.apache.spark.deploy.yarn.ApplicationMaster" in cmd]
        assert am, f"no ApplicationMaster process of {app}"
        os.killpg(os.getpgid(am[0]), signal.SIGKILL)
        wait_until(lambda: not self.app_alive(app), timeout=180, interval=2, what=f"YARN to end {app}")
        self.fig.note(
            "driver kill",
            f"SIGKILL the AM of {app} {'mid-batch' if mid else 'between batches'}: {self.rm.app(app).summary()}",
        )
        self.job_down = True

    def rm_restart(self) -> None:
        app = self.app_id()
        down = self.rng.uniform(1, 5)
        took = self.cluster.restart_resourcemanager(down)
        after = self.job_survived(app, "ResourceManager restart")
        self.fig.note("RM restart", f"down {down:.1f}s, back in {took:.0f}s; {after}")

    def nn_restart(self) -> None:
        app = self.app_id()
        down = self.rng.uniform(2, 8)
        took = self.cluster.restart_namenode(down)
        after = self.job_survived(app, "NameNode restart")
        self.fig.note("NameNode restart", f"HDFS down {down:.1f}s, back in {took:.0f}s; {after}")

    def nm_loss(self) -> None:
        app = self.app_id()
        lost = self.cluster.lose_nodemanager()
        time.sleep(self.rng.uniform(1, 5))
        self.cluster.start_nodemanager()
        wait_until(lambda: not self.app_alive(app), timeout=240, interval=2, what=f"YARN to end {app} (node lost)")
        self.job_down = True
        self.fig.note(
            "NodeManager loss", f"{lost} containers killed with the NM, a new NM up; {self.rm.app(app).summary()}"
        )

    # -- the sequence --------------------------------------------------------------------------
    def options(self) -> dict[str, int]:
        options = {"keep": 3 if self.job_down else 1, "auto": 1}
        if not self.job_down:
            options.update(driver_kill=2, rm_restart=2, nn_restart=2, nm_loss=1)
        return options

    def run_event(self, kind: str) -> None:
        fault = {"rm_restart": self.rm_restart, "nn_restart": self.nn_restart, "nm_loss": self.nm_loss}.get(kind)
        if fault is not None:
            fault()
        else:
            super().run_event(kind)


def test_soak_yarn(airflow_home, connector_jars):
    seed, target, max_s = knobs(12)
    print(f"\nyarn soak seed {seed} (replay: AKS_SOAK_SEED={seed} AKS_SOAK_EVENTS={target})", flush=True)
    rng = random.Random(seed)
    fig = Figures(seed=seed, events_target=target)
    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix=f"aks-soak-yarn-{seed}-"))  # kept after a failure, for its logs
    cluster = broker = None
    mp = pytest.MonkeyPatch()
    services = feeder = counter = soak = rm = None
    passed = False
    try:
        cluster = HadoopCluster(data_dir=base / "hadoop", recovery=True).start()
        submit = prepare(cluster)
        print(f"[yarn soak] HDFS + YARN up, Spark on HDFS, in {time.monotonic() - started:.0f}s", flush=True)
        rm = ResourceManager([cluster.rm_url], timeout=5)
        broker = LocalBroker(data_dir=base / "kafka").start()
        topic = f"soak-yarn-{seed}"
        topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
        dags = base / "dags"
        soak_dag(dags)
        registry = base / "streaming_jobs.yaml"
        data = f"{cluster.default_fs}/aks-soak"
        env = airflow_env(base, dags, registry, broker.bootstrap_servers, data) | {
            "AIRFLOW_CONN_SPARK_YARN": SPARK_YARN_CONN,
            "AKS_HEALTH_GATE_POLL_S": "3",
            **{k: submit.env[k] for k in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "PYSPARK_ARCHIVES_PATH")},
        }
        for k, v in env.items():
            mp.setenv(k, v)
        services = AirflowServices(airflow_home, base, env)
        start_airflow(dags, services)
        job_conf = {**submit.conf, "spark.jars": ",".join(submit.jars)}
        soak = YarnSoak(
            base, broker, services, registry, topic, rng, fig, data=data, cluster=cluster, rm=rm, job_conf=job_conf
        )
        soak.max_s = max_s
        soak.write_registry()
        feeder = Feeder(broker.bootstrap_servers, topic, PARTITIONS, RATE).start()
        counter = AppCounter(rm, APP_NAME).start()
        forced = ["rm_restart", "nn_restart", "nm_loss", "driver_kill", "auto"]
        rng.shuffle(forced)
        run_sequence(soak, forced, target, max_s, started)

        def sink() -> Path:
            import fsspec

            local = base / "sink"
            webhdfs = fsspec.filesystem("webhdfs", skip_instance_cache=True, **cluster.fsspec_options())
            webhdfs.get(f"/aks-soak/sinks/{JOB}", str(local), recursive=True)
            return local

        finish(soak, feeder, counter, sink, started, what="YARN applications running", catch_up_s=600)
        print(f"[yarn soak] RM samples it could not answer (restarting): {counter.blind}", flush=True)
        passed = True
    finally:
        if counter is not None:
            counter.stop()
        if feeder is not None and not feeder._stop.is_set():
            feeder._stop.set()
        if services is not None:
            services.stop()
        if rm is not None:
            with contextlib.suppress(Exception):
                for app in rm.find(name=APP_NAME):
                    if app.alive:
                        rm.kill(app.id)
        if cluster is not None:
            cluster.stop()
        if broker is not None:
            broker.stop()
        mp.undo()
        if passed:
            shutil.rmtree(base, ignore_errors=True)
