"""The compatibility probe's pure parts: the staged copy, the classification of Spark's answer, ``auto``'s use of it.

The answers themselves are checked against real Spark in tests/integration/test_probe.py; the
error texts below are the ones Spark 4.2 printed there (and Spark 3.5's legacy schema exception).
"""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark.runtime import safe_restart
from airflow_kafka_spark.runtime.probe import (
    PROBE_PREFIX,
    SOURCE_COUNT_CHANGED,
    ProbeAnswer,
    ProbeResult,
    classify,
    stage_checkpoint,
)
from tests.support.checkpoint_factory import write_checkpoint

ACK = PROBE_PREFIX + json.dumps({"event": "sink", "sink": "noop", "trigger": "once"})


def _result(ok: bool, error: str = "") -> str:
    return PROBE_PREFIX + json.dumps({"event": "result", "ok": ok, "error": error})


def test_staged_copy_gets_an_empty_pending_batch_and_leaves_the_checkpoint_alone(tmp_path):
    write_checkpoint(tmp_path / "ck", batches=3, state=True)
    before = {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*") if p.is_file()}
    staged = stage_checkpoint(str(tmp_path / "ck"), str(tmp_path / "copy"))
    assert staged is not None and staged.batch == 3 and staged.empty_batch
    assert (tmp_path / "copy" / "offsets" / "3").read_bytes() == (tmp_path / "ck" / "offsets" / "2").read_bytes()
    assert not (tmp_path / "copy" / "commits" / "3").exists()
    assert staged.operators == ("0:stateStoreSave",)
    assert {p: p.read_bytes() for p in (tmp_path / "ck").rglob("*") if p.is_file()} == before


def test_staged_copy_replays_a_pending_batch_as_it_is(tmp_path):
    write_checkpoint(tmp_path / "ck", batches=2, pending=True)
    staged = stage_checkpoint(str(tmp_path / "ck"), str(tmp_path / "copy"))
    assert staged is not None and staged.batch == 2 and not staged.empty_batch
    assert (tmp_path / "copy" / "offsets" / "2").read_bytes() == (tmp_path / "ck" / "offsets" / "2").read_bytes()


def test_a_checkpoint_without_batches_needs_no_shadow_start(tmp_path):
    (tmp_path / "ck").mkdir()
    assert stage_checkpoint(str(tmp_path / "ck"), str(tmp_path / "copy")) is None


@pytest.mark.parametrize(("error", "answer", "error_class"), [
    ("[STREAM_FAILED] Query terminated with exception: [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value "
     "schema does not match existing state value schema.", ProbeAnswer.BREAKING,
     "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
    ("[STREAM_FAILED] ... [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema", ProbeAnswer.BREAKING,
     "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"),
    ("[STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY] Cannot restart streaming query",
     ProbeAnswer.BREAKING, "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY"),
    ("[STREAM_FAILED] ... terminated with exception: assertion failed: There are [1] sources in the checkpoint "
     "offsets and now there are [2] sources requested by the query. Cannot continue.", ProbeAnswer.BREAKING,
     SOURCE_COUNT_CHANGED),
    ("StateSchemaNotCompatible: Provided schema doesn't match to the schema for existing state!",
     ProbeAnswer.BREAKING, "StateSchemaNotCompatible"),
    ("org.apache.spark.sql.execution.streaming.state.InvalidUnsafeRowException: The streaming query failed by "
     "state format invalidation.", ProbeAnswer.BREAKING, "InvalidUnsafeRowException"),
    ("[STREAM_FAILED] ... [KAFKA_DATA_LOSS.START_OFFSET_RESET] Some data may have been lost", ProbeAnswer.UNKNOWN,
     "KAFKA_DATA_LOSS.START_OFFSET_RESET"),
    ("java.net.ConnectException: Connection refused", ProbeAnswer.UNKNOWN, None),
])
def test_spark_errors_are_classified(error, answer, error_class):
    got, reason, cls = classify(1, "\n".join([ACK, "log line", _result(False, error)]), timeout_s=60)
    assert (got, cls) == (answer, error_class)
    assert reason


def test_compatible_only_when_the_batch_ran_and_the_sink_was_swapped():
    assert classify(0, "\n".join([ACK, _result(True)]), timeout_s=60)[0] is ProbeAnswer.COMPATIBLE
    # exit 0 without the acknowledgement: the application may have written to its real sink
    answer, reason, _ = classify(0, "some output", timeout_s=60)
    assert answer is ProbeAnswer.UNKNOWN and "acknowledging --aks-probe" in reason
    answer, reason, _ = classify(2, "error: unrecognized arguments: --aks-probe", timeout_s=60)
    assert answer is ProbeAnswer.UNKNOWN and "does not know --aks-probe" in reason
    answer, reason, _ = classify(None, ACK, timeout_s=60)
    assert answer is ProbeAnswer.UNKNOWN and "within 60s" in reason


def _probe(answer: ProbeAnswer) -> ProbeResult:
    return ProbeResult(answer, f"{answer} for a test", method="shadow-start", error_class="X")


def test_auto_uses_the_probe_and_compatibility_version_overrides_it():
    assert safe_restart.wants_probe("auto", enabled=True, registry_compat="1", recorded_compat="1")
    assert safe_restart.wants_probe("auto", enabled=True, registry_compat="1", recorded_compat=None)
    assert not safe_restart.wants_probe("auto", enabled=False, registry_compat="1", recorded_compat="1")
    assert not safe_restart.wants_probe("auto", enabled=True, registry_compat="2", recorded_compat="1")
    assert not safe_restart.wants_probe("keep", enabled=True, registry_compat="1", recorded_compat="1")

    breaking = safe_restart.decide("auto", registry_compat="1", recorded_compat="1",
                                   probe=_probe(ProbeAnswer.BREAKING))
    assert breaking.action is safe_restart.RestartAction.RESET and breaking.reset_mode == "preserve"
    assert "compatibility probe says checkpoint-breaking" in breaking.why
    assert breaking.to_dict()["probe"]["answer"] == "breaking"
    kept = safe_restart.decide("auto", registry_compat="1", recorded_compat="1", probe=_probe(ProbeAnswer.COMPATIBLE))
    assert kept.action is safe_restart.RestartAction.KEEP and "probe" in kept.why
    from airflow_kafka_spark.errors import BlockReason, ExitCode, OperationBlocked

    with pytest.raises(OperationBlocked) as unknown:     # the run stops before anything changes, and says why
        safe_restart.decide("auto", registry_compat="1", recorded_compat="1", probe=_probe(ProbeAnswer.UNKNOWN))
    assert unknown.value.reason is BlockReason.COMPATIBILITY_UNKNOWN and unknown.value.exit_code == ExitCode.BLOCKED
    assert "nothing was changed" in str(unknown.value) and "mode keep" in str(unknown.value)
    bumped = safe_restart.decide("auto", registry_compat="2", recorded_compat="1", probe=_probe(ProbeAnswer.COMPATIBLE))
    assert bumped.action is safe_restart.RestartAction.RESET and "compatibility_version changed" in bumped.why


# --- the agent probe (users' unchanged applications): the report is the evidence ----------------------

def _report(*, status="stopped_by_agent", committed=3, exception=None, replaced=True, refused=(),
            copy="/s/checkpoint", query_ck="file:/s/checkpoint"):
    return {"probe": {"copy": copy, "root": "/s", "refused": list(refused),
                      "rewritten": [{"name": "orders", "sink_was": "ForeachBatchSink", "sink": "noop",
                                     "checkpoint_given": "file:/real/ck", "checkpoint_used": "file:" + copy}]},
            "queries": [{"name": "orders", "checkpoint": query_ck, "status": status, "exception": exception,
                         "probe_sink_replaced": replaced,
                         "at_end": {"last_offsets_batch": 3, "last_committed_batch": committed}}]}


@pytest.mark.parametrize(("report", "code", "answer", "error_class", "reason"), [
    (_report(), 0, ProbeAnswer.COMPATIBLE, None, "batch 3 committed"),
    (_report(status="failed", committed=2, exception="org.apache.spark.sql.streaming.StreamingQueryException: "
             "[STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY] Cannot restart"), 1, ProbeAnswer.BREAKING,
     "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY", "Spark refused"),
    (_report(status="failed", committed=2, exception="[KAFKA_UNREACHABLE] no broker"), 1, ProbeAnswer.UNKNOWN,
     "KAFKA_UNREACHABLE", "not about the checkpoint"),
    (_report(committed=2), 0, ProbeAnswer.UNKNOWN, None, "without committing batch 3"),
    (_report(replaced=False), 0, ProbeAnswer.UNKNOWN, None, "without proof"),
    (_report(refused=[{"what": "sink_not_replaced", "query": "orders"}]), 86, ProbeAnswer.UNKNOWN, None,
     "could not replace the sink of query orders"),
    (_report(refused=[{"what": "createAtomic", "path": "/real/ck/offsets/4"}]), 1, ProbeAnswer.UNKNOWN, None,
     "refused to createAtomic /real/ck/offsets/4"),
    (_report(refused=[{"what": "mkdirs", "path": "/real/out/_spark_metadata"}]), 0, ProbeAnswer.COMPATIBLE, None,
     "committed"),
    (_report(copy="/other/checkpoint"), 0, ProbeAnswer.UNKNOWN, None, "no query of the application was moved"),
    (None, 1, ProbeAnswer.UNKNOWN, None, "no probe report"),
    ({"queries": []}, 0, ProbeAnswer.UNKNOWN, None, "no probe report"),
])
def test_agent_probe_answers_only_on_the_agents_evidence(report, code, answer, error_class, reason):
    from airflow_kafka_spark.runtime import probe_agent
    from airflow_kafka_spark.runtime.probe import classify_agent

    verdict = probe_agent.judge(code, report, "/s/checkpoint", 3)
    got = classify_agent(code, verdict, "", timeout_s=60)
    assert got[0] is answer and got[2] == error_class and reason in got[1], got


def test_agent_probe_timeout_is_unknown():
    from airflow_kafka_spark.runtime import probe_agent
    from airflow_kafka_spark.runtime.probe import classify_agent

    got = classify_agent(None, probe_agent.judge(None, _report(), "/s/checkpoint", 3), "", timeout_s=60)
    assert got[0] is ProbeAnswer.UNKNOWN and "within 60s" in got[1]


def test_spark35_missing_delta_file_is_breaking_only_for_an_operator_without_state():
    """Spark 3.5 has no class for a new stateful operator: the first batch fails reading its delta file."""
    from airflow_kafka_spark.runtime import probe_agent
    from airflow_kafka_spark.runtime.probe import STATE_MISSING, classify_agent

    text = ("[STREAM_FAILED] Query [id = a, runId = b] terminated with exception: Error reading delta file "
            "file:/s/checkpoint/state/0/1/2.delta of HDFSStateStoreProvider[id = (op=0,part=1),dir = "
            "file:/s/checkpoint/state/0/1]: file:/s/checkpoint/state/0/1/2.delta does not exist")
    verdict = probe_agent.judge(1, _report(status="failed", committed=2, exception=text), "/s/checkpoint", 3)
    new_op = classify_agent(1, verdict, "", timeout_s=60, state_dirs=frozenset())
    assert new_op[0] is ProbeAnswer.BREAKING and new_op[2] == STATE_MISSING
    damaged = classify_agent(1, verdict, "", timeout_s=60, state_dirs=frozenset({"0"}))
    assert damaged[0] is ProbeAnswer.UNKNOWN
