"""The compatibility probe against real Spark: its answer equals what a real restart of the changed query does.

For each kind of change: the old query runs a few batches on the real checkpoint and sink; the
probe (``runtime.probe``, spark-submit through the Spark provider's hook, local master) judges the
new query with **no new data in Kafka** (its staged copy gets an empty pending batch); then new
records arrive and Spark itself restarts the new query on a second copy of the checkpoint and sink
(the oracle). The probe must say ``breaking`` exactly when that restart fails, with the error
class Spark raised, and the real checkpoint and sink must be byte-identical afterwards.

Two cases (one breaking, one compatible) go the whole product path: a spark-submit built by the
Spark provider's hook from the job's connection (15–30 s each on an idle machine); the breaking one
through ``CompatibilityProbeOperator`` (registry entry = the old job, the new application's
arguments given to the operator), the other through ``probe_application``. The other
four run the same staged copy, the same ``--aks-probe`` job code and the same classification in
the tests' warm session (a few seconds each), which keeps this file near two minutes.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.jobs import reference_job
from airflow_kafka_spark.registry.model import Integration, JobSpec, Sink
from airflow_kafka_spark.runtime import probe
from devstack import topics
from devstack.produce import produce
from tests.support import spark_session, variant_job

pytestmark = [pytest.mark.integration, pytest.mark.airflow]

VARIANT_JOB = Path(variant_job.__file__).resolve()

# (old variant, old sink, new variant, new sink, error class of Spark's restart or None)
MISSING_STATE = "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"
THROUGH_SPARK_SUBMIT = ("new-stateful-operator", "sink-only")
CASES = {
    "new-stateful-operator": ("base", "append", "dedup", "append", MISSING_STATE),
    "new-aggregation-column": ("agg", "append", "agg_sum", "append", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
    "changed-dropduplicates-key": ("dedup", "append", "dedup_key2", "append", "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"),
    "stateless-projection": ("base", "append", "projection", "append", None),
    "number-of-sources": ("base", "append", "two_sources", "append", probe.SOURCE_COUNT_CHANGED),
    "sink-only": ("base", "append", "base", "parquet", None),
}


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run(bootstrap: str, topic: str, second: str, variant: str, sink: str, ck: Path, out: Path,
         **opts: object) -> spark_session.RunResult:
    """The query in the tests' warm session with availableNow: the old job's run, and Spark's own restart."""
    argv = ["--topics", topic, "--bootstrap-servers", bootstrap, "--checkpoint", str(ck), "--output", str(out),
            "--sink", sink, "--variant", variant, "--second-topic", second]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    args = variant_job.parse_args(argv)
    t0 = time.monotonic()
    try:
        query = variant_job.build_query(spark_session.session(), args, trigger="availableNow")
        query.awaitTermination(180)
    except Exception as exc:  # refused at start
        return spark_session.RunResult(False, spark_session.error_text(exc), time.monotonic() - t0)
    exc = query.exception()
    return spark_session.RunResult(exc is None, spark_session.error_text(exc) if exc else None,
                                   time.monotonic() - t0)


def _probe_in_session(bootstrap: str, topic: str, second: str, variant: str, sink: str, ck: Path,
                      scratch: Path) -> probe.ProbeResult:
    """The probe without spark-submit: the same staged copy, job code (``--aks-probe``) and classification."""
    t0 = time.monotonic()
    staged = probe.stage_checkpoint(str(ck), str(scratch / "checkpoint"))
    assert staged is not None
    args = variant_job.parse_args(["--topics", topic, "--bootstrap-servers", bootstrap, "--checkpoint",
                                   staged.location.path, "--output", str(scratch / "output"), "--sink", sink,
                                   "--variant", variant, "--second-topic", second, "--aks-probe"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            returncode = reference_job.run_probe(variant_job.build_query(spark_session.session(), args))
        except Exception as exc:  # refused at start, as main() reports it
            reference_job.probe_refused(exc)
            returncode = 1
    answer, reason, error_class = probe.classify(returncode, out.getvalue(), timeout_s=300)
    return probe.ProbeResult(answer, reason, method="shadow-start", error_class=error_class, batch=staged.batch,
                             empty_batch=staged.empty_batch, seconds=round(time.monotonic() - t0, 1),
                             operators=staged.operators)


def _probe_with_operator(tmp_path: Path, bootstrap: str, new: JobSpec, *, old_args: tuple[str, ...],
                         monkeypatch: pytest.MonkeyPatch) -> probe.ProbeResult:
    """``CompatibilityProbeOperator`` with the new application's arguments given to the operator."""
    from airflow_kafka_spark.operators.probe import CompatibilityProbeOperator

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_PROBE_TEST", json.dumps({"conn_type": "kafka",
                                                                    "extra": {"bootstrap.servers": bootstrap}}))
    entry = {"name": new.name, "application": new.application, "topics": list(new.topics),
             "checkpoint": new.checkpoint, "output": new.output, "sink": new.sink.value,
             "backup_root": new.backup_root, "spark_conn_id": new.spark_conn_id, "kafka_conn_id": "kafka_probe_test",
             "compatibility_probe": True, "integration": "reference", "spark_conf": new.spark_conf,
             "application_args": list(old_args)}
    registry = tmp_path / "streaming_jobs.yaml"
    registry.write_text(json.dumps({"version": 1, "allowed_roots": [str(tmp_path), str(VARIANT_JOB.parent)],
                                    "jobs": [entry]}))
    task = CompatibilityProbeOperator(task_id="probe", job=new.name, registry_path=str(registry),
                                      application_args=list(new.application_args), fail_on="never")
    doc = task.execute({})
    return probe.ProbeResult(probe.ProbeAnswer(doc["answer"]), doc["reason"], method=doc["method"],
                             error_class=doc["error_class"], batch=doc["batch"], empty_batch=doc["empty_batch"],
                             seconds=doc["seconds"], operators=tuple(doc["operators"]))


@pytest.fixture(scope="module")
def spark_conn():
    os.environ.setdefault("AIRFLOW_CONN_SPARK_PROBE_TEST", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    return "spark_probe_test"


@pytest.mark.parametrize("case", list(CASES))
def test_probe_answers_what_a_real_restart_does(case, broker, connector_jars, spark_conn, tmp_path, topic_name,
                                                monkeypatch):
    from airflow_kafka_spark.airflow_glue.spark import spark_target

    old, old_sink, new, new_sink, spark_error = CASES[case]
    bs = broker.bootstrap_servers
    second = topic_name + "-b"
    topics.create_topic(bs, topic_name, 2)
    topics.create_topic(bs, second, 1)
    produce(bs, topic_name, 120, partitions=2)
    produce(bs, second, 10, partitions=1)
    ck, sink = tmp_path / "real" / "checkpoint", tmp_path / "real" / "sink"
    first = _run(bs, topic_name, second, old, old_sink, ck, sink, max_offsets_per_trigger=50)
    assert first.ok, first.error
    assert len(list((ck / "commits").glob("[0-9]*"))) >= 2
    before = tree_digest(tmp_path / "real")

    spec = JobSpec(name="probed", application=str(VARIANT_JOB), topics=(topic_name,), checkpoint=str(ck),
                   backup_root=str(tmp_path / "backups"), stop_marker=str(tmp_path / "real" / "STOP"),
                   output=str(sink), sink=Sink(new_sink), spark_conn_id=spark_conn, compatibility_probe=True,
                   integration=Integration.REFERENCE,   # the variant job implements --aks-probe
                   spark_conf={"spark.sql.shuffle.partitions": "2"},
                   application_args=("--variant", new, "--second-topic", second))
    if case == "new-stateful-operator":   # the operator: registry entry = old job, operator arguments = new one
        result = _probe_with_operator(tmp_path, bs, spec, old_args=("--variant", old, "--second-topic", second),
                                      monkeypatch=monkeypatch)
    elif case in THROUGH_SPARK_SUBMIT:
        result = probe.probe_application(spec, kafka_config={"bootstrap.servers": bs}, target=spark_target(spec),
                                         timeout_s=300)
    else:
        result = _probe_in_session(bs, topic_name, second, new, new_sink, ck, tmp_path / "probe")
    print(f"{case}: probe {result.answer} in {result.seconds}s ({result.reason}); batch {result.batch} "
          f"empty={result.empty_batch} operators={result.operators}")
    assert tree_digest(tmp_path / "real") == before, "the probe touched the real checkpoint or sink"

    # Spark is the oracle: new data arrives, the new query restarts on a copy of the real checkpoint.
    produce(bs, topic_name, 10, partitions=2, start_id=10_000)
    shutil.copytree(tmp_path / "real", tmp_path / "restart")
    restart = _run(bs, topic_name, second, new, new_sink, tmp_path / "restart" / "checkpoint",
                   tmp_path / "restart" / "sink")
    print(f"{case}: Spark's restart {'succeeded' if restart.ok else 'failed'}")
    if spark_error is None:
        assert restart.ok, restart.error
        assert result.answer is probe.ProbeAnswer.COMPATIBLE, result
    else:
        # The probe names the error Spark's own restart raised (spark_error: what Spark 4.2 raises).
        assert not restart.ok, "Spark restarted the changed query: the case is wrong"
        assert result.answer is probe.ProbeAnswer.BREAKING, result
        marker = ("sources in the checkpoint offsets" if result.error_class == probe.SOURCE_COUNT_CHANGED
                  else result.error_class)
        assert marker and marker in (restart.error or ""), (result, restart.error)
    assert result.method == "shadow-start" and result.empty_batch and result.batch is not None
    assert tree_digest(tmp_path / "real") == before
