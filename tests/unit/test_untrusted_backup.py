"""Backups, manifests and checkpoints are untrusted input (issue 17, items 1, 3, 4 and the incremental part of 6).

Pure-file tests (no broker): every command runs as a real subprocess with a timeout, so a hang is a
failure, and every one is checked for one line on stderr, its exit code, and that nothing changed
anywhere under the test folder (path -> sha256, mode, mtime; FIFOs and links by their lstat).
Restore is exercised here only where it must refuse before talking to Kafka (the manifest is read
first); the restores that need the broker are in tests/integration/test_untrusted_restore.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.paths import check_relative, safe_child
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.manifest import FileEntry, Manifest
from airflow_kafka_spark.ops.backup.store import materialize
from airflow_kafka_spark.ops.commands import backup_checkpoint, prune_backups
from airflow_kafka_spark.ops.options import Retention
from tests.support.checkpoint_factory import write_checkpoint

JOB = "orders"
REPO = Path(__file__).resolve().parents[2]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below ``root``: regular files by (sha256, mode, mtime_ns), others by lstat mode."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode):
                out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode,
                                                 st.st_mtime_ns)
            elif stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif not stat.S_ISDIR(st.st_mode):
                out[str(p.relative_to(root))] = ("special", st.st_mode)
    return out


def aks(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command line; a hang fails the test (TimeoutExpired)."""
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def one_line(out: subprocess.CompletedProcess, code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    return lines[0]


def reseal(path: Path, edit) -> dict:
    """Edit a published manifest and recompute its unkeyed sha256 seal, as anyone with write access can."""
    doc = json.loads(path.read_text())
    doc.pop("digest")
    doc.pop("hmac", None)
    edit(doc)
    keyed = doc.pop("hmac", None)
    doc["digest"] = seal.digest(doc)
    if keyed:
        doc["hmac"] = keyed
    path.write_text(json.dumps(doc))
    return doc


@pytest.fixture
def setup(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True)
    root = tmp_path / "backups"
    first = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    return ck, root, first.manifest, root / JOB / "backups" / f"{first.backup_id}.json"


# --------------------------------------------------------------------------- 1: manifest paths


BAD_PATHS = ["../evil", "../../ck/metadata", "offsets/../../escape", "/tmp/aks-absolute-target", "a//b", "./metadata",
             "offsets/.", "", "dir\\..\\evil", "bad\x00name", "line\nbreak", "memory://x::file", "C:/win", "a/b/.."]


@pytest.mark.parametrize("bad", BAD_PATHS)
def test_a_resealed_manifest_with_an_unsafe_path_is_not_verified_listed_or_restored(setup, tmp_path, bad):
    ck, root, m, mpath = setup

    def edit(doc):
        doc["files"][0]["path"] = bad
    reseal(mpath, edit)
    before = snapshot(tmp_path)

    line = one_line(aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", m.backup_id))
    assert "modified after it was written" in line and repr(bad) in line, line
    listed = aks("backups", "--backup-root", str(root), "--job", JOB)
    assert listed.returncode == 0 and f"INVALID {m.backup_id}.json" in listed.stdout, listed.stdout
    assert m.backup_id not in [b.backup_id for b in list_backups(str(root), JOB).backups]
    # restore reads the manifest before Kafka: it refuses with one line, plan or --execute
    for extra in (["--execute"], []):
        line = one_line(aks("restore", "--checkpoint", ck.location, "--backup-root", str(root), "--job", JOB,
                            "--backup", m.backup_id, "--bootstrap-servers", "127.0.0.1:9", *extra))
        assert repr(bad) in line, line
    assert snapshot(tmp_path) == before


def test_materialize_never_writes_outside_its_destination(setup, tmp_path):
    """Even a Manifest built in memory (no from_json) cannot make materialize write elsewhere."""
    _, root, m, _ = setup
    dest = open_location(str(tmp_path / "dest"))
    for bad in ("../outside", "/tmp/aks-abs", "x/../../outside"):
        evil = Manifest(**{**m.__dict__, "files": (FileEntry(bad, m.files[0].size, m.files[0].sha256),)})
        before = snapshot(tmp_path)
        with pytest.raises(UserError) as err:
            materialize(evil, str(root), dest)
        assert repr(bad) in str(err.value) and "\n" not in str(err.value)
        assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("dest")} == before
    assert not (tmp_path / "outside").exists() and not Path("/tmp/aks-abs").exists()


def test_a_link_planted_in_a_destination_is_not_written_through(setup, tmp_path):
    _, root, m, _ = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "offsets").symlink_to(outside)
    with pytest.raises(UserError, match="symbolic link"):
        materialize(m, str(root), open_location(str(dest)))
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("rel", ["offsets/0", "state/0/0/1.delta", "a.b/c-d_e", "commits/.0.crc"])
def test_safe_relative_paths_pass(rel):
    assert check_relative(rel) == rel
    assert safe_child(open_location("/tmp/x"), rel).path == f"/tmp/x/{rel}"


# --------------------------------------------------------------------------- keyed seal


def test_keyed_seal_refuses_resealed_and_unkeyed_manifests(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2)
    root = tmp_path / "backups"
    key = tmp_path / "seal.key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    unkeyed = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    out = aks("backup", "--checkpoint", ck.location, "--backup-root", str(root), "--job", JOB, "--settle", "0",
              "--seal-key-file", str(key), "--json")
    assert out.returncode == 0, out.stderr
    keyed_id = json.loads(out.stdout)["backup"]["backup_id"]
    keyed_path = root / JOB / "backups" / f"{keyed_id}.json"
    assert json.loads(keyed_path.read_text())["hmac"].startswith("hmac-sha256:")

    ok = aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", keyed_id, "--seal-key-file", str(key))
    assert ok.returncode == 0 and "verified" in ok.stdout, ok.stderr
    # with the key, a manifest without an HMAC (older, or forged) is refused; without the key it stays readable
    line = one_line(aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", unkeyed.backup_id,
                        env={seal.KEY_FILE_ENV: str(key)}))
    assert "no keyed seal" in line
    assert aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", unkeyed.backup_id).returncode == 0
    # an attacker edits the keyed manifest and recomputes the sha256: refused with the key
    reseal(keyed_path, lambda doc: doc.update(reason="forged"))
    line = one_line(aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", keyed_id,
                        "--seal-key-file", str(key)))
    assert "keyed seal" in line
    other = b"another-key-of-enough-length-000"

    def forge(doc):
        doc["reason"] = "forged"
        doc["hmac"] = seal.keyed(doc, other)
    reseal(keyed_path, forge)
    line = one_line(aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", keyed_id,
                        "--seal-key-file", str(key)))
    assert "no valid keyed seal" in line
    catalog = list_backups(str(root), JOB, seal_key=key.read_bytes())
    assert catalog.backups == [] and len(catalog.invalid) == 2
    # pruning with a key never collects the blobs of a still-kept unkeyed backup
    prune_backups(str(root), JOB, Retention(keep_last=5), seal_key=key.read_bytes())
    from airflow_kafka_spark.ops.backup.store import verify_backup
    assert verify_backup(str(root), JOB, unkeyed.backup_id).backup_id == unkeyed.backup_id


def test_a_bad_seal_key_file_is_one_line(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=1)
    short = tmp_path / "short.key"
    short.write_text("abc")
    before = snapshot(tmp_path)
    for path, needle in ((short, "shorter than 16"), (tmp_path / "missing.key", "does not exist")):
        line = one_line(aks("backup", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "b"), "--job", JOB,
                            "--seal-key-file", str(path)))
        assert needle in line, line
    assert snapshot(tmp_path) == before


def test_a_manifest_without_the_new_fields_stays_readable(setup):
    """Manifests written before this change carry no ``ctime`` and no ``hmac``: still verified."""
    _, root, m, mpath = setup

    def strip(doc):
        for f in doc["files"]:
            f.pop("ctime", None)
    reseal(mpath, strip)
    out = aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", m.backup_id)
    assert out.returncode == 0 and "verified" in out.stdout, out.stderr


# --------------------------------------------------------------------------- 3: links and special files


def _backup_args(ck, tmp_path) -> tuple[str, ...]:
    return ("backup", "--checkpoint", ck.location, "--backup-root", str(tmp_path / "backups"), "--job", JOB,
            "--settle", "0")


@pytest.mark.parametrize("kind", ["link-out", "dev-zero", "dev-urandom", "fifo", "fifo-metadata", "broken-link",
                                  "dir-link"])
def test_backup_refuses_links_and_special_files_in_one_line(tmp_path, kind):
    ck = write_checkpoint(tmp_path / "ck", batches=2, state=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2\n")
    target = ck.root / "sources" / "0" / "1"
    if kind == "link-out":
        target.symlink_to(secret)
    elif kind == "dev-zero":
        (ck.root / "offsets" / "0").unlink()
        (ck.root / "offsets" / "0").symlink_to("/dev/zero")
    elif kind == "dev-urandom":
        target.symlink_to("/dev/urandom")
    elif kind == "fifo":
        os.mkfifo(ck.root / "state" / "0" / "0" / "fifo")
    elif kind == "fifo-metadata":
        (ck.root / "metadata").unlink()
        os.mkfifo(ck.root / "metadata")
    elif kind == "broken-link":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "dir-link":
        (ck.root / "state" / "1").symlink_to(tmp_path, target_is_directory=True)
    before = snapshot(tmp_path)
    line = one_line(aks(*_backup_args(ck, tmp_path), timeout=30))
    assert "symbolic link" in line or "FIFO" in line, line
    assert "running" not in line
    assert snapshot(tmp_path) == before
    blobs = tmp_path / "backups" / JOB / "blobs"
    assert not blobs.exists() or all(b"hunter2" not in p.read_bytes() for p in blobs.rglob("*") if p.is_file())


def test_fifos_and_links_under_the_backup_root_do_not_hang_or_mislead(setup, tmp_path):
    ck, root, m, _ = setup
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / ("ab" * 32)).write_text("keep me")
    os.mkfifo(root / JOB / "backups" / "20260101T000000000Z-b1-aaaaaa.json")
    (root / JOB / "staging").mkdir(exist_ok=True)
    os.mkfifo(root / JOB / "staging" / "20260101T000000000Z-b1-bbbbbb.json")
    (root / JOB / "blobs" / "zz").symlink_to(outside, target_is_directory=True)
    listed = aks("backups", "--backup-root", str(root), "--job", JOB, timeout=30)
    assert listed.returncode == 0 and "FIFO" in listed.stdout and m.backup_id in listed.stdout, listed.stderr
    pruned = aks("backups", "--backup-root", str(root), "--job", JOB, "--prune", "--keep-last", "1", "--execute",
                 timeout=30)
    assert pruned.returncode == 0, pruned.stderr
    assert (outside / ("ab" * 32)).read_text() == "keep me"
    # a blob replaced by a FIFO: verify reports it, never waits on it
    blob = root / JOB / "blobs" / m.files[0].sha256[:2] / m.files[0].sha256
    blob.unlink()
    os.mkfifo(blob)
    line = one_line(aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", m.backup_id, timeout=30))
    assert m.files[0].path in line, line
    # and a new backup does not hang on it either
    out = aks(*_backup_args(ck, tmp_path), timeout=30)
    assert out.returncode in (0, 2) and "Traceback" not in out.stderr, out.stderr


def test_read_bytes_refuses_devices_and_fifos_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for path, needle in ((tmp_path / "fifo", "FIFO"), (Path("/dev/zero"), "character device")):
        with pytest.raises(UserError, match=needle):
            read_bytes(open_location(str(path)))
    big = tmp_path / "big"
    big.write_bytes(b"x" * 100)
    with pytest.raises(UserError, match="larger than 10 bytes"):
        read_bytes(open_location(str(big)), limit=10)


# --------------------------------------------------------------------------- 6: incremental trusts size+mtime


def test_content_changed_with_mtime_kept_is_read_again(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True)
    root = str(tmp_path / "backups")
    backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    victim = ck.root / "state" / "0" / "0" / "2.delta"
    st = victim.stat()
    victim.write_bytes(bytes(b ^ 0xFF for b in victim.read_bytes()))      # same size, other content
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))                 # mtime put back
    second = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    entry = next(f for f in second.manifest.files if f.path == "state/0/0/2.delta")
    assert entry.sha256 == hashlib.sha256(victim.read_bytes()).hexdigest()
    assert second.files_from_previous == second.files - 1                 # the others are still reused
    out = aks("backups", "--backup-root", root, "--job", JOB, "--verify", second.backup_id)
    assert out.returncode == 0, out.stderr


def test_a_rebackup_reusing_digests_reads_a_changed_file_again(tmp_path):
    """Same size, other content, a new mtime (what any writer leaves): hashed again, the others reused."""
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True)
    root = str(tmp_path / "backups")
    first = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    victim = ck.root / "state" / "0" / "0" / "2.delta"
    st = victim.stat()
    victim.write_bytes(bytes(b ^ 0xFF for b in victim.read_bytes()))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    second = backup_checkpoint(ck.location, root, job=JOB, settle_s=0)
    entry = next(f for f in second.manifest.files if f.path == "state/0/0/2.delta")
    assert entry.sha256 == hashlib.sha256(victim.read_bytes()).hexdigest()
    assert entry.sha256 != next(f.sha256 for f in first.manifest.files if f.path == "state/0/0/2.delta")
    assert (second.files_hashed, second.blobs_written) == (1, 1)
    assert second.files_from_previous == second.files - 1
    from airflow_kafka_spark.ops.backup.store import verify_backup
    verify_backup(root, JOB, second.backup_id)   # deep: every blob re-hashed


def test_a_missing_blob_is_stored_again_by_the_next_backup(setup):
    """The re-backup trusts the sizes of the blobs the previous manifest names, but lists their names:
    a blob deleted from the store is not trusted, the next backup reads its file and stores it again."""
    ck, root, m, _ = setup
    f = next(f for f in m.files if f.path == "offsets/2")
    blob = root / JOB / "blobs" / f.sha256[:2] / f.sha256
    blob.unlink()
    second = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    assert blob.read_bytes() == (ck.root / "offsets" / "2").read_bytes()
    assert second.blobs_written == 1 and second.files_from_previous == second.files - 1
    from airflow_kafka_spark.ops.backup.store import verify_backup
    verify_backup(str(root), JOB, second.backup_id)


def test_a_blob_damaged_in_place_fails_deep_verification_and_restore(setup, tmp_path):
    """A blob the previous manifest names is not re-read by the next backup (blobs are never rewritten
    in place); one damaged in place by someone else is caught by the deep verify and by restore,
    which hash every blob they read."""
    ck, root, m, _ = setup
    f = next(f for f in m.files if f.path == "offsets/2")
    blob = root / JOB / "blobs" / f.sha256[:2] / f.sha256
    blob.write_bytes(bytes(b ^ 0xFF for b in blob.read_bytes()))           # same size, other bytes
    second = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    assert second.files_from_previous == second.files
    out = aks("backups", "--backup-root", str(root), "--job", JOB, "--verify", second.backup_id)
    assert out.returncode == 2 and "does not match its sha256" in out.stderr, out.stderr
    with pytest.raises(UserError, match="does not match its sha256"):
        materialize(second.manifest, str(root), open_location(str(tmp_path / "restored")))


def test_a_manifest_is_sealed_over_its_own_bytes_and_older_layouts_still_parse(setup):
    """Manifests are written as the canonical body plus the seals, and checked over those bytes; a
    manifest in the older key order (``to_json``) still parses; one changed byte is refused."""
    _, _, m, mpath = setup
    raw = mpath.read_bytes()
    assert raw.startswith(seal.canonical(m.body())[:-1]) and raw.endswith(f',"digest":"{m.digest}"}}\n'.encode())
    assert Manifest.from_json(raw, where="x") == m
    assert Manifest.from_json(m.to_json(), where="x") == m
    tampered = raw.replace(b'"path":"offsets/2","sha256"', b'"path":"offsets/3","sha256"', 1)
    assert tampered != raw
    with pytest.raises(UserError, match="digest does not match"):
        Manifest.from_json(tampered, where="x")
    key = b"0123456789abcdef0123456789abcdef"
    keyed, keyed_raw = m.sealed_json(key)
    assert Manifest.from_json(keyed_raw, where="x", seal_key=key) == keyed
    with pytest.raises(UserError, match="no valid keyed seal"):
        Manifest.from_json(keyed_raw, where="x", seal_key=b"another-key-of-enough-length-000")


# --------------------------------------------------------------------------- 4: staging cleanup by exact name


def test_stale_staging_cleanup_never_touches_a_neighbours_folder(tmp_path):
    from airflow_kafka_spark.ops.restore import remove_stale_staging

    mine = tmp_path / "job[12].staging-20260101T000000Z-abcdef"
    neighbour = tmp_path / "job1.staging-20260101T000000Z-abcdef"
    odd = tmp_path / "job[12].staging-not-an-operation"
    for d in (mine, neighbour, odd):
        d.mkdir()
        (d / "f").write_text("x")
    assert remove_stale_staging(open_location(str(tmp_path / "job[12]"))) == 1
    assert not mine.exists() and neighbour.exists() and odd.exists()


# --------------------------------------------------------------------------- 1: journal paths (restore's roll-forward)


@pytest.mark.parametrize("key", ["staging", "aside"])
def test_a_restore_journal_naming_a_foreign_folder_moves_nothing(tmp_path, key):
    from airflow_kafka_spark.lifecycle.journal import Journal, journal_location
    from airflow_kafka_spark.ops.restore import roll_forward

    ck = write_checkpoint(tmp_path / "ck", batches=2)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data").write_text("not yours")
    loc = open_location(ck.location)
    op = "20260101T000000Z-abcdef"
    payload = {"job": JOB, "backup_id": "20260101T000000000Z-b1-aaaaaa", "backup_root": str(tmp_path / "b"),
               "staging": loc.sibling(f".staging-{op}").url, "aside": loc.sibling(f".restore-{op}").url}
    payload[key] = str(victim)
    doc = {"format": 1, "op": "restore", "operation_id": op, "checkpoint": loc.url, "done": [], "payload": payload}
    Path(journal_location(loc).path).write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    with pytest.raises(UserError) as err:
        roll_forward(Journal(journal_location(loc), doc), loc)
    assert f"names {key}" in str(err.value) and "\n" not in str(err.value)
    assert snapshot(tmp_path) == before
