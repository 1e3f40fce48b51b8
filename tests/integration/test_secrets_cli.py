"""A secret planted in every input form of ``aks`` never shows: stdout, stderr, ``--json``, written files, ``ps``.

Real broker, real CLI processes. The broker speaks PLAINTEXT, so a ``sasl.password`` is carried in
the config but unused on the success path; on the failure path (``security.protocol=SASL_PLAINTEXT``
against that broker) librdkafka's own errors are what must be scrubbed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.kafka.secrets import scrub
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = pytest.mark.integration

AKS = Path(sys.executable).with_name("aks")
SECRET = "Pw-7f3a9c-do-not-print"


def _cmd(*args: str) -> list[str]:
    return [*([str(AKS)] if AKS.exists() else [sys.executable, "-m", "airflow_kafka_spark.cli"]), *args]


def _forms(tmp: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    """form name → (extra argv, extra environment); each puts SECRET in the client config."""
    props = tmp / "client.properties"
    props.write_text(f"# Kafka tools' habit: whitespace separator\nsasl.username alice\nsasl.password {SECRET}\n")
    jaas = tmp / "jaas.properties"
    jaas.write_text("sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="alice" password="{SECRET}";\n')
    js = tmp / "client.json"
    js.write_text(json.dumps({"sasl.username": "alice", "sasl.password": SECRET}))
    pw = tmp / "pw.txt"
    pw.write_text(SECRET + "\n")
    return {
        "properties": (["--kafka-config", str(props)], {}),
        "command-config-jaas": (["--command-config", str(jaas)], {}),
        "json": (["--kafka-config", str(js)], {}),
        "env": ([], {"AKS_KAFKA_SASL_PASSWORD": SECRET, "AKS_KAFKA_SASL_USERNAME": "alice"}),
        "env-reference": (["-X", "sasl.password=@env:MY_PW"], {"MY_PW": SECRET}),
        "file-reference": (["-X", f"sasl.password=@file:{pw}"], {}),
    }


def _run_sampling_ps(argv: list[str], env: dict[str, str], timeout: float = 90) -> tuple[subprocess.CompletedProcess,
                                                                                          list[str]]:
    """Run ``argv`` and sample every process's command line while it runs."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        seen.append(subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return subprocess.CompletedProcess(argv, proc.returncode, out, err), seen


def _files_holding(root: Path, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.fixture
def aligned(broker, tmp_path, topic_name):
    bs = broker.bootstrap_servers
    topics.create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 40, partitions=2)
    ck = write_checkpoint(tmp_path / "ck", batches=2, sources=({topic_name: 2},), records_per_batch=10,
                          start_timestamp_ms=int(time.time() * 1000) - 2000)
    return bs, ck


def test_no_input_form_leaks_the_secret(aligned, tmp_path):
    bs, ck = aligned
    work = tmp_path / "inputs"
    work.mkdir()
    backups = tmp_path / "backups"
    for form, (extra, env) in _forms(work).items():
        runs = [
            _cmd("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, *extra, "--json"),
            # the failure path: a SASL client against a PLAINTEXT broker; librdkafka's errors are scrubbed
            _cmd("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, *extra,
                 "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "--timeout", "3",
                 "--json"),
        ]
        if form == "properties":   # the other commands read the config the same way: once is enough
            runs[1:1] = [
                _cmd("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, *extra),
                _cmd("lag", "--checkpoint", ck.location, "--bootstrap-servers", bs, *extra, "--json"),
                _cmd("reset", "--checkpoint", ck.location, "--backup-root", str(backups), "--bootstrap-servers",
                     bs, *extra, "--mode", "earliest", "--json"),
            ]
        for argv in runs:
            res, listings = _run_sampling_ps(argv, env)
            where = f"{form}: {' '.join(argv[1:3])}"
            assert "Traceback" not in res.stderr, (where, res.stderr)
            assert SECRET not in res.stdout and SECRET not in res.stderr, (where, res.stdout, res.stderr)
            assert listings and not any(SECRET in snap for snap in listings), where
            assert "puts a secret on the command line" not in res.stderr, (where, res.stderr)
        # the failure path did fail, and said so in one line (not a silent pass without the secret)
        assert res.returncode == 2, (form, res.stdout, res.stderr)
    assert _files_holding(Path(ck.location).parent, SECRET) == [str(p) for p in work.rglob("*")
                                                                if p.is_file() and SECRET in p.read_text()]


def test_a_literal_secret_on_argv_is_warned_about_and_still_not_echoed(aligned):
    bs, ck = aligned
    res = subprocess.run(_cmd("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs,
                              "-X", f"sasl.password={SECRET}", "--json"), capture_output=True, text=True, timeout=90)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert "warning: -X sasl.password=... puts a secret on the command line" in res.stderr
    assert SECRET not in res.stdout + res.stderr
    assert json.loads(res.stdout)["verdict"] in ("PASS", "WARN"), res.stdout


def test_an_oauth_error_keeps_its_words_and_drops_only_the_secret(broker, tmp_path):
    """The hostile probe's case: ``sasl.oauthbearer.client.id=c`` was scrubbed as a secret, so every ``c`` of
    librdkafka's message became ``***`` (``Failed to a***quire ... Failed to ***onne***t``). The client id names
    who connects (as ``sasl.username`` does); only the client secret is one."""
    conf = tmp_path / "oauth.properties"
    conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\nsasl.oauthbearer.method=oidc\n"
                    f"sasl.oauthbearer.client.id=c\nsasl.oauthbearer.client.secret={SECRET}\n"
                    "sasl.oauthbearer.token.endpoint.url=http://127.0.0.1:1/token\n")
    res = subprocess.run(_cmd("validate", "--group", "g-oauth", "--topics", "t", "--bootstrap-servers",
                              broker.bootstrap_servers, "--kafka-config", str(conf), "--timeout", "5"),
                         capture_output=True, text=True, timeout=90)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Failed to acquire SASL OAUTHBEARER token: Failed to connect to 127.0.0.1:1" in res.stderr, res.stderr
    assert not re.search(r"\w\*\*\*|\*\*\*\w", res.stderr), res.stderr      # no word cut by a scrubbed letter
    assert SECRET not in res.stdout + res.stderr


def test_a_short_secret_is_scrubbed_where_it_stands_alone_and_words_around_it_survive():
    message = "Failed to acquire SASL OAUTHBEARER token: Failed to connect as c with password c"
    assert scrub(message, {"sasl.password": "c", "sasl.oauthbearer.client.id": "c"}) == (
        "Failed to acquire SASL OAUTHBEARER token: Failed to connect as *** with password ***")
    assert scrub(message, {"sasl.oauthbearer.client.id": "c"}) == message     # not a secret at all
    assert scrub(f"token {SECRET}x rejected", {"sasl.password": SECRET}) == "token ***x rejected"  # long: anywhere
