"""Issue 10 acceptance — Spark is the oracle with the checkpoint on HDFS and on S3.

The local oracle tests (tests/integration/test_scenarios.py) with the checkpoint moved: Spark (the
shared local SparkSession, so restarts take seconds) writes it to ``hdfs://`` on the minicluster or
to ``s3a://`` on the S3 store, reading a real topic on the session broker. The scenario is set up
as there (retention deletes records; the topic is recreated; a batch is left between offsets/N and
commits/N), the product judges it through the command line users run (``aks validate --checkpoint
hdfs://…`` with ``HADOOP_CONF_DIR`` as on a worker; ``s3://…`` with ``--storage-option``), then
Spark restarts on the same checkpoint and the sink is counted against what Kafka acknowledged: the
verdict's severity and the count it announces (lost / skipped / replayed) must be what Spark did.
The observed rows are printed (``-s``) and kept in docs/scenarios.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devstack import oracle, topics
from tests.support import spark_session
from tests.support.scenario import Job, drop_latest, short, write_observed

pytestmark = [pytest.mark.cluster, pytest.mark.integration]

AKS = str(Path(sys.executable).with_name("aks"))
OBSERVED: list[dict] = []


@dataclass(frozen=True)
class Store:
    """Where the scenario's checkpoints go, as Spark names it and as the product opens it."""

    name: str                        # "HDFS" or "S3"
    spark_root: str                  # hdfs://… / s3a://…
    product_root: str                # hdfs://… / s3://…
    cli_options: dict[str, str]      # what `aks … --storage-option k=v` passes (strings only)
    env: dict[str, str] = field(default_factory=dict)      # the CLI's environment (as on a worker)
    options: dict[str, object] = field(default_factory=dict)  # in-process storage options (test helpers)


@pytest.fixture(scope="module")
def hdfs_store(hadoop) -> Store:
    # One DataNode: without this the client asks for 3 replicas of every checkpoint file.
    spark_session.set_hadoop_conf({"dfs.replication": "1"})
    # The CLI finds the NameNode's HTTP port in HADOOP_CONF_DIR, as on a worker; this process must not
    # set it (the shared SparkSession would take hdfs:// as its default file system), so the test's
    # own reads name the port as a storage option.
    root = f"{hadoop.default_fs}/scenarios"
    port = int(hadoop.webhdfs_address.rsplit(":", 1)[1])
    return Store("HDFS", root, root, {}, env={"HADOOP_CONF_DIR": str(hadoop.conf_dir)}, options={"port": port})


@pytest.fixture(scope="module")
def spark_s3a(s3) -> Store:
    """The S3 store for Spark (S3A) and for the product (s3fs); the session must carry hadoop-aws."""
    assert spark_session.has_s3a(), (
        f"the shared SparkSession started without hadoop-aws: tests/cluster/conftest.py sets "
        f"{spark_session.S3A_ENV} when a selected test uses the spark_s3a fixture; start the run with it set")
    spark_session.set_hadoop_conf(s3.spark_conf())
    options = {"key": s3.access_key, "secret": s3.secret_key, "endpoint_url": s3.endpoint}
    return Store("S3", s3.s3a_url("scenarios"), s3.url("scenarios"), options, options=dict(options))


@pytest.fixture
def cluster_job(broker, tmp_path, topic_name):
    def make(store: Store, *, sink: str = "idempotent", partitions: int = 3) -> Job:
        topics.create_topic(broker.bootstrap_servers, topic_name, partitions)
        return Job(broker, tmp_path, [topic_name], sink, partitions,
                   spark_checkpoint=f"{store.spark_root}/{topic_name}/checkpoint",
                   checkpoint_url=f"{store.product_root}/{topic_name}/checkpoint",
                   storage_options=dict(store.options))

    return make


def aks_validate(store: Store, j: Job, *flags: str) -> dict:
    """``aks validate --json`` on the job's checkpoint, as a user runs it; the report, with its exit code."""
    cmd = [AKS, "validate", "--checkpoint", j.checkpoint_url, "--bootstrap-servers", j.bootstrap,
           "--topics", ",".join(j.topics), "--json", *flags]
    for key, value in store.cli_options.items():
        cmd += ["--storage-option", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=os.environ | store.env)
    assert proc.returncode in (0, 3), f"aks validate exited {proc.returncode}: {proc.stderr.strip()[-600:]}"
    report = json.loads(proc.stdout)
    assert report["exit_code"] == proc.returncode
    assert (proc.returncode == 3) == (report["verdict"] == "BLOCK")
    return report


def codes(report: dict) -> set[str]:
    return {f["code"] for f in report["findings"]} - {"OK"}


def findings(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def record(store: Store, scenario: str, report: dict, announced: str, spark: str) -> None:
    row = {"scenario": scenario, "store": store.name, "verdict": report["verdict"], "codes": sorted(codes(report)),
           "announced": announced, "spark": spark}
    OBSERVED.append(row)
    print("SCENARIO " + json.dumps(row))


def first_run(j: Job, n: int = 300, **options) -> None:
    j.produce(n)
    res = j.run(**options)
    assert res.ok, res.error
    assert j.compare().exact, j.compare().summary()


# --------------------------------------------------------------------------- S01


def retention_past_checkpoint(store: Store, j: Job) -> None:
    """S01, then S31: Spark fails with failOnDataLoss=true and skips exactly the lost records with false."""
    first_run(j, 300)
    j.produce(300)  # unread by the job
    committed = {tp.partition: off for tp, off in j.committed().items()}
    assert sum(committed.values()) == 300
    topics.delete_records(j.bootstrap, j.topics[0], {p: o + 40 for p, o in committed.items()})

    strict = aks_validate(store, j)
    assert strict["verdict"] == "BLOCK" and "OFFSET_BELOW_LOG_START" in codes(strict)
    announced = sum(f["numbers"]["records_lost"] for f in findings(strict, "OFFSET_BELOW_LOG_START"))
    assert announced == strict["summary"]["records_lost"] == 120
    res = j.run(fail_on_data_loss="true")
    assert not res.ok, "Spark should refuse to read deleted offsets"
    assert any(m in res.error for m in ("OffsetOutOfRange", "KAFKA_DATA_LOSS", "Cannot fetch")), short(res.error)
    record(store, "S01 retention past checkpoint (failOnDataLoss=true)", strict, f"records_lost={announced}",
           "fails: " + short(res.error, 90))

    lenient = aks_validate(store, j, "--fail-on-data-loss", "false")
    assert lenient["verdict"] == "BLOCK"
    assert {"OFFSET_BELOW_LOG_START", "FAIL_ON_DATA_LOSS_DISABLED"} <= codes(lenient)
    announced = lenient["summary"]["records_lost"]
    res = j.run(fail_on_data_loss="false")
    assert res.ok, res.error
    cmp = j.compare()
    assert len(cmp.missing) == announced == 120 and not cmp.duplicated and not cmp.unexpected, cmp.summary()
    record(store, "S01 retention past checkpoint (then failOnDataLoss=false)", lenient,
           f"records_lost={announced}", f"silently skipped {len(cmp.missing)} records")


def test_s01_retention_past_checkpoint_on_hdfs(hdfs_store, cluster_job):
    retention_past_checkpoint(hdfs_store, cluster_job(hdfs_store))


def test_s01_retention_past_checkpoint_on_s3(spark_s3a, cluster_job):
    j = cluster_job(spark_s3a)
    retention_past_checkpoint(spark_s3a, j)
    fs, root = j.filesystem()
    assert fs.exists(f"{root}/commits/0"), "the checkpoint is on the S3 store, where Spark wrote it"


# --------------------------------------------------------------------------- S03


def test_s03_topic_recreated_on_hdfs(hdfs_store, cluster_job):
    j = cluster_job(hdfs_store)
    first_run(j, 300)
    # the deploy before the incident validates, which keeps the topic ids in the lifecycle record on HDFS
    before = aks_validate(hdfs_store, j)
    assert before["verdict"] in ("PASS", "WARN"), before["headline"]
    fs, root = j.filesystem()
    assert fs.exists(f"{root}.lifecycle.json"), "validate keeps its lifecycle record beside the checkpoint"
    old_rows = j.sink_rows()
    topics.delete_topic(j.bootstrap, j.topics[0])
    topics.create_topic(j.bootstrap, j.topics[0], 3)
    new = j.produce(450)  # 150 per partition, above the checkpoint's 100

    report = aks_validate(hdfs_store, j)
    assert report["verdict"] == "BLOCK" and "TOPIC_RESET" in codes(report)
    reset = findings(report, "TOPIC_RESET")
    assert len(reset) == 3 and all(f["numbers"]["recorded_topic_id"] != f["numbers"]["topic_id"] for f in reset)
    # the verdict names where Spark would resume in the new log: everything below is skipped
    announced = sum(f["numbers"]["checkpoint_offset"] - f["numbers"]["log_start"] for f in reset)
    res = j.run()
    assert res.ok, "Spark does not notice a recreated topic with more records"
    first_run_batches = {r["batch_id"] for r in old_rows}
    cmp = oracle.compare(new, [r for r in j.sink_rows() if r["batch_id"] not in first_run_batches])
    assert len(cmp.missing) == announced == 300 and not cmp.duplicated, cmp.summary()
    record(hdfs_store, "S03 topic recreated, more records", report, f"skipped={announced} (offset − log start)",
           f"starts silently, skipped {len(cmp.missing)} new records")


# --------------------------------------------------------------------------- S07


def test_s07_pending_batch_replay_on_hdfs(hdfs_store, cluster_job):
    j = cluster_job(hdfs_store, sink="append")
    j.produce(300)
    assert j.run(max_offsets_per_trigger=60).ok
    last = drop_latest(j, "commits")  # crash after offsets/N, before commits/N

    report = aks_validate(hdfs_store, j, "--sink", "append")
    assert report["verdict"] == "WARN", report["headline"]
    [pending] = findings(report, "PENDING_BATCH_REPLAY")
    assert pending["numbers"]["batch_id"] == last
    announced = pending["numbers"]["records_to_replay"]
    assert announced > 0 and announced == report["summary"]["records_to_replay"]
    res = j.run()
    assert res.ok, res.error
    cmp = j.compare()
    assert not cmp.missing and not cmp.unexpected and cmp.duplicate_count == announced, cmp.summary()
    record(hdfs_store, "S07 half-written batch (non-idempotent sink)", report, f"records_to_replay={announced}",
           f"replayed batch {last}: {cmp.duplicate_count} dups")


# --------------------------------------------------------------------------- snapshot backups of Spark's files


def test_a_snapshot_backup_of_a_checkpoint_spark_wrote_restores_where_spark_resumes(hdfs_store, cluster_job,
                                                                                   topic_name):
    """A snapshot backup (ops/backup/snapshot.py) of the files Spark itself wrote to HDFS: Spark writes
    them without HDFS checksums, so the cluster cannot name their content; the backup must still
    publish, verify deep, and restore a checkpoint from which Spark resumes at the backup's batch."""
    from airflow_kafka_spark._util.stores import webhdfs_file_checksum
    from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
    from airflow_kafka_spark.ops.backup.snapshot import READ_SHA256
    from airflow_kafka_spark.ops.backup.store import verify_backup
    from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint

    j = cluster_job(hdfs_store)
    fs, ck_path = j.filesystem()
    parent = ck_path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    fs._call("ALLOWSNAPSHOT", "put", parent)   # what `hdfs dfsadmin -allowSnapshot` does (superuser)
    first_run(j, 300, stateful="dedup")
    with pytest.raises(RuntimeError):   # Spark turned the checksums off: the NameNode has none to give
        webhdfs_file_checksum(fs, f"{ck_path}/commits/0")

    root = f"{hdfs_store.product_root}/{topic_name}-backups"
    stores = {"storage_options": hdfs_store.options, "backup_storage_options": hdfs_store.options}
    pre = precopy_checkpoint(j.checkpoint_url, root, job="snap", **stores)
    backup = backup_checkpoint(j.checkpoint_url, root, job="snap", settle_s=0, **stores)
    m = backup.manifest
    state = [f for f in m.files if f.path.startswith("state/")]
    assert m.snapshot and state and pre.files_read == pre.files == len(m.files)
    assert all(f.sha256.startswith(READ_SHA256) for f in m.files), "Spark's files carry no cluster checksum"
    assert backup.files_hashed == 0 and backup.bytes_written == 0   # all named by the pre-copy; nothing copied
    assert verify_backup(root, "snap", m.backup_id, deep=True, storage_options=hdfs_store.options)
    committed = j.committed()

    j.produce(200)
    assert j.run(stateful="dedup").ok
    assert j.committed() != committed
    restored = restore_checkpoint(j.checkpoint_url, root, m.backup_id, {"bootstrap.servers": j.bootstrap},
                                  job="snap", backup_settle_s=0, **stores)
    assert restored.restored and j.committed() == committed
    # Spark is the oracle: from the restored checkpoint (its dedup state included) it reads exactly the 200
    # records produced after the backup again: not the 500 of a fresh start, not none
    j.output = j.root / "out-restored"
    res = j.run(stateful="dedup")
    assert res.ok, res.error
    cmp = j.compare(j.produced[300:])
    assert cmp.exact, cmp.summary()
    assert min(r["batch_id"] for r in j.sink_rows()) == m.last_committed_batch + 1


# --------------------------------------------------------------------------- bad input


def test_s3_checkpoint_without_credentials_is_one_line(s3, broker, tmp_path):
    """No key/secret anywhere: one line naming the settings, exit 2, and nothing written to the store."""
    fs = s3.filesystem()
    before = sorted(fs.find(s3.url()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true"}
    proc = subprocess.run([AKS, "validate", "--checkpoint", s3.url("scenarios/nobody/checkpoint"),
                           "--bootstrap-servers", broker.bootstrap_servers,
                           "--storage-option", f"endpoint_url={s3.endpoint}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-800:]
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-800:]
    assert proc.stderr.startswith("error: no credentials") and "AWS_ACCESS_KEY_ID" in proc.stderr
    assert sorted(fs.find(s3.url())) == before


@pytest.fixture(scope="module", autouse=True)
def _write_observed_table():
    yield
    write_observed(OBSERVED, "scenarios-cluster-observed")
