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
from airflow_kafka_spark.lifecycle.events import LifecycleEvent
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.adopt import ADOPT_MAX_AGE_S, adopt_backup, checkpoint_now, stop_before, why_not
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


@pytest.fixture
def stopped_then_backed_up(tmp_path):
    """As :func:`backed_up`, but the product's stop of the job is recorded before the backup (the safe restart's
    stop task): the adoption then matches ``offsets/`` and ``commits/`` only."""
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=True, state=True)
    record = LifecycleRecord.create(JOB, ck.location)
    record.add_event(LifecycleEvent.DRIVER_STOPPED, actor="stop-task", outcome="STOPPED", graceful=True, killed=False,
                     last_committed=3, replay_batch=None)
    record.save()
    bk = backup_checkpoint(ck.location, str(tmp_path / "backups"), job=JOB, settle_s=0)
    return ck, tmp_path / "backups", bk.manifest


def adopt_with_record(ck, root, **kw):
    return adopt(ck, root, record=LifecycleRecord.load(ck.location), **kw)


def test_after_a_recorded_stop_only_the_logs_are_matched(stopped_then_backed_up, monkeypatch):
    ck, root, m = stopped_then_backed_up
    from airflow_kafka_spark.ops.backup import adopt as adopt_mod

    listed: list[str] = []
    real = adopt_mod.log_listing
    monkeypatch.setattr(adopt_mod, "list_files", lambda loc: listed.append(loc.url) or {})   # never the whole tree
    monkeypatch.setattr(adopt_mod, "log_listing", lambda loc: listed.append("logs") or real(loc))
    got = adopt_with_record(ck, root)
    assert got.manifest is not None and got.manifest.backup_id == m.backup_id, got.why_not
    assert listed == ["logs"] and got.scope == ("offsets/", "commits/")
    assert ("after the recorded stop; offsets/ and commits/ unchanged since, no submit, lease, reset or restore "
            "recorded since") in got.note
    assert got.ids == (frozenset(range(5)), frozenset(range(4)))


def test_after_a_recorded_stop_a_moved_log_still_refuses(stopped_then_backed_up):
    ck, root, _ = stopped_then_backed_up
    commit = ck.root / "commits" / "3"
    st = commit.stat()
    commit.write_bytes(commit.read_bytes() + b"\n")            # the newest commit rewritten, one byte longer
    os.utime(commit, ns=(st.st_atime_ns, st.st_mtime_ns))
    got = adopt_with_record(ck, root)
    assert got.manifest is None and "commits/3" in got.why_not and got.scope == ("offsets/", "commits/")
    commit.write_bytes(commit.read_bytes()[:-1])
    (ck.root / "commits" / "4").write_bytes(commit.read_bytes())  # the pending batch committed since
    got = adopt_with_record(ck, root)
    assert got.manifest is None and "the checkpoint now 4 (pending None)" in got.why_not


@pytest.mark.parametrize("event", ["driver_submitted", "lease_acquired", "checkpoint_restored"])
def test_a_writer_after_the_stop_brings_back_the_whole_listing(stopped_then_backed_up, event):
    """A submit, lease or restore since the stop: the stop no longer speaks for the checkpoint, every file is
    matched again, and a state file rewritten under its old mtime is noticed (by its ctime)."""
    ck, root, _ = stopped_then_backed_up
    record = LifecycleRecord.load(ck.location)
    record.add_event(LifecycleEvent(event), actor="someone")
    record.save()
    assert adopt_with_record(ck, root).scope == ()
    state_file = next(p for p in sorted((ck.root / "state").rglob("*.delta")))
    st = state_file.stat()
    time.sleep(0.01)
    state_file.write_bytes(state_file.read_bytes())
    os.utime(state_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    got = adopt_with_record(ck, root)
    assert got.manifest is None and "1 file(s) differ" in got.why_not and got.scope == ()


def test_a_stop_at_another_batch_or_after_the_backup_witnesses_nothing(stopped_then_backed_up):
    ck, _, m = stopped_then_backed_up
    record = LifecycleRecord.load(ck.location)
    assert stop_before(record, m) is not None
    assert stop_before(record, replace(m, last_committed_batch=2)) is None
    assert stop_before(record, replace(m, created_at_ms=record.history[-1]["at_ms"] - 1)) is None
    assert stop_before(None, m) is None
