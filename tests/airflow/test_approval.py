"""The safe restart's human approval through Airflow's REST API: rejected changes nothing; approved resets.

Real components: the broker, a checkpoint in Spark's format (tests/support/checkpoint_factory)
whose offsets are the broker's, this session's Airflow DB, ``dag.test()`` of the DAG from the dags
folder in this process (it runs the tasks and keeps the run alive while the approval task waits
in ``awaiting_input``), and a real ``airflow api-server`` on the same DB through which a person
answers: ``GET .../hitlDetails?response_received=false`` then ``PATCH
.../taskInstances/approve/-1/hitlDetails``, as the "Required actions" page does. The answer comes
from a thread while ``dag.test()`` runs.

Spark only where the approved reset is followed by its submit (the reset runs in the ``submit`` task):
the reference job starts on the reset checkpoint, and the run marks ``health_gate`` successful
without running it (``mark_success_pattern``): what is tested is the approval and the reset.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.runtime import drivers
from devstack import topics
from devstack.airflow_services import AirflowServices, sync_dags_folder
from devstack.produce import produce
from tests.airflow.conftest import TIMINGS
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn, write_registry
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.dag_runs import RunResult, collect
from tests.support.kafka import end_offsets

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

DAG_ID = "streaming_safe_restart"
JOB = "ledger"
PARTITIONS = 2


def tree(root: Path) -> dict[str, str]:
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


class Responder(threading.Thread):
    """Answers the first unanswered approval of the DAG through the REST API, as a person would.

    A request that fails in transit (the api-server slow or restarting on a loaded machine) is asked again
    until the deadline. A responder that gives up fails the waiting task in the metadata DB: ``dag.test()``
    keeps a run whose task awaits input alive for ever, and its DAG parse cancels pytest-timeout's alarm
    (SIGALRM), so without this a lost answer held CI's shard until its 50-minute limit (session 28's CI).
    """

    def __init__(self, client: Any, option: str, params: dict[str, Any], timeout: float = 240) -> None:
        super().__init__(daemon=True)
        self.client, self.option, self.params, self.timeout = client, option, params, timeout
        self.asked: dict[str, Any] | None = None
        self.answer: dict[str, Any] | None = None
        self.error: str | None = None

    def run(self) -> None:
        import httpx

        deadline = time.monotonic() + self.timeout
        last = "no approval was asked for"
        while time.monotonic() < deadline and self.answer is None:
            try:
                self._answer_once()
            except (httpx.TransportError, _ServerError) as exc:   # asked again until the deadline
                last = repr(exc)
            except Exception as exc:   # reported by the test
                last = repr(exc)
                break
            if self.answer is None:
                time.sleep(1)
        if self.answer is None:
            self.error = last
            _fail_awaiting_input(DAG_ID)

    def _answer_once(self) -> None:
        r = self.client.get(f"/api/v2/dags/{DAG_ID}/dagRuns/~/hitlDetails", params={"response_received": "false"})
        if r.status_code >= 500:
            raise _ServerError(f"{r.status_code}: {r.text[:200]}")
        r.raise_for_status()
        found = list(r.json()["hitl_details"])
        if not found:
            return
        self.asked = found[0]
        ti = self.asked["task_instance"]
        resp = self.client.patch(
            f"/api/v2/dags/{DAG_ID}/dagRuns/{ti['dag_run_id']}/taskInstances/{ti['task_id']}/-1/hitlDetails",
            json={"chosen_options": [self.option], "params_input": self.params})
        if resp.status_code >= 500:
            raise _ServerError(f"{resp.status_code}: {resp.text[:200]}")
        assert resp.status_code == 200, resp.text
        self.answer = resp.json()


class _ServerError(Exception):
    """The api-server answered 5xx: asked again."""


def _fail_awaiting_input(dag_id: str) -> None:
    """Fail every task of ``dag_id`` that awaits input, so that ``dag.test()`` ends the run instead of waiting."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    with create_session() as session:
        for ti in session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id,
                                                     TaskInstance.state == TaskInstanceState.AWAITING_INPUT):
            ti.state = TaskInstanceState.FAILED


@pytest.fixture(scope="module")
def stack(broker, airflow_home, tmp_path_factory):
    base = tmp_path_factory.mktemp("aks-approval")
    data = base / "data"
    topic = f"ledger-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, PARTITIONS)
    produce(broker.bootstrap_servers, topic, 200, partitions=PARTITIONS)
    registry = write_registry(base / "streaming_jobs.yaml", [{"name": JOB, "topics": [topic]}])
    ck = data / "checkpoints" / JOB
    write_checkpoint(ck, batches=3, sources=({topic: PARTITIONS},), records_per_batch=10,
                     start_timestamp_ms=int(time.time() * 1000) - 60_000)          # committed 30 per partition
    mp = pytest.MonkeyPatch()
    mp.setenv("AKS_DATA_DIR", str(data))
    mp.setenv("AKS_JOB_REGISTRY", str(registry))
    mp.setenv("AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL", "0")
    mp.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_conn(broker.bootstrap_servers))
    mp.setenv("AIRFLOW_CONN_SPARK_DEFAULT", SPARK_LOCAL_CONN)
    sync_dags_folder(DAG_ID)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()
    services = AirflowServices(airflow_home, base)
    try:
        TIMINGS["approval: api-server start"] = services.start_api_server()
        client = services.client()
        yield {"dag": bag.get_dag(DAG_ID), "client": client, "checkpoint": ck, "backups": data / "backups",
               "topic": topic, "bootstrap": broker.bootstrap_servers}
        client.close()
    finally:
        rec = LifecycleRecord.load(str(ck))
        if rec is not None and rec.driver is not None:   # the approved run's driver
            drivers.kill_local(rec.driver, grace_s=5)
        services.stop()
        mp.undo()


def run_answered(stack: dict[str, Any], option: str, comment: str, what: str,
                 max_records_skipped: int | None = None) -> tuple[RunResult, Responder]:
    conf = {"job": JOB, "mode": "reset-latest", "backup_id": None, "datetime": None, "dry_run": False,
            "accept_data_loss": False, "reason": f"test {what}"}
    responder = Responder(stack["client"], option, {"comment": comment, "max_records_skipped": max_records_skipped})
    responder.start()
    started = time.perf_counter()
    dr = stack["dag"].test(run_conf=conf, mark_success_pattern="health_gate")
    result = collect(DAG_ID, dr.run_id, dr.state, time.perf_counter() - started)
    TIMINGS[f"approval: {what}"] = result.seconds
    responder.join(10)
    assert responder.error is None and responder.answer is not None, responder.error
    return result, responder


def audits(ck: Path) -> list[dict[str, Any]]:
    rec = LifecycleRecord.load(str(ck))
    assert rec is not None
    return [e for e in rec.history if e["event"] == "safe_restart"]


def test_rejected_changes_nothing_and_the_audit_names_who_rejected(stack):
    ck, backups = stack["checkpoint"], stack["backups"]
    before = tree(ck), tree(backups)
    skipped = sum(end_offsets(stack["bootstrap"], stack["topic"], PARTITIONS).values()) - 2 * 30
    r, responder = run_answered(stack, "Reject", "not during the month-end close", "rejected")
    # What the person was shown: the core's plan numbers (30 committed per partition, the rest skipped).
    assert f"**{skipped:,}**" in responder.asked["body"] and "records skipped" in responder.asked["body"]
    assert r.state == "success", r.states
    assert r.states["approve"] == "success"
    for step in ("stop", "submit", "health_gate", "rollback"):
        assert r.states[step] == "skipped", (step, r.states)
    assert (tree(ck), tree(backups)) == before                   # checkpoint and backups byte for byte
    rec = LifecycleRecord.load(str(ck))
    assert rec.next_starting_offsets is None
    (entry,) = audits(ck)
    audit = entry["details"]
    assert audit["outcome"] == "REJECTED"
    user = stack["client"].user
    assert audit["approval"]["decision"] == "rejected" and audit["approval"]["by"] == user
    assert audit["approval"]["comment"] == "not during the month-end close"
    assert audit["approval"]["shown"]["skipped"] == skipped and "DATA_LOSS" in audit["approval"]["shown"]["codes"]
    assert audit["backup_id"] is None and audit["reset"] is None


def test_a_plan_that_grew_past_the_approved_bound_is_refused_after_the_stop(stack):
    """The approver allowed 10 records; the reset, planned again after the stop, would skip more:
    it changes nothing (the backup step's pre-change backup is the only new file), the run fails."""
    ck = stack["checkpoint"]
    before = tree(ck)
    r, _ = run_answered(stack, "Approve", "only a few", "approved, bound exceeded", max_records_skipped=10)
    assert r.state == "failed" and r.states["submit"] == "failed", r.states
    assert "more than the 10 approved; nothing was changed" in r.xcom("submit", "failure")
    assert r.xcom("submit", "verdict") is None                    # refused before the judgement and the submit
    assert r.states["health_gate"] == "upstream_failed" and r.states["rollback"] == "success"
    assert tree(ck) == before
    assert LifecycleRecord.load(str(ck)).next_starting_offsets is None
    audit = audits(ck)[-1]["details"]
    assert audit["outcome"] == "ROLLED_BACK" and audit["approval"]["max_records_skipped"] == 10
    assert audit["approval"]["by"] == stack["client"].user


def test_a_dry_run_shows_what_it_would_ask_and_does_not_pause(stack):
    ck, backups = stack["checkpoint"], stack["backups"]
    before = tree(ck), tree(backups)
    conf = {"job": JOB, "mode": "reset-latest", "backup_id": None, "datetime": None, "dry_run": True,
            "accept_data_loss": False, "reason": "test dry run"}
    started = time.perf_counter()
    dr = stack["dag"].test(run_conf=conf, mark_success_pattern="health_gate")   # no responder: no pause
    r = collect(DAG_ID, dr.run_id, dr.state, time.perf_counter() - started)
    TIMINGS["approval: dry run"] = r.seconds
    assert r.state == "success" and r.states["approve"] == "skipped", r.states
    approval = r.xcom("approve", "approval")
    assert approval["decision"] == "dry run" and approval["request"]["needed"] is True
    assert r.states["submit"] == "success", (r.states, r.xcom("submit", "failure"))
    reset = r.xcom("submit", "reset")
    assert reset["dry_run"] is True and approval["request"]["skipped"] == reset["plan"]["totals"]["skipped"] > 0
    assert (tree(ck), tree(backups)) == before


def test_approved_resets_and_the_audit_names_the_approver(stack):
    ck = stack["checkpoint"]
    r, _ = run_answered(stack, "Approve", "month-end replay not needed", "approved")
    assert r.state == "success", (r.states, r.xcom("finish", "failure"))
    assert r.states["approve"] == "success" and r.states["stop"] == "success" and r.states["submit"] == "success"
    reset = r.xcom("submit", "reset")
    ends = end_offsets(stack["bootstrap"], stack["topic"], PARTITIONS)
    skipped = sum(ends.values()) - 2 * 30
    assert reset["plan"]["totals"]["skipped"] == skipped and reset["backup_id"]
    assert json.loads(reset["starting_offsets"]) == {stack["topic"]: {str(p): o for p, o in ends.items()}}
    assert Path(reset["aside_location"].removeprefix("file://")).exists()   # the old checkpoint, kept
    approval = r.xcom("approve", "approval")
    assert approval["decision"] == "approved" and approval["max_records_skipped"] == skipped + 1000
    entry = audits(ck)[-1]
    audit = entry["details"]
    assert audit["outcome"] == "SUCCESS"
    assert audit["approval"]["by"] == stack["client"].user and audit["approval"]["decision"] == "approved"
    assert audit["approval"]["comment"] == "month-end replay not needed"
    assert audit["reset"]["backup_id"] == reset["backup_id"]
    rec = LifecycleRecord.load(str(ck))
    assert rec.next_starting_offsets                              # the new run starts at the log end


def test_an_overridden_block_asks_for_approval_with_its_codes():
    """validate_before's XCom after an override (pure: no run needed)."""
    from airflow_kafka_spark.operators.approval import overridden_codes
    from airflow_kafka_spark.ops.approval import approval_request

    verdict = {"overridden": True, "findings": [
        {"code": "OFFSET_BELOW_LOG_START", "severity": "BLOCK"}, {"code": "BACKLOG", "severity": "INFO"},
        {"code": "OFFSET_BELOW_LOG_START", "severity": "BLOCK"}]}
    assert overridden_codes(verdict) == ["OFFSET_BELOW_LOG_START"]
    assert overridden_codes({**verdict, "overridden": False}) == [] and overridden_codes(None) == []
    request = approval_request(None, idempotent_sink=None, overridden_codes=overridden_codes(verdict))
    assert request.needed and "`OFFSET_BELOW_LOG_START`" in request.body()
