"""Restore round trips, blocked restores and reset crash safety — against the real broker and real Spark.

Spark is the oracle: after a restore, the restarted query must put exactly the replay the restore
announced into a non-idempotent sink (counted record by record against what Kafka acknowledged).
The reset crash tests SIGKILL the real command line at every named step and check that the
original checkpoint is never lost, nothing half-written is listed, and re-running converges.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.initial_offsets import read_initial_offsets
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import OperationBlocked, UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition, parse_offsets_json
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.backup.store import verify_backup
from airflow_kafka_spark.ops.commands import backup_checkpoint, reset_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions, SinkFacts
from airflow_kafka_spark.ops.reset_plan import ResetRequest
from devstack import oracle, topics
from devstack.produce import produce
from tests.support import spark_session
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.sink_log_factory import write_sink_log

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOB = "orders"


def tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


class Job:
    """One topic, one checkpoint, an append (non-idempotent) sink, and everything produced."""

    def __init__(self, broker, root: Path, topic: str, partitions: int = 3) -> None:
        self.broker, self.root, self.topic, self.partitions = broker, root, topic, partitions
        self.checkpoint, self.output, self.backups = root / "ck", root / "out", root / "backups"
        self.produced: list = []
        topics.create_topic(self.bootstrap, topic, partitions)
        LifecycleRecord.create(JOB, str(self.checkpoint)).save()

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    @property
    def kafka(self) -> dict:
        return {"bootstrap.servers": self.bootstrap}

    def produce(self, n: int) -> list:
        recs = produce(self.bootstrap, self.topic, n, partitions=self.partitions, start_id=len(self.produced))
        self.produced += recs
        return recs

    def run(self, **options):
        res = spark_session.run_available_now(self.bootstrap, self.topic, self.checkpoint, self.output,
                                              sink="append", **options)
        assert res.ok, res.error
        return res

    def compare(self) -> oracle.Comparison:
        return oracle.compare(self.produced, oracle.read_sink(self.output, "append"))

    def committed(self) -> dict:
        return read_checkpoint(str(self.checkpoint)).latest_committed.kafka_offsets


@pytest.fixture
def job(broker, tmp_path, topic_name):
    return Job(broker, tmp_path, topic_name)


# --------------------------------------------------------------------------- restore round trip


def test_restore_round_trip_replays_exactly_what_it_announced(job):
    job.produce(300)
    job.run(max_offsets_per_trigger=100)
    first = backup_checkpoint(str(job.checkpoint), str(job.backups), job=JOB, settle_s=0)
    c_first = first.manifest.last_committed_batch
    assert c_first is not None and c_first >= 1

    job.produce(240)
    job.run(max_offsets_per_trigger=100)
    assert job.compare().exact
    moved_on = read_checkpoint(str(job.checkpoint))
    assert moved_on.latest_committed.batch_id > c_first

    dry = restore_checkpoint(str(job.checkpoint), str(job.backups), first.backup_id, job.kafka, dry_run=True,
                             sink=SinkFacts(idempotent=False), run=RunOptions(backup_settle_s=0))
    assert dry.records_to_replay == 240 and not dry.restored
    assert read_checkpoint(str(job.checkpoint)).commit_batch_ids == moved_on.commit_batch_ids

    result = restore_checkpoint(str(job.checkpoint), str(job.backups), first.backup_id, job.kafka,
                                sink=SinkFacts(idempotent=False), run=RunOptions(backup_settle_s=0))
    assert result.restored and result.records_to_replay == 240
    assert result.plan.severity == "WARN" and "REPLAY" in {f.code for f in result.plan.findings}
    restored = read_checkpoint(str(job.checkpoint))
    assert restored.latest_committed.batch_id == c_first and restored.query_id == moved_on.query_id
    # the replaced checkpoint was kept and backed up
    assert Path(result.aside_location).exists()
    assert result.pre_restore_backup_id in {b.backup_id for b in list_backups(str(job.backups), JOB).backups}
    events = [e["event"] for e in LifecycleRecord.load(str(job.checkpoint)).history]
    assert "checkpoint_restored" in events

    job.run(max_offsets_per_trigger=100)
    cmp = job.compare()
    assert not cmp.missing and not cmp.unexpected, cmp.summary()
    assert cmp.duplicate_count == result.records_to_replay == 240, cmp.summary()
    print("RESTORE_ROUND_TRIP " + json.dumps({"announced_replay": result.records_to_replay, **cmp.summary()}))


def test_restore_past_retention_is_blocked_with_the_count_and_changes_nothing(job):
    job.produce(300)
    job.run()
    old = backup_checkpoint(str(job.checkpoint), str(job.backups), job=JOB, settle_s=0)
    job.produce(300)
    job.run()
    # retention removes 50 records per partition that the backup's position still needs
    ends = {tp.partition: o for tp, o in old.manifest.committed_offsets.items()}
    topics.delete_records(job.bootstrap, job.topic, {p: o + 50 for p, o in ends.items()})

    before = (tree(job.root), tree(job.backups))
    with pytest.raises(OperationBlocked) as err:
        restore_checkpoint(str(job.checkpoint), str(job.backups), old.backup_id, job.kafka,
                           run=RunOptions(backup_settle_s=0))
    assert err.value.exit_code == 3 and err.value.code == "OFFSET_BELOW_LOG_START"
    assert "nothing was changed" in str(err.value) and "\n" not in str(err.value)
    lost = [f for f in err.value.details["plan"]["findings"] if f["code"] == "OFFSET_BELOW_LOG_START"]
    assert sum(f["numbers"]["records_lost"] for f in lost) == 150
    assert (tree(job.root), tree(job.backups)) == before

    out = aks("restore", "--checkpoint", str(job.checkpoint), "--backup-root", str(job.backups), "--backup",
              old.backup_id, "--bootstrap-servers", job.bootstrap, "--json", "--execute")
    assert out.returncode == 3, out.stderr
    assert json.loads(out.stdout)["code"] == "OFFSET_BELOW_LOG_START"
    assert (tree(job.root), tree(job.backups)) == before


def test_restore_bad_input_is_one_line_and_changes_nothing(job, tmp_path):
    job.produce(30)
    job.run()
    good = backup_checkpoint(str(job.checkpoint), str(job.backups), job=JOB, settle_s=0)
    other = write_checkpoint(tmp_path / "other-ck", batches=2)
    LifecycleRecord.create("payments", other.location).save()
    foreign = backup_checkpoint(other.location, str(job.backups), settle_s=0)
    tampered_root = tmp_path / "tampered"
    tampered = backup_checkpoint(str(job.checkpoint), str(tampered_root), job=JOB, settle_s=0)
    mpath = tampered_root / JOB / "backups" / f"{tampered.backup_id}.json"
    doc = json.loads(mpath.read_text())
    doc["last_committed_batch"] = 99
    mpath.write_text(json.dumps(doc))

    cases = [
        ("tampered manifest", dict(backup_root=str(tampered_root), backup_id=tampered.backup_id),
         "modified after it was written"),
        ("backup of another job", dict(backup_id=foreign.backup_id), "belongs to job 'payments'"),
        ("unknown backup", dict(backup_id="20260101T000000000Z-b1-aaaaaa"), "no published backup"),
        ("not a backup id", dict(backup_id="latest-and-greatest"), "is not a backup id"),
        ("missing backup root", dict(backup_root=str(tmp_path / "nowhere")), "no published backup"),
        ("root inside checkpoint", dict(backup_root=str(job.checkpoint / "bk")), "inside checkpoint"),
        ("wrong job", dict(job="payments"), "belongs to job 'orders'"),
    ]
    for name, override, needle in cases:
        before = tree(tmp_path)
        kwargs = {"backup_root": str(job.backups), "backup_id": good.backup_id, **override}
        with pytest.raises(UserError) as err:
            restore_checkpoint(str(job.checkpoint), kwargs.pop("backup_root"), kwargs.pop("backup_id"), job.kafka,
                               **kwargs, run=RunOptions(backup_settle_s=0))
        assert needle in str(err.value), (name, str(err.value))
        assert "\n" not in str(err.value), name
        assert tree(tmp_path) == before, name


# --------------------------------------------------------------------------- reset crash safety


def aks(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **(env or {})}, timeout=180)


RESET_CRASH_POINTS = ["backup.blob#3", "backup.published", "reset.backed_up", "reset.journaled", "reset.recorded",
                      "reset.sink_moved", "reset.moved", "reset.sources_written"]


@pytest.fixture
def reset_setup(broker, tmp_path, topic_name):
    """A checkpoint (as Spark writes it) whose offsets lie inside a real topic, plus a file sink's log."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 200, partitions=2)   # 100 per partition
    ck = write_checkpoint(tmp_path / "ck", batches=4, pending=True, sources=({topic_name: 2},),
                          records_per_batch=10, state=True, start_timestamp_ms=int(time.time() * 1000))
    out = tmp_path / "out"
    write_sink_log(out, 5)
    LifecycleRecord.create(JOB, ck.location).save()
    return ck, out, topic_name


@pytest.mark.parametrize("point", RESET_CRASH_POINTS)
def test_a_killed_reset_never_loses_the_checkpoint_and_a_rerun_converges(broker, tmp_path, reset_setup, point):
    ck, out, topic = reset_setup
    original, original_sink = tree(ck.root), tree(out / "_spark_metadata")
    root = tmp_path / "backups"
    args = ("reset", "--checkpoint", ck.location, "--backup-root", str(root), "--mode", "preserve",
            "--bootstrap-servers", broker.bootstrap_servers, "--sink-output", str(out), "--sink-log", "move-aside",
            "--settle", "0", "--json", "--execute")
    killed = aks(*args, env={"AKS_CRASH_AT": point})
    assert killed.returncode == -9, killed.stdout + killed.stderr

    # The original checkpoint is at its location or at the journal's aside path, intact.
    journal = ck.root.parent / "ck.operation.json"
    asides = sorted(ck.root.parent.glob("ck.reset-*"))
    if not asides:
        assert tree(ck.root) == original
    else:   # moved; the fresh location may already hold the new sources/0/0 (killed at reset.sources_written)
        assert journal.exists() and len(asides) == 1 and tree(asides[0]) == original
    catalog = list_backups(str(root), JOB)
    assert not catalog.invalid
    for b in catalog.backups:
        verify_backup(str(root), JOB, b.backup_id)

    again = aks(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads(again.stdout)
    assert not journal.exists()
    # The fresh location holds only Spark's start file at the planned offsets (ops/reset_start.py).
    assert sorted(str(p.relative_to(ck.root)) for p in ck.root.rglob("*") if p.is_file()) == ["sources/0/0"]
    assert read_initial_offsets(ck.location, "0") == {TopicPartition(topic, 0): 40, TopicPartition(topic, 1): 40}
    asides = sorted(ck.root.parent.glob("ck.reset-*"))
    assert len(asides) == 1 and tree(asides[0]) == original
    sink_asides = sorted(out.glob("_spark_metadata.reset-*"))
    assert len(sink_asides) == 1 and tree(sink_asides[0]) == original_sink
    assert not (out / "_spark_metadata").exists()
    rec = LifecycleRecord.load(ck.location)
    expected = {TopicPartition(topic, 0): 40, TopicPartition(topic, 1): 40}   # committed batch 3, not pending 4
    assert parse_offsets_json(rec.next_starting_offsets) == expected
    assert parse_offsets_json(doc["starting_offsets"]) == expected
    assert [e["event"] for e in rec.history].count("checkpoint_reset") == 1
    catalog = list_backups(str(root), JOB)
    assert catalog.backups and not catalog.invalid
    assert {f.path for f in catalog.newest.files} == set(original)


def test_reset_dry_run_and_bad_input_change_nothing(broker, tmp_path, reset_setup):
    ck, out, topic = reset_setup
    root = tmp_path / "backups"
    base = ("reset", "--checkpoint", ck.location, "--backup-root", str(root),
            "--bootstrap-servers", broker.bootstrap_servers, "--settle", "0")
    before = tree(tmp_path)
    dry = aks(*base, "--mode", "preserve")   # without --execute: the plan only
    assert dry.returncode == 0 and not dry.stderr, dry.stderr
    assert "plan only: nothing changed" in dry.stdout and "SINK_NOT_INSPECTED" in dry.stdout
    assert "--execute" in dry.stdout
    old_spelling = aks(*base, "--mode", "preserve", "--dry-run")   # still accepted for one release
    assert old_spelling.returncode == 0 and "plan only: nothing changed" in old_spelling.stdout
    assert old_spelling.stderr.count("\n") == 1 and "deprecated" in old_spelling.stderr
    blocked = aks(*base, "--mode", "preserve", "--sink-output", str(out))
    assert blocked.returncode == 3 and "SINK_WILL_DISCARD_BATCHES" in blocked.stdout
    refused = aks(*base, "--mode", "latest", "--execute")
    assert refused.returncode == 3 and "DATA_LOSS" in refused.stderr and refused.stderr.count("\n") == 1
    for args, needle in [
        (("--mode", "to-offsets", "--to-offsets", json.dumps({topic: {"0": 10_000}})), "outside its log"),
        (("--mode", "to-offsets", "--to-offsets", "{not json"), "not JSON"),
        (("--mode", "to-datetime", "--to-datetime", "yesterday"), "is not a time"),
        (("--mode", "sideways"), "invalid choice"),
    ]:
        bad = aks(*base, *args, "--execute")
        assert bad.returncode == 2 and needle in bad.stderr and bad.stderr.count("\n") == 1, bad.stderr
    missing = aks("reset", "--checkpoint", str(tmp_path / "nope"), "--backup-root", str(root), "--mode", "preserve",
                  "--bootstrap-servers", broker.bootstrap_servers, "--execute")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert tree(tmp_path) == before


def test_reset_accepting_data_loss_is_audited(broker, tmp_path, reset_setup):
    ck, _, topic = reset_setup
    result = reset_checkpoint(ck.location, str(tmp_path / "backups"), {"bootstrap.servers": broker.bootstrap_servers},
                              ResetRequest(mode="latest", accept_data_loss=True), actor="tester",
                              run=RunOptions(backup_settle_s=0))
    assert result.plan.skipped == 2 * (100 - 40)
    assert parse_offsets_json(result.starting_offsets) == {TopicPartition(topic, 0): 100,
                                                           TopicPartition(topic, 1): 100}
    rec = LifecycleRecord.load(ck.location)
    accepted = [e for e in rec.history if e["event"] == "data_loss_accepted"]
    assert len(accepted) == 1 and accepted[0]["details"]["records_skipped"] == 120
    assert accepted[0]["actor"] == "tester"


def test_a_reset_seals_its_backup_with_the_key_it_was_given(broker, tmp_path, reset_setup):
    """`aks reset --seal-key-file` keys the seal of the backup taken before anything moves (it used to reach
    the backup only through an environment variable the command set on itself, and the core dropped a key
    passed in ``RunOptions``)."""
    from airflow_kafka_spark.ops.backup.catalog import list_backups

    ck, _, _ = reset_setup
    key = tmp_path / "seal.key"
    key.write_text("a-reset-seal-key-0123456789abcdef")
    root = tmp_path / "backups"
    done = aks("reset", "--checkpoint", ck.location, "--backup-root", str(root), "--mode", "preserve", "--job", JOB,
               "--bootstrap-servers", broker.bootstrap_servers, "--seal-key-file", str(key), "--settle", "0",
               "--execute", "--json", env={"AKS_SEAL_KEY_FILE": ""})
    assert done.returncode == 0, done.stderr
    backup_id = json.loads(done.stdout)["backup_id"]
    keyed = list_backups(str(root), JOB, seal_key=key.read_bytes())
    assert [b.backup_id for b in keyed.backups] == [backup_id]
    assert keyed.backups[0].hmac.startswith("hmac-sha256:")
    assert list_backups(str(root), JOB, seal_key=b"another-key-0123456789abcdef").backups == []


RESTORE_CRASH_POINTS = ["restore.file#2", "backup.published", "restore.backed_up", "restore.journaled",
                        "restore.moved_aside", "restore.in_place"]


def advance(ck, topic: str, first: int, last: int) -> None:
    """Commit the pending batch and plan/commit more, as a restarted query would (offsets ≤ 100)."""
    from tests.support.checkpoint_factory import commit_file, offsets_file

    for b in range(first, last + 1):
        ends = json.dumps({topic: {"0": (b + 1) * 10, "1": (b + 1) * 10}}, separators=(",", ":"))
        if not ck.path(f"offsets/{b}").exists():
            ck.write(f"offsets/{b}", offsets_file([ends], batch_timestamp_ms=int(time.time() * 1000)))
        ck.write(f"commits/{b}", commit_file())
        for p in range(2):
            ck.write(f"state/0/{p}/{b + 1}.delta", b"\x00\x00\x00\x00")


@pytest.mark.parametrize("point", RESTORE_CRASH_POINTS)
def test_a_killed_restore_never_loses_a_checkpoint_and_a_rerun_converges(broker, tmp_path, reset_setup, point):
    ck, _, topic = reset_setup
    root = tmp_path / "backups"
    old = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    advance(ck, topic, 4, 7)                                      # the current checkpoint moved on to batch 7
    current = tree(ck.root)
    args = ("restore", "--checkpoint", ck.location, "--backup-root", str(root), "--backup", old.backup_id,
            "--bootstrap-servers", broker.bootstrap_servers, "--settle", "0", "--json", "--execute")
    killed = aks(*args, env={"AKS_CRASH_AT": point})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    asides = sorted(ck.root.parent.glob("ck.restore-*"))
    if ck.root.exists() and tree(ck.root) != current:
        assert asides and tree(asides[0]) == current               # the replaced checkpoint was moved, not lost
    elif not ck.root.exists():
        assert len(asides) == 1 and tree(asides[0]) == current
    for b in list_backups(str(root), JOB).backups:
        verify_backup(str(root), JOB, b.backup_id)

    again = aks(*args)
    assert again.returncode == 0, again.stdout + again.stderr
    doc = json.loads(again.stdout)
    assert doc["restored"] is True
    assert tree(ck.root) == {f.path: f.sha256 for f in old.files}  # exactly the backup, file by file
    asides = sorted(ck.root.parent.glob("ck.restore-*"))
    assert len(asides) == 1 and tree(asides[0]) == current
    assert not list(ck.root.parent.glob("ck.staging-*")) and not (ck.root.parent / "ck.operation.json").exists()
    rec = LifecycleRecord.load(ck.location)
    assert [e["event"] for e in rec.history].count("checkpoint_restored") == 1
    assert doc["records_to_replay"] == 2 * (80 - 40)               # current C=7 (80) back to the backup's C=3 (40)


# --------------------------------------------------------------------------- what proves each file


def test_a_manifest_entry_names_its_proof_and_an_unknown_proof_is_refused(tmp_path):
    from dataclasses import replace

    from airflow_kafka_spark.ops.backup.manifest import Manifest

    ck = write_checkpoint(tmp_path / "ck", batches=2, state=True)
    m = backup_checkpoint(str(ck.root), str(tmp_path / "b"), job=JOB, settle_s=0).manifest
    assert m.files and all(f.proof is None for f in m.files)   # a local backup hashed every byte itself
    vouched = (m.files[0]._replace(proof="s3-sha256"), *m.files[1:])
    _, raw = replace(m, files=vouched, files_json=None).sealed_json()
    back = Manifest.from_json(raw, where="test")
    assert back.files == vouched and b'"proof":"s3-sha256"' in raw
    _, bad = replace(m, files=(m.files[0]._replace(proof="trust-me"), *m.files[1:]), files_json=None).sealed_json()
    with pytest.raises(UserError, match="unknown proof"):
        Manifest.from_json(bad, where="test")
