"""Helpers for the tests that run the provider in real Airflow: a registry, connections, inline DAG runs,
fake checkpoints and submits, and the check that a secret is nowhere.

Shared by the Airflow, UI, soak, DStream and cluster tests (they lived in ``tests/airflow/test_operators.py``,
which still re-exports them for modules not moved yet).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import app_versions, detach
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint
from tests.support.dag_runs import RunResult, collect

# Random per session, so that the value is in no source file: Airflow stores DAG files' source in the
# metadata DB (dag_code), and the "not in any file under $AIRFLOW_HOME" check must mean the connection.
SECRET = f"s3cr3t-sasl-{uuid.uuid4().hex}"
_dag_ids = itertools.count()


# --------------------------------------------------------------------------------------------------
# registry, connections, inline DAG runs, the secret
# --------------------------------------------------------------------------------------------------

def write_registry(path: Path, jobs: list[dict[str, Any]], **defaults: Any) -> Path:
    """A job registry whose state lives under ``$AKS_DATA_DIR`` (set by the caller)."""
    doc = {
        "version": 1,
        "vars": {"data": "${AKS_DATA_DIR}"},
        "allowed_roots": ["${data}", "${AKS_PACKAGE_DIR}/jobs"],
        "defaults": {
            "application": "${AKS_PACKAGE_DIR}/jobs/reference_job.py",
            "integration": "reference",   # the bundled job's flags (registry.model.Integration)
            "checkpoint": "${data}/checkpoints/{name}",
            "output": "${data}/sinks/{name}",
            "backup_root": "${data}/backups",
            "stop_timeout_s": 60,
            "health_gate": {"min_batches": 2, "timeout_s": 150},
            **defaults,
        },
        "jobs": jobs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def kafka_conn(bootstrap: str, **extra: str) -> str:
    return json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap, **extra}})


SPARK_LOCAL_CONN = json.dumps({"conn_type": "spark", "host": "local[2]"})


def run_inline(dag: Any, conf: dict[str, Any] | None = None) -> RunResult:
    """``dag.test()`` for a DAG built in the test: registered in the dags-folder bundle by hand first
    (``dag.test()`` refuses DAGs that are not serialized)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder="/nonexistent", collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    started = time.perf_counter()
    dr = dag.test(run_conf=conf)
    return collect(dag.dag_id, dr.run_id, dr.state, time.perf_counter() - started)


def new_dag(**kwargs: Any) -> Any:
    from airflow.sdk import DAG

    return DAG(f"aks_test_ops_{os.getpid()}_{next(_dag_ids)}", schedule=None, **kwargs)


def assert_no_secret(result: RunResult, *texts: str, secret: str = SECRET) -> None:
    """The secret is nowhere: XCom values, rendered template fields, the captured task logs (``dag.test()``
    writes task logs to the console), and no file under ``$AIRFLOW_HOME``, the metadata DB included."""
    assert secret not in json.dumps({f"{k[0]}/{k[1]}": v for k, v in result.xcoms.items()}, default=str)
    assert secret not in json.dumps(result.rendered, default=str)
    for text in texts:
        assert secret not in text
    # grep in another process: opening and closing the SQLite files from *this* process would drop
    # its POSIX locks on them (all of a process's fcntl locks on a file go with any close()), and the
    # next Airflow process to exit would then checkpoint and delete the WAL under this one's feet.
    found = subprocess.run(["grep", "-rlF", "--", secret, os.environ["AIRFLOW_HOME"]], capture_output=True,
                           text=True, timeout=60)
    assert found.returncode == 1 and not found.stdout, found.stdout + found.stderr


# --------------------------------------------------------------------------------------------------


@dataclass
class Env:
    data: Path
    registry: Path
    bootstrap: str
    topic: str

    def checkpoint(self, job: str) -> Path:
        return self.data / "checkpoints" / job


def fake_checkpoint(env: Env, job: str, *, batches: int = 3, rpb: int = 5) -> Path:
    """A checkpoint of ``job`` with ``batches`` committed batches of ``rpb`` records per partition."""
    ck = env.checkpoint(job)
    write_checkpoint(ck, batches=batches, sources=({env.topic: 2},), records_per_batch=rpb,
                     start_timestamp_ms=int(time.time() * 1000) - batches * 1000)
    return ck


def add_batch(ck: Path, topic: str, batch_id: int, end: int) -> None:
    """Append ``offsets/<id>`` and ``commits/<id>`` as a running query does."""
    line = json.dumps({topic: {"0": end, "1": end}}, separators=(",", ":"))
    (ck / "offsets" / str(batch_id)).write_bytes(offsets_file([line], batch_timestamp_ms=int(time.time() * 1000)))
    (ck / "commits" / str(batch_id)).write_bytes(commit_file())


def record_fake_submit(env: Env, job: str, pid: int, *, committed_before: int | None = None,
                       holder: str | None = None) -> LifecycleRecord:
    """What a submit records, for a driver that is any process (this test's own pid = alive).
    ``committed_before`` defaults to the checkpoint's last committed batch (nothing new yet)."""
    ck = str(env.checkpoint(job))
    record = LifecycleRecord.load_or_create(job, ck)
    from airflow_kafka_spark.checkpoint.reader import read_checkpoint

    state = read_checkpoint(ck)
    if committed_before is None and state.latest_committed is not None:
        committed_before = state.latest_committed.batch_id
    app_versions.record_submit(record, app_versions.SubmittedApp(
        app={"application": "app.py", "application_args": [], "compatibility_version": "7"},
        driver=DriverInfo(kind="local-pid", id=str(pid), host=socket.gethostname(), started_at=int(time.time() * 1000)),
        master="local[2]", deploy_mode=None, mode=detach.DETACH_LOCAL, committed_before=committed_before,
        query_id_before=state.query_id, log_path=None, starting_offsets_file=None, actor="test", holder=holder))
    record.save()
    return record


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
