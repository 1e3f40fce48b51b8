"""Issue 17 item 2 in ``aks lag``: a reset killed half-way is visible in lag, as in validate and the audit.

The real command line against the real broker: ``aks reset`` is SIGKILLed right after its journal
is written (the product's crash point ``reset.journaled``). ``aks lag`` must then name the
INTERRUPTED_OPERATION in its JSON (with the operation id), in its human output (with the fix), and
``--check`` must exit 3; before the kill it shows none and ``--check`` passes on the same checkpoint.
"""

from __future__ import annotations

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
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def aks(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=180)


def test_lag_shows_an_interrupted_reset_and_check_exits_3(broker, tmp_path, topic_name):
    bs = broker.bootstrap_servers
    topics.create_topic(bs, topic_name, 2)
    produce(bs, topic_name, 200, partitions=2)
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=False, sources=({topic_name: 2},),
                          records_per_batch=10, start_timestamp_ms=int(time.time() * 1000))
    LifecycleRecord.create("orders", ck.location).save()
    lag = ("lag", "--checkpoint", ck.location, "--bootstrap-servers", bs)

    before = aks(*lag, "--json", "--check", "--stall-after", "86400", "--stopped-after", "86400")
    assert "Traceback" not in before.stderr, before.stderr
    assert before.returncode == 0, before.stdout + before.stderr
    assert json.loads(before.stdout)["interrupted_operation"] is None

    killed = aks("reset", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "backups"), "--mode",
                 "preserve", "--bootstrap-servers", bs, "--settle", "0", "--json", "--execute",
                 env={"AKS_CRASH_AT": "reset.journaled"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    op_id = json.loads((tmp_path / "ck.operation.json").read_text())["operation_id"]

    res = aks(*lag, "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    found = json.loads(res.stdout)["interrupted_operation"]
    assert found["code"] == "INTERRUPTED_OPERATION" and found["severity"] == "BLOCK"
    assert op_id in found["message"] and "aks reset" in found["fix"]

    human = aks(*lag)
    assert human.returncode == 0, human.stderr
    line = next(ln for ln in human.stdout.splitlines() if "INTERRUPTED_OPERATION" in ln)
    assert line.startswith("BLOCK INTERRUPTED_OPERATION:") and op_id in line and "fix: " in human.stdout

    check = aks(*lag, "--check", "--stall-after", "86400", "--stopped-after", "86400")
    assert check.returncode == 3 and "Traceback" not in check.stderr, check.stdout + check.stderr
