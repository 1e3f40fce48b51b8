"""Restore against the real broker when its inputs or its timing are hostile (issue 17, items 1 and 4).

A dry run writes nothing anywhere (file bytes, modes, mtimes and directory mtimes compared); a
staged copy that vanishes before the commit point fails the restore with one line and records
nothing; a checkpoint named with glob characters never makes cleanup touch a neighbour; a finished
restore run again is a no-op that says so; of two restores started together (two real processes)
one proceeds and the other refuses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark._util import faults
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOB = "orders"


def snapshot(root: Path) -> dict[str, tuple]:
    """Files by (sha256, mode, mtime_ns) and directories by mtime_ns: a created-then-deleted folder shows."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        out[str(Path(dirpath).relative_to(root))] = ("dir", os.lstat(dirpath).st_mtime_ns)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode,
                                                 st.st_mtime_ns)
            else:
                out[str(p.relative_to(root))] = ("other", st.st_mode)
    return out


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def aks_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "airflow_kafka_spark.cli", *args]


def aks(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(aks_args(*args), capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=180)


def advance(ck, topic: str, first: int, last: int) -> None:
    for b in range(first, last + 1):
        ends = json.dumps({topic: {"0": (b + 1) * 10, "1": (b + 1) * 10}}, separators=(",", ":"))
        if not ck.path(f"offsets/{b}").exists():
            ck.write(f"offsets/{b}", offsets_file([ends], batch_timestamp_ms=int(time.time() * 1000)))
        ck.write(f"commits/{b}", commit_file())


def restored_events(location: str) -> int:
    return [e["event"] for e in LifecycleRecord.load(location).history].count("checkpoint_restored")


@pytest.fixture
def moved_on(broker, tmp_path, topic_name):
    """A checkpoint inside a real topic, a backup of its batch 3, then batches up to 7."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 200, partitions=2)
    base = tmp_path / "space"
    ck = write_checkpoint(base / "job[12]", batches=4, pending=True, sources=({topic_name: 2},),
                          records_per_batch=10, state=True, start_timestamp_ms=int(time.time() * 1000))
    LifecycleRecord.create(JOB, ck.location).save()
    root = base / "backups"
    old = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    advance(ck, topic_name, 4, 7)
    return ck, root, old, base


def restore_args(ck, root, backup_id: str, broker, *extra: str) -> tuple[str, ...]:
    return ("restore", "--checkpoint", ck.location, "--backup-root", str(root), "--backup", backup_id,
            "--bootstrap-servers", broker.bootstrap_servers, *extra)


def test_a_dry_run_writes_nothing_anywhere(broker, moved_on):
    ck, root, old, base = moved_on
    before = snapshot(base)
    time.sleep(0.05)        # a folder created and removed within the same tick would still change mtimes
    out = aks(*restore_args(ck, root, old.backup_id, broker, "--settle", "0", "--json"))   # a plan: the default
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["dry_run"] is True and doc["restored"] is False and doc["records_to_replay"] == 2 * (80 - 40)
    assert snapshot(base) == before


def test_a_staging_copy_that_vanishes_before_the_commit_point_restores_and_records_nothing(broker, moved_on,
                                                                                          monkeypatch):
    ck, root, old, base = moved_on
    current = tree(ck.root)
    real = faults.crash_point

    def vanish(name: str) -> None:
        if name == "restore.backed_up":
            for p in base.iterdir():
                if p.name.startswith("job[12].staging-"):
                    shutil.rmtree(p)
        real(name)

    monkeypatch.setattr(faults, "crash_point", vanish)
    with pytest.raises(UserError) as err:
        restore_checkpoint(ck.location, str(root), old.backup_id, {"bootstrap.servers": broker.bootstrap_servers},
                           run=RunOptions(backup_settle_s=0))
    assert "vanished" in str(err.value) and "\n" not in str(err.value)
    assert tree(ck.root) == current and restored_events(ck.location) == 0
    assert not (base / "job[12].operation.json").exists()


def test_a_staging_copy_gone_after_the_journal_is_not_recorded_as_restored(broker, moved_on, monkeypatch):
    ck, root, old, base = moved_on
    current = tree(ck.root)
    real = faults.crash_point

    def vanish(name: str) -> None:
        if name == "restore.journaled":
            for p in base.iterdir():
                if p.name.startswith("job[12].staging-"):
                    shutil.rmtree(p)
        real(name)

    monkeypatch.setattr(faults, "crash_point", vanish)
    with pytest.raises(UserError, match="is gone; nothing was restored"):
        restore_checkpoint(ck.location, str(root), old.backup_id, {"bootstrap.servers": broker.bootstrap_servers},
                           run=RunOptions(backup_settle_s=0))
    assert tree(ck.root) == current and restored_events(ck.location) == 0
    assert not (base / "job[12].operation.json").exists()


def test_cleanup_never_touches_a_neighbours_staging_and_a_rerun_is_a_no_op(broker, moved_on):
    ck, root, old, base = moved_on
    neighbour = base / "job1.staging-20260101T000000Z-abcdef"     # matched by the glob "job[12].staging-*"
    neighbour.mkdir()
    (neighbour / "metadata").write_text("the neighbour's restore in progress")
    out = aks(*restore_args(ck, root, old.backup_id, broker, "--settle", "0", "--json", "--execute"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["restored"] is True
    assert (neighbour / "metadata").read_text() == "the neighbour's restore in progress"
    assert tree(ck.root) == {f.path: f.sha256 for f in old.files}

    before = snapshot(base)
    again = aks(*restore_args(ck, root, old.backup_id, broker, "--settle", "0", "--execute"))
    assert again.returncode == 0, again.stderr
    assert "already in place" in again.stdout and "nothing was done" in again.stdout
    assert restored_events(ck.location) == 1
    assert len(list(base.glob("job?12?.restore-*"))) == 1
    # every file identical (the lock file came and went: the parent folder's mtime may move)
    assert {k: v for k, v in snapshot(base).items() if not k.startswith("backups") and v[0] != "dir"} == \
        {k: v for k, v in before.items() if not k.startswith("backups") and v[0] != "dir"}


def test_two_concurrent_restores_one_proceeds_the_other_refuses(broker, moved_on):
    ck, root, old, base = moved_on
    args = aks_args(*restore_args(ck, root, old.backup_id, broker, "--settle", "4", "--json", "--execute"))
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(2)]
    results = [(p.wait(timeout=180), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results
    loser = next(r for r in results if r[0] == 2)
    lines = loser[2].strip().splitlines()
    assert len(lines) == 1 and "locked" in lines[0], loser
    assert restored_events(ck.location) == 1
    assert len(list(base.glob("job?12?.restore-*"))) == 1
    assert tree(ck.root) == {f.path: f.sha256 for f in old.files}
