"""Issue 17 items 2, 5, 6 on the real command line against the real broker.

The headline story (item 2): ``aks reset --mode preserve`` is SIGKILLed right after its journal is
written (the product's own crash point ``reset.journaled``). ``aks validate`` must then BLOCK with
``INTERRUPTED_OPERATION`` (it said PASS). If the job is deployed meanwhile (lease taken, batch 5
written) and reset is run again, it must refuse in one line (exit 3) and leave the live checkpoint
byte for byte as it is (it "resumed": moved the live checkpoint aside, restart from batch 4's
offsets, batch 5 read twice).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOB = "orders"
DEEP = "[" * 10_000 + "]" * 10_000


def tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def aks(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=180)


def one_line_error(res: subprocess.CompletedProcess, code: int) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    return res.stderr


@pytest.fixture
def job(broker, tmp_path, topic_name):
    """A stopped job: 100 records per partition, batches 0-3 committed, batch 4 planned, a record."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 200, partitions=2)
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=True, sources=({topic_name: 2},),
                          records_per_batch=10, start_timestamp_ms=int(time.time() * 1000))
    LifecycleRecord.create(JOB, ck.location).save()
    return ck, topic_name


def validate_json(ck_location: str, bs: str, *extra: str) -> tuple[int, dict]:
    res = aks("validate", "--checkpoint", ck_location, "--bootstrap-servers", bs, "--json", *extra)
    assert "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def test_a_killed_reset_blocks_validate_and_a_rerun_after_a_deploy_refuses(broker, tmp_path, job):
    ck, topic = job
    bs = broker.bootstrap_servers
    args = ("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "backups"), "--mode", "preserve",
            "--bootstrap-servers", bs, "--settle", "0", "--json", "--execute")
    killed = aks(*args, env={"AKS_CRASH_AT": "reset.journaled"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    journal = tmp_path / "ck.operation.json"
    assert journal.exists()

    code, doc = validate_json(ck.location, bs)
    assert code == 3 and doc["verdict"] == "BLOCK", doc["headline"]
    [found] = [f for f in doc["findings"] if f["code"] == "INTERRUPTED_OPERATION"]
    op_id = json.loads(journal.read_text())["operation_id"]
    assert found["severity"] == "BLOCK" and op_id in found["message"] and "aks reset" in found["fix"]
    assert doc["headline"].startswith("verdict: BLOCK — INTERRUPTED_OPERATION")
    human = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs)
    assert human.returncode == 3 and "INTERRUPTED_OPERATION" in human.stdout.strip().splitlines()[-1]
    dry = aks(*[a for a in args if a not in ("--json", "--execute")])   # the plan (the default)
    assert dry.returncode == 3 and "INTERRUPTED_OPERATION" in dry.stdout and "Traceback" not in dry.stderr

    # The job is deployed meanwhile: it takes the lease, commits batch 4 and writes batch 5.
    LifecycleRecord.load(ck.location).acquire_lease("airflow-run-5", 600)
    ck.write("commits/4", commit_file())
    ck.write("offsets/5", offsets_file([json.dumps({topic: {"0": 60, "1": 60}}, separators=(",", ":"))],
                                       batch_timestamp_ms=int(time.time() * 1000)))
    ck.write("commits/5", commit_file())
    live, record_before = tree(ck.root), Path(ck.location + ".lifecycle.json").read_bytes()

    again = aks(*args)
    err = one_line_error(again, 3)
    assert op_id in err and "lease" in err and "nothing was changed" in err
    assert tree(ck.root) == live and journal.exists()
    assert not list(tmp_path.glob("ck.reset-*"))
    assert LifecycleRecord.load(ck.location).next_starting_offsets is None

    # The lease ends (the run stopped), the checkpoint still moved on: still refused, still untouched.
    LifecycleRecord.load(ck.location).release_lease("airflow-run-5")
    again = aks(*args)
    err = one_line_error(again, 3)
    assert "moved on" in err and "offsets 4 -> 5" in err
    assert tree(ck.root) == live and journal.exists() and not list(tmp_path.glob("ck.reset-*"))
    assert Path(ck.location + ".lifecycle.json").read_bytes() != record_before  # only the lease release


def test_validate_refuses_hostile_names_and_chained_paths_with_one_line(broker, tmp_path, job):
    ck, _ = job
    bs = broker.bootstrap_servers
    for bad in ("../../etc", "orders\n"):
        res = aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs, "--job-name", bad)
        assert "job name" in one_line_error(res, 2)
    assert not Path(ck.location + ".lifecycle.json").read_text().count("etc")
    other = write_checkpoint(tmp_path / "other", batches=1)
    before = tree(tmp_path)
    res = aks("validate", "--checkpoint", f"{ck.location}-missing::{other.location}", "--bootstrap-servers", bs)
    assert "'::'" in one_line_error(res, 2)
    assert tree(tmp_path) == before


def test_validate_blocks_empty_latest_offsets_like_reset_refuses_them(broker, tmp_path, job):
    ck, _ = job
    bs = broker.bootstrap_servers
    ck.write("commits/4", commit_file())
    ck.write("offsets/5", offsets_file(["{}"], batch_timestamp_ms=int(time.time() * 1000)))
    ck.write("commits/5", commit_file())
    before = tree(ck.root)
    code, doc = validate_json(ck.location, bs, "--no-record")
    assert code == 3 and "KAFKA_OFFSETS_EMPTY" in {f["code"] for f in doc["findings"]}, doc["headline"]
    dry = aks("reset", "--checkpoint", ck.location, "--mode", "preserve", "--bootstrap-servers", bs)
    assert dry.returncode in (2, 3) and "Traceback" not in dry.stderr
    assert tree(ck.root) == before


def test_hostile_json_and_huge_files_give_one_line_or_a_block(broker, tmp_path, job):
    ck, _ = job
    bs = broker.bootstrap_servers
    record = Path(ck.location + ".lifecycle.json")
    doc = json.loads(record.read_text())
    doc["next_starting_offsets"] = '{"a":' * 10_000 + "1" + "}" * 10_000
    record.write_text(json.dumps(doc))
    before = tree(tmp_path)
    assert "next_starting_offsets" in one_line_error(aks("validate", "--checkpoint", ck.location,
                                                          "--bootstrap-servers", bs), 2)
    record.write_text(DEEP)
    assert "nested" in one_line_error(aks("validate", "--checkpoint", ck.location, "--bootstrap-servers", bs), 2)
    assert tree(tmp_path) == {**before, "ck.lifecycle.json": hashlib.sha256(DEEP.encode()).hexdigest()}
    record.unlink()

    ck.write("sources/0/0", b"\x00v1\n" + DEEP.encode())          # batch 4 pending, 3 committed: a WARN
    with open(ck.path("metadata"), "r+b") as fh:
        fh.truncate(1 << 30)                                       # sparse 1 GiB
    code, doc = validate_json(ck.location, bs, "--no-record")
    assert code == 3 and doc["verdict"] == "BLOCK"
    messages = " ".join(f["message"] for f in doc["findings"])
    assert "1,073,741,824 bytes" in messages and "sources/0/0" in messages
    (tmp_path / "ck.operation.json").write_text(DEEP)
    code, doc = validate_json(ck.location, bs, "--no-record")
    assert code == 3 and "INTERRUPTED_OPERATION" in {f["code"] for f in doc["findings"]}
    dry = aks("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--mode", "earliest",
              "--bootstrap-servers", bs, "--settle", "0", "--execute")
    assert "nested" in one_line_error(dry, 2)
    assert not (tmp_path / "b").exists()
