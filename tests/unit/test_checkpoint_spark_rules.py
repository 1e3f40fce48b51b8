"""The checkpoint reader reads by Spark's rules, not stricter, not looser (issue 27).

Each case is a layout Spark's own test suite ships and restarts or refuses (the corpus test,
tests/integration/test_spark_corpus.py, runs those very files); here they are written byte for
byte by the factory so the rule is pinned without Spark: ``sources/<n>/0``'s first byte skipped
whatever it is (Spark 2.1.0 wrote the JSON's length there) and its version checked; a checkpoint
without a ``commits/`` folder (Spark 2.1) judged as Spark restarts it (re-run of the newest batch,
no CHECKPOINT_CORRUPT); a hole in ``offsets/`` never described as batches "planned without being
committed", and its position labelled "missing", not "unreadable".
"""

from __future__ import annotations

import json
import shutil

from airflow_kafka_spark.checkpoint.escaped import ESCAPED_PATH_CONF, legacy_escaped_path
from airflow_kafka_spark.checkpoint.model import CHECKPOINT_CORRUPT, UNSUPPORTED_LOG_VERSION
from airflow_kafka_spark.checkpoint.position import resume_position
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.kafka.offsets import TopicPartition
from tests.support.checkpoint_factory import write_checkpoint

KAFKA_JSON = json.dumps({"orders": {"0": 5, "1": 7}}, separators=(",", ":")).encode()


def codes(state) -> set[tuple[str, str]]:
    return {(p.code, p.path) for p in state.problems}


def test_initial_offsets_first_byte_is_skipped_whatever_it_is(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=0)
    (ck.root / "sources" / "0").mkdir(parents=True, exist_ok=True)
    # Spark 2.1.0: the JSON's length as the first byte, then the JSON without a version line.
    (ck.root / "sources" / "0" / "0").write_bytes(bytes([len(KAFKA_JSON)]) + KAFKA_JSON)
    state = read_checkpoint(str(ck.root))
    assert state.initial_offsets == {"0": {TopicPartition("orders", 0): 5, TopicPartition("orders", 1): 7}}
    assert resume_position(state).label.startswith("sources/<n>/0")


def test_a_future_initial_offsets_version_is_unsupported_not_ignored(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=0)
    (ck.root / "sources" / "0").mkdir(parents=True, exist_ok=True)
    # As Spark's kafka-source-initial-offset-future-version.bin: an ASCII "0", then v99999.
    (ck.root / "sources" / "0" / "0").write_bytes(b"0v99999\n" + KAFKA_JSON)
    state = read_checkpoint(str(ck.root))
    assert (UNSUPPORTED_LOG_VERSION, "sources/0/0") in codes(state)
    assert state.initial_offsets == {}


def test_a_non_kafka_source_log_is_still_not_taken_for_kafka(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=0)
    (ck.root / "sources" / "0").mkdir(parents=True, exist_ok=True)
    (ck.root / "sources" / "0" / "0").write_bytes(b"v1\n1700000000000")      # the rate source's log
    state = read_checkpoint(str(ck.root))
    assert state.initial_offsets == {} and not state.problems


def test_a_checkpoint_without_commit_log_is_read_as_spark_restarts_it(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3, state=True)
    shutil.rmtree(ck.root / "commits")
    state = read_checkpoint(str(ck.root))
    assert not [p for p in state.problems if p.code == CHECKPOINT_CORRUPT], state.problems
    pos = resume_position(state)
    assert pos.known and pos.label == "offsets/1" and pos.pending_batch == 2
    assert pos.start == state.before_latest.kafka_offsets


def test_an_emptied_commit_log_of_a_newer_spark_is_still_damage(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=3)
    for f in (ck.root / "commits").iterdir():
        f.unlink()
    assert (CHECKPOINT_CORRUPT, "commits/0") in codes(read_checkpoint(str(ck.root)))


def test_a_hole_in_offsets_is_a_gap_not_batches_planned_without_commit(tmp_path):
    # Spark's checkpoint-test-offsetId-commitId-inconsistent: offsets 0-2,4, commits 0-2.
    ck = write_checkpoint(tmp_path / "ck", batches=5)
    for rel in ("offsets/3", "commits/3", "commits/4"):
        ck.remove(rel)
    state = read_checkpoint(str(ck.root))
    messages = " ".join(p.message for p in state.problems)
    assert (CHECKPOINT_CORRUPT, "offsets/3") in codes(state)
    assert "planned without being committed" not in messages
    assert "asyncProgressTrackingEnabled" in messages
    assert resume_position(state).label == "missing offsets/3"


def test_a_newer_log_version_is_refused_in_one_line_naming_the_newest_spark_known(tmp_path):
    ck = write_checkpoint(tmp_path / "ck", batches=2, crc=False)
    (ck.root / "commits" / "1").write_bytes(b'v3\n{"nextBatchWatermarkMs":0}')
    problems = [p for p in read_checkpoint(str(ck.root)).problems if p.code == UNSUPPORTED_LOG_VERSION]
    assert [p.path for p in problems] == ["commits/1"]
    assert "log format v3" in problems[0].message and "Spark 4.2.0" in problems[0].message
    assert "\n" not in problems[0].message


def test_spark_210_initial_offsets_under_a_pending_first_batch_are_the_replay_start(tmp_path):
    # Before: "does not start with the 0x00 byte Kafka writes", a BLOCK with the wrong reason.
    ck = write_checkpoint(tmp_path / "ck", batches=0, pending=True, crc=False)
    body = json.dumps({"orders": {"0": 0, "1": 0}}, separators=(",", ":")).encode()
    (ck.root / "sources" / "0" / "0").write_bytes(bytes([len(body)]) + body)
    state = read_checkpoint(str(ck.root))
    assert not state.problems, state.problems
    pos = resume_position(state)
    assert pos.known and pos.pending_batch == 0
    assert pos.start == {TopicPartition("orders", 0): 0, TopicPartition("orders", 1): 0}


def test_without_commit_log_the_batch_before_the_newest_counts_as_processed(tmp_path):
    # Spark 2.1 planned batch L only after finishing L-1; lag and reset preserve count from there,
    # not from sources/<n>/0 (which would replay the whole history).
    ck = write_checkpoint(tmp_path / "ck", batches=3)
    shutil.rmtree(ck.root / "commits")
    state = read_checkpoint(str(ck.root))
    pos = resume_position(state)
    assert state.commit_log_absent and pos.committed_batch == 1
    assert pos.committed == state.before_latest.kafka_offsets != state.initial_offsets["0"]
    assert pos.pending_batch == 2 and pos.committed_label == "offsets/1 (last committed)"


def test_spark_2x_escaped_folder_of_a_special_path_is_found_and_named(tmp_path):
    # The on-disk name is the one in Spark's escaped-path-2.4.0 test checkpoint.
    assert legacy_escaped_path(f"{tmp_path}/chk %@#chk") == f"{tmp_path}/chk%252520%252525@%252523chk"
    assert legacy_escaped_path(f"{tmp_path}/plain_name-1.2") is None
    assert legacy_escaped_path(f"{tmp_path}/donn\u00e9es") is None      # java.net.URI keeps non-ASCII as is
    write_checkpoint(tmp_path / "chk%252520%252525@%252523chk", batches=1)
    state = read_checkpoint(str(tmp_path / "chk %@#chk"))
    assert not state.exists and state.legacy_escaped == f"{tmp_path}/chk%252520%252525@%252523chk"
    [problem] = state.problems
    assert problem.code == "LEGACY_ESCAPED_PATH" and ESCAPED_PATH_CONF in problem.message
    assert not read_checkpoint(str(tmp_path / "chk%252520%252525@%252523chk")).problems
