"""The registry's job kinds (issue 12): ``kind: dstream`` names its consumer group and optional DStream
checkpoint; receiver-based Kafka jobs (kafka-0-8, WAL) are refused with one line."""

from __future__ import annotations

import pytest

from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import JobKind
from tests.unit.test_registry import base_doc, load_error, write


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "data"
    r.mkdir()
    return r


@pytest.fixture
def app(tmp_path):
    a = tmp_path / "apps" / "job.jar"
    a.parent.mkdir()
    a.write_bytes(b"PK")
    return a


def dstream_job(root, **extra) -> dict:
    return {"name": "clicks", "topics": ["clicks"], "kind": "dstream", "group": "clicks-dstream",
            "dstream_checkpoint": f"{root}/dstream/clicks", **extra}


def test_dstream_job_loads_with_group_and_checkpoint(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["jobs"].append(dstream_job(root, sink="append"))
    reg = load_registry(write(tmp_path, doc))
    spec = reg.get("clicks")
    assert spec.kind is JobKind.DSTREAM and spec.group == "clicks-dstream"
    assert spec.dstream_checkpoint == str(root / "dstream" / "clicks") and spec.to_dict()["kind"] == "dstream"
    assert reg.get("orders").kind is JobKind.STRUCTURED and reg.get("orders").group is None
    assert spec.position_source == (None, "clicks-dstream")
    assert reg.get("orders").position_source == (reg.get("orders").checkpoint, None)


def test_mirror_refuses_a_dstream_job_with_one_line(tmp_path, root, app, capsys):
    """A DStream job already commits to its group: mirroring it would only add a second, stale copy."""
    from airflow_kafka_spark.cli import main

    doc = base_doc(root, app)
    doc["jobs"].append(dstream_job(root))
    path = write(tmp_path, doc)
    assert main(["mirror", "--job", "clicks", "--registry", str(path), "--bootstrap", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: job clicks is a DStream job: it commits its position to group clicks-dstream itself, "
                   "so Kafka's lag tools already see it; there is nothing to mirror"], err


@pytest.mark.parametrize(("job", "needle"), [
    ({"kind": "dstream"}, "clicks'.group: is required for kind dstream"),
    ({"group": "g"}, "clicks'.group: applies only to kind: dstream"),
    ({"kind": "dstream", "group": "g", "dstream_checkpoint": "/etc/x"}, "outside allowed_roots"),
    ({"kind": "receiver"}, "receiver-based Kafka job"),
    ({"spark_conf": {"spark.jars.packages": "org.apache.spark:spark-streaming-kafka-0-8_2.11:2.4.8"}},
     "receiver-based Kafka job"),
    ({"spark_conf": {"spark.streaming.receiver.writeAheadLog.enable": "true"}}, "removed in Spark 3.0"),
])
def test_bad_kinds_are_one_line(tmp_path, root, app, job, needle):
    doc = base_doc(root, app)
    doc["jobs"].append({"name": "clicks", "topics": ["clicks"], **job})
    assert needle in load_error(tmp_path, doc)


def test_dstream_checkpoint_must_not_overlap_the_checkpoint(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["jobs"].append(dstream_job(root, dstream_checkpoint=f"{root}/checkpoints/clicks/inner"))
    assert "overlaps the checkpoint or backup_root" in load_error(tmp_path, doc)


def test_structured_only_steps_refuse_a_dstream_job_with_one_line(tmp_path, root, app):
    from airflow_kafka_spark.airflow_glue.jobs import load_job, require_structured
    from airflow_kafka_spark.errors import UserError

    doc = base_doc(root, app)
    doc["jobs"].append(dstream_job(root))
    path = str(write(tmp_path, doc))
    assert require_structured(load_job("orders", path)[1], "the lag sensor").name == "orders"
    clicks = load_job("clicks", path)[1]  # the safe-restart DAG's steps dispatch it (airflow_glue/kinds/dstream.py)
    assert clicks.is_dstream
    with pytest.raises(UserError, match=r"is a DStream job .*: the lag sensor works on Structured Streaming "):
        require_structured(clicks, "the lag sensor")


def test_each_kind_is_one_implementation_of_the_steps_and_the_operators_never_look_at_the_kind():
    """A kind is a type (airflow_glue/kinds): every JobKind has its steps, each implements every step of
    the interface, and no operator or sensor branches on the kind (a new kind is one new module)."""
    import inspect
    import pathlib

    import airflow_kafka_spark
    from airflow_kafka_spark.airflow_glue import kinds
    from airflow_kafka_spark.airflow_glue.kinds.base import KindSteps
    from airflow_kafka_spark.registry.model import JobKind, JobSpec

    steps = {k: kinds.steps_for(JobSpec(name="j", application="a.py", topics=("t",), checkpoint="/c",
                                        backup_root="/b", stop_marker="/m", kind=k, group="g"))
             for k in JobKind}
    assert len({type(s) for s in steps.values()}) == len(JobKind)
    wanted = {n for n, _ in inspect.getmembers(KindSteps, inspect.isfunction) if not n.startswith("_")}
    assert wanted >= {"validate", "backup", "restore", "reset", "rollback", "worker_gate"}
    for kind, impl in steps.items():
        assert all(callable(getattr(impl, n, None)) for n in wanted), kind
        assert isinstance(impl.precopies_backup, bool) and isinstance(impl.plans_offsets, bool)
    root = pathlib.Path(airflow_kafka_spark.__file__).parent
    for layer in ("operators", "sensors"):
        for path in (root / layer).glob("*.py"):
            text = path.read_text()
            assert "is_dstream" not in text and "JobKind." not in text, path
