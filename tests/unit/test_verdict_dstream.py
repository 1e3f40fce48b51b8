"""verdict/dstream.py: which build wrote a DStream checkpoint decides whether a deploy may start from it."""

from __future__ import annotations

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.verdict.dstream import (
    DStreamCheckpoint,
    dstream_checkpoint_verdict,
    evaluate_dstream_checkpoint,
    jar_digest,
    read_state,
    record_build,
)
from airflow_kafka_spark.verdict.findings import CODES, Verdict
from airflow_kafka_spark.verdict.group import evaluate_group
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support.verdict_states import broker, tps

FILES = ("checkpoint-1000", "checkpoint-2000")


def verdict(recorded, deploy="b2", files=FILES, moves_aside=False) -> Verdict:
    state = DStreamCheckpoint("/ck", files, recorded, "/apps/job.jar" if recorded else None)
    return Verdict.of(evaluate_dstream_checkpoint(state, deploy, moves_aside=moves_aside))


@pytest.mark.parametrize(("recorded", "files", "aside", "code", "severity"), [
    ("b2", FILES, False, "DSTREAM_CHECKPOINT_SAME_BUILD", "PASS"),
    ("b1", FILES, False, "DSTREAM_CHECKPOINT_OTHER_BUILD", "BLOCK"),
    ("b1", FILES, True, "DSTREAM_CHECKPOINT_OTHER_BUILD", "INFO"),
    (None, FILES, False, "DSTREAM_CHECKPOINT_BUILD_UNKNOWN", "WARN"),
    (None, FILES, True, "DSTREAM_CHECKPOINT_BUILD_UNKNOWN", "INFO"),
    ("b1", (), False, "DSTREAM_CHECKPOINT_NONE", "INFO"),
])
def test_build_decides(recorded, files, aside, code, severity):
    v = verdict(recorded, files=files, moves_aside=aside)
    [f] = v.findings
    assert f.code == code and f.severity == severity and code in CODES
    if code == "DSTREAM_CHECKPOINT_OTHER_BUILD" and not aside:
        assert "InvalidClassException" in f.message and "move the DStream checkpoint aside" in f.fix


def test_recorded_build_round_trip(tmp_path):
    jar1, jar2 = tmp_path / "v1.jar", tmp_path / "v2.jar"
    jar1.write_bytes(b"one build")
    jar2.write_bytes(b"another build")
    ck = tmp_path / "dstream"
    (ck / "checkpoint-2000").parent.mkdir()
    for name in ("checkpoint-2000", "checkpoint-1000.bk", "checkpoint-1000", "receivedBlockMetadata/x"):
        (ck / name).parent.mkdir(exist_ok=True)
        (ck / name).write_bytes(b"\xac\xed")
    assert read_state(str(ck)).recorded_build is None
    assert record_build(str(ck), str(jar1)) == jar_digest(str(jar1))
    state = read_state(str(ck))
    assert state.files == ("checkpoint-1000", "checkpoint-1000.bk", "checkpoint-2000")
    assert state.recorded_application == str(jar1)
    assert dstream_checkpoint_verdict(str(ck), str(jar1)).severity == "PASS"
    assert dstream_checkpoint_verdict(str(ck), str(jar2)).severity == "BLOCK"


def test_missing_jar_is_one_line(tmp_path):
    with pytest.raises(UserError, match="does not exist; build or upload it"):
        jar_digest(str(tmp_path / "nope.jar"))


def test_group_trail_announces_the_records_to_replay():
    """What the restart of a commitAsync job reads again: log end − committed, also in the verdict summary."""
    v = evaluate_group(tps({("t", 0): 40, ("t", 1): 90}), broker({("t", 0): (0, 100), ("t", 1): (0, 90)}),
                       DeployOptions(starting_offsets="earliest"), group_id="g")
    [trail] = v.by_code("GROUP_COMMIT_TRAILS_ONE_BATCH")
    assert trail.numbers["records_to_replay"] == 60 and v.summary["records_to_replay"] == 60
    assert "60 records" in trail.message
