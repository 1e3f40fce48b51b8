"""Issue 9 — is a replay into Spark's parquet (file) sink harmless? Spark is the oracle.

A pending batch (``offsets/N`` written, ``commits/N`` not) is re-run on restart with the same batch
id and the same offset range. ``FileStreamSink.addBatch`` skips a batch id that is not above the
latest one in ``<output>/_spark_metadata``, and readers that go through that log never see files a
batch wrote without reaching it. So the registry decides once (``Sink.PARQUET.replay_is_idempotent``)
that such a replay duplicates nothing, and validate, the hourly audit and the CLI's ``--sink parquet``
all say so: ``PENDING_BATCH_REPLAY`` at INFO, no ``duplicates_expected``. Reset's dry-run plan reads
the same pending records again (``pending_replay``) into a new checkpoint, whose file-sink log it
moves aside (S20). Each claim is checked against the restarted query's output.

Two crash points: after the sink's log entry (``_spark_metadata/N`` written: Spark skips the batch)
and before it (files written, no log entry: Spark writes the batch again and the log lists only the
new files; a reader that lists the folder without the log sees the orphans — said here, measured).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_kafka_spark.registry.model import JobSpec, Sink
from airflow_kafka_spark.verdict.options import DeployOptions
from airflow_kafka_spark.verdict.validate import validate
from airflow_kafka_spark.watch.audit.job import AuditChecks, audit_job
from devstack import oracle, topics
from devstack.produce import produce
from tests.support import spark_session

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _aks(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def _drop_latest(folder: Path) -> int:
    """Delete ``folder/<latest>`` and its checksum, as a crash before that file was renamed into place."""
    n = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    (folder / str(n)).unlink()
    (folder / f".{n}.crc").unlink(missing_ok=True)
    return n


def _rows_on_disk(out: Path) -> list[dict]:
    """Every parquet file in the output folder, as a reader that ignores ``_spark_metadata`` sees them."""
    rows: list[dict] = []
    for f in sorted(out.rglob("*.parquet")):
        if not any(part.startswith(("_", ".")) for part in f.relative_to(out).parts):
            rows.extend(pq.read_table(f).to_pylist())
    return rows


@pytest.mark.parametrize("crash", ["after_sink_log", "before_sink_log"])
def test_parquet_sink_replay_of_a_pending_batch_duplicates_nothing(broker, tmp_path, topic_name, crash):
    bootstrap, topic = broker.bootstrap_servers, topic_name
    topics.create_topic(bootstrap, topic, 3)
    ck, out = tmp_path / "checkpoint", tmp_path / "out"
    spec = JobSpec(name="orders", application=str(tmp_path / "job.py"), topics=(topic,), checkpoint=str(ck),
                   backup_root=str(tmp_path / "backups"), stop_marker=f"{ck}.stop", output=str(out),
                   sink=Sink.PARQUET)
    assert spec.replay_is_idempotent and spec.sink_output == str(out)

    produced = produce(bootstrap, topic, 300, partitions=3)
    first = spark_session.run_available_now(bootstrap, topic, ck, out, sink="parquet", max_offsets_per_trigger=60)
    assert first.ok, first.error
    assert oracle.compare(produced, oracle.read_sink(out, "parquet")).exact
    batch = _drop_latest(ck / "commits")                   # a crash after offsets/N, before commits/N
    if crash == "before_sink_log":
        assert _drop_latest(out / "_spark_metadata") == batch  # ... and before the sink's log entry
    files_before = sorted(p.name for p in out.glob("*.parquet"))

    # validate, as the operators build it for the job: one decision (the Sink) says "no duplicates"
    verdict = validate(checkpoint_location=str(ck), kafka_config={"bootstrap.servers": bootstrap},
                       options=DeployOptions.for_job(spec), record_identity=False)
    [pending] = verdict.by_code("PENDING_BATCH_REPLAY")
    announced = pending.numbers["records_to_replay"]
    assert announced > 0 and pending.numbers["batch_id"] == batch
    assert pending.severity == "INFO" and "duplicates_expected" not in pending.numbers, pending
    assert verdict.severity == "PASS", verdict.headline

    # the hourly audit judges the same checkpoint the same way (it used to build its own options)
    audit = audit_job(spec, {"bootstrap.servers": bootstrap}, checks=AuditChecks(verdict=True))
    assert audit.checkpoint.get("verdict") == str(verdict.severity), audit.checkpoint
    [audited] = [f for f in audit.checkpoint["findings"] if f["code"] == "PENDING_BATCH_REPLAY"]
    assert audited["severity"] == "INFO" and f"({announced:,} records" in audited["message"], audited

    # the CLI's --sink names the same decision; an append sink is the contrast
    base = ("validate", "--checkpoint", str(ck), "--bootstrap-servers", bootstrap, "--topics", topic,
            "--no-record", "--json")
    by_sink = {}
    for sink in ("parquet", "append"):
        res = _aks(*base, "--sink", sink)
        assert res.returncode == 0, res.stdout + res.stderr
        [f] = [f for f in json.loads(res.stdout)["findings"] if f["code"] == "PENDING_BATCH_REPLAY"]
        by_sink[sink] = f
    assert by_sink["parquet"]["severity"] == "INFO" and "duplicates_expected" not in by_sink["parquet"]["numbers"]
    assert by_sink["append"]["severity"] == "WARN" and by_sink["append"]["numbers"]["duplicates_expected"] == announced

    # reset's plan (dry run, new checkpoint, file-sink log moved aside) reads the same pending records again
    plan = _aks("reset", "--checkpoint", str(ck), "--backup-root", str(tmp_path / "backups"), "--mode", "preserve",
                "--bootstrap-servers", bootstrap, "--sink-output", spec.sink_output, "--sink-log", "move-aside",
                "--json")   # without --execute: the plan
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert json.loads(plan.stdout)["plan"]["totals"]["pending_replay"] == announced

    # Spark: restart on the same checkpoint; the oracle reads through the sink's log, as Spark readers do
    again = spark_session.run_available_now(bootstrap, topic, ck, out, sink="parquet")
    assert again.ok, again.error
    cmp = oracle.compare(produced, oracle.read_sink(out, "parquet"))
    assert cmp.exact, cmp.summary()                        # 0 duplicates, 0 missing: the INFO was right
    raw = oracle.compare(produced, _rows_on_disk(out))
    files_after = sorted(p.name for p in out.glob("*.parquet"))
    if crash == "after_sink_log":
        assert files_after == files_before                 # Spark skipped batch N: not one file written
        assert raw.exact, raw.summary()
    else:
        assert len(files_after) > len(files_before)        # batch N written again under the same id ...
        assert raw.duplicate_count == announced, raw.summary()  # ... its orphans visible only without the log
    print("PARQUET_REPLAY " + json.dumps({"crash": crash, "batch": batch, "announced": announced,
                                          "through_log": cmp.summary(), "whole_folder": raw.summary()}))
