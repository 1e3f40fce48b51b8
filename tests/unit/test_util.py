"""The leaf helpers every layer shares: the on-disk time formats and the one lock file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.text import iso_millis, iso_seconds, one_line, utc_display
from airflow_kafka_spark.errors import ExitCode, OperationBlocked, UserError
from airflow_kafka_spark.lifecycle.events import DriverKind, LifecycleEvent

MS = 1_763_939_291_123   # 2025-11-23T23:08:11.123Z


def test_time_formats_are_the_ones_already_on_disk():
    # the expressions the pre-issue-9 modules used, so manifests, records and reports keep their shape
    dt = datetime.fromtimestamp(MS / 1000, tz=UTC)
    assert iso_millis(MS) == dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" == "2025-11-23T23:08:11.123Z"
    assert iso_seconds(MS) == dt.strftime("%Y-%m-%dT%H:%M:%SZ") == "2025-11-23T23:08:11Z"
    assert utc_display(MS) == "2025-11-23 23:08:11 UTC" and utc_display(None) == "-"
    assert iso_seconds().endswith("Z") and len(iso_seconds()) == 20


def test_one_line_flattens_and_bounds_a_message():
    assert one_line(ValueError("a\n  b")) == "a b"
    assert one_line(ValueError("")) == "ValueError"
    assert one_line(ValueError("x" * 300)) == "x" * 200 + "…"


def test_enums_keep_the_strings_and_numbers_users_already_have():
    assert [k.value for k in DriverKind] == ["local-pid", "yarn", "k8s", "standalone"]
    assert LifecycleEvent.LEASE_ACQUIRED == "lease_acquired"
    assert str(LifecycleEvent.CHECKPOINT_RESET) == "checkpoint_reset"
    assert (ExitCode.OK, ExitCode.USER_ERROR, ExitCode.BLOCKED, ExitCode.INTERRUPTED) == (0, 2, 3, 130)
    assert UserError("x").exit_code == 2 and OperationBlocked("x").exit_code == 3


def test_a_refusal_carries_a_typed_reason_and_keeps_the_code_json_prints():
    from airflow_kafka_spark.errors import BlockReason
    from airflow_kafka_spark.lifecycle.journal import INTERRUPTED_OPERATION, STALE_INTERRUPTED_OPERATION

    assert OperationBlocked("x", reason=BlockReason.ALREADY_RUNNING).code == "ALREADY_RUNNING"
    assert OperationBlocked("x", code="QUERY_RUNNING").reason is BlockReason.QUERY_RUNNING   # callers passing a code
    plan = OperationBlocked("x", reason=BlockReason.PLAN_BLOCKED, code="OFFSETS_AHEAD")
    assert (plan.reason, plan.code) == (BlockReason.PLAN_BLOCKED, "OFFSETS_AHEAD")
    assert OperationBlocked("x", code="OFFSETS_AHEAD").reason is BlockReason.PLAN_BLOCKED     # a finding's code
    assert (OperationBlocked("x").reason, OperationBlocked("x").code) == (BlockReason.PLAN_BLOCKED, "BLOCKED")
    # the journal's finding codes and the refusals' --json codes are the same strings
    assert (INTERRUPTED_OPERATION, STALE_INTERRUPTED_OPERATION) == (BlockReason.INTERRUPTED_OPERATION,
                                                                    BlockReason.STALE_INTERRUPTED_OPERATION)


def _lock(tmp_path, **kw) -> LockFile:
    return LockFile(open_location(str(tmp_path / "x.lock")), what="thing", **kw)


def test_lock_is_exclusive_and_names_its_holder(tmp_path):
    with _lock(tmp_path), pytest.raises(UserError) as info, _lock(tmp_path, timeout=0.2):
        pass
    msg = str(info.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}" in msg and "delete the lock file" in msg
    assert "\n" not in msg
    assert not (tmp_path / "x.lock").exists()   # released on exit


def test_lock_left_by_a_dead_process_is_broken(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "x.lock").write_text(f"{socket.gethostname()} {dead.pid} beef {int(time.time() * 1000)}")
    with _lock(tmp_path, timeout=1.0) as held:
        assert (tmp_path / "x.lock").read_text() == held.token


@pytest.mark.parametrize(("age_s", "stale_after_s", "broken"), [(120, 60.0, True), (120, 6 * 3600.0, False)])
def test_a_live_holder_is_waited_for_until_the_caller_stale_limit(tmp_path, age_s, stale_after_s, broken):
    # a lifecycle record breaks a lock older than a minute; an operation lock waits hours
    created = int((time.time() - age_s) * 1000)
    (tmp_path / "x.lock").write_text(f"{socket.gethostname()} {os.getpid()} cafe {created}")
    if broken:
        with _lock(tmp_path, timeout=0.5, stale_after_s=stale_after_s):
            pass
    else:
        with pytest.raises(UserError, match="locked by"), _lock(tmp_path, timeout=0.2, stale_after_s=stale_after_s):
            pass


@pytest.mark.parametrize(("age_s", "waits_s"), [(60, 0.0), (2, 1.0)])
def test_an_empty_lock_file_is_stale_after_a_short_grace(tmp_path, monkeypatch, age_s, waits_s):
    """A create whose token never landed (a kill between create and write; on HDFS a create cut off by an
    outage, found by tests/cluster/test_store_restart.py) names no owner: broken after a grace, not 6 hours —
    and a caller whose timeout is shorter than the grace waits it out rather than failing (the YARN soak's
    retried ``stop`` gave up on such a record lock after 10 s)."""
    from airflow_kafka_spark._util import lock as lock_module

    monkeypatch.setattr(lock_module, "EMPTY_STALE_AFTER_S", 3.0)
    lock = tmp_path / "x.lock"
    lock.write_bytes(b"")
    os.utime(lock, (time.time() - age_s, time.time() - age_s))
    t0 = time.monotonic()
    with _lock(tmp_path, timeout=0.2) as held:
        assert lock.read_text() == held.token
    took = time.monotonic() - t0
    assert waits_s - 0.3 <= took <= waits_s + 1.5, took
