"""The backup's pre-copy (issue 28): the bulk of the copy before the stop, the same verified backup after it.

What is proven here, on checkpoints written as Spark writes them (no Spark): a pre-copy publishes
nothing and changes nothing beside the blob store; the backup after it reads only the files
written since, and its manifest (files, sizes, sha256) is the one a backup without a pre-copy
writes; a file rewritten after the pre-copy (even with its old mtime put back), a tampered or
foreign-keyed pre-copy, a pre-copied blob that went missing or was damaged are all caught, and the
backup is still right; files that vanish or change while pre-copied are left to the backup.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import precopy as precopy_mod
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.precopy import PassAbandoned, precopy_checkpoint
from airflow_kafka_spark.ops.backup.reuse import PRECOPY_NAME
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import BackupRequest, backup_as_requested, backup_checkpoint, prune_backups
from airflow_kafka_spark.ops.options import Retention, RunOptions
from tests.support.checkpoint_factory import write_checkpoint
from tests.unit.test_backup import JOB, add_batches, tree


@pytest.fixture
def ck(tmp_path):
    return write_checkpoint(tmp_path / "ck", batches=5, state=True)


SETTLED = RunOptions(backup_settle_s=0)


def entries(m) -> list[tuple[str, int, str]]:
    return [(f.path, f.size, f.sha256) for f in m.files]


def blobs(root: Path) -> set[str]:
    return {p.name for p in (root / JOB / "blobs").rglob("*") if p.is_file()}


def test_a_precopy_publishes_nothing_and_touches_only_the_blob_store(ck, tmp_path):
    root = tmp_path / "b"
    before = tree(ck.root)
    r = precopy_checkpoint(ck.location, str(root), job=JOB)
    assert tree(ck.root) == before                               # the checkpoint is read only
    assert LifecycleRecord.load(ck.location) is None             # no record written beside it
    assert list_backups(str(root), JOB).backups == []            # nothing published
    assert r.files_read == r.files > 0 and r.files_skipped == 0
    assert len(blobs(root)) == r.blobs_written > 0
    assert (root / JOB / PRECOPY_NAME).is_file()
    assert {p.name for p in (root / JOB).iterdir()} <= {".lock", ".tmp", "blobs", PRECOPY_NAME}


def test_the_backup_after_a_precopy_reads_only_what_was_written_since_and_is_the_same_backup(ck, tmp_path):
    twin = write_checkpoint(tmp_path / "twin", batches=5, state=True)   # the same history, no pre-copy
    pre = precopy_checkpoint(ck.location, str(tmp_path / "b"), job=JOB)
    add_batches(ck, 5, 3)                    # the query runs on until the stop
    add_batches(twin, 5, 3)
    after = backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0)
    plain = backup_checkpoint(twin.location, str(tmp_path / "b2"), job=JOB, settle_s=0)
    new_files = 3 * 2 + 3 * 2                # offsets + commits, 2 state deltas per batch
    assert after.files_hashed == new_files and plain.files_hashed == plain.files
    assert after.files_from_precopy == pre.files and after.files_from_precopy == after.files - new_files
    assert entries(after.manifest) == entries(plain.manifest)
    assert after.manifest.stats["files_from_precopy"] == pre.files
    # Verified exactly as a backup without pre-copy: every blob re-hashed by a deep verify.
    assert verify_backup(str(tmp_path / "b"), JOB, after.backup_id, deep=True).backup_id == after.backup_id
    assert not (tmp_path / "b" / JOB / PRECOPY_NAME).exists()     # consumed by the backup


def test_a_pass_that_finds_nothing_new_seals_nothing_and_the_backup_still_reuses_all(ck, tmp_path):
    root = tmp_path / "b"
    first = precopy_checkpoint(ck.location, str(root), job=JOB)
    path = root / JOB / PRECOPY_NAME
    sealed, stamp = path.read_bytes(), path.stat().st_mtime_ns
    again = precopy_checkpoint(ck.location, str(root), job=JOB)
    assert first.sealed and not again.sealed
    assert (again.files, again.files_read, again.blobs_written) == (first.files, 0, 0)
    assert path.read_bytes() == sealed and path.stat().st_mtime_ns == stamp      # not written again
    r = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    assert r.files_hashed == 0 and r.files_from_precopy == first.files


def test_an_abandoned_pass_gives_up_before_its_first_read_and_stores_nothing(ck, tmp_path):
    root = tmp_path / "b"
    with pytest.raises(PassAbandoned, match="before reading"):
        precopy_checkpoint(ck.location, str(root), job=JOB, abandon=lambda: True)
    assert blobs(root) == set() and not (root / JOB / PRECOPY_NAME).exists()
    r = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)       # its lock was given back
    assert r.files_hashed == r.files > 0


def test_a_file_rewritten_after_the_precopy_with_its_old_mtime_is_read_again(ck, tmp_path):
    precopy_checkpoint(ck.location, str(tmp_path / "b"), job=JOB)
    target = ck.root / "state/0/0/3.delta"
    st = target.stat()
    target.write_bytes(b"X" * st.st_size)                         # same size...
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))         # ...and the old mtime put back
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0).manifest
    got = {f.path: f.sha256 for f in m.files}
    assert got["state/0/0/3.delta"] == hashlib.sha256(b"X" * st.st_size).hexdigest()


def test_a_tampered_precopy_is_ignored_and_the_backup_reads_every_file(ck, tmp_path):
    root = tmp_path / "b"
    precopy_checkpoint(ck.location, str(root), job=JOB)
    path = root / JOB / PRECOPY_NAME
    doc = json.loads(path.read_bytes())
    victim = next(f for f in doc["files"] if f["path"] == "state/0/1/2.delta")
    victim["sha256"] = hashlib.sha256(b"forged").hexdigest()     # a forged entry, old digest
    path.write_text(json.dumps(doc))
    r = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    assert r.files_from_precopy == 0 and r.files_hashed == r.files
    got = {f.path: f.sha256 for f in r.manifest.files}
    assert got["state/0/1/2.delta"] == hashlib.sha256((ck.root / "state/0/1/2.delta").read_bytes()).hexdigest()


def test_a_precopy_sealed_with_another_key_is_not_trusted(ck, tmp_path):
    root = str(tmp_path / "b")
    precopy_checkpoint(ck.location, root, job=JOB, seal_key=b"k" * 32)
    r = backup_checkpoint(ck.location, root, job=JOB, settle_s=0, run=RunOptions(seal_key=b"other-key-" * 4))
    assert r.files_from_precopy == 0 and r.files_hashed == r.files
    mine = precopy_checkpoint(ck.location, root, job=JOB, seal_key=b"k" * 32)
    add_batches(ck, 5, 1)
    r2 = backup_checkpoint(ck.location, root, job=JOB, settle_s=0, run=RunOptions(seal_key=b"k" * 32))
    assert r2.files_hashed == 4 and r2.files_from_precopy + r2.files_from_previous >= mine.files


@pytest.mark.parametrize("damage", ["missing", "damaged"])
def test_a_precopied_blob_missing_or_damaged_is_stored_again_or_refused(ck, tmp_path, damage):
    root = tmp_path / "b"
    precopy_checkpoint(ck.location, str(root), job=JOB)
    rel = "state/0/0/4.delta"
    sha = hashlib.sha256((ck.root / rel).read_bytes()).hexdigest()
    blob = root / JOB / "blobs" / sha[:2] / sha
    if damage == "missing":
        blob.unlink()
        r = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
        assert blob.is_file() and r.files_hashed >= 1               # read and stored again
        verify_backup(str(root), JOB, r.backup_id, deep=True)
    else:
        blob.write_bytes(b"Z" * blob.stat().st_size)                # same size, other bytes
        r = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
        # As for a blob of a previous backup damaged in place: the deep verify (and any restore) says so.
        with pytest.raises(UserError, match="does not match its sha256"):
            verify_backup(str(root), JOB, r.backup_id, deep=True)


def test_files_that_vanish_or_change_while_precopied_are_left_to_the_backup(ck, tmp_path, monkeypatch):
    real_put = precopy_mod.BlobWriter.put
    gone, grown = ck.root / "state/0/0/2.delta", ck.root / "state/0/1/2.delta"

    def put(self, src, size):
        if src.path == str(gone):
            gone.unlink()                        # state maintenance deleted it after the listing
        out = real_put(self, src, size)
        if src.path == str(grown):
            with open(grown, "ab") as fh:        # written again right after it was read
                fh.write(b"+")
        return out

    monkeypatch.setattr(precopy_mod.BlobWriter, "put", put)
    r = precopy_checkpoint(ck.location, str(tmp_path / "b"), job=JOB)
    assert r.files_skipped == 2
    monkeypatch.undo()
    doc = json.loads((tmp_path / "b" / JOB / PRECOPY_NAME).read_bytes())
    assert {"state/0/0/2.delta", "state/0/1/2.delta"}.isdisjoint(f["path"] for f in doc["files"])
    shutil.copy(ck.root / "state/0/0/3.delta", gone)   # put back (other bytes): the backup must read it
    b = backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0)
    got = {f.path: f.sha256 for f in b.manifest.files}
    for p in (gone, grown):
        assert got[str(p.relative_to(ck.root))] == hashlib.sha256(p.read_bytes()).hexdigest()


def test_an_unconsumed_precopy_is_collected_by_pruning_and_a_reset_querys_precopy_is_not_used(ck, tmp_path):
    root = tmp_path / "b"
    backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    add_batches(ck, 5, 2)
    pre = precopy_checkpoint(ck.location, str(root), job=JOB)
    assert pre.files_read == 8 and pre.blobs_written > 0            # only what the last backup lacks
    pr = prune_backups(str(root), JOB, Retention(keep_last=1))
    assert pr.blobs_removed == pre.blobs_written                    # named by no published backup
    other = write_checkpoint(tmp_path / "ck2", batches=5, state=True, query_id="0" * 8 + "-0000-0000-0000-" + "0" * 12)
    precopy_checkpoint(other.location, str(tmp_path / "c"), job=JOB)
    shutil.rmtree(other.root)
    fresh = write_checkpoint(tmp_path / "ck2", batches=5, state=True)   # same path, another query id
    r = backup_checkpoint(fresh.location, str(tmp_path / "c"), job=JOB, settle_s=0)
    assert r.files_from_precopy == 0


def test_aks_backup_pre_copy_publishes_nothing_and_the_next_backup_reads_only_new_files(ck, tmp_path):
    from tests.unit.test_backup import aks

    root = str(tmp_path / "b")
    out = aks("backup", "--checkpoint", ck.location, "--backup-root", root, "--job", JOB, "--pre-copy", "--json")
    assert out.returncode == 0, out.stderr
    pre = json.loads(out.stdout)["pre_copy"]
    assert pre["files_read"] == pre["files"] > 0 and list_backups(root, JOB).backups == []
    add_batches(ck, 5, 1)
    out = aks("backup", "--checkpoint", ck.location, "--backup-root", root, "--job", JOB, "--settle", "0", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["files_hashed"] == 4 and doc["files_from_precopy"] == pre["files"]


def test_the_stop_pre_copies_again_while_a_pass_was_slow_each_pass_reading_only_what_came_during_the_last(
        ck, tmp_path):
    """The running query commits a batch between passes (the ``still_running`` probe is called there): each
    later pass reads exactly the files that batch added and reuses the rest; a quick pass ends it."""
    root = str(tmp_path / "b")
    batches: list[int] = []

    def running() -> bool:
        batches.append(5 + len(batches))
        add_batches(ck, batches[-1], 1)
        return True

    slow = precopy_mod.precopy_until_quiet(ck.location, root, job=JOB, still_running=running, quiet_s=-1.0)
    assert len(slow) == precopy_mod.MAX_PASSES and batches == [5, 6]
    assert slow[0].files_read == slow[0].files > 2
    grown = [b.files - a.files for a, b in itertools.pairwise(slow)]
    assert all(g > 0 for g in grown) and [p.files_read for p in slow[1:]] == grown
    stored = json.loads((tmp_path / "b" / JOB / PRECOPY_NAME).read_text())
    assert {"commits/5", "commits/6", "state/0/1/7.delta"} <= {f["path"] for f in stored["files"]}
    quick = precopy_mod.precopy_until_quiet(ck.location, root, job=JOB, still_running=running, quiet_s=3600.0)
    stopped = precopy_mod.precopy_until_quiet(ck.location, root, job=JOB, still_running=lambda: False,
                                              quiet_s=-1.0)
    assert (len(quick), len(stopped), batches) == (1, 1, [5, 6])
    assert quick[0].files_read == 0 and stopped[0].files_read == 0


def test_the_stop_tasks_passes_beside_the_wait_hand_their_entries_on_in_memory(ck, tmp_path):
    """``PassChain``: the pass before the stop writes ``precopy.json``; the passes beside the wait write
    nothing, each reading only what came since the one before (its entries in memory, not the older file);
    the backup given the newest in memory reads only what came after it and is the backup a twin checkpoint
    gets without any pre-copy; the file on the store is still consumed."""
    twin = write_checkpoint(tmp_path / "twin", batches=5, state=True)
    root = tmp_path / "b"
    chain = precopy_mod.PassChain(ck.location, str(root), job=JOB)
    first = chain.before()
    path = root / JOB / PRECOPY_NAME
    on_disk = path.read_bytes()
    assert first.sealed and first.files_read == first.files and chain.newest is first.manifest
    beside = []
    for b in (5, 6):
        add_batches(ck, b, 1)
        add_batches(twin, b, 1)
        beside.append(chain.beside(precopy_mod.never_abandon))
    assert [(r.files_read, r.sealed) for r in beside] == [(4, False), (4, False)]   # not the first's 4 again
    assert path.read_bytes() == on_disk and chain.newest is beside[-1].manifest     # nothing written beside
    assert beside[-1].to_dict()["sealed"] is False and "manifest" not in beside[-1].to_dict()
    add_batches(ck, 7, 1)
    add_batches(twin, 7, 1)
    after = backup_as_requested(ck.location, str(root), BackupRequest(job=JOB, precopy=chain.newest), run=SETTLED)
    plain = backup_checkpoint(twin.location, str(tmp_path / "b2"), job=JOB, settle_s=0)
    assert after.files_hashed == 4 and after.files_from_precopy == after.files - 4
    assert entries(after.manifest) == entries(plain.manifest)
    assert verify_backup(str(root), JOB, after.backup_id, deep=True).backup_id == after.backup_id
    assert not path.exists()                                                        # consumed


def test_a_handed_precopy_of_another_query_is_not_used_and_the_store_s_file_is(ck, tmp_path):
    root = str(tmp_path / "b")
    precopy_checkpoint(ck.location, root, job=JOB)
    other = write_checkpoint(tmp_path / "ck2", batches=5, state=True, query_id="0" * 8 + "-0000-0000-0000-" + "0" * 12)
    stranger = precopy_mod.PassChain(other.location, str(tmp_path / "c"), job=JOB)
    stranger.before()
    add_batches(ck, 5, 1)
    r = backup_as_requested(ck.location, root, BackupRequest(job=JOB, precopy=stranger.newest), run=SETTLED)
    assert r.files_hashed == 4 and r.files_from_precopy == r.files - 4            # precopy.json's entries
