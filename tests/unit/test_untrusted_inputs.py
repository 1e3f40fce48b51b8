"""Issue 17 items 2, 5, 6 (pure logic and local files): untrusted JSON, sizes, names, paths, journals.

Every hostile input must end as one :class:`UserError` line (or a BLOCK finding), never a
traceback, and must change nothing. The broker-backed CLI stories are in
tests/integration/test_untrusted_ops.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from airflow_kafka_spark._util.fs import open_location, refuse_chained_url
from airflow_kafka_spark._util.jsonfile import UntrustedJSONError, json_depth, load_json
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.journal import Journal
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.names import validate_backup_id, validate_job_name
from airflow_kafka_spark.ops.backup.catalog import list_backups
from airflow_kafka_spark.ops.commands import backup_checkpoint
from airflow_kafka_spark.ops.recover import finish_interrupted
from airflow_kafka_spark.verdict.evaluate import evaluate
from airflow_kafka_spark.verdict.findings import BLOCK, PASS
from airflow_kafka_spark.verdict.interrupted import interrupted_finding
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support import verdict_states as vs
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

REPO = Path(__file__).resolve().parents[2]
DEEP = "[" * 10_000 + "]" * 10_000
DEEP_OBJ = '{"a":' * 10_000 + "1" + "}" * 10_000
JOB = "orders"


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text
    return text


# --------------------------------------------------------------------------- the bounded loader


def test_bounded_loader_refuses_depth_size_and_garbage_with_one_line():
    assert load_json(b'{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    for raw, needle in [(DEEP, "nested"), (DEEP_OBJ, "nested"), ("[" * 100 + "]" * 100, "nested"),
                        (b"x" * 2048, "larger"), ("{not json", "not JSON"), (b"\xff\xfe", "not JSON")]:
        with pytest.raises(UntrustedJSONError) as info:
            load_json(raw, what="the thing", max_bytes=1024 if needle == "larger" else 1 << 20)
        assert needle in one_line(info.value) and "the thing" in str(info.value)
        assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)


def test_the_depth_count_settles_lists_of_flat_objects_at_once_and_still_counts_what_hides_in_them():
    """A manifest's 40,000 flat file entries are settled in one scan (issue 15); one entry holding a
    nested value is counted like any other document (the recursive count is the reference)."""
    def depth(node):
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        return 0 if children is None else 1 + max((depth(c) for c in children), default=0)

    flat = [{"path": f"p{i}", "size": i, "mtime": 1.5, "ctime": None} for i in range(100)]
    nested = [*flat[:50], {"path": "x", "extra": [[[{"a": [1]}]]]}, *flat[50:]]
    docs = [flat, {"files": flat}, {"files": nested}, [[], {}], [{}, {"a": {}}], {"a": [flat, [nested]]}]
    for doc in docs:
        assert json_depth(doc) == depth(doc), doc if len(str(doc)) < 200 else type(doc)
    deep = {"files": [*flat, {"path": "y", "extra": json.loads("[" * 70 + "]" * 70)}]}
    with pytest.raises(UntrustedJSONError, match="nested too deeply"):
        load_json(json.dumps(deep))


# --------------------------------------------------------------------------- item 5: nested JSON everywhere


def test_deeply_nested_sources_0_0_is_a_problem_not_a_traceback(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=0, pending=True)
    ck.write("sources/0/0", b"\x00v1\n" + DEEP.encode())
    state = read_checkpoint(ck.location)
    assert any(p.path == "sources/0/0" and "nested" in p.message for p in state.problems), state.problems


def test_deeply_nested_lifecycle_record_and_next_starting_offsets_are_one_line(tmp_path):
    ck = write_checkpoint(tmp_path / "ck")
    rec = LifecycleRecord.create(JOB, ck.location)
    rec.save()
    path = Path(rec.location)
    doc = json.loads(path.read_text())
    doc["next_starting_offsets"] = DEEP_OBJ
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError) as info:
        LifecycleRecord.load(ck.location)
    assert "next_starting_offsets" in one_line(info.value)
    path.write_text(DEEP)
    with pytest.raises(UserError) as info:
        LifecycleRecord.load(ck.location)
    assert "nested" in one_line(info.value)


def test_deeply_nested_journal_is_one_line_and_a_block_finding(tmp_path):
    ck = write_checkpoint(tmp_path / "ck")
    (tmp_path / "ck.operation.json").write_text(DEEP)
    loc = open_location(ck.location)
    with pytest.raises(UserError) as info:
        Journal.load(loc)
    assert "nested" in one_line(info.value)
    finding = interrupted_finding(ck.location)
    assert finding is not None and finding.severity == BLOCK and finding.code == "INTERRUPTED_OPERATION"


def test_one_nested_manifest_is_listed_as_damaged_and_never_breaks_later_backups(tmp_path):
    ck = write_checkpoint(tmp_path / "ck")
    root = tmp_path / "b"
    first = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    bad = root / JOB / "backups" / "20991231T235959000Z-b9-zzzzzz.json"
    bad.write_text(DEEP)
    catalog = list_backups(str(root), JOB)
    assert [b.backup_id for b in catalog.backups] == [first.backup_id]
    assert [n for n, _ in catalog.invalid] == [bad.name] and "nested" in catalog.invalid[0][1]
    ck.write("offsets/3", offsets_file(['{"orders":{"0":40,"1":40}}']))
    ck.write("commits/3", commit_file())
    second = backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0).manifest
    assert list_backups(str(root), JOB).newest.backup_id == second.backup_id


def test_cli_backups_lists_a_nested_manifest_as_damaged(tmp_path):
    ck = write_checkpoint(tmp_path / "ck")
    root = tmp_path / "b"
    backup_checkpoint(ck.location, str(root), job=JOB, settle_s=0)
    (root / JOB / "backups" / "20991231T235959000Z-b9-zzzzzz.json").write_text(DEEP)
    res = subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", "backups", "--backup-root", str(root),
                          "--job", JOB], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "Traceback" not in res.stderr and res.returncode in (0, 3), res.stderr
    assert "20991231T235959000Z-b9-zzzzzz.json" in res.stdout + res.stderr


# --------------------------------------------------------------------------- item 6: sizes, names, paths


def test_a_1gib_metadata_file_is_refused_from_its_size_without_reading_it(tmp_path):
    ck = write_checkpoint(tmp_path / "ck")
    with open(ck.path("metadata"), "r+b") as fh:
        fh.truncate(1 << 30)                                   # sparse: no disk used
    tracemalloc.start()
    try:
        state = read_checkpoint(ck.location)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert any(p.path == "metadata" and "larger" in p.message for p in state.problems), state.problems


def test_a_huge_sources_file_is_refused_from_its_size(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=0, pending=True)
    with open(ck.path("sources/0/0"), "r+b") as fh:
        fh.truncate(1 << 30)
    tracemalloc.start()
    try:
        state = read_checkpoint(ck.location)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert any(p.path == "sources/0/0" and "larger" in p.message for p in state.problems), state.problems


@pytest.mark.parametrize("name", ["orders\n", "../../etc", "a/b", "", ".hidden", "x" * 129])
def test_job_names_are_checked_by_fullmatch(name):
    with pytest.raises(UserError):
        validate_job_name(name)


def test_backup_id_with_a_trailing_newline_is_refused():
    validate_backup_id("20260101T120000000Z-b41-1a2b3c")
    with pytest.raises(UserError):
        validate_backup_id("20260101T120000000Z-b41-1a2b3c\n")


def test_lifecycle_record_refuses_a_traversal_job_name(tmp_path):
    with pytest.raises(UserError) as info:
        LifecycleRecord.create("../../etc", str(tmp_path / "ck"))
    assert "job name" in one_line(info.value)
    assert not list(tmp_path.iterdir())


def test_a_chained_url_is_refused_instead_of_opening_another_folder(tmp_path):
    other = write_checkpoint(tmp_path / "other")
    for url in [f"file://{tmp_path}/ck::file://{other.location}", f"{tmp_path}/ck::{other.location}",
                f"simplecache::file://{other.location}"]:
        with pytest.raises(UserError) as info:
            open_location(url, what="checkpoint location")
        assert "::" in one_line(info.value)
        with pytest.raises(UserError):
            read_checkpoint(url)
    with pytest.raises(UserError):        # fsspec splits "[::1]" too (file://[::1]/x opens "./[")
        refuse_chained_url("hdfs://[::1]:8020/data/ck")


def test_empty_latest_kafka_offsets_are_not_a_pass():
    broker = vs.broker({("orders", 0): (0, 100), ("orders", 1): (0, 100)})
    ok = evaluate(vs.checkpoint({("orders", 0): 40, ("orders", 1): 40}), broker, None, DeployOptions())
    assert ok.severity == PASS
    for options in (DeployOptions(), DeployOptions(topics=("orders",))):   # today: PASS, and WARN
        empty = evaluate(vs.checkpoint({}), broker, None, options)
        assert empty.severity == BLOCK and "KAFKA_OFFSETS_EMPTY" in empty.codes, empty.headline


# --------------------------------------------------------------------------- item 2: the journal guard


def _journaled_reset(tmp_path) -> tuple:
    """A checkpoint with a reset journal written at its commit point (as reset.journaled leaves it)."""
    ck = write_checkpoint(tmp_path / "ck", batches=5)
    LifecycleRecord.create(JOB, ck.location).save()
    loc = open_location(ck.location, what="checkpoint location")
    payload = {"job": JOB, "actor": None, "request": {"mode": "preserve", "accept_data_loss": False},
               "backup_root": str(tmp_path / "b"), "backup_id": "x",
               "aside": ck.location + ".reset-20260101T000000Z-abcdef",
               "sink_output": None, "sink_aside": None, "starting_offsets": '{"orders":{"0":50,"1":50}}',
               "old_query_id": ck.query_id, "skipped": 0, "replayed": 0, "pending_replay": 0, "plan": {}}
    Journal.begin(loc, "reset", "20260101T000000Z-abcdef", payload)
    return ck, loc


def test_an_interrupted_reset_is_a_block_finding_naming_the_operation(tmp_path):
    ck, _ = _journaled_reset(tmp_path)
    finding = interrupted_finding(ck.location)
    assert finding is not None and finding.code == "INTERRUPTED_OPERATION" and finding.severity == BLOCK
    assert "20260101T000000Z-abcdef" in finding.message and "aks reset" in finding.fix
    assert interrupted_finding(str(tmp_path / "nothing-here")) is None


def test_roll_forward_refuses_when_the_checkpoint_moved_on(tmp_path):
    ck, _ = _journaled_reset(tmp_path)
    ck.write("offsets/5", offsets_file(['{"orders":{"0":60,"1":60}}']))
    ck.write("commits/5", commit_file())
    before = tree(ck.root)
    with pytest.raises(OperationBlocked) as info:
        finish_interrupted(open_location(ck.location))
    assert "moved on" in one_line(info.value) and info.value.exit_code == 3
    assert tree(ck.root) == before and (tmp_path / "ck.operation.json").exists()
    assert LifecycleRecord.load(ck.location).next_starting_offsets is None


def test_roll_forward_refuses_while_a_driver_holds_the_lease(tmp_path):
    ck, _ = _journaled_reset(tmp_path)
    LifecycleRecord.load(ck.location).acquire_lease("airflow-run-7", 600)
    before = tree(ck.root)
    with pytest.raises(OperationBlocked) as info:
        finish_interrupted(open_location(ck.location))
    assert "lease" in one_line(info.value)
    assert tree(ck.root) == before and (tmp_path / "ck.operation.json").exists()


def test_roll_forward_still_finishes_an_untouched_interruption(tmp_path):
    ck, _ = _journaled_reset(tmp_path)
    done = finish_interrupted(open_location(ck.location))
    assert done is not None and done["op"] == "reset"
    assert not ck.root.exists() and Path(ck.location + ".reset-20260101T000000Z-abcdef").exists()
    assert not (tmp_path / "ck.operation.json").exists()


def test_journal_guard_is_cheap_on_large_state(tmp_path):
    """The guard lists offsets/ and commits/ only: it never walks state/."""
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True)
    marks = open_location(ck.location)
    from airflow_kafka_spark.lifecycle.journal import checkpoint_marks

    got = checkpoint_marks(marks)
    assert got["offsets"] == 2 and got["commits"] == 2 and got["metadata_sha256"]
    assert os.path.exists(ck.path("state/0/0/1.delta"))


def test_nested_audit_history_and_kafka_config_are_not_tracebacks(tmp_path):
    from airflow_kafka_spark.watch.audit.history import HISTORY_FILE, AuditHistory

    (tmp_path / HISTORY_FILE).write_text(DEEP)
    assert AuditHistory.load(str(tmp_path)).runs == []        # a damaged history restarts the trends
    config = tmp_path / "kafka.json"
    config.write_text(DEEP)
    res = subprocess.run([sys.executable, "-m", "airflow_kafka_spark.cli", "validate", "--checkpoint",
                          str(tmp_path / "ck"), "--kafka-config", str(config)], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert "nested" in res.stderr


def test_sink_log_entry_with_nested_json_is_a_format_error():
    from airflow_kafka_spark.checkpoint.sink_log import _entry
    from airflow_kafka_spark.errors import CheckpointFormatError

    with pytest.raises(CheckpointFormatError):
        _entry(DEEP, "_spark_metadata/0 line 2")


def test_past_the_move_only_bookkeeping_is_left_and_a_new_run_does_not_block_it(tmp_path):
    ck, loc = _journaled_reset(tmp_path)
    journal = Journal.load(loc)
    for step in ("record", "sink"):
        journal.mark(step)
    os.rename(ck.root, ck.location + ".reset-20260101T000000Z-abcdef")
    journal.mark("aside")                                   # killed at reset.moved
    LifecycleRecord.load(ck.location).acquire_lease("new-run", 600)
    assert finish_interrupted(open_location(ck.location))["op"] == "reset"
    assert not (tmp_path / "ck.operation.json").exists()


@pytest.mark.parametrize("nested_as", ["json string", "yaml"])
def test_registry_with_nested_starting_offsets_is_one_short_line(tmp_path, nested_as):
    import yaml

    from airflow_kafka_spark.registry.loader import load_registry

    (tmp_path / "data").mkdir()
    (tmp_path / "apps").mkdir()
    (tmp_path / "apps" / "job.py").write_text("print('job')\n")
    doc = {"version": 1, "allowed_roots": [str(tmp_path / "data"), str(tmp_path / "apps")],
           "defaults": {"application": str(tmp_path / "apps" / "job.py"),
                        "checkpoint": f"{tmp_path}/data/checkpoints/{{name}}",
                        "backup_root": f"{tmp_path}/data/backups/{{name}}",
                        "output": f"{tmp_path}/data/sinks/{{name}}"},
           "jobs": [{"name": "orders", "topics": ["orders"], "sink": "idempotent",
                     "starting_offsets_default": DEEP if nested_as == "json string" else "PLACEHOLDER"}]}
    text = yaml.safe_dump(doc, width=1 << 20)
    path = tmp_path / "streaming_jobs.yaml"
    path.write_text(text.replace("PLACEHOLDER", DEEP))
    with pytest.raises(UserError) as info:
        load_registry(path)
    assert len(one_line(info.value)) < 400 and str(path) in str(info.value)


def test_a_reset_journal_whose_aside_leaves_the_checkpoint_is_refused_and_nothing_moves(tmp_path):
    # issue 17 corpus journal__reset_aside_outside: roll-forward moved the checkpoint to outside/aside
    ck, _ = _journaled_reset(tmp_path)
    path = tmp_path / "ck.operation.json"
    doc = json.loads(path.read_text())
    doc["payload"]["aside"] = str(tmp_path / "outside" / "aside")
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"names aside .* it was edited; nothing was moved"):
        finish_interrupted(open_location(ck.location))
    assert ck.root.exists() and not (tmp_path / "outside").exists()


@pytest.mark.parametrize("files", [{"../x": '{"orders":{"0":50}}'}, {"0": '{"orders":{"0":-2}}'}, ["0"]])
def test_a_reset_journal_with_edited_source_files_is_refused_and_nothing_moves(tmp_path, files):
    ck, _ = _journaled_reset(tmp_path)
    path = tmp_path / "ck.operation.json"
    doc = json.loads(path.read_text())
    doc["payload"]["source_files"] = files
    path.write_text(json.dumps(doc))
    before = (tmp_path / "ck.lifecycle.json").read_text()
    with pytest.raises(UserError, match=r"unreadable source_files .* it was edited; nothing was moved"):
        finish_interrupted(open_location(ck.location))
    assert ck.root.exists() and not (tmp_path / "x").exists()
    assert (tmp_path / "ck.lifecycle.json").read_text() == before


def test_a_reset_killed_after_the_move_writes_the_start_files_when_finished(tmp_path):
    ck, loc = _journaled_reset(tmp_path)
    path = tmp_path / "ck.operation.json"
    doc = json.loads(path.read_text())
    doc["payload"]["source_files"] = {"0": '{"orders":{"0":50,"1":50}}'}
    path.write_text(json.dumps(doc))
    journal = Journal.load(loc)
    for step in ("record", "sink"):
        journal.mark(step)
    os.rename(ck.root, ck.location + ".reset-20260101T000000Z-abcdef")
    journal.mark("aside")                                   # killed at reset.moved
    assert finish_interrupted(open_location(ck.location))["op"] == "reset"
    assert (ck.root / "sources/0/0").read_bytes() == b'\x00v1\n{"orders":{"0":50,"1":50}}'
    assert not (tmp_path / "ck.operation.json").exists()
