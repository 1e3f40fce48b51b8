"""The compatibility probe of users' unchanged applications, through the agent (docs/probe.md).

The old release of a users'-style PySpark job (tests/support/user_jobs/orders_report.py, which has
never heard of the product) runs on the real checkpoint and writes its real sink with its own
``foreachBatch`` code (or Spark's parquet sink); then ``probe_application`` judges the new release,
as the product runs it for an ``integration: agent`` job: the application unchanged, its arguments
from the registry with the staged copy as ``{checkpoint}``, the agent's confs added. After every
probe the real checkpoint and sink are byte-identical (sha256 of every file, and the same set of
folders). Expected answers: what Spark's own restart of the new release does (the reference job's
probe tests, tests/integration/test_probe.py, hold that oracle for the same six changes on 4.2.0).

One broker and one pair of topics for the module; every probe is one real spark-submit (local[2]).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.registry.model import Integration, JobSpec, Sink
from airflow_kafka_spark.runtime import probe, safe_restart
from devstack import topics
from devstack.produce import produce
from devstack.spark_runtimes import runtime
from tests.support import agent_harness as h

pytestmark = [pytest.mark.integration, pytest.mark.userjobs, pytest.mark.airflow]

APP = h.USER_JOBS / "orders_report.py"
B, C, U = probe.ProbeAnswer.BREAKING, probe.ProbeAnswer.COMPATIBLE, probe.ProbeAnswer.UNKNOWN
# case -> (old release, old sink, new release, new sink, expected answer, Spark's error class)
CASES = {
    "new-stateful-operator": ("base", "foreach", "dedup", "foreach", B,
                              "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"),
    "new-aggregation-column": ("agg", "foreach", "agg_sum", "foreach", B, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
    "changed-dropduplicates-key": ("dedup", "foreach", "dedup_key2", "foreach", B,
                                   "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"),
    "stateless-projection": ("base", "foreach", "projection", "foreach", C, None),
    "sink-only": ("base", "foreach", "base", "parquet", C, None),
    "number-of-sources": ("base", "foreach", "two_sources", "foreach", B, probe.SOURCE_COUNT_CHANGED),
    "watermark-window-added": ("base", "foreach", "window", "foreach", B,
                               "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"),
}


def digest(root: Path) -> dict[str, str]:
    """Every file's sha256 and every folder (a folder the probe created would show too)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir")
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def stack(broker):
    bs = broker.bootstrap_servers
    topic, second = "probe-users", "probe-users-b"
    topics.create_topic(bs, topic, 2)
    topics.create_topic(bs, second, 1)
    produce(bs, topic, 120, partitions=2)
    produce(bs, second, 10, partitions=1)
    os.environ.setdefault("AIRFLOW_CONN_SPARK_PROBE_USERS", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return bs, topic, second


def _args(topic: str, second: str, release: str, sink: str, *extra: str) -> tuple[str, ...]:
    return ("--brokers", "{bootstrap_servers}", "--topic", topic, "--second-topic", second, "--checkpoint",
            "{checkpoint}", "--out", "{output}", "--release", release, "--sink", sink, *extra)


def _old_run(tmp: Path, bs: str, topic: str, second: str, release: str, sink: str, *extra: str,
             line: str = "default") -> Path:
    """The old release on the real checkpoint and sink, plain spark-submit, until Kafka is read (availableNow)."""
    real = tmp / "real"
    args = [a.replace("{bootstrap_servers}", bs).replace("{checkpoint}", str(real / "checkpoint"))
            .replace("{output}", str(real / "sink")) for a in _args(topic, second, release, sink, *extra)]
    driver = h.submit(runtime(line), APP, [*args, "--available-now"], tmp / "old.log")
    assert driver.wait(240) == 0, driver.text()[-3000:]
    assert h.newest(real / "checkpoint", "commits") >= 0
    return real


def _spec(tmp: Path, topic: str, args: tuple[str, ...], *, application: Path = APP, line: str = "default",
          main_class: str | None = None, **conf: str) -> JobSpec:
    """The registry entry of the job; the Kafka connector as local jars (as on a cluster: no Ivy at start)."""
    real = tmp / "real"
    rt = runtime(line)
    return JobSpec(name="users-report", application=str(application), main_class=main_class, topics=(topic,),
                   checkpoint=str(real / "checkpoint"), backup_root=str(tmp / "backups"),
                   stop_marker=str(real / "STOP"), output=str(real / "sink"), sink=Sink.IDEMPOTENT,
                   spark_conn_id="spark_probe_users", compatibility_probe=True, integration=Integration.AGENT,
                   spark_version=rt.version,
                   spark_conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "640m",
                               "spark.jars": ",".join(str(j) for j in rt.kafka_jars()), **conf},
                   application_args=args)


def _probe(spec: JobSpec, bs: str, **kw) -> probe.ProbeResult:
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    return probe.probe_application(spec, kafka_config={"bootstrap.servers": bs}, target=spark_target(spec),
                                   timeout_s=300, **kw)


@pytest.fixture(scope="module")
def old_runs(stack, tmp_path_factory):
    """One real run per old release, shared by the cases (each probe must leave it byte-identical)."""
    bs, topic, second = stack
    cache: dict[tuple[str, str, str], Path] = {}

    def get(release: str, sink: str, line: str = "default") -> Path:
        if (release, sink, line) not in cache:
            tmp = tmp_path_factory.mktemp(f"old-{release}-{line}")
            _old_run(tmp, bs, topic, second, release, sink, line=line)
            cache[(release, sink, line)] = tmp
        return cache[(release, sink, line)]
    return get


@contextlib.contextmanager
def spark_line(line: str):
    """The product's spark-submit (found on PATH, as on a worker) is this runtime's."""
    rt = runtime(line)
    with pytest.MonkeyPatch.context() as mp:
        if line != "default":
            mp.setenv("SPARK_HOME", str(rt.home))
            mp.setenv("PATH", f"{rt.home / 'bin'}{os.pathsep}{os.environ['PATH']}")
            mp.setenv("PYSPARK_PYTHON", str(rt.python))
        yield rt


@pytest.mark.parametrize("case", list(CASES))
def test_probe_of_a_users_pyspark_job(case, stack, old_runs):
    bs, topic, second = stack
    old, old_sink, new, new_sink, expected, error_class = CASES[case]
    tmp = old_runs(old, old_sink)
    real = tmp / "real"
    before = digest(real)
    result = _probe(_spec(tmp, topic, _args(topic, second, new, new_sink)), bs)
    print(f"{case}: {result.answer} in {result.seconds}s, class {result.error_class}: {result.reason}")
    assert digest(real) == before, "the probe touched the real checkpoint or sink"
    assert result.answer is expected, result
    assert result.error_class == error_class, result
    # auto on the unchanged job (compatibility_version not bumped): breaking resets with preserve, compatible keeps
    decision = safe_restart.decide("auto", registry_compat="1", recorded_compat="1", probe=result)
    assert decision.action is (safe_restart.RestartAction.RESET if expected is B else safe_restart.RestartAction.KEEP)
    assert decision.reset_mode is (ResetMode.PRESERVE if expected is B else None)


def test_two_queries_each_on_its_own_checkpoint(stack, old_runs):
    """The application runs a second query (``--totals``) on ``<checkpoint>-totals`` into ``<out>-totals``:
    both sinks are replaced, the second query's checkpoint is a fresh one inside the probe's folder,
    and neither real checkpoint nor real sink changes; the compatible answer needs both queries ended."""
    bs, topic, second = stack
    tmp = old_runs("base", "foreach")
    real = tmp / "real"
    before = digest(real)
    result = _probe(_spec(tmp, topic, _args(topic, second, "projection", "foreach", "--totals")), bs)
    print(f"two queries: {result.answer} in {result.seconds}s: {result.reason}")
    assert digest(real) == before
    assert result.answer is C, result


def test_a_sink_that_was_not_replaced_halts_before_its_first_batch(stack, old_runs):
    """The start check alone (the rewrite switched off by a test-only conf), with the application's
    output hard-coded to the real sink: the driver halts before the first batch, nothing is written,
    and the answer is ``unknown``."""
    bs, topic, second = stack
    tmp = old_runs("base", "foreach")
    real = tmp / "real"
    before = digest(real)
    args = tuple(str(real / "sink") if a == "{output}" else a for a in _args(topic, second, "base", "foreach"))
    result = _probe(_spec(tmp, topic, args, **{"spark.aks.agent.probe.testSkipRewrite": "true"}), bs)
    print(f"unreplaced sink: {result.answer} in {result.seconds}s: {result.reason}")
    assert digest(real) == before
    assert result.answer is U and "could not replace the sink" in result.reason, result


def test_killed_midway(stack, old_runs, tmp_path):
    """SIGKILL of the probe's driver while its query is active: the real checkpoint and sink are unchanged."""
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.airflow_glue.spark import spark_target
    from airflow_kafka_spark.runtime import probe_agent

    bs, topic, second = stack
    tmp = old_runs("agg", "foreach")
    real = tmp / "real"
    before = digest(real)
    spec = _spec(tmp, topic, _args(topic, second, "agg", "foreach"))
    scratch = open_location(str(tmp_path / "scratch"))
    staged = probe.stage_checkpoint(spec.checkpoint, scratch.child("checkpoint").url)
    assert staged is not None
    cmd, env = probe_agent.command(spec, staged.location, scratch, kafka_config={"bootstrap.servers": bs},
                                   target=spark_target(spec))
    (tmp_path / "scratch" / "STOP").touch()
    with open(tmp_path / "driver.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline, active = time.monotonic() + 240, False
        report = tmp_path / "scratch" / probe_agent.REPORT_NAME
        while not active and time.monotonic() < deadline and proc.poll() is None:
            doc = json.loads(report.read_text()) if report.exists() else {}
            active = any(q.get("status") == "active" for q in doc.get("queries") or [])
            time.sleep(0.05)
        assert active and proc.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert digest(real) == before
    assert (tmp_path / "scratch" / "checkpoint" / "offsets").is_dir()


@pytest.mark.spark35
def test_java_application_with_its_checkpoint_in_its_own_config_file_spark35(stack, tmp_path):
    """The Java application reads checkpoint and output from its properties file (no ``{checkpoint}`` to
    fill in): the agent moves the registry's checkpoint onto the copy in the plan itself. Spark 3.5.1:
    v1 -> v2 (``dropDuplicates`` added) is breaking (3.5's missing state file), v1 -> v1 compatible."""
    from devstack import user_jobs

    bs, topic, _ = stack
    rt = runtime("3.5")
    real = tmp_path / "real"
    props = user_jobs.write_properties(tmp_path / "orders.properties", bootstrap=bs, topic=topic,
                                       checkpoint=real / "checkpoint", output=real / "sink")
    jars = {v: user_jobs.build("3.5", v) for v in ("v1", "v2")}
    marker = tmp_path / "stop"
    from airflow_kafka_spark import agent

    conf = agent.agent_conf(str(marker), str(real / "checkpoint"), str(tmp_path / "run.agent.json"), rt.version, {})
    driver = h.submit(rt, jars["v1"], [str(props)], tmp_path / "v1.log", conf=conf, main_class=user_jobs.MAIN_CLASS)
    try:
        deadline = time.monotonic() + 180
        while (driver.proc.poll() is None and h.newest(real / "checkpoint", "commits") < 0
               and time.monotonic() < deadline):
            time.sleep(0.3)
        marker.touch()
        assert driver.wait(90) == 0, driver.text()[-3000:]
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    before = digest(real)
    answers = {}
    for variant in ("v2", "v1"):
        spec = _spec(tmp_path, topic, (str(props),), application=jars[variant], line="3.5",
                     main_class=user_jobs.MAIN_CLASS)
        with spark_line("3.5"):
            answers[variant] = _probe(spec, bs)
        print(f"java 3.5 {variant}: {answers[variant].answer} in {answers[variant].seconds}s "
              f"class {answers[variant].error_class}: {answers[variant].reason}\n{answers[variant].log_tail}")
        assert digest(real) == before
    assert answers["v2"].answer is B, answers["v2"]
    assert answers["v1"].answer is C, answers["v1"]


@pytest.mark.spark35
@pytest.mark.parametrize("case", ["new-aggregation-column"])
def test_probe_of_a_users_pyspark_job_spark35(case, stack, old_runs):
    """The 3.5 line of the agent (its own ``WriteToStream`` copy, 8 fields) on the same PySpark job, for the
    change Spark 3.5 raises without an error class. (A missing state folder on 3.5, breaking, and the
    compatible case are the Java job's test above; the source count is the product's own check, the same on
    every line: the other three changes ran here too until the CI budget asked for their time.)"""
    bs, topic, second = stack
    old, old_sink, new, new_sink, expected, _ = CASES[case]
    classes = {"new-stateful-operator": probe.STATE_MISSING, "new-aggregation-column": "StateSchemaNotCompatible",
               "stateless-projection": None, "number-of-sources": probe.SOURCE_COUNT_CHANGED}
    tmp = old_runs(old, old_sink, "3.5")
    real = tmp / "real"
    before = digest(real)
    with spark_line("3.5"):
        result = _probe(_spec(tmp, topic, _args(topic, second, new, new_sink), line="3.5"), bs)
    print(f"3.5 {case}: {result.answer} in {result.seconds}s, class {result.error_class}: {result.reason}")
    assert digest(real) == before, "the probe touched the real checkpoint or sink"
    assert (result.answer, result.error_class) == (expected, classes[case]), result


def test_a_file_sink_on_the_real_output_path_is_never_touched(stack, old_runs):
    """The new release writes Spark's parquet file sink to the **real** output path, hard-coded in its
    arguments: ``start()`` builds the file sink, whose metadata log makes ``<out>/_spark_metadata``
    before the probe's rule runs; the file manager's fence skips that folder, the rule swaps the sink,
    and not even a folder appears under the real path."""
    bs, topic, second = stack
    tmp = old_runs("base", "foreach")
    real = tmp / "real"
    before = digest(real)
    args = tuple(str(real / "sink") if a == "{output}" else a for a in _args(topic, second, "base", "parquet"))
    result = _probe(_spec(tmp, topic, args), bs)
    print(f"file sink on the real path: {result.answer} in {result.seconds}s: {result.reason}")
    assert digest(real) == before
    assert result.answer is C, result


SAME_PLACE = """
import org.apache.hadoop.conf.Configuration;
public class SamePlace {
  public static void main(String[] a) {
    Configuration c = new Configuration();
    for (int i = 0; i < a.length; i += 2) {
      String ref = aks.agent.Probe.qualify(a[i + 1], c);
      System.out.println(ref.equals(aks.agent.Probe.qualifyOn(a[i], a[i + 1], c)));
    }
  }
}
"""


def test_the_agent_sees_one_checkpoint_however_hdfs_is_spelled(tmp_path):
    """The agent's checkpoint compare (``Probe.qualifyOn``, Hadoop's ``checkPath`` inside
    ``FileSystem.makeQualified``) on Spark 4.2's own Hadoop client: the NameNode's default port
    written or not, its host by name or address, are one place; another port, another path or another
    file system are not. No NameNode needed: Hadoop decides this without a call."""
    rt = runtime("default")
    from airflow_kafka_spark import agent

    src = tmp_path / "SamePlace.java"
    src.write_text(SAME_PLACE)
    pairs = [("hdfs://localhost:8020/ck", "hdfs://localhost/ck", True),
             ("hdfs://localhost/ck/", "hdfs://localhost:8020/ck", True),
             ("hdfs://127.0.0.1:8020/ck", "hdfs://localhost/ck", True),
             ("hdfs://localhost:9000/ck", "hdfs://localhost/ck", False),
             ("hdfs://localhost/ck2", "hdfs://localhost/ck", False),
             ("file:/ck", "hdfs://localhost/ck", False),
             ("/tmp/ck", "file:///tmp/ck", True),
             ("/ck", "hdfs://localhost/ck", False)]   # no scheme: the default file system's (local here), as for Spark
    cp = f"{agent.jar_for(rt.version)}{os.pathsep}{rt.home / 'jars' / '*'}"
    proc = subprocess.run(["java", "-cp", cp, str(src), *[x for a, b, _ in pairs for x in (a, b)]],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = [ln == "true" for ln in proc.stdout.split()]
    assert got == [same for *_, same in pairs], list(zip(pairs, got, strict=False))


def test_a_changed_group_state_schema_spark4(stack, tmp_path_factory):
    """``applyInPandasWithState`` keeps its own state: release ``state`` with ``records long``,
    ``state_v2`` with ``records long, bytes long`` (Spark 4.2). The oracle is Spark's own restart of
    ``state_v2`` with new records, on a copy of the old checkpoint; the probe, with no new data, must
    give its answer and class, and leave the real checkpoint and sink byte-identical."""
    import shutil

    bs, _, second = stack
    topic = "probe-users-state"
    topics.create_topic(bs, topic, 2)
    produce(bs, topic, 40, partitions=2)
    tmp = tmp_path_factory.mktemp("group-state")
    real = _old_run(tmp, bs, topic, second, "state", "foreach")
    before = digest(real)
    result = _probe(_spec(tmp, topic, _args(topic, second, "state_v2", "foreach")), bs)
    print(f"group state schema: {result.answer} in {result.seconds}s, class {result.error_class}: {result.reason}")
    assert digest(real) == before, "the probe touched the real checkpoint or sink"

    oracle = tmp / "oracle"
    shutil.copytree(real / "checkpoint", oracle / "checkpoint")
    produce(bs, topic, 10, partitions=2)
    args = [a.replace("{bootstrap_servers}", bs).replace("{checkpoint}", str(oracle / "checkpoint"))
            .replace("{output}", str(oracle / "sink")) for a in _args(topic, second, "state_v2", "foreach")]
    driver = h.submit(runtime("default"), APP, [*args, "--available-now"], tmp / "oracle.log")
    rc = driver.wait(240)
    refusal = probe.checkpoint_refusal(driver.text())
    print(f"group state schema: Spark's own restart exited {rc}, refusal {refusal}")
    assert rc is not None
    spark_says = (C, None) if rc == 0 else (B, refusal)
    assert (result.answer, result.error_class) == spark_says, (result, driver.text()[-3000:])
    # What Spark 4.2.0 did (docs/probe.md): it checks the group state's value schema and refuses the change.
    assert spark_says == (B, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"), driver.text()[-3000:]
