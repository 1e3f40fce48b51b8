"""An HDFS snapshot backup's manifest (``ops.backup.snapshot``): what it records, and what its parse refuses.

Its entries name files by the cluster's checksum (``checksum``) and its ``snapshot`` says where they
are; both are used to read (restore) and delete (prune) on the cluster, so a manifest that puts them
anywhere else, or mixes them with blob entries, is refused before anything uses it.
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.manifest import SNAPSHOT_PROOF, FileEntry, Manifest
from airflow_kafka_spark.ops.backup.snapshot import snapshot_name
from airflow_kafka_spark.ops.backup.store import check_blobs

BACKUP_ID = "20261124T000000000Z-b3-abcdef"
CHECKSUM = "MD5-of-0MD5-of-512CRC32C:" + "0" * 8 + "ab" * 20
SNAPSHOT = {"folder": "/data/ck", "name": snapshot_name("shop", BACKUP_ID),
            "path": f"/data/ck/.snapshot/aks-shop-{BACKUP_ID}/shop/ck"}


def _manifest(files: tuple[FileEntry, ...], snapshot: dict[str, str]) -> Manifest:
    return Manifest(backup_id=BACKUP_ID, job="shop", created_at_ms=1, reason="test",
                    checkpoint_location="hdfs://nn/data/ck/shop/ck", query_id="q", last_committed_batch=3,
                    committed_offsets=None, pending_batch=None, pending_offsets=None, initial_offsets=None,
                    spark_version=None, kafka_cluster_id=None, topics={}, forced=False, running=False, state={},
                    problems=[], files=files, snapshot=snapshot)


ENTRIES = (FileEntry("commits/3", 29, CHECKSUM, 1795532379.08, None, SNAPSHOT_PROOF),
           FileEntry("state/0/0/4.delta", 524288, CHECKSUM.replace("ab", "cd"), 1795532379.5, None, SNAPSHOT_PROOF))


def test_a_snapshot_manifest_records_checksums_and_the_snapshot_and_parses_back():
    _, raw = _manifest(ENTRIES, SNAPSHOT).sealed_json()
    doc = json.loads(raw)
    assert doc["snapshot"] == SNAPSHOT
    assert [set(f) for f in doc["files"]] == [{"path", "size", "checksum", "mtime", "proof"}] * 2
    back = Manifest.from_json(raw, where="t")
    assert back.files == ENTRIES and back.snapshot == SNAPSHOT


@pytest.mark.parametrize("snapshot, files", [
    ({**SNAPSHOT, "path": "/data/other/shop/ck"}, ENTRIES),                            # not inside the snapshot
    ({**SNAPSHOT, "path": f"/data/ck/.snapshot/aks-shop-{BACKUP_ID}/../x"}, ENTRIES),  # climbs out of it
    ({**SNAPSHOT, "folder": "data/ck"}, ENTRIES),                                      # relative folder
    ({**SNAPSHOT, "name": "a/b"}, ENTRIES),
    ({**SNAPSHOT, "extra": "x"}, ENTRIES),
    (SNAPSHOT, (*ENTRIES, FileEntry("metadata", 45, "0" * 64, 1.0))),                 # a blob entry among them
])
def test_a_snapshot_that_points_elsewhere_or_mixes_in_blob_entries_is_refused(snapshot, files):
    _, raw = _manifest(files, snapshot).sealed_json()
    with pytest.raises(UserError, match="malformed snapshot"):
        Manifest.from_json(raw, where="t")


@pytest.mark.parametrize("entry", [
    {"path": "a", "size": 1, "checksum": "no colon", "proof": SNAPSHOT_PROOF},
    {"path": "a", "size": 1, "checksum": CHECKSUM, "sha256": "0" * 64, "proof": SNAPSHOT_PROOF},
    {"path": "a", "size": 1, "sha256": "0" * 64, "proof": SNAPSHOT_PROOF},
    {"path": "a", "size": 1, "checksum": CHECKSUM},   # a checksum is no blob name
])
def test_a_malformed_checksum_entry_is_refused(entry):
    body = {**json.loads(_manifest(ENTRIES, {}).sealed_json()[1]), "files": [entry]}
    body.pop("digest")
    raw = json.dumps({**body, "digest": seal.digest(body)}).encode()   # sealed as it is: the entry is refused
    with pytest.raises(UserError, match="malformed"):
        Manifest.from_json(raw, where="t")


def test_a_snapshot_backup_is_checked_on_hdfs_only(tmp_path):
    with pytest.raises(UserError, match="not on HDFS"):
        check_blobs(open_location(str(tmp_path)), _manifest(ENTRIES, SNAPSHOT), deep_shas=set())
