"""Every kind of refusal (:class:`~airflow_kafka_spark.errors.BlockReason`) is an ``OperationBlocked``, exit 3.

One test per kind: the core call raises it with its typed reason (what callers test, never the
message), and where ``aks`` reaches the refusal, the real command line exits 3 and its ``--json``
``code`` is the reason's value (or, for a plan that blocks, the finding's code). Nothing is changed
by a refusal: each test checks the files too. ``ALREADY_RUNNING`` has no command line (a submit is
an Airflow task), so it is checked on the submit itself, for each of its three situations.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.errors import BlockReason, ExitCode, OperationBlocked
from airflow_kafka_spark.lifecycle.journal import Journal
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.commands import backup_checkpoint, reset_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.ops.recover import finish_interrupted
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

AKS = Path(sys.executable).with_name("aks")
JOB = "orders"
OP_ID = "20260101T000000Z-abcdef"
NO_KAFKA = "127.0.0.1:1"   # never contacted: each refusal below comes before Kafka is asked


def aks(*args: str) -> tuple[int, dict]:
    res = subprocess.run([str(AKS), *args, "--json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def blocked(call, reason: BlockReason) -> OperationBlocked:
    with pytest.raises(OperationBlocked) as info:
        call()
    assert info.value.reason is reason and info.value.exit_code == ExitCode.BLOCKED == 3, info.value
    return info.value


def journaled_reset(tmp_path: Path):
    """A checkpoint with a reset journal written at its commit point (as ``reset.journaled`` leaves it)."""
    ck = write_checkpoint(tmp_path / "ck", batches=5)
    LifecycleRecord.create(JOB, ck.location).save()
    payload = {"job": JOB, "actor": None, "request": {"mode": "preserve", "accept_data_loss": False},
               "backup_root": str(tmp_path / "b"), "backup_id": "x", "aside": f"{ck.location}.reset-{OP_ID}",
               "sink_output": None, "sink_aside": None, "starting_offsets": '{"orders":{"0":50,"1":50}}',
               "old_query_id": ck.query_id, "skipped": 0, "replayed": 0, "pending_replay": 0, "plan": {}}
    Journal.begin(open_location(ck.location), "reset", OP_ID, payload)
    return ck


def test_query_running(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2)
    LifecycleRecord.create(JOB, ck.location).save()
    LifecycleRecord.load(ck.location).acquire_lease("airflow-run-5", 600)
    before = tree(tmp_path)
    blocked(lambda: backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0),
            BlockReason.QUERY_RUNNING)
    blocked(lambda: reset_checkpoint(ck.location, str(tmp_path / "b"), {"bootstrap.servers": NO_KAFKA},
                                     ResetRequest(mode="preserve")), BlockReason.QUERY_RUNNING)
    for argv in (["backup", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB],
                 ["reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB,
                  "--bootstrap-servers", NO_KAFKA, "--mode", "preserve", "--execute"]):
        code, doc = aks(*argv)
        assert (code, doc["code"], doc["exit_code"]) == (3, BlockReason.QUERY_RUNNING.value, 3), (argv, doc)
    assert tree(tmp_path) == before


def test_plan_blocked(broker, tmp_path, topic_name):
    """The plan's verdict blocks (the checkpoint is ahead of what Kafka holds): the reason is PLAN_BLOCKED and
    ``code`` the blocking finding's."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 10, partitions=2)       # 5 per partition; the checkpoint says 20
    ck = write_checkpoint(tmp_path / "ck", batches=2, sources=({topic_name: 2},), records_per_batch=10,
                          start_timestamp_ms=int(time.time() * 1000) - 2000)
    before = tree(tmp_path)
    err = blocked(lambda: reset_checkpoint(ck.location, str(tmp_path / "b"),
                                           {"bootstrap.servers": broker.bootstrap_servers},
                                           ResetRequest(mode="preserve"), job=JOB, run=RunOptions(backup_settle_s=0)),
                  BlockReason.PLAN_BLOCKED)
    blocking = {f["code"] for f in err.details["plan"]["findings"] if f["severity"] == "BLOCK"}
    assert err.code not in {r.value for r in BlockReason} and err.code in blocking, err.details
    code, doc = aks("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB,
                    "--bootstrap-servers", broker.bootstrap_servers, "--mode", "preserve", "--execute")
    assert (code, doc["code"]) == (3, err.code), doc
    assert tree(tmp_path) == before


def test_interrupted_operation(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2)
    Journal.begin(open_location(ck.location), "reset", OP_ID, {"aside": "x"})
    before = tree(tmp_path)
    blocked(lambda: backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0),
            BlockReason.INTERRUPTED_OPERATION)
    code, doc = aks("backup", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB)
    assert (code, doc["code"]) == (3, BlockReason.INTERRUPTED_OPERATION.value), doc
    assert tree(tmp_path) == before


def test_stale_interrupted_operation(tmp_path):
    """Finishing the interrupted reset would pull the checkpoint from under the job that now holds the lease."""
    ck = journaled_reset(tmp_path)
    LifecycleRecord.load(ck.location).acquire_lease("airflow-run-7", 600)
    before = tree(tmp_path)
    blocked(lambda: finish_interrupted(open_location(ck.location)), BlockReason.STALE_INTERRUPTED_OPERATION)
    code, doc = aks("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB,
                    "--bootstrap-servers", NO_KAFKA, "--mode", "preserve", "--execute")
    assert (code, doc["code"]) == (3, BlockReason.STALE_INTERRUPTED_OPERATION.value), doc
    assert tree(tmp_path) == before


def test_interrupted_operation_finished(tmp_path):
    """A reset asked for another mode finishes the interrupted one first, then refuses to start its own."""
    ck = journaled_reset(tmp_path)
    code, doc = aks("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB,
                    "--bootstrap-servers", NO_KAFKA, "--mode", "earliest", "--execute")
    assert (code, doc["code"]) == (3, BlockReason.INTERRUPTED_OPERATION_FINISHED.value), doc
    assert not (tmp_path / "ck.operation.json").exists()                  # the interrupted reset was finished
    assert Path(f"{ck.location}.reset-{OP_ID}").is_dir()                  # (its checkpoint moved aside)
    ck2 = journaled_reset(tmp_path / "again")
    blocked(lambda: reset_checkpoint(ck2.location, str(tmp_path / "again" / "b"), {"bootstrap.servers": NO_KAFKA},
                                     ResetRequest(mode="earliest")), BlockReason.INTERRUPTED_OPERATION_FINISHED)


# -- ALREADY_RUNNING: a submit that would start a second driver on the checkpoint -----------------------------

@pytest.fixture
def job(tmp_path):
    import yaml

    from airflow_kafka_spark.registry.loader import load_registry

    (tmp_path / "data").mkdir()
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "job.py").write_text("print('job')\n")
    doc = {"version": 1, "allowed_roots": [str(tmp_path / "data"), str(tmp_path / "apps")],
           "defaults": {"application": str(tmp_path / "apps" / "job.py"),
                        "checkpoint": f"{tmp_path}/data/checkpoints/{{name}}",
                        "backup_root": f"{tmp_path}/data/backups/{{name}}",
                        "output": f"{tmp_path}/data/sinks/{{name}}"},
           "jobs": [{"name": JOB, "topics": ["orders"], "sink": "idempotent"}]}
    (tmp_path / "streaming_jobs.yaml").write_text(yaml.safe_dump(doc))
    spec = load_registry(tmp_path / "streaming_jobs.yaml").get(JOB)
    write_checkpoint(spec.checkpoint, batches=2)
    return spec


def submit(spec, holder: str = "dag/run_2/submit"):
    from airflow_kafka_spark.runtime import start_stop
    from airflow_kafka_spark.runtime.submit import SparkTarget

    target = SparkTarget(master="local[2]", deploy_mode=None, spark_binary="spark-submit",
                         build_command=lambda kwargs, app: ["/bin/false", app])   # a start would fail, loudly
    return start_stop.submit_job(spec, kafka_config={"bootstrap.servers": NO_KAFKA}, target=target,
                                 by=start_stop.Submitter(actor="test", holder=holder, run_id="run_2"),
                                 log=logging.getLogger("test"))


def test_an_argument_yarn_would_change_on_its_way_to_the_driver_is_refused_before_anything(job):
    """Round 25 of docs/benchmarks.md: a NodeManager deleted the '}}' of a cluster-mode driver's offsets JSON."""
    import dataclasses

    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.runtime import start_stop
    from airflow_kafka_spark.runtime.submit import SparkTarget

    def cluster_submit(args):
        target = SparkTarget(master="yarn", deploy_mode="cluster", spark_binary="spark-submit",
                             build_command=lambda kwargs, app: ["/bin/false", app])
        return start_stop.submit_job(dataclasses.replace(job, application_args=args),
                                     kafka_config={"bootstrap.servers": NO_KAFKA}, target=target,
                                     by=start_stop.Submitter(actor="test", holder="dag/run_2/submit", run_id="run_2"),
                                     log=logging.getLogger("test"))

    before = sorted(p.name for p in Path(job.checkpoint).parent.iterdir())
    with pytest.raises(UserError) as info:   # the registry's doubled braces: the job's argument is {"t":{"0":5}}
        cluster_submit(("--offsets", '{{"t":{{"0":5}}}}'))
    message = str(info.value)
    assert "\n" not in message and '{"t":{"0":5}}' in message and "write '} }'" in message, message
    assert sorted(p.name for p in Path(job.checkpoint).parent.iterdir()) == before   # no record, no lock
    for fine in (("--offsets", '{{"t":{{"0":5}} }}'), ("--dir", "{{{{PWD}}}}/x")):   # past this check
        with pytest.raises(UserError) as info:
            cluster_submit(fine)
        assert "parameter expansion" not in str(info.value) and "ResourceManager" in str(info.value), info.value


def test_already_running_another_runs_lease(job):
    LifecycleRecord.load_or_create(JOB, job.checkpoint).acquire_lease("other_dag/run_1/submit", 300, run_id="run_1")
    err = blocked(lambda: submit(job), BlockReason.ALREADY_RUNNING)
    assert "leased by other_dag/run_1/submit" in str(err)
    assert LifecycleRecord.load(job.checkpoint).driver is None


def test_already_running_a_live_recorded_driver(job):
    from airflow_kafka_spark.runtime import app_versions, detach

    record = LifecycleRecord.load_or_create(JOB, job.checkpoint)
    me = DriverInfo(kind="local-pid", id=str(os.getpid()), host=socket.gethostname(),
                    started_at=int(time.time() * 1000))                  # this test's process: alive
    app_versions.record_submit(record, app_versions.SubmittedApp(
                               app={"application": "app.py", "application_args": [],
                                            "compatibility_version": "7"}, driver=me, master="local[2]",
                               deploy_mode=None, mode=detach.DETACH_LOCAL, committed_before=1, query_id_before=None,
                               log_path=None, starting_offsets_file=None, actor="test", holder="dag/run_1/submit"))
    record.save()
    blocked(lambda: submit(job), BlockReason.ALREADY_RUNNING)
    after = LifecycleRecord.load(job.checkpoint)
    assert after.driver.id == str(os.getpid()) and after.lease is None   # nothing replaced, the lease released


def test_already_running_a_driver_no_record_names(job):
    from airflow_kafka_spark.runtime import drivers

    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                             env={**os.environ, drivers.CHECKPOINT_ENV: job.checkpoint,
                                  drivers.SUBMITTER_ENV: "other_dag/run_9/submit"})
    try:
        wait_until(lambda: drivers.local_unrecorded(job.checkpoint), timeout=10, what="the stray's environment")
        err = blocked(lambda: submit(job), BlockReason.ALREADY_RUNNING)
        assert f"process group {stray.pid}" in str(err)
    finally:
        stray.kill()
        stray.wait()
    assert LifecycleRecord.load(job.checkpoint).driver is None


# -- two operations at once on one location (ops/guards.py): a second reset is refused, a second backup waits ---

def test_a_second_backup_waits_for_the_first_and_a_second_reset_is_refused_at_once(tmp_path):
    from airflow_kafka_spark._util.lock import LockFile
    from airflow_kafka_spark.errors import UserError
    from airflow_kafka_spark.ops.backup.catalog import job_location, list_backups, open_backup_root, store_path
    from airflow_kafka_spark.ops.backup.manifest import LOCK_NAME
    from airflow_kafka_spark.ops.guards import operation_lock

    ck = write_checkpoint(tmp_path / "ck", batches=2)
    root = tmp_path / "b"
    first = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    job_loc = job_location(open_backup_root(str(root)), JOB)
    with LockFile(store_path(job_loc, LOCK_NAME), what="a first backup of the job"):   # a backup in progress
        second = subprocess.Popen([str(AKS), "backup", "--checkpoint", ck.location, "--backup-root", str(root),
                                   "--job", JOB, "--settle", "0", "--json"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        assert second.poll() is None, second.communicate()            # waiting, not refused
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, (out, err)
    doc = json.loads(out)
    assert doc["backup"]["backup_id"] != first.backup_id, doc                      # published once the first ended
    assert {b.backup_id for b in list_backups(str(root), JOB).backups} == {first.backup_id, doc["backup"]["backup_id"]}

    with operation_lock(open_location(ck.location)):                  # a reset or restore in progress
        started = time.monotonic()
        with pytest.raises(UserError, match="is locked by pid") as info:
            reset_checkpoint(ck.location, str(root), {"bootstrap.servers": NO_KAFKA}, ResetRequest(mode="preserve"))
        assert time.monotonic() - started < 2 and not isinstance(info.value, OperationBlocked)   # at once, exit 2
