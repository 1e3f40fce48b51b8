"""The job registry: a good file loads; every hostile or mistaken input is one UserError line.

Each error case asserts the message names the problem (the job, the field or the key) and the
fix, and that it is a single line, because that line is all an operator sees in a failed task.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry.loader import REGISTRY_ENV, default_registry_path, load_registry
from airflow_kafka_spark.registry.model import BackupRetention, HealthGate, JobSpec, Registry

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "dags" / "streaming_jobs.yaml"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "data"
    r.mkdir()
    return r


@pytest.fixture
def app(tmp_path: Path) -> Path:
    a = tmp_path / "apps" / "job.py"
    a.parent.mkdir()
    a.write_text("print('job')\n")
    return a


def base_doc(root: Path, app: Path) -> dict[str, Any]:
    return {
        "version": 1,
        "allowed_roots": [str(root), str(app.parent)],
        "defaults": {
            "application": str(app),
            "checkpoint": f"{root}/checkpoints/{{name}}",
            "backup_root": f"{root}/backups/{{name}}",
            "output": f"{root}/sinks/{{name}}",
        },
        "jobs": [
            {"name": "orders", "topics": ["orders"], "sink": "idempotent"},
            {"name": "payments", "topics": ["payments", "refunds"], "sink": "parquet"},
        ],
    }


def write(tmp_path: Path, doc: dict[str, Any] | str) -> Path:
    path = tmp_path / "dags" / "streaming_jobs.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc, sort_keys=False))
    return path


def load_error(tmp_path: Path, doc: dict[str, Any] | str) -> str:
    path = write(tmp_path, doc)
    with pytest.raises(UserError) as info:
        load_registry(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, "the message must name the registry file"
    return message


# --------------------------------------------------------------------------------------------------
# good registries
# --------------------------------------------------------------------------------------------------

def test_good_registry_loads_with_defaults_and_derived_fields(tmp_path, root, app):
    reg = load_registry(write(tmp_path, base_doc(root, app)))
    assert isinstance(reg, Registry)
    assert reg.names() == ["orders", "payments"]
    orders = reg.get("orders")
    assert isinstance(orders, JobSpec)
    assert orders.checkpoint == str(root / "checkpoints" / "orders")
    assert orders.stop_marker == str(root / "checkpoints" / "orders") + ".stop"
    assert orders.backup_root == str(root / "backups" / "orders")
    assert orders.application == str(app)
    assert (orders.spark_conn_id, orders.kafka_conn_id) == ("spark_default", "kafka_default")
    assert orders.topics == ("orders",)
    assert orders.fail_on_data_loss is True
    assert orders.starting_offsets_default == "earliest"
    assert orders.compatibility_version == "1"
    assert orders.backup_retention == BackupRetention(keep_last=5, max_age_days=30.0)
    assert orders.health_gate == HealthGate(min_batches=1, timeout_s=600.0, idle_pass_s=120.0)
    assert reg.get("payments").topics == ("payments", "refunds")
    json.dumps(orders.to_dict())  # XCom-able


def test_an_agent_job_may_ask_for_the_compatibility_probe(tmp_path, root, app):
    """The agent swaps the sink by configuration (docs/probe.md): no contract needed from the application."""
    doc = base_doc(root, app)
    doc["jobs"][0].update(compatibility_probe=True, integration="agent")
    orders = load_registry(write(tmp_path, doc)).get("orders")
    assert orders.compatibility_probe is True and orders.integration.value == "agent"


def test_every_field_parses(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["jobs"] = [{
        "name": "full-job_1", "topics": ["t.a"], "sink": "append",
        "application_args": ["--trigger", "processing:2s", "--shuffle-partitions", 8],
        "spark_conn_id": "spark_yarn", "kafka_conn_id": "kafka_prod", "deploy_mode": "cluster",
        "spark_conf": {"spark.sql.shuffle.partitions": 8, "spark.speculation": False,
                       "spark.driver.extraJavaOptions": "-Dhome=$${env:HOME}"},
        "backup_retention": {"keep_last": 2, "max_age_days": None},
        "stop_timeout_s": 60, "stop_marker": f"{root}/markers/full.stop",
        "compatibility_version": 3, "starting_offsets_default": {"t.a": {0: 5, "1": -2}},
        "fail_on_data_loss": "false", "max_offsets_per_trigger": 100, "max_lag_records": 1,
        "max_lag_seconds": 30, "min_headroom_s": 3600, "stall_after_s": 120,
        "mirror_group": "aks-mirror-full", "health_gate": {"min_batches": 3, "idle_pass_s": None},
    }]
    spec = load_registry(write(tmp_path, doc)).get("full-job_1")
    assert spec.application_args == ("--trigger", "processing:2s", "--shuffle-partitions", "8")
    assert spec.spark_conf == {"spark.sql.shuffle.partitions": "8", "spark.speculation": "false",
                               "spark.driver.extraJavaOptions": "-Dhome=${env:HOME}"}
    assert spec.deploy_mode == "cluster"
    assert spec.backup_retention == BackupRetention(keep_last=2, max_age_days=None)
    assert spec.stop_marker == f"{root}/markers/full.stop"
    assert spec.compatibility_version == "3"
    assert json.loads(spec.starting_offsets_default) == {"t.a": {"0": 5, "1": -2}}
    assert spec.fail_on_data_loss is False
    assert spec.health_gate == HealthGate(min_batches=3, timeout_s=600.0, idle_pass_s=None)   # null disables
    assert (spec.max_lag_records, spec.max_lag_seconds, spec.min_headroom_s, spec.stall_after_s) == \
        (1, 30.0, 3600.0, 120.0)


@pytest.mark.parametrize("gate, problem", [
    ({"idle_pass_s": 0}, "must be > 0"),
    ({"idle_pass_s": "soon"}, "is not a number"),
    ({"idle_after": 5}, "idle_pass_s"),            # unknown key: "did you mean"
])
def test_health_gate_idle_pass_is_checked(tmp_path, root, app, gate, problem):
    doc = base_doc(root, app)
    doc["jobs"][0]["health_gate"] = gate
    with pytest.raises(UserError) as exc:
        load_registry(write(tmp_path, doc))
    assert problem in str(exc.value) and "health_gate" in str(exc.value)


def test_shipped_example_registry_loads(monkeypatch, tmp_path):
    monkeypatch.delenv("AKS_DATA_DIR", raising=False)
    reg = load_registry(SHIPPED)
    assert {"orders", "payments", "clicks"} <= set(reg.names())
    data = (REPO / ".aks-data").resolve()
    for spec in reg:
        assert Path(spec.application) == REPO / "airflow_kafka_spark" / "jobs" / "reference_job.py"
        assert Path(spec.application).is_file()
        assert Path(spec.checkpoint).is_relative_to(data)
        assert spec.stop_marker == spec.checkpoint + ".stop"
        assert Path(spec.backup_root) == data / "backups"   # shared; backup.py adds /<job>
    # AKS_DATA_DIR moves every root and path.
    monkeypatch.setenv("AKS_DATA_DIR", str(tmp_path / "elsewhere"))
    moved = load_registry(SHIPPED)
    assert moved.get("orders").checkpoint == str(tmp_path / "elsewhere" / "checkpoints" / "orders")


def test_application_args_reach_the_job_as_written_but_for_placeholders(tmp_path, root, app):
    from airflow_kafka_spark.runtime.integrations import LaunchFacts, own_arguments

    args = ['{"t": 1}', '{{"t":{{"0":1}}}}', "--ck={checkpoint}", "{{checkpoint}}", "--servers", "{bootstrap_servers}"]
    doc = base_doc(root, app)
    doc["jobs"][0]["application_args"] = args
    spec = load_registry(write(tmp_path, doc)).get("orders")
    assert own_arguments(spec, LaunchFacts(bootstrap_servers="b:9092")) == [
        '{"t": 1}', '{"t":{"0":1}}', f"--ck={spec.checkpoint}", "{checkpoint}", "--servers", "b:9092"]


def test_registry_path_comes_from_env_then_dags_folder(monkeypatch, tmp_path, root, app):
    path = write(tmp_path, base_doc(root, app))
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    assert load_registry().path == str(path)
    monkeypatch.delenv(REGISTRY_ENV)
    assert default_registry_path(dags_folder=path.parent) == path
    assert load_registry(dags_folder=path.parent).names() == ["orders", "payments"]


def test_missing_registry_file_says_how_to_fix(tmp_path):
    with pytest.raises(UserError, match=rf"does not exist; create it, or point \${REGISTRY_ENV}"):
        load_registry(tmp_path / "nope.yaml")


def test_relative_paths_are_relative_to_the_registry_file(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["allowed_roots"] = ["../data", str(app.parent)]
    doc["defaults"]["checkpoint"] = "../data/ckpt/{name}"
    reg = load_registry(write(tmp_path, doc))
    assert reg.allowed_roots[0] == str(root)
    assert reg.get("orders").checkpoint == str(root / "ckpt" / "orders")


def test_symlink_that_stays_inside_the_root_is_fine_and_resolved(tmp_path, root, app):
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real")
    doc = base_doc(root, app)
    doc["jobs"][0]["checkpoint"] = f"{root}/alias/orders"
    assert load_registry(write(tmp_path, doc)).get("orders").checkpoint == str(root / "real" / "orders")


def test_remote_urls_are_checked_by_prefix(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["allowed_roots"].append("s3://bucket/streaming")
    doc["jobs"][0].update(checkpoint="s3://bucket/streaming/ckpt/orders/",
                          backup_root="s3://bucket/streaming/backups/orders")
    spec = load_registry(write(tmp_path, doc)).get("orders")
    assert spec.checkpoint == "s3://bucket/streaming/ckpt/orders"   # trailing '/' dropped
    assert spec.stop_marker == "s3://bucket/streaming/ckpt/orders.stop"


def test_file_urls_are_local_and_keep_their_scheme(tmp_path, root, app):
    doc = base_doc(root, app)
    doc["jobs"][0]["checkpoint"] = f"file://{root}/x/../ckpt/orders"
    spec = load_registry(write(tmp_path, doc)).get("orders")
    assert spec.checkpoint == f"file://{root}/ckpt/orders"
    assert spec.stop_marker == f"{root}/ckpt/orders.stop"   # the job tests it with os.path.exists


def test_env_defaults_and_vars(monkeypatch, tmp_path, root, app):
    doc = base_doc(root, app)
    doc["vars"] = {"data": "${AKS_TEST_DATA:-" + str(root) + "}"}
    doc["allowed_roots"][0] = "${data}"
    doc["defaults"]["checkpoint"] = "${data}/c/{name}"
    doc["jobs"][0]["max_offsets_per_trigger"] = "${AKS_TEST_MAX:-250}"
    monkeypatch.delenv("AKS_TEST_DATA", raising=False)
    spec = load_registry(write(tmp_path, doc)).get("orders")
    assert spec.checkpoint == str(root / "c" / "orders")
    assert spec.max_offsets_per_trigger == 250


def test_check_location_for_paths_from_dag_runs(tmp_path, root, app):
    reg = load_registry(write(tmp_path, base_doc(root, app)))
    assert reg.check_location(f"{root}/backups/orders/2024") == str(root / "backups" / "orders" / "2024")
    with pytest.raises(UserError, match="restore source '/etc' is outside the allowed roots"):
        reg.check_location(f"{root}/../../../../../../etc", what="restore source")


# --------------------------------------------------------------------------------------------------
# hostile or mistaken input: one line each, naming the problem and the fix
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "orders/../x", "Orders", "orders\n", "",
                                  "a" * 64, "1orders", "orders;rm -rf /", None, 7])
def test_get_rejects_invalid_names_and_lists_known_ones(tmp_path, root, app, name):
    reg = load_registry(write(tmp_path, base_doc(root, app)))
    with pytest.raises(UserError) as info:
        reg.get(name)
    msg = str(info.value)
    assert msg.startswith("invalid job name") and "\n" not in msg
    assert "orders, payments" in msg


def test_get_unknown_job_lists_known_names(tmp_path, root, app):
    reg = load_registry(write(tmp_path, base_doc(root, app)))
    with pytest.raises(UserError) as info:
        reg.get("ordres")
    assert str(info.value).startswith("unknown job 'ordres'; known jobs: orders, payments")


def mutate(root: Path, app: Path, change) -> dict[str, Any]:
    doc = copy.deepcopy(base_doc(root, app))
    change(doc, root)
    return doc


CASES = {
    "path-like job name in the file": (
        lambda d, r: d["jobs"][0].update(name="../etc/passwd"),
        ["jobs[0].name", "'../etc/passwd' is not a valid job name", "[a-z][a-z0-9_-]{0,62}"]),
    "checkpoint outside the roots": (
        lambda d, r: d["jobs"][0].update(checkpoint="/var/tmp/ckpt"),
        ["job 'orders'.checkpoint", "'/var/tmp/ckpt' is outside allowed_roots", "move it under"]),
    "dot-dot traversal": (
        lambda d, r: d["jobs"][0].update(checkpoint=f"{r}/checkpoints" + "/.." * 20 + "/etc/cron.d"),
        ["job 'orders'.checkpoint", "'/etc/cron.d' is outside allowed_roots"]),
    "backup root inside the checkpoint": (
        lambda d, r: d["jobs"][0].update(backup_root=f"{r}/checkpoints/orders/backups"),
        ["job 'orders'.backup_root", "is inside the checkpoint", "put backups beside it"]),
    "checkpoint inside the backup root": (
        lambda d, r: d["jobs"][0].update(backup_root=f"{r}/checkpoints"),
        ["job 'orders'.checkpoint", "is inside backup_root"]),
    "output and checkpoint overlap": (
        lambda d, r: d["jobs"][0].update(output=f"{r}/checkpoints/orders/out"),
        ["job 'orders'.output", "overlap"]),
    "stop marker inside the checkpoint": (
        lambda d, r: d["jobs"][0].update(stop_marker=f"{r}/checkpoints/orders/STOP"),
        ["job 'orders'.stop_marker", "inside the checkpoint"]),
    "checkpoint is a root itself": (
        lambda d, r: d["jobs"][0].update(checkpoint=str(r)),
        ["job 'orders'.checkpoint", "is an allowed root itself"]),
    "sibling folder with the root as a string prefix": (
        lambda d, r: d["jobs"][0].update(checkpoint=f"{r}2/ckpt"),
        ["job 'orders'.checkpoint", "is outside allowed_roots"]),
    "application outside the roots": (
        lambda d, r: d["jobs"][0].update(application="/usr/lib/python3/evil.py"),
        ["job 'orders'.application", "is outside allowed_roots"]),
    "application that is not .py/.jar": (
        lambda d, r: d["jobs"][0].update(application=f"{r}/run.sh"),
        ["job 'orders'.application", "is not a .py or .jar file"]),
    "unknown key (typo)": (
        lambda d, r: d["jobs"][0].update(chekpoint="x"),
        ["job 'orders'", "unknown key 'chekpoint'", "did you mean 'checkpoint'?"]),
    "unknown top-level key": (
        lambda d, r: d.update(allowed_root=["/x"]),
        ["the file", "unknown key 'allowed_root'", "did you mean 'allowed_roots'?"]),
    "unknown nested key": (
        lambda d, r: d["jobs"][0].update(backup_retention={"keep": 3}),
        ["job 'orders'.backup_retention", "unknown key 'keep'", "did you mean 'keep_last'?"]),
    "duplicate job name": (
        lambda d, r: d["jobs"].append({"name": "orders", "topics": ["x"],
                                       "checkpoint": f"{r}/other/orders"}),
        ["job 'orders'", "is defined twice", "unique name"]),
    "unset environment variable": (
        lambda d, r: d["defaults"].update(checkpoint="${AKS_TEST_UNSET_DIR}/c/{name}"),
        ["job 'orders'.checkpoint", "uses ${AKS_TEST_UNSET_DIR}, which is not set",
         "export AKS_TEST_UNSET_DIR=", "${AKS_TEST_UNSET_DIR:-default}"]),
    "empty environment variable": (
        lambda d, r: d["defaults"].update(checkpoint="${AKS_TEST_EMPTY_DIR}/c/{name}"),
        ["uses ${AKS_TEST_EMPTY_DIR}, which is not set (or empty)"]),
    "bad variable syntax": (
        lambda d, r: d["jobs"][0].update(spark_conf={"spark.x": "${env:HOME}"}),
        ["job 'orders'.spark_conf.spark.x", "${env:HOME} is not a variable reference", "$${...}"]),
    "unclosed variable": (
        lambda d, r: d["jobs"][0].update(output="${AKS_DATA_DIR/out"),
        ["job 'orders'.output", "unclosed '${'"]),
    "checkpoints of two jobs overlap": (
        lambda d, r: d["jobs"][1].update(checkpoint=f"{r}/checkpoints/orders/nested"),
        ["job 'payments'.checkpoint", "overlaps the checkpoint of job 'orders'"]),
    "another job's backups inside a checkpoint": (
        lambda d, r: d["jobs"][1].update(backup_root=f"{r}/checkpoints/orders/bk"),
        ["job 'payments'.backup_root", "overlaps the checkpoint of job 'orders'"]),
    "secret in spark_conf": (
        lambda d, r: d["jobs"][0].update(spark_conf={"spark.kafka.sasl.jaas.config": "x"}),
        ["job 'orders'.spark_conf", "looks like a secret", "connection"]),
    "secret in application_args": (
        lambda d, r: d["jobs"][0].update(
            application_args=["--kafka-option", "kafka.sasl.jaas.config=secret"]),
        ["job 'orders'.application_args", "looks like a secret"]),
    "bootstrap servers in application_args": (
        lambda d, r: d["jobs"][0].update(integration="reference", application_args=["--bootstrap-servers", "h:9092"]),
        ["job 'orders'.application_args", "--bootstrap-servers", "Kafka connection"]),
    "managed flag in application_args": (
        lambda d, r: d["jobs"][0].update(integration="reference", application_args=["--checkpoint=/tmp/x"]),
        ["sets --checkpoint, which comes from checkpoint"]),
    "unknown placeholder in application_args": (
        lambda d, r: d["jobs"][0].update(application_args=["--ck", "{checkpiont}"]),
        ["job 'orders'.application_args", "unknown placeholder {checkpiont}", "did you mean {checkpoint}"]),
    "nested JSON in application_args, whose '}}' would reach the job as '}'": (
        lambda d, r: d["jobs"][0].update(application_args=["--offsets", '{"t":{"0":1}}']),
        ["job 'orders'.application_args", "single braces and doubled ones", "write every literal brace twice"]),
    "main class of a Python application": (
        lambda d, r: d["jobs"][0].update(main_class="com.example.Main"),
        ["job 'orders'.main_class", "applies only to a .jar application"]),
    "main class that is no class name": (
        lambda d, r: d["jobs"][0].update(main_class="com.example.Main; rm -rf /"),
        ["job 'orders'.main_class", "is not a Java class name"]),
    "unknown integration": (
        lambda d, r: d["jobs"][0].update(integration="agnet"),
        ["job 'orders'.integration", "is not one of agent, reference, none"]),
    "probe without an integration that can run it": (
        lambda d, r: d["jobs"][0].update(compatibility_probe=True, integration="none"),
        ["job 'orders'.compatibility_probe", "integration agent", "--aks-probe", "not none"]),
    "a batch-keyed sink for the reference job, whose --sink has no such kind": (
        lambda d, r: d["jobs"][0].update(sink="batch-keyed", integration="reference"),
        ["job 'orders'.sink", "batch-keyed is a sink of your own foreachBatch", "idempotent, append or parquet"]),
    "a shipped jar outside the allowed roots": (
        lambda d, r: d["jobs"][0].update(jars=["/opt/elsewhere/dep.jar"]),
        ["job 'orders'.jars[0]", "outside allowed_roots", "local:/path"]),
    "a package that is no Maven coordinate": (
        lambda d, r: d["jobs"][0].update(packages=["spark-sql-kafka"]),
        ["job 'orders'.packages", "is not a Maven coordinate"]),
    "a Spark version read as a number": (
        lambda d, r: d["jobs"][0].update(spark_version=3.5),
        ["job 'orders'.spark_version", "read as a number", '"3.5"']),
    "connection URI instead of id": (
        lambda d, r: d["jobs"][0].update(kafka_conn_id="kafka://user:pw@host:9092"),
        ["job 'orders'.kafka_conn_id", "is not an Airflow connection id"]),
    "credentials in a URL": (
        lambda d, r: (d["allowed_roots"].append("s3://bucket/x"),
                      d["jobs"][0].update(checkpoint="s3://AKIA:secret@bucket/x/c")),
        ["job 'orders'.checkpoint", "credentials", "never in the registry"]),
    "dot-dot in a remote URL": (
        lambda d, r: (d["allowed_roots"].append("s3://bucket/x"),
                      d["jobs"][0].update(checkpoint="s3://bucket/x/../y/c")),
        ["job 'orders'.checkpoint", "contains a '..' segment"]),
    "encoded dot-dot in a remote URL": (
        lambda d, r: (d["allowed_roots"].append("hdfs://nn/x"),
                      d["jobs"][0].update(checkpoint="hdfs://nn/x/%2E%2E/y")),
        ["contains a '%2E%2E' segment"]),
    "root that allows everything": (
        lambda d, r: d["allowed_roots"].append("/"),
        ["allowed_roots[2]", "would allow every path"]),
    "no allowed roots": (
        lambda d, r: d.pop("allowed_roots"),
        ["allowed_roots", "is missing"]),
    "YAML boolean as topic": (
        lambda d, r: d["jobs"][0].update(topics=[False]),
        ["job 'orders'.topics", "not a string", "yes/no/on/off"]),
    "illegal topic name": (
        lambda d, r: d["jobs"][0].update(topics=["a/b"]),
        ["'a/b' is not a legal Kafka topic name"]),
    "compatibility version read as a float": (
        lambda d, r: d["jobs"][0].update(compatibility_version=1.10),
        ["job 'orders'.compatibility_version", "quote it"]),
    "bad sink": (
        lambda d, r: d["jobs"][0].update(sink="jdbc"),
        ["job 'orders'.sink", "'jdbc' is not one of idempotent, append, parquet"]),
    "parquet sink without output": (
        lambda d, r: (d["defaults"].pop("output")),
        ["job 'payments'.output", "required for the parquet sink"]),
    "zero lag threshold": (
        lambda d, r: d["jobs"][0].update(max_lag_records=0),
        ["job 'orders'.max_lag_records", "0 is below 1"]),
    "negative number": (
        lambda d, r: d["jobs"][0].update(stop_timeout_s=-1),
        ["job 'orders'.stop_timeout_s", "must be > 0"]),
    "bool where a number goes": (
        lambda d, r: d["jobs"][0].update(max_offsets_per_trigger=True),
        ["job 'orders'.max_offsets_per_trigger", "not a whole number"]),
    "starting offsets for a topic the job does not read": (
        lambda d, r: d["jobs"][0].update(starting_offsets_default={"other": {"0": 1}}),
        ["names topic 'other', which the job does not read"]),
    "missing required field": (
        lambda d, r: d["defaults"].pop("backup_root"),
        ["job 'orders'", "is missing backup_root"]),
    "same stop marker for two jobs": (
        lambda d, r: [job.update(stop_marker=f"{r}/STOP") for job in d["jobs"]],
        ["job 'payments'.stop_marker", "stopping one job would stop both"]),
    "home-relative path": (
        lambda d, r: d["jobs"][0].update(output="~/out"),
        ["job 'orders'.output", "starts with '~'"]),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_hostile_or_mistaken_registry_is_one_clear_line(monkeypatch, tmp_path, root, app, case):
    monkeypatch.delenv("AKS_TEST_UNSET_DIR", raising=False)
    monkeypatch.setenv("AKS_TEST_EMPTY_DIR", "")
    change, expected = CASES[case]
    message = load_error(tmp_path, mutate(root, app, change))
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_symlink_escaping_the_root_is_rejected(tmp_path, root, app):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    doc = base_doc(root, app)
    doc["jobs"][0]["checkpoint"] = f"{root}/escape/orders"
    message = load_error(tmp_path, doc)
    assert "job 'orders'.checkpoint" in message
    assert f"'{outside}/orders' is outside allowed_roots" in message


def test_symlinked_registry_dir_does_not_widen_relative_roots(tmp_path, root, app):
    # A dangling link in the path is resolved as far as it exists; the check uses what is real.
    (root / "ghost").symlink_to(tmp_path / "nowhere")
    doc = base_doc(root, app)
    doc["jobs"][0]["backup_root"] = f"{root}/ghost/backups"
    assert "is outside allowed_roots" in load_error(tmp_path, doc)


def test_malformed_yaml_names_line_and_column(tmp_path):
    message = load_error(tmp_path, "version: 1\njobs:\n  - name: orders\n   topics: [a\n")
    assert "not valid YAML at line" in message and "column" in message
    assert "fix the YAML syntax" in message


def test_duplicate_yaml_key_is_not_silently_overwritten(tmp_path, root, app):
    text = yaml.safe_dump(base_doc(root, app), sort_keys=False)
    twice = f"- name: orders\n  checkpoint: {root}/a\n  checkpoint: {root}/b\n"
    text = text.replace("- name: orders\n", twice)
    assert text.count("checkpoint: ") == 3
    message = load_error(tmp_path, text)
    assert "duplicate key 'checkpoint'" in message and "line" in message


def test_yaml_merge_keys_may_be_overridden(tmp_path, root, app):
    text = f"""
version: 1
allowed_roots: [{root}, {app.parent}]
x-common: &common
  application: {app}
  backup_root: {root}/b/{{name}}
  checkpoint: {root}/c/shared
jobs:
  - <<: *common
    name: orders
    topics: [orders]
    checkpoint: {root}/c/orders
"""
    # Unknown top-level keys are typos here (the registry has 'defaults' for sharing) ...
    assert "unknown key 'x-common'" in load_error(tmp_path, text)
    # ... but YAML merge keys work, and an explicit key overrides a merged one.
    text = text.replace("x-common: &common", "defaults: &common")
    spec = load_registry(write(tmp_path, text)).get("orders")
    assert spec.checkpoint == str(root / "c" / "orders")


@pytest.mark.parametrize("doc", ["", "- a\n- b\n", "just text\n",
                                 "jobs: {orders: {}}\nallowed_roots: [/x]\n"])
def test_wrong_shapes_are_one_line(tmp_path, doc):
    load_error(tmp_path, doc)


def test_registry_must_be_utf8_and_small(tmp_path):
    path = write(tmp_path, "x")
    path.write_bytes(b"version: 1\n\xff\xfe\n")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        load_registry(path)
    path.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(UserError, match="byte limit"):
        load_registry(path)


def test_registry_module_imports_no_airflow():
    import subprocess
    import sys

    code = ("import sys, airflow_kafka_spark.registry.loader as r; "
            "bad = [m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_registry_keys_doc_is_generated_from_the_one_declaration():
    """docs/registry.md is registry/keys.py's output from JobSpec: every key the loader accepts, one line each."""
    from dataclasses import fields
    from pathlib import Path

    from airflow_kafka_spark.registry import keys
    from airflow_kafka_spark.registry.model import JOB_KEYS, JobSpec

    assert all(f.metadata.get("doc") for f in fields(JobSpec)), "a JobSpec field without its doc line"
    doc = (Path(__file__).parents[2] / "docs" / "registry.md").read_text()
    assert doc == keys.markdown(), "stale: python -m airflow_kafka_spark.registry.keys > docs/registry.md"
    assert [line.split("`")[1] for line in doc.splitlines() if line.startswith("| `")] == list(JOB_KEYS)
