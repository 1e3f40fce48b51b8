"""``aks restore`` finds the job the way ``aks backup`` filed it (issue 14): no ``--job`` needed either way.

A checkpoint written by real Spark, no lifecycle record beside it: ``aks backup`` files the backup
under the checkpoint folder's name, and ``aks restore`` (by id and with ``--backup latest``) must
find it there — before the fix it refused without ``--job``, contrary to its help.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.support import spark_session

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def aks(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ), timeout=180)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_restore_without_job_finds_the_backup_filed_under_the_folder_name(broker, tmp_path, topic_name):
    bootstrap = broker.bootstrap_servers
    topics.create_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 100, partitions=2)
    ck, out, root = tmp_path / "orders_stream", tmp_path / "out", tmp_path / "backups"
    assert spark_session.run_available_now(bootstrap, topic_name, ck, out).ok
    assert not list(tmp_path.glob("*.lifecycle.json")), "the point: no record names the job"

    backup = aks("backup", "--checkpoint", str(ck), "--backup-root", str(root), "--settle", "0", "--json")
    assert backup.returncode == 0, backup.stdout + backup.stderr
    doc = json.loads(backup.stdout)
    backup_id = doc["backup"]["backup_id"]
    assert (root / "orders_stream").is_dir(), "backup files it under the checkpoint folder's name"
    backed_up = tree(ck)

    produce(bootstrap, topic_name, 40, partitions=2)
    assert spark_session.run_available_now(bootstrap, topic_name, ck, out).ok   # the checkpoint moves on
    assert tree(ck) != backed_up

    common = ("--checkpoint", str(ck), "--backup-root", str(root), "--bootstrap-servers", bootstrap,
              "--settle", "0", "--json")
    dry = aks("restore", "--backup", backup_id, *common)   # the plan (no --execute)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    latest = aks("restore", "--backup", "latest", "--execute", *common)
    assert latest.returncode == 0, latest.stdout + latest.stderr
    result = json.loads(latest.stdout)
    assert result["restored"] is True and result["backup_id"] == backup_id
    assert result["records_to_replay"] == 40                                    # the 40 read since the backup
    restored = tree(ck)
    assert {k: v for k, v in restored.items() if k in backed_up} == backed_up

    other = aks("restore", "--backup", "latest", "--job", "someone_else", "--execute", *common)
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr
    assert "someone_else" in other.stderr
