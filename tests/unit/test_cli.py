"""``aks`` as users meet it: exit codes, one-line errors, fast start, and the shared report helpers.

Bad input and an unreachable broker are run as real subprocesses (the console script), because
"one line, no traceback, within the timeout" is a property of the whole process. The output
layout is tested in-process with a canned verdict.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark import cli
from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import (
    add_json_argument,
    add_kafka_arguments,
    kafka_config_from_args,
)
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.client_config import read_config_file as read_kafka_config_file
from airflow_kafka_spark.verdict.findings import BLOCK, INFO, PASS, WARN, Finding, Verdict

AKS = Path(sys.executable).with_name("aks")


def aks(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    cmd = [str(AKS)] if AKS.exists() else [sys.executable, "-m", "airflow_kafka_spark.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(res: subprocess.CompletedProcess, *fragments: str, code: int = 2) -> None:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- start-up


def test_help_and_fast_import_without_airflow_pyspark_or_kafka():
    res = aks("--help")
    assert res.returncode == 0 and "validate" in res.stdout
    probe = ("import sys, airflow_kafka_spark.cli as c; c.build_parser(); "
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('airflow', 'pyspark', 'confluent_kafka', 'fsspec')); print(bad)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_validate_help_lists_the_options():
    res = aks("validate", "--help")
    assert res.returncode == 0
    for option in ("--checkpoint", "--group", "--bootstrap-servers", "--kafka-config", "--topics",
                   "--fail-on-data-loss", "--starting-offsets", "--conf", "--timeout", "--json"):
        assert option in res.stdout


# --------------------------------------------------------------------------- bad input → exit 2, one line


def test_missing_offset_source():
    assert_one_line_error(aks("validate", "--bootstrap-servers", "127.0.0.1:1"), "--checkpoint", "--group")


def test_checkpoint_and_group_together():
    assert_one_line_error(aks("validate", "--checkpoint", "/x", "--group", "g", "--bootstrap-servers", "h:1"),
                          "not allowed")


def test_missing_checkpoint_path(tmp_path):
    missing = tmp_path / "nope"
    assert_one_line_error(aks("validate", "--checkpoint", str(missing), "--bootstrap-servers", "127.0.0.1:1"),
                          str(missing), "does not exist")


def test_file_instead_of_checkpoint_folder(tmp_path):
    f = tmp_path / "offsets.txt"
    f.write_text("v1\n")
    assert_one_line_error(aks("validate", "--checkpoint", str(f), "--bootstrap-servers", "127.0.0.1:1"),
                          "not a directory")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--conf", "spark.sql.shuffle.partitions"], "KEY=VALUE"),
    (["--conf", "=8"], "KEY=VALUE"),
    (["--fail-on-data-loss", "maybe"], "true or false"),
    (["--timeout", "0"], "positive"),
    (["--max-offsets-per-trigger", "-5"], "positive"),
    (["--sink", "sometimes"], "invalid choice"),
])
def test_bad_option_values(tmp_path, args, fragment):
    assert_one_line_error(aks("validate", "--checkpoint", str(tmp_path), "--bootstrap-servers", "h:1", *args),
                          fragment)


def test_bad_starting_offsets_json(tmp_path):
    assert_one_line_error(aks("validate", "--checkpoint", str(tmp_path), "--bootstrap-servers", "h:1",
                              "--starting-offsets", "{oops"), "startingOffsets")


def test_no_kafka_given(tmp_path):
    assert_one_line_error(aks("validate", "--checkpoint", str(tmp_path)), "--bootstrap-servers")


def test_kafka_config_file_missing(tmp_path):
    assert_one_line_error(aks("validate", "--checkpoint", str(tmp_path), "--kafka-config",
                              str(tmp_path / "kafka.properties")), "does not exist")


def test_unreachable_broker_ends_within_the_timeout(tmp_path):
    port = unused_port()
    t0 = time.monotonic()
    res = aks("validate", "--checkpoint", str(tmp_path), "--bootstrap-servers", f"127.0.0.1:{port}",
              "--timeout", "2")
    elapsed = time.monotonic() - t0
    assert_one_line_error(res, f"127.0.0.1:{port}", "not reachable", code=4)   # 4: unreachable, not a typo
    assert elapsed < 5.5, elapsed


def test_json_errors_are_json_too(tmp_path):
    res = aks("validate", "--checkpoint", str(tmp_path / "nope"), "--bootstrap-servers", "h:1", "--json")
    assert res.returncode == 2
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2 and "does not exist" in doc["error"]


def test_no_command_prints_help_and_exits_2():
    res = aks()
    assert res.returncode == 2 and "validate" in res.stdout


# --------------------------------------------------------------------------- Kafka config files


def test_properties_file_with_comments_continuations_and_jaas(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text(
        "# a Java client config\n"
        "bootstrap.servers=b1:9092,\\\n"
        "    b2:9092\n"
        "! another comment\n"
        "security.protocol: SASL_SSL\n"
        "sasl.mechanism = PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="alice" password="s3cret";\n')
    assert read_kafka_config_file(f) == {
        "bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
        "sasl.username": "alice", "sasl.password": "s3cret"}


def test_json_config_file_and_precedence(tmp_path):
    f = tmp_path / "kafka.json"
    f.write_text(json.dumps({"bootstrap.servers": "a:1", "client.id": "x", "socket.timeout.ms": 500}))
    args = cli.build_parser().parse_args(["validate", "--checkpoint", "c", "--kafka-config", str(f),
                                          "-X", "client.id=y", "--bootstrap-servers", "b:2"])
    assert kafka_config_from_args(args) == {"bootstrap.servers": "b:2", "client.id": "y",
                                                "socket.timeout.ms": 500}


@pytest.mark.parametrize(("name", "text", "fragment"), [
    ("k.json", "[1, 2]", "JSON object"),
    ("k.json", "{nope", "is not JSON"),
    ("k.properties", "=novalue-key\n", "a setting without a key"),
])
def test_bad_config_files(tmp_path, name, text, fragment):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(UserError, match=fragment):
        read_kafka_config_file(f)


# --------------------------------------------------------------------------- output and exit codes (in-process)


def canned(severity_findings: list[Finding]) -> Verdict:
    return Verdict.of(severity_findings, subject="/ck/orders")


BLOCKED = canned([
    Finding("OFFSET_BELOW_LOG_START", BLOCK, "orders", 0,
            {"checkpoint_offset": 500, "log_start": 800, "log_end": 1200, "records_lost": 300},
            "the checkpoint resumes orders-0 at 500 but the log now starts at 800: 300 unread records were deleted",
            "accept the loss explicitly"),
    Finding("OK", PASS, "orders", 1, {"checkpoint_offset": 500, "log_start": 0, "log_end": 500, "backlog": 0},
            "orders-1 resumes at 500 within [0, 500]"),
    Finding("TOPIC_RESET", BLOCK, "orders", 2, {"checkpoint_offset": 7, "log_start": 0, "log_end": 9,
                                                "record_timestamp_ms": 1750000000000},
            "suspected topic reset", "reset it", inferred=True),
])


@pytest.fixture
def fake_validate(monkeypatch):
    calls = []

    def install(verdict: Verdict):
        def fake(**kwargs):
            calls.append(kwargs)
            return verdict

        monkeypatch.setattr("airflow_kafka_spark.verdict.validate.validate", fake)
        return calls

    return install


def test_block_prints_table_and_last_line_and_exits_3(fake_validate, capsys):
    calls = fake_validate(BLOCKED)
    code = cli.main(["validate", "--checkpoint", "/ck/orders", "--bootstrap-servers", "k:9092", "--topics", "orders,b",
                     "--fail-on-data-loss", "false", "--conf", "spark.sql.shuffle.partitions=8",
                     "--starting-offsets", "earliest", "--sink", "non-idempotent", "--spark-version", "4.0.0",
                     "--timeout", "3"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 3
    header = next(line for line in out if line.startswith("SEVERITY"))
    assert all(h in header for h in ("CODE", "PARTITION", "CHECKPOINT", "LOG START", "LOG END", "MESSAGE"))
    row = next(line for line in out if "OFFSET_BELOW_LOG_START" in line)
    assert "orders-0" in row and "1,200" in row and "records_lost=300" in row
    assert "record_timestamp_ms=1750000000000" in next(line for line in out if "TOPIC_RESET*" in line)
    assert out[-1].startswith("verdict: BLOCK") and "fix: accept the loss explicitly" in out[-1]
    opts = calls[0]["options"]
    assert opts.topics == ("orders", "b") and opts.fail_on_data_loss is False
    assert opts.conf == {"spark.sql.shuffle.partitions": "8"} and opts.idempotent_sink is False
    assert calls[0]["timeout"] == 3.0 and calls[0]["kafka_config"] == {"bootstrap.servers": "k:9092"}
    assert calls[0]["record_identity"] is True


def test_json_report(fake_validate, capsys):
    fake_validate(BLOCKED)
    code = cli.main(["validate", "--checkpoint", "/ck/orders", "--bootstrap-servers", "k:9092", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3 and doc["verdict"] == "BLOCK" and doc["exit_code"] == 3
    assert doc["summary"]["records_lost"] == 300
    assert [f["code"] for f in doc["findings"]] == ["OFFSET_BELOW_LOG_START", "OK", "TOPIC_RESET"]


@pytest.mark.parametrize(("severity", "code"), [(WARN, 0), (INFO, 0), (PASS, 0)])
def test_warn_and_pass_exit_0(fake_validate, capsys, severity, code):
    fake_validate(canned([Finding("BACKLOG", severity, numbers={"backlog": 5}, message="5 records", fix="x")]))
    assert cli.main(["validate", "--group", "g1", "--bootstrap-servers", "k:1", "--no-record"]) == code
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(
        f"verdict: {'PASS' if severity != WARN else 'WARN'}")


def test_many_healthy_partitions_are_folded(fake_validate, capsys):
    ok = [Finding("OK", PASS, "t", p, {"checkpoint_offset": 1, "log_start": 0, "log_end": 3, "backlog": 2}, "ok")
          for p in range(50)]
    fake_validate(canned(ok))
    cli.main(["validate", "--checkpoint", "/c", "--bootstrap-servers", "k:1"])
    out = capsys.readouterr().out
    assert "50 partitions" in out and "backlog=100" in out and out.count("\nPASS") == 1
    fake_validate(canned(ok))
    cli.main(["validate", "--checkpoint", "/c", "--bootstrap-servers", "k:1", "--all"])
    assert capsys.readouterr().out.count("\nPASS") == 50


def test_user_error_inside_a_command_is_one_line(monkeypatch, capsys):
    def boom(**kwargs):
        raise UserError("Kafka at k:1 is not reachable\n(details)")

    monkeypatch.setattr("airflow_kafka_spark.verdict.validate.validate", boom)
    assert cli.main(["validate", "--checkpoint", "/c", "--bootstrap-servers", "k:1"]) == 2
    assert capsys.readouterr().err == "error: Kafka at k:1 is not reachable (details)\n"


@pytest.mark.parametrize("json_flag", [False, True])
def test_a_bug_keeps_its_traceback_without_a_secret_this_run_knows(monkeypatch, capsys, tmp_path, json_flag):
    """A bug (any exception not a UserError) prints its traceback, since that is how it gets fixed,
    but a secret from the command line, the Kafka config file or a secret-named environment
    variable, and a credential in a URL, come out as ***; exit 1, and --json still gets JSON."""
    conf = tmp_path / "client.properties"
    conf.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=svc\n"
                    "sasl.password=from-the-file-7q2\n")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-k9x")
    shown = ["from-argv-hunter2", "from-the-file-7q2", "env-secret-k9x"]

    def bug(**kwargs):
        config = kwargs.get("kafka_config") or kwargs.get("config") or {}
        raise RuntimeError(f"unexpected: {shown} {sorted(config)} https://nn:9870/webhdfs/v1/x?op=OPEN&delegation=tok3n")

    monkeypatch.setattr("airflow_kafka_spark.verdict.validate.validate", bug)
    argv = ["validate", "--checkpoint", "/c", "--bootstrap-servers", "k:1", "--kafka-config", str(conf),
            "-X", "sasl.oauthbearer.client.secret=from-argv-hunter2", *(["--json"] if json_flag else [])]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    err = captured.err
    assert "Traceback (most recent call last)" in err and "RuntimeError: unexpected" in err
    assert err.rstrip().endswith("please report it with the traceback above")
    for secret in [*shown, "tok3n"]:
        assert secret not in err and secret not in captured.out
    assert err.count("***") >= 4
    if json_flag:
        assert json.loads(captured.out.splitlines()[-1])["exit_code"] == 1


def test_registering_a_subcommand_takes_a_few_lines(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    def args(p):
        add_kafka_arguments(p)
        add_json_argument(p)

    def run(ns):
        report.emit(report.dump_json({"servers": kafka_config_from_args(ns)["bootstrap.servers"]}))
        return 0

    cli.register("hello", "a test command", args, run)
    assert cli.main(["hello", "--bootstrap-servers", "k:1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"servers": "k:1"}


# --------------------------------------------------------------------------- report helpers


def test_render_table_aligns_and_leaves_the_last_column_free():
    text = report.render_table(["A", "NUM", "TEXT"], [["x", 1234, "free text"], ["longer", None, "t"]], right=(1,))
    lines = text.splitlines()
    assert lines == ["A         NUM  TEXT", "x       1,234  free text", "longer      -  t"]


def test_fmt():
    assert report.fmt(1234567) == "1,234,567" and report.fmt(None) == "-" and report.fmt(True) == "true"
    assert report.fmt("a\nb") == "a b"


def test_guarded_keeps_tracebacks_for_bugs(capsys):
    assert report.guarded(lambda: 1 // 0) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ZeroDivisionError" in err
