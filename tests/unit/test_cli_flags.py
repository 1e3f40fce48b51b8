"""The flags issue 13 added to ``aks``: --execute (and the deprecated --dry-run), --job from the registry,
--version, the exit-code table, exit 4 for unreachable storage, and the progress lines.

Parsing is tested in-process (``build_parser``); what a user sees of a whole process (one line, the
exit code, no traceback) through the console script. The real broker and a real driver are in
tests/integration/test_cli_commands.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark import cli
from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import UsageError
from airflow_kafka_spark.cli._job import executes, pick, refuse_conflicts
from airflow_kafka_spark.errors import ExitCode, Unreachable, UserError, is_unreachable
from airflow_kafka_spark.registry.loader import load_registry

AKS = Path(sys.executable).with_name("aks")
DESTRUCTIVE = {
    "reset": ["reset", "--checkpoint", "c", "--backup-root", "b", "--mode", "preserve"],
    "restore": ["restore", "--checkpoint", "c", "--backup-root", "b", "--backup", "latest"],
    "backups": ["backups", "--backup-root", "b", "--job", "j", "--prune", "--keep-last", "1"],
    "mirror": ["mirror", "--checkpoint", "c"],
}


def aks(*args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    """The console script in a process of its own (exit code, stderr and "no traceback" as users see them)."""
    cmd = [str(AKS)] if AKS.exists() else [sys.executable, "-m", "airflow_kafka_spark.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **env})


@pytest.fixture
def run(capsys):
    """``aks`` in this process (``cli.main``): the same code path without an interpreter start per call."""

    def call(*args: str) -> subprocess.CompletedProcess:
        code = cli.main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), int(code), out.out, out.err)

    return call


def one_error_line(res: subprocess.CompletedProcess, code: int) -> str:
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in res.stderr, res.stderr
    return lines[0]


# --------------------------------------------------------------------------- --execute / --dry-run


@pytest.mark.parametrize("command", sorted(DESTRUCTIVE))
def test_destructive_commands_plan_unless_execute(command, capsys):
    parser = cli.build_parser()
    plain = parser.parse_args(DESTRUCTIVE[command])
    assert executes(plain) is False
    assert executes(parser.parse_args([*DESTRUCTIVE[command], "--execute"])) is True
    assert capsys.readouterr().err == ""
    old = parser.parse_args([*DESTRUCTIVE[command], "--dry-run"])
    assert executes(old) is False
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deprecated" in err and "--execute" in err
    with pytest.raises(UsageError, match="not allowed with"):
        parser.parse_args([*DESTRUCTIVE[command], "--execute", "--dry-run"])


@pytest.mark.parametrize("command", [*sorted(DESTRUCTIVE), "stop"])
def test_help_says_nothing_changes_without_execute(command):
    sub = cli.build_parser()._subparsers._group_actions[0].choices[command]
    assert "without --execute the plan is printed and nothing is changed" in " ".join(sub.format_help().split())


def test_top_level_help_lists_exit_codes_and_execute():
    res = aks("--help")
    assert res.returncode == 0
    for line in ("0    done", "2    bad input", "3    BLOCK", "4    Kafka or the storage did not answer",
                 "--execute", "status", "stop", "--version"):
        assert line in res.stdout, line


def test_version():
    from importlib.metadata import version

    res = aks("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"aks {version('airflow-kafka-spark')}"


def test_backups_execute_without_prune_is_one_line(run, tmp_path):
    line = one_error_line(run("backups", "--backup-root", str(tmp_path), "--job", "j", "--execute"), 2)
    assert "--prune" in line


# --------------------------------------------------------------------------- exit codes


def test_unreachable_storage_exits_4_in_one_line():
    # a refused WebHDFS NameNode and a refused S3 endpoint (botocore raised a traceback before)
    line = one_error_line(aks("backups", "--backup-root", "webhdfs://127.0.0.1:1/x", "--job", "j"), 4)
    assert "127.0.0.1:1" in line
    line = one_error_line(aks("backups", "--backup-root", "s3://bucket/x", "--job", "j",
                              "--backup-storage-option", "endpoint_url=http://127.0.0.1:1",
                              "--backup-storage-option", "key=a", "--backup-storage-option", "secret=b",
                              AWS_MAX_ATTEMPTS="1"), 4)
    assert "not reachable" in line and "endpoint_url" in line


def test_bad_input_stays_exit_2(run):
    one_error_line(run("backups", "--backup-root", "/nonexistent-root", "--job", "Bad Name"), 2)


def test_exit_code_of_errors_caused_by_a_connection():
    def raised_from(cause: BaseException) -> UserError:
        try:
            try:
                raise cause
            except OSError:
                raise UserError("cannot list x: refused") from None
        except UserError as exc:
            return exc

    assert is_unreachable(raised_from(ConnectionRefusedError(111, "Connection refused")))
    assert not is_unreachable(raised_from(FileNotFoundError(2, "No such file")))
    assert Unreachable("x").exit_code == ExitCode.UNREACHABLE == 4
    assert report.guarded(lambda: (_ for _ in ()).throw(raised_from(TimeoutError("timed out")))) == 4
    assert report.guarded(lambda: (_ for _ in ()).throw(raised_from(PermissionError(13, "denied")))) == 2


def test_a_storage_error_quoting_a_url_never_shows_its_token(capsys):
    """requests quotes the URL it failed on; a WebHDFS delegation token or an S3 presigned signature in its
    query must not reach stderr or --json (the shape seen when a NameNode restart cut off ``aks backup``)."""
    import requests

    url = ("/webhdfs/v1/bk/orders/.tmp/x.blob?op=CREATE&delegation=HAAEcm9vdARyb290AIoBk2Secret&overwrite=false&"
           "X-Amz-Signature=abc123Secret&sig=sasSecret%3D")

    def fail() -> int:
        raise requests.exceptions.ConnectionError(f"HTTPConnectionPool(host='nn', port=9870): Max retries exceeded "
                                                  f"with url: {url} (Caused by NewConnectionError('refused'))")

    assert report.guarded(fail, json_errors=True) == 4
    out, err = capsys.readouterr()
    assert "Secret" not in out + err and "delegation=***" in err and "op=CREATE" in err
    assert json.loads(out)["error"].count("***") == 3 and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- --job from the registry


REGISTRY = """
version: 1
allowed_roots: [{root}]
jobs:
  - name: orders
    application: {root}/app.py
    topics: [orders]
    checkpoint: {root}/ck
    backup_root: {root}/backups
    sink: parquet
    output: {root}/out
  - name: legacy
    kind: dstream
    application: {root}/app.jar
    topics: [legacy]
    group: legacy-group
    checkpoint: {root}/legacy-ck
    backup_root: {root}/backups
"""


@pytest.fixture
def registry(tmp_path):
    (tmp_path / "app.py").write_text("")
    (tmp_path / "app.jar").write_text("")
    path = tmp_path / "jobs.yaml"
    path.write_text(REGISTRY.format(root=tmp_path))
    return path


def test_job_fills_what_was_not_given_and_flags_win(registry, tmp_path):
    reg = load_registry(registry)
    spec = reg.get("orders")
    assert pick(None, spec, "checkpoint", what="checkpoint") == spec.checkpoint
    assert pick("/elsewhere", spec, "checkpoint", what="checkpoint") == "/elsewhere"
    with pytest.raises(UsageError, match=r"--job NAME .* or --backup-root URL"):
        pick(None, None, "backup_root", what="backup root")
    args = cli.build_parser().parse_args(["lag", "--job", "orders", "--registry", str(registry)])
    refuse_conflicts(args, spec)        # nothing contradicts


def test_conflicting_combinations_are_one_line(run, registry):
    res = run("validate", "--job", "orders", "--registry", str(registry), "--group", "g", "--bootstrap-servers", "h:1")
    assert "conflicts with --job orders" in one_error_line(res, 2)
    res = run("validate", "--job", "legacy", "--registry", str(registry), "--checkpoint", "/x",
              "--bootstrap-servers", "h:1")
    assert "--checkpoint conflicts with --job legacy" in one_error_line(res, 2)
    res = run("lag", "--job", "orders", "--checkpoint", "/x", "--registry", str(registry))
    assert "not allowed with" in one_error_line(res, 2)


def test_reset_without_checkpoint_needs_a_registry_job(run, registry):
    res = run("reset", "--mode", "preserve", "--bootstrap-servers", "h:1")
    assert "no checkpoint given: pass --job NAME" in one_error_line(res, 2)
    res = run("reset", "--job", "nope", "--registry", str(registry), "--mode", "preserve", "--bootstrap-servers", "h:1")
    assert "unknown job 'nope'" in one_error_line(res, 2)


def test_job_reaches_the_registry_checkpoint(run, registry, tmp_path):
    # The registry job's checkpoint does not exist yet: the error names it, so --job resolved it.
    res = run("reset", "--job", "orders", "--registry", str(registry), "--mode", "preserve",
              "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1")
    assert str(tmp_path / "ck") in one_error_line(res, 2)
    res = run("backups", "--job", "orders", "--registry", str(registry))
    assert res.returncode == 0 and "backups of job orders" in res.stdout, res.stderr


def test_backups_prune_takes_the_registry_retention(run, registry):
    res = run("backups", "--job", "orders", "--registry", str(registry), "--prune")
    assert res.returncode == 0, res.stderr
    assert "would remove 0 backup(s)" in res.stdout and "pass --execute to prune" in res.stdout


# --------------------------------------------------------------------------- progress


def test_progress_is_silent_for_quick_runs_and_shows_steps_of_slow_ones():
    quick = io.StringIO()
    with report.Progress("backup", stream=quick) as step:
        step("copying")
    assert quick.getvalue() == ""

    slow = io.StringIO()
    with report.Progress("reset", after_s=0.2, every_s=0.6, stream=slow) as step:
        step("planning against Kafka")
        time.sleep(0.5)
        step("backing up the checkpoint")
        time.sleep(1.0)
    lines = slow.getvalue().splitlines()
    assert lines[0].startswith("reset: [0.") and lines[0].endswith("planning against Kafka")
    assert lines[1].endswith("backing up the checkpoint")
    assert any(line.endswith("still backing up the checkpoint") for line in lines[2:-1])
    assert lines[-1].endswith("done")

    off = io.StringIO()   # not a terminal and no --progress: a script's stderr keeps its one error line
    with report.Progress("reset", after_s=0.0, stream=off, enabled=False) as step:
        step("planning against Kafka")
        time.sleep(0.3)
    assert off.getvalue() == ""
    args = cli.build_parser().parse_args([*DESTRUCTIVE["reset"], "--progress"])
    assert args.progress is True and args.progress_after == 1.0


def test_an_old_setting_name_is_one_warning_line(run, registry, monkeypatch):
    from airflow_kafka_spark import settings

    monkeypatch.setattr(settings, "_warned", set())
    monkeypatch.delenv("AIRFLOW__KAFKA_SPARK__JOB_REGISTRY", raising=False)
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(registry))
    res = run("status", "--no-lag", "--job", "orders")
    assert res.returncode == 0 and res.stdout.splitlines()[1].split()[:3] == ["orders", "-", "NONE"], res.stdout
    assert res.stderr.splitlines() == ["warning: AKS_JOB_REGISTRY is deprecated and will be ignored in the next "
                                       "release: set AIRFLOW__KAFKA_SPARK__JOB_REGISTRY or [kafka_spark] job_registry "
                                       "in airflow.cfg"]


def test_new_commands_refuse_bad_input_in_one_line_and_change_nothing(registry, tmp_path):
    """status, stop and serve-metrics: an unknown job and a taken port are one line, exit 2, no marker written."""
    import socket

    for cmd in (["status"], ["stop", "--execute"], ["serve-metrics", "--port", "0"]):
        res = aks(*cmd, "--job", "nope", "--registry", str(registry), timeout=60)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (cmd, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and "nope" in res.stderr, (cmd, res.stderr)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        res = aks("serve-metrics", "--host", "127.0.0.1", "--port", port, "--registry", str(registry), timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr and f"127.0.0.1:{port}" in res.stderr, res.stderr
    assert not list(tmp_path.rglob("*.stop"))
