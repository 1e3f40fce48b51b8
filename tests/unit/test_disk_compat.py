"""Files already on users' disks stay readable: fixtures written by the release before issue 9.

``data/compat/disk`` was written by the code at commit 2b586a6 (``data/compat/generator``): a backup
root with two published backups (the second HMAC-sealed) sharing content-addressed blobs, a
lifecycle record with a lease taken and released, an event and next startingOffsets, and a reset
journal killed after its ``record`` step. ``expected.json`` is what that code read back from them.
The code of today must read, verify, materialize, prune and roll forward the same bytes the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.lifecycle.journal import Journal
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups, load_backup
from airflow_kafka_spark.ops.backup.store import materialize, verify_backup
from airflow_kafka_spark.ops.commands import prune_backups
from airflow_kafka_spark.ops.options import Retention
from airflow_kafka_spark.ops.recover import finish_interrupted
from airflow_kafka_spark.verdict.interrupted import interrupted_finding

DATA = Path(__file__).parent / "data" / "compat"
JOB = "orders"


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """A copy of the old release's files (tests must never change the fixtures)."""
    shutil.copytree(DATA / "disk", tmp_path / "disk")
    return tmp_path / "disk"


@pytest.fixture(scope="module")
def expected() -> dict:
    return json.loads((DATA / "expected.json").read_text())


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_catalog_lists_both_old_backups_as_it_did(disk, expected):
    catalog = list_backups(str(disk / "backups"), JOB)
    assert json.loads(json.dumps(catalog.to_dict(), default=str)) == expected["catalog_unkeyed"]
    assert len(catalog.backups) == 2 and catalog.invalid == []


def test_the_keyed_seal_of_an_old_manifest_still_verifies(disk, expected):
    key = (disk / "seal.key").read_bytes()
    catalog = list_backups(str(disk / "backups"), JOB, seal_key=key)
    assert [m.backup_id for m in catalog.backups] == expected["catalog_keyed_ids"]
    assert [n for n, _ in catalog.invalid] == expected["catalog_keyed_invalid"]   # the unsealed one
    sealed = expected["catalog_keyed_ids"][0]
    assert verify_backup(str(disk / "backups"), JOB, sealed, deep=True, seal_key=key).hmac


def test_old_backups_verify_deep_and_materialize_byte_for_byte(disk, expected):
    root = str(disk / "backups")
    for backup_id, files in expected["materialized"].items():
        manifest = verify_backup(root, JOB, backup_id, deep=True)
        dest = disk / f"restored-{backup_id}"
        materialize(manifest, root, open_location(str(dest)))
        assert _tree(dest) == files


def test_an_old_manifest_is_rewritten_to_the_same_document(disk, expected):
    """Parsing then serializing an old manifest changes no field, so its canonical body (what the seal covers)
    is the same. The bytes differ since manifests are written compact (round 2 of issue 15): old, indented
    manifests are read as they are and never rewritten."""
    for backup_id in expected["materialized"]:
        path = disk / "backups" / JOB / "backups" / f"{backup_id}.json"
        manifest = load_backup(str(disk / "backups"), JOB, backup_id)
        assert json.loads(manifest.to_json()) == json.loads(path.read_bytes())


def test_pruning_an_old_root_keeps_the_newest_and_its_blobs(disk, expected):
    root = str(disk / "backups")
    newest = expected["catalog_unkeyed"]["backups"][0]["backup_id"]
    result = prune_backups(root, JOB, Retention(keep_last=1))
    assert [m.backup_id for m in result.removed] != [] and newest not in [m.backup_id for m in result.removed]
    assert verify_backup(root, JOB, newest, deep=True).backup_id == newest


def test_the_old_lifecycle_record_reads_the_same(disk, expected):
    record = LifecycleRecord.load(str(disk / "ck"))
    assert record is not None
    assert json.loads(json.dumps(record.to_dict(), default=str)) == expected["record"]
    assert record.next_starting_offsets is not None and record.job_name == JOB


def test_the_old_reset_journal_reads_blocks_and_rolls_forward(disk, expected):
    ck = open_location(str(disk / "ck"))
    journal = Journal.load(ck)
    assert journal is not None
    got = {"op": journal.op, "operation_id": journal.operation_id, "payload": journal.payload,
           "done": journal.doc["done"], "guard": journal.doc["guard"]}
    assert json.loads(json.dumps(got, default=str)) == expected["journal"]
    finding = interrupted_finding(str(disk / "ck"))
    assert finding is not None and finding.code == expected["interrupted_finding"]["code"]
    assert str(finding.severity) == expected["interrupted_finding"]["severity"]
    # The journal's aside path is absolute as written; the copy's own aside is where the move lands —
    # and roll-forward only accepts ``<checkpoint>.reset-<operation id>`` (issue 17: journals are input).
    payload_aside = Path(f"ck.reset-{journal.operation_id}")
    data = json.loads((disk / "ck.operation.json").read_text())
    data["payload"]["aside"] = str(disk / payload_aside.name)
    (disk / "ck.operation.json").write_text(json.dumps(data))
    done = finish_interrupted(open_location(str(disk / "ck")))
    assert done is not None and done["op"] == "reset"
    assert not (disk / "ck").exists() and (disk / payload_aside.name / "offsets" / "4").exists()
    assert not (disk / "ck.operation.json").exists()
