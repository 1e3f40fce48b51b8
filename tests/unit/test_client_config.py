"""Kafka client settings from files, the environment and value references: parsed like Java, never echoed."""

from __future__ import annotations

import os
import stat

import pytest

from airflow_kafka_spark import cli
from airflow_kafka_spark.cli._args import kafka_config_from_args
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.client_config import (
    env_config,
    parse_properties,
    read_config_file,
    resolve_references,
    secrets_on_argv,
)

SECRET = "Zq9-hunter2-SECRET"


@pytest.mark.parametrize(("line", "expected"), [
    ("sasl.password=v", ("sasl.password", "v")),
    ("sasl.password = v", ("sasl.password", "v")),
    ("sasl.password: v", ("sasl.password", "v")),
    ("sasl.password v", ("sasl.password", "v")),
    ("sasl.password\t\tv w", ("sasl.password", "v w")),
    ("sasl.password  =  =v", ("sasl.password", "=v")),
    ("key\\=with\\:seps=x", ("key=with:seps", "x")),
    ("k=a\\tb\\u0041", ("k", "a\tbA")),
    ("justakey", ("justakey", "")),
])
def test_java_properties_separators(line, expected):
    assert parse_properties(line + "\n") == dict([expected])


def test_continuation_comments_and_trailing_backslash():
    text = "# c\n! c\n  a = 1,\\\n     2\nb=x\\\\\nc=end\\"
    assert parse_properties(text) == {"a": "1,2", "b": "x\\", "c": "end"}


@pytest.mark.parametrize("text", [f"=  {SECRET}\n", f"k=bad\\u12{SECRET}\n", f": {SECRET}\n"])
def test_malformed_lines_never_echo_their_content(tmp_path, text):
    f = tmp_path / "client.properties"
    f.write_text("bootstrap.servers=b:1\n" + text)
    with pytest.raises(UserError) as err:
        read_config_file(f)
    message = str(err.value)
    assert "line 2" in message
    assert SECRET not in message and SECRET[:6] not in message


def test_env_form_and_references(tmp_path):
    env = {"AKS_KAFKA_SASL_PASSWORD": SECRET, "AKS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "OTHER": "x",
           "PW": SECRET}
    assert env_config(env) == {"sasl.password": SECRET, "security.protocol": "SASL_SSL"}
    secret_file = tmp_path / "pw"
    secret_file.write_text(SECRET + "\n")
    resolved = resolve_references({"a": "@env:PW", "b": f"@file:{secret_file}", "c": "plain"}, env)
    assert resolved == {"a": SECRET, "b": SECRET, "c": "plain"}


@pytest.mark.parametrize(("ref", "fragment"), [
    ("@env:NOPE_NOT_SET", "environment variable NOPE_NOT_SET, which is not set"),
    ("@file:/nonexistent/pw", "does not exist"),
])
def test_broken_references_are_one_line(ref, fragment):
    with pytest.raises(UserError, match=fragment):
        resolve_references({"sasl.password": ref}, {})


def test_fifo_and_oversized_files_are_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo.properties"
    os.mkfifo(fifo)
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    with pytest.raises(UserError, match="not a regular file"):
        read_config_file(fifo)
    big = tmp_path / "big.properties"
    big.write_bytes(b"a=" + b"x" * (2 << 20))
    with pytest.raises(UserError, match="larger than"):
        read_config_file(big)


def test_secrets_on_argv_are_found_but_references_are_not():
    pairs = [("sasl.password", SECRET), ("sasl.oauthbearer.client.secret", "@env:X"), ("client.id", "a"),
             ("ssl.key.password", "@file:/p")]
    assert secrets_on_argv(pairs) == ["sasl.password"]


def test_precedence_file_env_argv(tmp_path, monkeypatch, capsys):
    f = tmp_path / "c.properties"
    f.write_text("bootstrap.servers a:1\nclient.id from-file\nsasl.username u\n")
    monkeypatch.setenv("AKS_KAFKA_CLIENT_ID", "from-env")
    monkeypatch.setenv("AKS_KAFKA_SASL_USERNAME", "env-user")
    monkeypatch.setenv("PW", SECRET)
    args = cli.build_parser().parse_args(["validate", "--checkpoint", "c", "--command-config", str(f),
                                          "-X", "client.id=from-argv", "-X", "sasl.password=@env:PW"])
    config = kafka_config_from_args(args)
    assert config == {"bootstrap.servers": "a:1", "client.id": "from-argv", "sasl.username": "env-user",
                      "sasl.password": SECRET}
    assert capsys.readouterr().err == ""   # a reference is not a secret on argv


def test_literal_secret_on_argv_warns_without_echoing(capsys):
    args = cli.build_parser().parse_args(["validate", "--checkpoint", "c", "--bootstrap-servers", "a:1",
                                          "-X", f"sasl.password={SECRET}"])
    assert kafka_config_from_args(args)["sasl.password"] == SECRET
    err = capsys.readouterr().err
    assert "warning: -X sasl.password=... puts a secret on the command line" in err
    assert "AKS_KAFKA_SASL_PASSWORD" in err and SECRET not in err


@pytest.mark.parametrize("argv", [
    ["-X", "sasl.password", SECRET],          # a space instead of '=': the secret is an unrecognized word
    ["-X", f"sasl.password{SECRET}"],         # no '=' at all
])
def test_usage_errors_do_not_echo_values(argv, capsys):
    code = cli.main(["validate", "--checkpoint", "c", "--bootstrap-servers", "a:1", *argv])
    out = capsys.readouterr()
    assert code == 2
    assert SECRET not in out.err and SECRET not in out.out
    assert out.err.count("\n") == 1 and out.err.startswith("error:")
