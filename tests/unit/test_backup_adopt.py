"""The rule by which a reset adopts the newest verified backup (airflow_kafka_spark/ops/backup/adopt.py).

A checkpoint as Spark lays it out (tests/support/checkpoint_factory.py) on the local disk, backed up
by the real backup; each test changes one thing the rule must notice.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.adopt import ADOPT_MAX_AGE_S, adopt_backup, checkpoint_now, why_not
from airflow_kafka_spark.ops.backup.catalog import job_location
from airflow_kafka_spark.ops.commands import backup_checkpoint
from tests.support.checkpoint_factory import write_checkpoint

JOB = "orders"


@pytest.fixture
def backed_up(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=True, state=True)
    LifecycleRecord.create(JOB, ck.location).save()
    bk = backup_checkpoint(ck.location, str(tmp_path / "backups"), job=JOB, settle_s=0)
    return ck, tmp_path / "backups", bk.manifest


def adopt(ck, root, **kw):
    loc = open_location(ck.location, None)
    return adopt_backup(loc, job_location(open_location(str(root), None), JOB), JOB, read_checkpoint(loc),
                        seal_key=kw.pop("seal_key", None), **kw)


def test_the_newest_backup_of_the_unchanged_checkpoint_is_adopted(backed_up):
    ck, root, m = backed_up
    got = adopt(ck, root)
    assert got.manifest is not None and got.manifest.backup_id == m.backup_id, got.why_not
    assert got.note.startswith(f"adopted verified backup {m.backup_id} (taken ")
    assert got.note.endswith("s ago; the checkpoint unchanged since)")
    assert (m.last_committed_batch, m.pending_batch) == (3, 4)


def test_a_file_rewritten_with_its_old_mtime_is_noticed_by_its_ctime(backed_up):
    ck, root, _ = backed_up
    state_file = next(p for p in sorted((ck.root / "state").rglob("*.delta")))
    st = state_file.stat()
    time.sleep(0.01)
    state_file.write_bytes(state_file.read_bytes())          # same size, same bytes...
    os.utime(state_file, ns=(st.st_atime_ns, st.st_mtime_ns))   # ...and the old mtime put back
    got = adopt(ck, root)
    assert got.manifest is None
    assert "1 file(s) differ" in got.why_not and str(state_file.relative_to(ck.root)) in got.why_not


def test_a_new_file_or_a_new_batch_is_noticed(backed_up):
    ck, root, _ = backed_up
    (ck.root / "notes.txt").write_text("written after the backup")
    got = adopt(ck, root)
    assert got.manifest is None and "notes.txt" in got.why_not
    (ck.root / "notes.txt").unlink()
    assert adopt(ck, root).manifest is not None
    (ck.root / "commits" / "4").write_bytes((ck.root / "commits" / "3").read_bytes())
    got = adopt(ck, root)
    assert got.manifest is None and "holds batch 3 (pending 4), the checkpoint now 4 (pending None)" in got.why_not


def test_an_old_forced_or_foreign_backup_is_not_adopted(backed_up):
    ck, _, m = backed_up
    loc = open_location(ck.location, None)
    now, _ = checkpoint_now(loc, read_checkpoint(loc))
    t = m.created_at_ms
    assert why_not(m, now, now_ms=t + 1000) == ""
    assert "taken 901s ago" in why_not(m, now, now_ms=t + int(ADOPT_MAX_AGE_S * 1000) + 1000)
    assert "running query" in why_not(replace(m, forced=True), now, now_ms=t)
    assert "running query" in why_not(replace(m, running=True), now, now_ms=t)
    assert "is of query other" in why_not(replace(m, query_id="other"), now, now_ms=t)
    assert "another location" in why_not(replace(m, checkpoint_location=str(ck.root.parent / "elsewhere")), now,
                                         now_ms=t)
    assert "another location" in why_not(replace(m, checkpoint_location="nosuchscheme://x/ck"), now, now_ms=t)
    assert "differ" in why_not(replace(m, files=m.files[1:]), now, now_ms=t)
    assert "differ" in why_not(replace(m, files=tuple(f._replace(ctime=None) for f in m.files)), now, now_ms=t)


def test_a_backup_without_the_configured_keyed_seal_is_not_adopted(backed_up):
    ck, root, _ = backed_up
    got = adopt(ck, root, seal_key=b"a-configured-seal-key-0123456789")
    assert got.manifest is None and "no published backup" in got.why_not
