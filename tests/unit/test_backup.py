"""Backups on checkpoints written byte for byte as Spark 4.0 does (no Spark, no broker).

What is proven here: which files make up the last committed version; the manifest and its seal;
content-addressed incremental copies; the catalog lists only published, intact backups; retention
never drops the newest one and collects unreferenced blobs; a running query is refused; bad input
is one line and changes nothing; and a backup SIGKILLed at any point is never listed and a re-run
converges.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.errors import OperationBlocked, UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups, load_backup
from airflow_kafka_spark.ops.backup.manifest import FileEntry, Manifest
from airflow_kafka_spark.ops.backup.selection import select_files
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint, prune_backups
from airflow_kafka_spark.ops.options import Retention
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

JOB = "orders"
REPO = Path(__file__).resolve().parents[2]


def tree(root: Path) -> dict[str, str]:
    """Every file below ``root`` with its sha256 (snapshot for "nothing changed" assertions)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def add_batches(ck, first: int, count: int, *, per_batch: int = 10, state: bool = True) -> None:
    """Append committed batches to a factory checkpoint (as a running query would)."""
    for b in range(first, first + count):
        ends = {"orders": {"0": (b + 1) * per_batch, "1": (b + 1) * per_batch}}
        ck.write(f"offsets/{b}", offsets_file([json.dumps(ends, separators=(",", ":"))], batch_timestamp_ms=b))
        ck.write(f"commits/{b}", commit_file())
        if state:
            for p in range(2):
                ck.write(f"state/0/{p}/{b + 1}.delta", f"delta {b}".encode())


@pytest.fixture
def ck(tmp_path):
    return write_checkpoint(tmp_path / "ck", batches=5, state=True)


# --------------------------------------------------------------------------- file selection (pure)


def listing(*names: str) -> dict[str, dict]:
    return {n: {"size": 1} for n in names}


def test_selection_keeps_the_committed_version_and_a_stopped_querys_pending_batch():
    files = listing("metadata", ".metadata.crc", "offsets/0", "offsets/1", "offsets/2", "offsets/.2.crc",
                    "commits/0", "commits/1", "offsets/.2.1b2c.tmp", "sources/0/0", "state/0/0/1.delta",
                    "state/0/0/2.delta", "state/0/0/.2.delta.crc", "state/0/0/3.delta", "state/0/0/.3.delta.crc",
                    "state/0/_metadata/metadata", "state/0/0/_metadata/schema", "offsets/notes")
    sel = select_files(files, committed=1, planned=2, keep_pending=True)
    assert sel.log_bound == 2 and sel.state_version == 2
    assert {"offsets/2", "offsets/.2.crc", "state/0/0/2.delta", "state/0/0/.2.delta.crc"} <= set(sel.files)
    assert {"state/0/0/3.delta", "state/0/0/.3.delta.crc", "offsets/.2.1b2c.tmp", "offsets/notes"} \
        <= set(sel.excluded)
    assert "temp file" in sel.excluded["offsets/.2.1b2c.tmp"]
    forced = select_files(files, committed=1, planned=2, keep_pending=False)
    assert "offsets/2" in forced.excluded and forced.log_bound == 1


def test_selection_of_versioned_state_metadata():
    files = listing("commits/3", "offsets/3", "state/0/_metadata/v2/3", "state/0/_metadata/v2/4",
                    "state/0/_stateSchema/default/3_abc", "state/0/_stateSchema/default/4_def",
                    "state/0/1/4_uid.zip", "state/0/1/5_uid.zip", "state/0/1/SSTs/000012-abc.sst")
    sel = select_files(files, committed=3, planned=3, keep_pending=True)
    assert set(sel.excluded) == {"state/0/_metadata/v2/4", "state/0/_stateSchema/default/4_def", "state/0/1/5_uid.zip"}


def state_chain_problems(paths: list[str], version: int) -> list[str]:
    """The selection's state-chain problems for these state files, capturing ``version`` (batch version - 1)."""
    return select_files({p: {} for p in paths}, committed=version - 1, planned=version - 1,
                        keep_pending=True).state_problems


def test_state_chain_check():
    ok = ["state/0/0/1.delta", "state/0/0/2.delta", "state/0/0/3.delta"]
    assert state_chain_problems(ok, 3) == []
    assert state_chain_problems(["state/0/0/2.snapshot", "state/0/0/3.delta"], 3) == []
    broken = state_chain_problems(["state/0/0/1.delta", "state/0/0/3.delta"], 3)
    assert len(broken) == 1 and "2.delta" in broken[0]
    assert state_chain_problems(["state/0/1/3.zip"], 3) == []


# --------------------------------------------------------------------------- backup, catalog, verify


def test_backup_publishes_a_verified_manifest(ck, tmp_path):
    root = tmp_path / "backups"
    r = backup_checkpoint(ck.location, str(root), job=JOB, reason="test", settle_s=0)
    m = r.manifest
    assert m.job == JOB and m.query_id == ck.query_id and m.reason == "test"
    assert m.last_committed_batch == 4 and m.pending_batch is None
    assert m.committed_offsets == {TopicPartition("orders", 0): 50, TopicPartition("orders", 1): 50}
    assert m.state == {"has_state": True, "version": 5, "complete": True}
    on_disk = {p for p in tree(ck.root)}
    assert {f.path for f in m.files} == on_disk
    for f in m.files:
        assert f.sha256 == hashlib.sha256((ck.root / f.path).read_bytes()).hexdigest()
        assert f.size == (ck.root / f.path).stat().st_size
    catalog = list_backups(str(root), JOB)
    assert [b.backup_id for b in catalog.backups] == [m.backup_id] and not catalog.invalid
    assert verify_backup(str(root), JOB, m.backup_id).backup_id == m.backup_id
    assert not list((root / JOB / "staging").glob("*"))


def test_a_stopped_querys_pending_batch_is_kept(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, pending=True)
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0).manifest
    assert m.last_committed_batch == 2 and m.pending_batch == 3
    assert "offsets/3" in {f.path for f in m.files}
    assert m.pending_offsets == ck.kafka_offsets(3)


def test_second_backup_copies_only_what_changed(ck, tmp_path):
    root = str(tmp_path / "b")
    first = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    assert first.files_hashed == first.files and first.files_from_previous == 0
    add_batches(ck, 5, 3)
    second = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    new_files = 3 * 2 + 3 * 2   # offsets+commits, 2 state deltas per batch
    assert second.files_hashed == new_files
    assert second.files_from_previous == second.files - new_files
    assert second.blobs_written <= new_files
    assert second.manifest.last_committed_batch == 7
    third = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    assert third.files_hashed == 0 and third.blobs_written == 0


def test_an_unchanged_rebackup_carries_the_sealed_file_list_and_a_touched_file_does_not(ck, tmp_path, monkeypatch):
    """Issue 15: nothing changed, so the file list is the previous manifest's bytes, not encoded again;
    the published manifest verifies and lists the same entries. One file touched (same bytes, new
    ctime) and the list is encoded anew, that entry with its new times."""
    root = str(tmp_path / "b")
    first = backup_checkpoint(ck.location, root, job=JOB, settle_s=0).manifest
    encoded = []
    real = FileEntry.to_dict
    monkeypatch.setattr(FileEntry, "to_dict", lambda self: encoded.append(self.path) or real(self))
    second = backup_checkpoint(ck.location, root, job=JOB, settle_s=0).manifest
    assert encoded == [] and second.files == first.files and second.backup_id != first.backup_id
    assert verify_backup(root, JOB, second.backup_id, deep=True).backup_id == second.backup_id
    touched = ck.root / "offsets" / "1"
    time.sleep(0.01)
    os.utime(touched)
    third = backup_checkpoint(ck.location, root, job=JOB, settle_s=0).manifest
    assert len(encoded) == len(third.files)
    changed = [f for f in third.files if f not in set(first.files)]
    assert [f.path for f in changed] == ["offsets/1"] and changed[0].sha256 == next(
        f.sha256 for f in first.files if f.path == "offsets/1")
    assert verify_backup(root, JOB, third.backup_id, deep=True).backup_id == third.backup_id


def test_lifecycle_identity_goes_into_the_manifest(ck, tmp_path):
    rec = LifecycleRecord.create(JOB, ck.location)
    rec.kafka_cluster_id = "cluster-Z"
    rec.spark_version = "4.0.0"
    rec.save()
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), settle_s=0).manifest  # job from the record
    assert (m.job, m.kafka_cluster_id, m.spark_version) == (JOB, "cluster-Z", "4.0.0")


def test_tampered_manifest_is_never_listed_and_is_a_one_line_error(ck, tmp_path):
    root = tmp_path / "b"
    m = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    path = root / JOB / "backups" / f"{m.backup_id}.json"
    doc = json.loads(path.read_text())
    doc["committed_offsets"]["orders"]["0"] = 1
    path.write_text(json.dumps(doc))
    catalog = list_backups(str(root), JOB)
    assert catalog.backups == [] and len(catalog.invalid) == 1
    with pytest.raises(UserError) as err:
        load_backup(str(root), JOB, m.backup_id)
    assert "modified after it was written" in str(err.value) and "\n" not in str(err.value)


def test_damaged_blob_fails_deep_verification(ck, tmp_path):
    root = tmp_path / "b"
    m = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    f = next(f for f in m.files if f.path == "offsets/4")
    blob = root / JOB / "blobs" / f.sha256[:2] / f.sha256
    blob.write_bytes(blob.read_bytes()[:-1] + b"X")
    with pytest.raises(UserError, match="does not match its sha256"):
        verify_backup(str(root), JOB, m.backup_id)
    blob.unlink()
    with pytest.raises(UserError, match="is missing"):
        verify_backup(str(root), JOB, m.backup_id, deep=False)


def test_backup_of_another_job(ck, tmp_path):
    root = tmp_path / "b"
    m = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    with pytest.raises(UserError, match="belongs to job 'orders', not 'payments'"):
        load_backup(str(root), "payments", m.backup_id)
    # a manifest copied by hand into another job's catalog is not that job's backup
    (root / "payments" / "backups").mkdir(parents=True)
    (root / JOB / "backups" / f"{m.backup_id}.json").rename(root / "payments" / "backups" / f"{m.backup_id}.json")
    assert list_backups(str(root), "payments").backups == []
    with pytest.raises(UserError, match="is a backup of job 'orders'"):
        load_backup(str(root), "payments", m.backup_id)


# --------------------------------------------------------------------------- running queries


def test_live_lease_refuses_unless_forced(ck, tmp_path):
    rec = LifecycleRecord.create(JOB, ck.location)
    rec.save()
    rec.acquire_lease("driver-1", 60)
    root = tmp_path / "b"
    with pytest.raises(OperationBlocked) as err:
        backup_checkpoint(ck.location, str(root), settle_s=0)
    assert err.value.exit_code == 3 and "running" in str(err.value)
    assert list_backups(str(root), JOB).backups == []
    m = backup_checkpoint(ck.location, str(root), settle_s=0, force=True).manifest
    assert m.forced and m.running


def test_batches_advancing_during_the_backup_refuse_it(ck, tmp_path):
    def advance():
        time.sleep(0.3)
        add_batches(ck, 5, 1)

    t = threading.Thread(target=advance)
    t.start()
    root = tmp_path / "b"
    try:
        with pytest.raises(OperationBlocked, match="changed during the backup"):
            backup_checkpoint(ck.location, str(root), job=JOB, settle_s=1.0)
    finally:
        t.join()
    assert list_backups(str(root), JOB).backups == []


def test_forced_backup_of_a_running_query_captures_only_the_last_committed_batch(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, pending=True, state=True)
    ck.write("state/0/0/4.delta", b"partial")   # state of the running batch 3
    rec = LifecycleRecord.create(JOB, ck.location)
    rec.save()
    rec.acquire_lease("driver-1", 60)
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), settle_s=0, force=True).manifest
    paths = {f.path for f in m.files}
    assert m.last_committed_batch == 2 and m.pending_batch is None
    assert "offsets/3" not in paths and "state/0/0/4.delta" not in paths and "state/0/0/3.delta" in paths


# --------------------------------------------------------------------------- retention


def test_retention_keeps_the_newest_and_collects_unreferenced_blobs(ck, tmp_path):
    root = str(tmp_path / "b")
    ids = []
    for i in range(4):
        add_batches(ck, 5 + i, 1)
        ids.append(backup_checkpoint(ck.location, root, job=JOB, settle_s=0, now_ms=1_000_000 + i * 1000).backup_id)
    assert [b.backup_id for b in list_backups(root, JOB).backups] == ids[::-1]
    dry = prune_backups(root, JOB, Retention(keep_last=2), dry_run=True)
    assert [m.backup_id for m in dry.removed] == ids[:2][::-1]
    assert len(list_backups(root, JOB).backups) == 4
    pr = prune_backups(root, JOB, Retention(keep_last=2))
    assert [b.backup_id for b in list_backups(root, JOB).backups] == ids[:1:-1]
    assert pr.blobs_removed == 0   # every file of the old backups is still in the newer ones
    for b in list_backups(root, JOB).backups:
        verify_backup(root, JOB, b.backup_id)
    # max age: everything is old, but the newest verified backup always stays
    pr = prune_backups(root, JOB, Retention(max_age_s=1), now_ms=10_000_000)
    assert [b.backup_id for b in list_backups(root, JOB).backups] == [ids[-1]]
    verify_backup(root, JOB, ids[-1])


def test_a_backup_taken_before_a_restore_never_prunes_the_backup_that_restore_reads(ck, tmp_path):
    # Found by the long soak (seed 360148, event 162): a restore of the oldest kept backup failed with
    # "no published backup" because the run's own backup, taken first, pruned it (keep_last 3 here).
    root = str(tmp_path / "b")
    ids = []
    for i in range(3):
        add_batches(ck, 5 + i, 1)
        ids.append(backup_checkpoint(ck.location, root, job=JOB, settle_s=0, now_ms=1_000_000 + i * 1000,
                                     retention=Retention(keep_last=3)).backup_id)
    add_batches(ck, 8, 1)
    new = backup_checkpoint(ck.location, root, job=JOB, settle_s=0, now_ms=1_010_000,
                            retention=Retention(keep_last=3, keep_ids=[ids[0]]))
    assert new.pruned == []                       # the oldest is the restore's target: kept
    assert [b.backup_id for b in list_backups(root, JOB).backups] == [new.backup_id, *ids[::-1]]
    verify_backup(root, JOB, ids[0])
    add_batches(ck, 9, 1)                         # the next backup (no restore pending) applies retention again
    later = backup_checkpoint(ck.location, root, job=JOB, settle_s=0, now_ms=1_020_000,
                              retention=Retention(keep_last=3))
    assert sorted(later.pruned) == sorted(ids[:2])


def test_gc_removes_blobs_only_dropped_backups_used(tmp_path):
    root = str(tmp_path / "b")
    a = write_checkpoint(tmp_path / "a", batches=2)
    old = backup_checkpoint(a.location, root, job=JOB, settle_s=0, now_ms=1000)
    a.write("offsets/1", a.path("offsets/1").read_bytes() + b" ")   # changed content: a blob of its own
    backup_checkpoint(a.location, root, job=JOB, settle_s=0, now_ms=2000)
    pr = prune_backups(root, JOB, Retention(keep_last=1))
    assert [m.backup_id for m in pr.removed] == [old.backup_id]
    assert pr.blobs_removed == 1


@pytest.mark.parametrize("kwargs", [{"keep_last": 0}, {"max_age_s": 0}])
def test_bad_retention_rules(ck, tmp_path, kwargs):
    with pytest.raises(UserError):
        prune_backups(str(tmp_path / "b"), JOB, Retention(**kwargs))


# --------------------------------------------------------------------------- bad input changes nothing


def bad_inputs(tmp_path: Path, ck) -> list[tuple[str, dict, str]]:
    a_file = tmp_path / "plain-file"
    a_file.write_text("x")
    return [
        ("missing checkpoint", {"checkpoint_location": str(tmp_path / "nope")}, "does not exist"),
        ("checkpoint is a file", {"checkpoint_location": str(a_file)}, "plain-file"),
        ("not a checkpoint", {"checkpoint_location": str(tmp_path / "empty")}, "not a Structured Streaming checkpoint"),
        ("root inside checkpoint", {"backup_root": str(ck.root / "backups")}, "inside checkpoint"),
        ("root is a file", {"backup_root": str(a_file)}, "is a file"),
        ("unknown scheme", {"backup_root": "nosuchscheme://bucket/x"}, "cannot open backup root"),
        ("bad job name", {"job": "../escape"}, "cannot name a backup folder"),
    ]


def test_bad_input_is_one_line_and_changes_nothing(ck, tmp_path):
    (tmp_path / "empty").mkdir()
    root = tmp_path / "b"
    for name, override, needle in bad_inputs(tmp_path, ck):
        before = tree(tmp_path)
        kwargs = {"checkpoint_location": ck.location, "backup_root": str(root), "job": JOB, "settle_s": 0,
                  **override}
        with pytest.raises(UserError) as err:
            backup_checkpoint(kwargs.pop("checkpoint_location"), kwargs.pop("backup_root"), **kwargs)
        assert needle in str(err.value), name
        assert "\n" not in str(err.value), name
        assert tree(tmp_path) == before, name


def test_job_name_must_match_the_lifecycle_record(ck, tmp_path):
    LifecycleRecord.create("payments", ck.location).save()
    before = tree(tmp_path)
    with pytest.raises(UserError, match="belongs to job 'payments'"):
        backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0)
    assert tree(tmp_path) == before


# --------------------------------------------------------------------------- the command line


def aks(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=120)


def test_cli_backup_and_backups(ck, tmp_path):
    root = str(tmp_path / "b")
    out = aks("backup", "--checkpoint", ck.location, "--backup-root", root, "--job", JOB, "--settle", "0", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    backup_id = doc["backup"]["backup_id"]
    listed = aks("backups", "--backup-root", root, "--job", JOB, "--verify", "latest")
    assert listed.returncode == 0 and backup_id in listed.stdout and "verified" in listed.stdout
    bad = aks("backup", "--checkpoint", str(tmp_path / "nope"), "--backup-root", root, "--job", JOB)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: ")
    bad_json = aks("backups", "--backup-root", root, "--job", JOB, "--verify", "nonsense", "--json")
    assert bad_json.returncode == 2 and json.loads(bad_json.stdout)["exit_code"] == 2


# --------------------------------------------------------------------------- crash safety


CRASH_POINTS = ["backup.listed", "backup.blob#1", "backup.blob#7", "backup.staged", "backup.verified",
                "backup.published"]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_killed_backup_is_never_listed_and_a_rerun_converges(ck, tmp_path, point):
    root = str(tmp_path / "b")
    original = tree(ck.root)
    args = ("backup", "--checkpoint", ck.location, "--backup-root", root, "--job", JOB, "--settle", "0")
    killed = aks(*args, env={"AKS_CRASH_AT": point})
    assert killed.returncode == -9, killed.stderr
    assert tree(ck.root) == original                                   # the checkpoint is never touched
    catalog = list_backups(root, JOB)
    assert catalog.invalid == []
    if point == "backup.published":
        assert len(catalog.backups) == 1                               # killed after the atomic publish
    else:
        assert catalog.backups == []                                   # nothing half-written is listed
    for b in catalog.backups:
        verify_backup(root, JOB, b.backup_id)
    again = aks(*args)
    assert again.returncode == 0, again.stderr                        # the job lock of the dead pid is broken
    catalog = list_backups(root, JOB)
    assert catalog.backups and all(verify_backup(root, JOB, b.backup_id) for b in catalog.backups)
    pr = prune_backups(root, JOB, Retention(keep_last=1))
    assert not list((tmp_path / "b" / JOB / "staging").glob("*"))
    assert not list((tmp_path / "b" / JOB / ".tmp").glob("*"))
    assert pr.leftovers_removed >= 0
    newest = list_backups(root, JOB).newest
    assert newest is not None and {f.path for f in newest.files} == set(original)


def test_manifest_round_trip_is_sealed(ck, tmp_path):
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0).manifest
    assert Manifest.from_json(m.to_json(), where="x") == m


# --------------------------------------------------------------------------- object stores (memory://)


def test_backup_to_an_object_store_and_back(ck, tmp_path):
    """``memory://`` has no rename: blobs go through a temp object, the manifest is one PUT."""
    import fsspec

    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark._util.trees import move_dir
    from airflow_kafka_spark.ops.backup.store import materialize

    root = "memory://aks-bench/backups"
    try:
        first = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
        add_batches(ck, 5, 2)
        second = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
        assert second.files_from_previous == first.files and second.files_hashed == 8
        catalog = list_backups(root, JOB)
        assert [b.backup_id for b in catalog.backups] == [second.backup_id, first.backup_id]
        verify_backup(root, JOB, second.backup_id)
        pr = prune_backups(root, JOB, Retention(keep_last=1), grace_s=0)
        assert [m.backup_id for m in pr.removed] == [first.backup_id]
        dest = open_location("memory://aks-bench/restored")
        materialize(second.manifest, root, dest)
        fs = fsspec.filesystem("memory")
        assert fs.cat_file("/aks-bench/restored/offsets/6") == ck.path("offsets/6").read_bytes()
        # a directory "move" on an object store: copy then delete, and re-running finishes it
        move_dir(dest, open_location("memory://aks-bench/moved"))
        assert not fs.exists("/aks-bench/restored") and fs.cat_file("/aks-bench/moved/offsets/6")
    finally:
        fsspec.filesystem("memory").rm("/aks-bench", recursive=True)


def test_one_operation_at_a_time_per_checkpoint(ck, tmp_path):
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.ops.commands import reset_checkpoint
    from airflow_kafka_spark.ops.guards import operation_lock
    from airflow_kafka_spark.ops.reset_plan import ResetRequest

    with operation_lock(open_location(ck.location)), pytest.raises(UserError, match="is locked by pid"):
        reset_checkpoint(ck.location, str(tmp_path / "b"), {"bootstrap.servers": "127.0.0.1:1"},
                         ResetRequest(mode="preserve"))
    assert not (tmp_path / "b").exists()


def test_backup_refuses_over_an_interrupted_operation(ck, tmp_path):
    from airflow_kafka_spark._util.fs import open_location
    from airflow_kafka_spark.lifecycle.journal import Journal

    Journal.begin(open_location(ck.location), "reset", "op-1", {"aside": "x"})
    with pytest.raises(OperationBlocked, match="interrupted reset"):
        backup_checkpoint(ck.location, str(tmp_path / "b"), job=JOB, settle_s=0)


def test_reset_and_restore_refuse_a_running_job_before_touching_anything(ck, tmp_path):
    from airflow_kafka_spark.ops.commands import reset_checkpoint, restore_checkpoint
    from airflow_kafka_spark.ops.reset_plan import ResetRequest

    root = str(tmp_path / "b")
    backup_id = backup_checkpoint(ck.location, root, job=JOB, settle_s=0).backup_id
    LifecycleRecord.load(ck.location).acquire_lease("driver-1", 60)
    before = tree(tmp_path)
    kafka = {"bootstrap.servers": "127.0.0.1:1"}   # never contacted: the lease decides first
    with pytest.raises(OperationBlocked, match="is running") as err:
        reset_checkpoint(ck.location, root, kafka, ResetRequest(mode="preserve"))
    assert err.value.exit_code == 3
    with pytest.raises(OperationBlocked, match="is running"):
        restore_checkpoint(ck.location, root, backup_id, kafka)
    assert tree(tmp_path) == before
