"""Bytes through the worker for a backup and a restore on the real stores (S3Proxy, the HDFS minicluster).

What the product's own fs layer counts (``_util.fs.TRAFFIC``: every body read or written through
this process) around each operation:

* **S3 -> S3, objects with a kept SHA-256** (written here with PutObject ``ChecksumAlgorithm=SHA256``,
  what S3A's ``fs.s3a.create.checksum.algorithm=SHA256`` asks for where Hadoop has it): the
  pre-copy and the backup after the stop read no state byte (``HeadObject`` + ``CopyObject``), the
  manifest is nonetheless the checkpoint byte for byte (each file read and hashed *by the test*),
  verifies deep, and the restore copies every blob inside the store; a blob replaced by other bytes
  of the same size (no kept SHA-256 then) is read, found wrong, and the restore refuses.
* **HDFS -> HDFS**: WebHDFS has no copy, so each new file is read once and written once; no blob is
  read back (the NameNode's checksum of each blob is its source file's): bytes read < 1.2x the
  checkpoint (before: 2x, the read-back re-hash). Also when the checkpoint folder itself is
  snapshottable: a snapshot there would make HDFS refuse the restore's move of the folder.
* **HDFS -> HDFS, the checkpoint in a snapshottable folder** (``ops.backup.snapshot``): the pre-copy
  and the backup after the stop move no state byte (checksums by the cluster, one CREATESNAPSHOT);
  the backup survives the live checkpoint's damage, the restore brings back its bytes, validate
  accepts them, and pruning the backup deletes its snapshot.
* **HDFS, small files** (the backup after a stop copies what Spark wrote since the pre-copy inside the
  downtime): each costs an ``OPEN`` and a ``CREATE`` (NameNode + DataNode each) and a ``RENAME``, counted
  request by request; the proofs, asked after all puts, still catch a blob rewritten or deleted since.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from airflow_kafka_spark._util.fs import TRAFFIC, list_files, open_location
from airflow_kafka_spark._util.stores import webhdfs_file_checksum
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import new_backup_id
from airflow_kafka_spark.ops.backup.catalog import blob_rel
from airflow_kafka_spark.ops.backup.kinds import WebHdfs
from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
from airflow_kafka_spark.ops.backup.store import blob_index, mismatched_blobs, verify_backup
from airflow_kafka_spark.ops.backup.writer import BlobWriter
from airflow_kafka_spark.ops.commands import backup_checkpoint, prune_backups, restore_checkpoint
from airflow_kafka_spark.ops.options import Retention
from airflow_kafka_spark.verdict.validate import validate
from devstack import topics
from devstack.produce import produce
from tests.cluster.test_ops_cluster import JOB, advance, base_url, remote_tree
from tests.cluster.test_ops_cluster import stores as stores  # the worker's environment (a fixture)
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = pytest.mark.cluster

STATE_FILE = 512 << 10


def stateful_checkpoint(url: str, broker, topic: str, tmp_path: Path, *, kept_sha256: bool) -> int:
    """A stopped query's checkpoint at ``url`` whose state files hold 512 KiB each; returns the state bytes."""
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 200, partitions=2)
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=True, sources=({topic: 2},), records_per_batch=10,
                          state=True, start_timestamp_ms=int(time.time() * 1000))
    state = 0
    for p in sorted((ck.root / "state").rglob("*.delta")):
        p.write_bytes(os.urandom(STATE_FILE))   # the backup copies state files; it never parses them
        state += STATE_FILE
    loc = open_location(url)
    for p in sorted(ck.root.rglob("*")):
        if not p.is_file():
            continue
        path = posixpath.join(loc.path, str(p.relative_to(ck.root)))
        if kept_sha256:
            bucket, key, _ = loc.fs.split_path(path)
            loc.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=p.read_bytes(), ChecksumAlgorithm="SHA256")
        else:
            loc.fs.pipe_file(path, p.read_bytes())
    LifecycleRecord.create(JOB, url).save()
    return state


def counted(fn):
    r0, w0 = TRAFFIC.totals()
    out = fn()
    r1, w1 = TRAFFIC.totals()
    return out, r1 - r0, w1 - w0


@pytest.mark.usefixtures("stores")
def test_s3_backup_and_restore_move_no_state_byte_through_the_worker(hadoop, s3, broker, topic_name, tmp_path):
    run = uuid.uuid4().hex[:8]
    ck_url, root_url = f"{s3.url(f'aks-copy/{run}')}/{JOB}/ck", s3.url(f"aks-copy/{run}/backups")
    stateful_checkpoint(ck_url, broker, topic_name, tmp_path, kept_sha256=True)
    written = remote_tree(ck_url)

    pre, pre_read, pre_written = counted(lambda: precopy_checkpoint(ck_url, root_url, job=JOB))
    after, read, wrote = counted(lambda: backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0))
    state = sum(f.size for f in after.manifest.files if f.path.startswith("state/"))   # the version's
    assert state >= 6 * STATE_FILE
    assert pre.files_vouched == pre.files > 20 and pre.files_read == 0 and pre.bytes_copied_by_store >= state
    assert {f.path: f.sha256 for f in after.manifest.files} == written     # the store's SHA-256s are the bytes'
    assert {f.proof for f in after.manifest.files} == {"s3-sha256"}
    assert after.files_hashed == 0
    # what did pass through: the checkpoint's logs (read to find the version), manifests and records
    assert pre_read + pre_written + read + wrote < 200_000 < state
    assert verify_backup(root_url, JOB, after.backup_id, deep=True).backup_id == after.backup_id

    # the round trip: the query moves on, the restore brings back exactly the backup's bytes
    advance(ck_url, topic_name, 4, 7)
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    restored, read, wrote = counted(lambda: restore_checkpoint(ck_url, root_url, after.backup_id, kafka,
                                                               backup_settle_s=0))
    assert restored.restored and remote_tree(ck_url) == written
    assert read + wrote < 300_000 < state   # blobs copied by CopyObject, proven by their kept SHA-256

    # a blob replaced by other bytes of its size has no kept SHA-256: it is read, found wrong, refused
    entry = next(f for f in after.manifest.files if f.path.endswith(".delta"))
    blob = open_location(f"{root_url}/{JOB}/{blob_rel(entry.sha256)}")
    blob.fs.pipe_file(blob.path, os.urandom(entry.size))
    advance(ck_url, topic_name, 4, 8)
    before = remote_tree(ck_url)
    with pytest.raises(UserError, match="does not match its sha256"):
        restore_checkpoint(ck_url, root_url, after.backup_id, kafka, backup_settle_s=0)
    assert remote_tree(ck_url) == before


@pytest.mark.usefixtures("stores")
def test_hdfs_backup_reads_each_new_byte_once_and_never_reads_a_blob_back(hadoop, s3, broker, topic_name, tmp_path,
                                                                          webhdfs):
    run = uuid.uuid4().hex[:8]
    ck_url, root_url = f"{base_url('hdfs', hadoop, s3, run)}/{JOB}/ck", f"{base_url('hdfs', hadoop, s3, run)}/backups"
    stateful_checkpoint(ck_url, broker, topic_name, tmp_path, kept_sha256=False)
    # the checkpoint folder itself snapshottable (no ancestor is): a snapshot there would stop the
    # restore below from moving the folder aside, so the blob store, as in a folder that is not
    webhdfs._call("ALLOWSNAPSHOT", "put", open_location(ck_url).path)
    written = remote_tree(ck_url)

    pre, pre_read, pre_wrote = counted(lambda: precopy_checkpoint(ck_url, root_url, job=JOB))
    after, read, wrote = counted(lambda: backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0))
    assert after.bytes >= 6 * STATE_FILE and pre.files_read == pre.files > 20 and pre.files_vouched == 0
    assert after.bytes < pre_read < 1.2 * after.bytes     # each file once; no blob read back (before: 2x)
    assert after.bytes < pre_wrote < 1.2 * after.bytes
    assert after.files_hashed == 0 and read + wrote < 200_000
    assert {f.path: f.sha256 for f in after.manifest.files} == written
    assert not after.manifest.snapshot
    assert verify_backup(root_url, JOB, after.backup_id, deep=True).backup_id == after.backup_id

    # the NameNode's checksum proves a blob only against its own bytes
    entries = [f for f in after.manifest.files if f.path.endswith(".delta")][:2]
    blob = open_location(f"{root_url}/{JOB}/{blob_rel(entries[0].sha256)}")
    own, other = (open_location(f"{ck_url}/{e.path}") for e in entries)
    assert WebHdfs().proves(blob, entries[0].sha256, entries[0].size, own)
    assert not WebHdfs().proves(blob, entries[0].sha256, entries[0].size, other)

    advance(ck_url, topic_name, 4, 7)
    restored = restore_checkpoint(ck_url, root_url, after.backup_id, {"bootstrap.servers": broker.bootstrap_servers},
                                  backup_settle_s=0)
    assert restored.restored and remote_tree(ck_url) == written
    assert hashlib.sha256(open_location(f"{ck_url}/{entries[0].path}").fs.cat_file(own.path)).hexdigest() \
        == entries[0].sha256


@pytest.mark.usefixtures("stores")
def test_hdfs_snapshot_backup_moves_no_state_byte_and_restores_the_snapshot(hadoop, s3, broker, topic_name, tmp_path,
                                                                            webhdfs):
    run = uuid.uuid4().hex[:8]
    base = base_url("hdfs", hadoop, s3, run)
    ck_url, root_url = f"{base}/snap/{JOB}/ck", f"{base}/backups"
    stateful_checkpoint(ck_url, broker, topic_name, tmp_path, kept_sha256=False)
    folder = open_location(f"{base}/snap").path
    webhdfs._call("ALLOWSNAPSHOT", "put", folder)   # what `hdfs dfsadmin -allowSnapshot` does (superuser)
    written = remote_tree(ck_url)
    live = open_location(ck_url)

    pre, pre_read, pre_wrote = counted(lambda: precopy_checkpoint(ck_url, root_url, job=JOB))
    after, read, wrote = counted(lambda: backup_checkpoint(ck_url, root_url, job=JOB, settle_s=0))
    m = after.manifest
    state = sum(f.size for f in m.files if f.path.startswith("state/"))
    assert state >= 6 * STATE_FILE and pre.files == pre.files_vouched == len(written) and pre.files_read == 0
    assert m.snapshot["folder"] == folder and m.snapshot["path"] == f"{folder}/.snapshot/{m.snapshot['name']}/{JOB}/ck"
    assert {f.proof for f in m.files} == {"hdfs-snapshot"} and after.files_from_precopy == len(m.files)
    assert after.files_hashed == after.blobs_written == after.files_vouched == 0
    # no state body through the worker: what passed is the logs read to find the version and the manifests
    assert pre_read + pre_wrote + read + wrote < STATE_FILE
    assert not list_files(open_location(f"{root_url}/{JOB}/blobs"))
    assert {f.path: f.sha256 for f in m.files} == {
        rel: webhdfs_file_checksum(live.fs, live.child(rel).path) for rel in written}
    assert verify_backup(root_url, JOB, after.backup_id, deep=True).backup_id == after.backup_id

    # the live checkpoint damaged: one state file rewritten, another deleted; the snapshot is not
    deltas = sorted(f.path for f in m.files if f.path.endswith(".delta"))
    live.fs.pipe_file(live.child(deltas[0]).path, os.urandom(STATE_FILE))
    live.fs.rm(live.child(deltas[1]).path)
    assert verify_backup(root_url, JOB, after.backup_id, deep=True).backup_id == after.backup_id

    advance(ck_url, topic_name, 4, 7)
    kafka = {"bootstrap.servers": broker.bootstrap_servers}
    damaged = remote_tree(ck_url)
    # a snapshot of a backup never published (refused after its snapshot: its mark in staging/), one of
    # another backup root (no mark here), and an administrator's
    orphan, elsewhere = (new_backup_id(int(time.time() * 1000), 3) for _ in range(2))
    for name in (f"aks-{JOB}-{orphan}", f"aks-{JOB}-{elsewhere}", "nightly"):
        webhdfs._call("CREATESNAPSHOT", "put", folder, snapshotname=name)
    live.fs.pipe_file(open_location(f"{root_url}/{JOB}/staging/{orphan}.snapshot.json").path,
                      json.dumps({"folder": folder}).encode())
    dry = restore_checkpoint(ck_url, root_url, after.backup_id, kafka, dry_run=True, backup_settle_s=0)
    assert dry.dry_run and not dry.restored and remote_tree(ck_url) == damaged   # judged in memory
    restored, read, wrote = counted(lambda: restore_checkpoint(ck_url, root_url, after.backup_id, kafka,
                                                               backup_settle_s=0))
    assert restored.restored and remote_tree(ck_url) == written
    assert state < read < 1.2 * after.bytes and state < wrote < 1.2 * after.bytes   # each file once
    assert {f.path: f.sha256 for f in m.files} == {
        rel: webhdfs_file_checksum(live.fs, live.child(rel).path) for rel in written}
    assert validate(checkpoint_location=ck_url, kafka_config=kafka).severity != "BLOCK"

    # the damaged checkpoint was backed up before the restore (a snapshot too); pruning it deletes its snapshot
    pre_restore = restored.pre_restore_backup_id
    snapshots = open_location(f"{base}/snap/.snapshot")
    names = {rel.split("/")[0] for rel in list_files(snapshots)}
    assert {f"aks-{JOB}-{after.backup_id}", f"aks-{JOB}-{pre_restore}", f"aks-{JOB}-{elsewhere}", "nightly"} <= names
    assert f"aks-{JOB}-{orphan}" not in names   # swept by the snapshot backup the restore took first
    assert not [rel for rel in list_files(open_location(f"{root_url}/{JOB}/staging")) if rel.startswith(orphan)]
    pruned = prune_backups(root_url, JOB, Retention(keep_last=1), grace_s=0)
    assert [b.backup_id for b in pruned.removed] == [after.backup_id]
    snapshots.fs.invalidate_cache()
    names = {rel.split("/")[0] for rel in list_files(snapshots)}
    assert f"aks-{JOB}-{after.backup_id}" not in names and f"aks-{JOB}-{pre_restore}" in names

    # a snapshot deleted behind the product's back: the backup is incomplete, the restore refuses
    webhdfs._call("DELETESNAPSHOT", "delete", folder, snapshotname=f"aks-{JOB}-{pre_restore}")
    with pytest.raises(UserError, match="incomplete"):
        verify_backup(root_url, JOB, pre_restore, deep=False)
    before = remote_tree(ck_url)
    with pytest.raises(UserError, match="incomplete"):
        restore_checkpoint(ck_url, root_url, pre_restore, kafka, backup_settle_s=0)
    assert remote_tree(ck_url) == before


class WebHdfsRequests:
    """Every request a WebHDFS session sends, by ``NN:<op>`` / ``DN:<op>`` (a redirect's DataNode leg too)."""

    def __init__(self, fs) -> None:
        self.session, self.namenode = fs.session, urlsplit(fs.url).port
        self.ops: Counter = Counter()

    def _hook(self, response, *args, **kwargs) -> None:
        url = urlsplit(response.request.url)
        self.ops[f"{'NN' if url.port == self.namenode else 'DN'}:{parse_qs(url.query)['op'][0]}"] += 1

    def take(self) -> dict[str, int]:
        out = dict(self.ops)
        self.ops.clear()
        return out

    def __enter__(self) -> WebHdfsRequests:
        self.session.hooks["response"].append(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        self.session.hooks["response"].remove(self._hook)


@pytest.mark.usefixtures("stores")
def test_hdfs_small_blobs_cost_two_requests_a_leg_and_are_proven_after_every_put(hadoop, s3):
    base = base_url("hdfs", hadoop, s3, uuid.uuid4().hex[:8])
    src, job_loc = open_location(f"{base}/src"), open_location(f"{base}/store/{JOB}")
    bodies: dict[str, bytes] = {}
    while len(bodies) < 12:   # each in its own blobs/<aa>/ folder: one MKDIRS each, none raced
        body = os.urandom(4096 + 1000 * len(bodies))
        if hashlib.sha256(body).hexdigest()[:2] not in {hashlib.sha256(b).hexdigest()[:2] for b in bodies.values()}:
            bodies[f"state/0/{len(bodies) % 4}/SSTs/{len(bodies)}.sst"] = body
    for rel, body in bodies.items():
        src.fs.pipe_file(src.child(rel).path, body)
    writer, n, payload = BlobWriter(job_loc, {}, WebHdfs()), len(bodies), list(bodies.values())
    with WebHdfsRequests(job_loc.fs) as sent:
        puts = list(writer.put_many([(src.child(rel), len(body)) for rel, body in bodies.items()]))
        assert [p[:2] for p in puts] == [(hashlib.sha256(b).hexdigest(), len(b)) for b in payload]
        # per file: OPEN and CREATE (NameNode + DataNode each), one RENAME; one MKDIRS per new blobs/<aa>
        # folder. No GETFILESTATUS, no empty CREATE + APPEND.
        assert sent.take() == {"NN:OPEN": n, "DN:OPEN": n, "NN:CREATE": n, "DN:CREATE": n,
                               "NN:RENAME": n, "NN:MKDIRS": n}
        blobs = [job_loc.child(blob_rel(sha)) for sha, _, _ in puts]
        # a later run, a new body into a folder the store has: no MKDIRS
        later = BlobWriter(job_loc, dict(writer.index), WebHdfs())
        body = next(b for b in iter(lambda: os.urandom(5000), b"") if hashlib.sha256(b).hexdigest()[:2] in
                    {sha[:2] for sha, _, _ in puts})
        src.fs.pipe_file(src.child("later.sst").path, body)
        sent.take()
        assert later.put(src.child("later.sst"), len(body))[0] == hashlib.sha256(body).hexdigest()
        assert sent.take() == {"NN:OPEN": 1, "DN:OPEN": 1, "NN:CREATE": 1, "DN:CREATE": 1, "NN:RENAME": 1}
        # the store's index, its blobs/<aa> folders listed in parallel: every blob, nothing from .tmp/
        assert blob_index(job_loc) == later.index and len(later.index) == n + 1
        assert sent.take() == {"NN:LISTSTATUS": n + 1}
        assert [job_loc.fs.cat_file(b.path) for b in blobs] == payload
        sent.take()

        # after the puts, before the proofs: one blob rewritten with other bytes of its size, one deleted
        job_loc.fs.pipe_file(blobs[3].path, os.urandom(len(payload[3])))
        job_loc.fs.rm(blobs[7].path)
        sent.take()
        rehash = writer.to_rehash()
        assert rehash == {puts[3][0], puts[7][0]}
        # two GETFILECHECKSUMs a blob (its source's, then its own), each computed by a DataNode; the
        # deleted blob's answered by the NameNode alone (no file)
        assert sent.take() == {"NN:GETFILECHECKSUM": 2 * n, "DN:GETFILECHECKSUM": 2 * n - 1}
        assert sorted(mismatched_blobs(job_loc, {sha: writer.index[sha] for sha in rehash})) == sorted(rehash)
        # the re-hash read back: one OPEN each (no GETFILESTATUS), the deleted blob's answered by the NameNode
        assert sent.take() == {"NN:OPEN": 2, "DN:OPEN": 1}

        # the restore's copy of a small blob HDFS -> HDFS: one OPEN, one CREATE, the bytes hashed on the way
        target = open_location(f"{base}/restored/one.sst")
        h, left = WebHdfs().copy_through(blobs[0], target, puts[0][1], body=True)
        assert sent.take() == {"NN:OPEN": 1, "DN:OPEN": 1, "NN:CREATE": 1, "DN:CREATE": 1}
        assert (h.hexdigest(), left) == (puts[0][0], 1)
        assert target.fs.cat_file(target.path) == payload[0]
        # a blob shorter than its manifest says shows as more bytes left to read
        assert WebHdfs().copy_through(blobs[1], target, puts[1][1] + 5, body=True)[1] == 6
