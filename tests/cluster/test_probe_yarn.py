"""The compatibility probe of a user's unchanged Java job in YARN cluster mode, checkpoint and sink on HDFS.

The application is ``com.example.orders.OrdersStream`` (tests/support/user_jobs/orders-java), as in
tests/cluster/test_users_jobs_yarn.py: one positional argument, a ``.properties`` file shipped with
``--files`` and read by its relative name in the driver's working folder (so its driver must run in
the ApplicationMaster's container), its jar on HDFS, a ``foreachBatch`` sink on HDFS. Its
properties name the checkpoint ``hdfs://127.0.0.1:<port>/...`` while the registry names the same
folder ``hdfs://localhost:<port>/...``: the agent must see one place (Hadoop's ``checkPath``) to move
the query onto the staged copy.

v1 runs on the real checkpoint and sink (a local driver on HDFS, stopped by the agent after a
committed batch); then ``probe_application`` judges, with no new data in Kafka and the registry
entry in cluster mode on YARN, v2 (``dropDuplicates`` added: Spark 4.2 refuses it with
``STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY``, tests/integration/test_probe.py holds that
oracle) and v3 (a projected column added: Spark runs the batch), and, at the same time, v3
again with an executor that never fits on the NodeManager (as on a full cluster) and a 45 s
``probe_timeout_s``: the product kills its YARN application and answers ``unknown``. After the
probes the real checkpoint and sink are byte-identical (listing and sha256 through the product's
file-system layer), nothing is left beside the checkpoint, and every probe's YARN application has
ended.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time

import pytest

from airflow_kafka_spark import agent
from airflow_kafka_spark._util.fs import list_files, open_location, read_bytes
from airflow_kafka_spark.errors import BlockReason, OperationBlocked
from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.registry.model import Integration, JobSpec, Sink
from airflow_kafka_spark.runtime import probe, safe_restart, yarn
from devstack import agent_build, topics, user_jobs
from devstack.produce import produce
from devstack.spark_runtimes import runtime
from tests.support import agent_harness as h
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.userjobs, pytest.mark.airflow]

JOB = "probeorders"
CONN = "spark_probe_yarn"


def _hdfs_path(url: str) -> str:
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


def digest(url: str) -> dict[str, str]:
    """Every file under ``url`` and its sha256, read through the product's file-system layer (WebHDFS)."""
    loc = open_location(url)
    return {rel: hashlib.sha256(read_bytes(loc.child(rel)) or b"").hexdigest() for rel in sorted(list_files(loc))}


def _newest_commit(webhdfs, ck: str) -> int:
    path = f"{ck}/commits"
    if not webhdfs.exists(path):
        return -1
    return max((int(p.rstrip("/").rsplit("/", 1)[-1]) for p in webhdfs.ls(path, detail=False)
                if p.rstrip("/").rsplit("/", 1)[-1].isdigit()), default=-1)


def test_probe_of_a_users_jar_in_yarn_cluster_mode_on_hdfs(broker, hadoop, yarn_submit, webhdfs, rm, tmp_path):
    agent_build.build_all()
    rt = runtime("default")
    mp = pytest.MonkeyPatch()   # the product reaches HDFS and YARN through the worker's Hadoop configuration
    for key in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        mp.setenv(key, yarn_submit.env[key])
    mp.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({"conn_type": "spark", "host": "yarn",
                                                          "extra": {"deploy-mode": "cluster"}}))
    try:
        results = _old_run_and_probes(broker.bootstrap_servers, hadoop, yarn_submit, webhdfs, tmp_path, rt)
        ran = rm.find(name=f"aks-probe-{JOB}")   # v2's, v3's and the timed-out probe's, started together
        assert len(ran) == 3 and not any(a.alive for a in ran), [a.summary() for a in ran]
        # v2's and v3's applications are the ones their log tails end with ("YARN: <summary>"): the third,
        # the timed-out probe's, is the one that was killed
        own = {a.id for a in ran if any(a.id in results[v].log_tail for v in ("v2", "v3"))}
        ended = [a for a in ran if a.id in own]
        killed = [a for a in ran if a.id not in own]
        assert len(ended) == 2 and len(killed) == 1, [a.summary() for a in ran]
        assert killed[0].state is yarn.AppState.KILLED, killed[0].summary()
        assert all(a.am_container_id for a in ended), "the probe's driver should have run in the AM's container"
        # its own tag, never the checkpoint's: nothing may take the probe for a driver of the job
        assert all(any(t.startswith("aks-probe-") for t in a.tags) and not any(t.startswith("aks-ck-") for t in a.tags)
                   for a in ran), [a.tags for a in ran]
        for a in ended:   # where the probe's time goes: YARN's accept-to-finish of its application
            print(f"[probe yarn] {a.summary()[:120]}: {(a.finished_ms - a.started_ms) / 1000:.1f}s on YARN")
    finally:
        for app in rm.find(name=f"aks-probe-{JOB}"):
            if app.alive:
                rm.kill(app.id)
        mp.undo()
    v2, v3 = results["v2"], results["v3"]
    assert (v2.answer, v2.error_class) == (probe.ProbeAnswer.BREAKING,
                                           "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"), v2
    assert "YARN: application_" in v2.log_tail and "FAILED" in v2.log_tail, v2.log_tail   # the plan shows why
    assert v3.answer is probe.ProbeAnswer.COMPATIBLE and v3.empty_batch, v3
    late = results["v3-timeout"]
    assert late.answer is probe.ProbeAnswer.UNKNOWN and "did not finish within 45s" in late.reason, late
    # auto on the unchanged job (compatibility_version not bumped): what each answer makes the run do
    decided = {v: safe_restart.decide("auto", registry_compat="1", recorded_compat="1", probe=results[v])
               for v in ("v2", "v3")}
    assert (decided["v2"].action, decided["v2"].reset_mode) == (safe_restart.RestartAction.RESET, ResetMode.PRESERVE)
    assert decided["v3"].action is safe_restart.RestartAction.KEEP
    with pytest.raises(OperationBlocked) as stopped:   # unknown: the run stops before anything changes
        safe_restart.decide("auto", registry_compat="1", recorded_compat="1", probe=late)
    assert stopped.value.reason is BlockReason.COMPATIBILITY_UNKNOWN and "could not tell" in str(stopped.value)


def _old_run_and_probes(bs, hadoop, yarn_submit, webhdfs, tmp_path, rt) -> dict[str, probe.ProbeResult]:
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    t_start = time.monotonic()
    topic = f"probe-yarn-{os.getpid()}"
    topics.create_topic(bs, topic, 2)
    produce(bs, topic, 60, partitions=2)
    port = hadoop.default_fs.rsplit(":", 1)[1]
    base = f"/aks-probe-yarn-{os.getpid()}"
    registry_ck, real_sink = f"hdfs://localhost:{port}{base}/checkpoints/{JOB}", f"{hadoop.default_fs}{base}/sink"
    apps_dir = f"{base}/apps"
    webhdfs.makedirs(apps_dir, exist_ok=True)
    for variant in ("v1", "v2", "v3"):
        webhdfs.put(str(user_jobs.build("default", variant)), f"{apps_dir}/orders-stream-{variant}.jar")
    # The application's own spelling of its checkpoint: the NameNode by address, not by name.
    props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=bs, topic=topic,
                                       checkpoint=f"hdfs://127.0.0.1:{port}{base}/checkpoints/{JOB}",
                                       output=real_sink, trigger_seconds=1)
    webhdfs.put(str(props), f"{apps_dir}/orders.properties")

    # v1 on the real checkpoint and sink (a local driver on HDFS), stopped by the agent after a committed batch.
    marker = f"{hadoop.default_fs}{base}/old.stop"
    conf = agent.agent_conf(marker, registry_ck, f"{hadoop.default_fs}{base}/old.agent.json", rt.version, {})
    driver = h.submit(rt, user_jobs.build("default", "v1"), [str(props)], tmp_path / "v1.log", conf=conf,
                      main_class=user_jobs.MAIN_CLASS, env=hadoop.env())
    try:
        wait_until(lambda: driver.proc.poll() is not None or _newest_commit(webhdfs, f"{base}/checkpoints/{JOB}") >= 0,
                   timeout=180, interval=0.5, what="v1's first committed batch on HDFS")
        webhdfs.touch(_hdfs_path(marker))
        assert driver.wait(120) == 0, driver.text()[-3000:]
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    before_ck, before_sink = digest(registry_ck), digest(real_sink)
    assert any(r.startswith("commits/") for r in before_ck) and before_sink, (before_ck, before_sink)
    print(f"\n[probe yarn] v1 ran on HDFS in {time.monotonic() - t_start:.1f}s: {len(before_ck)} checkpoint files, "
          f"{len(before_sink)} sink files")

    t0 = time.monotonic()   # the staged copy alone, as the probe makes it (WebHDFS), for the time report
    staged = probe.stage_checkpoint(registry_ck, f"{hadoop.default_fs}{base}/staging-timing")
    print(f"[probe yarn] staged copy of {len(before_ck)} files (batch {staged.batch if staged else None}) in "
          f"{time.monotonic() - t0:.1f}s")
    webhdfs.rm(f"{base}/staging-timing", recursive=True)

    def run(variant: str, timeout_s: float, **conf: str) -> probe.ProbeResult:
        jar = variant.split("-")[0]
        spec = JobSpec(name=JOB, application=f"{hadoop.default_fs}{apps_dir}/orders-stream-{jar}.jar",
                       main_class=user_jobs.MAIN_CLASS, topics=(topic,), checkpoint=registry_ck,
                       backup_root=f"{hadoop.default_fs}{base}/backups", stop_marker=f"{registry_ck}.stop",
                       output=real_sink, sink=Sink.IDEMPOTENT, spark_conn_id=CONN, deploy_mode="cluster",
                       compatibility_probe=True, integration=Integration.AGENT, spark_version=rt.version,
                       application_args=("orders.properties",),
                       files=(f"{hadoop.default_fs}{apps_dir}/orders.properties",),
                       spark_conf={**yarn_submit.conf, "spark.jars": ",".join(yarn_submit.jars), **conf})
        load = os.getloadavg()[0]
        result = probe.probe_application(spec, kafka_config={"bootstrap.servers": bs}, target=spark_target(spec),
                                         timeout_s=timeout_s)
        print(f"[probe yarn] {variant}: {result.answer} in {result.seconds}s (load {load:.1f} -> "
              f"{os.getloadavg()[0]:.1f}), class {result.error_class}: {result.reason}\n"
              + "\n".join(f"    {ln[:160]}" for ln in result.log_tail.splitlines()[-4:]))
        return result

    # The two releases and a probe that outlives probe_timeout_s, all three at once (the CI budget wants the
    # time: the third waits out its whole 45 s either way). Its executor (3 GB) never fits beside the AMs on
    # the 4 GB NodeManager, so its batch waits, as on a full cluster; the product kills it and answers
    # unknown. Three AMs (1 GB each) fit under the minicluster's AM share (80 %); v2's and v3's executors may
    # have to wait for the kill (the scheduler holds the node for the big request), within their 240 s.
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = {v: pool.submit(run, v, 240) for v in ("v2", "v3")}
        futures["v3-timeout"] = pool.submit(run, "v3-timeout", 45, **{"spark.executor.memory": "3g"})
        results = {v: f.result() for v, f in futures.items()}
    assert digest(registry_ck) == before_ck, "the probe touched the real checkpoint"
    assert digest(real_sink) == before_sink, "the probe touched the real sink"
    left = [p for p in webhdfs.ls(f"{base}/checkpoints", detail=False) if ".probe-" in p]
    assert not left, {p: webhdfs.find(p) for p in left}
    return results
