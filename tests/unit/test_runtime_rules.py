"""The runtime's pure rules without Airflow: the safe-restart decision as a typed value, driver control by kind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.events import DriverKind
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.ops.modes import ResetMode
from airflow_kafka_spark.runtime import drivers
from airflow_kafka_spark.runtime.safe_restart import (
    RestartAction,
    RestartDecision,
    RestartMode,
    decide,
    unchanged_since_backup,
)


def test_auto_mode_resets_with_preserve_only_when_the_compatibility_version_changed():
    bumped = decide("auto", registry_compat="2", recorded_compat="1")
    assert isinstance(bumped, RestartDecision)
    assert (bumped.action, bumped.reset_mode, bumped.tolerate_block) == (RestartAction.RESET, ResetMode.PRESERVE, True)
    same = decide("auto", registry_compat="2", recorded_compat="2")
    assert (same.action, same.reset_mode, same.tolerate_block) == (RestartAction.KEEP, None, False)
    assert decide("auto", registry_compat="2", recorded_compat=None).action is RestartAction.KEEP


def test_every_reset_mode_maps_to_a_reset_mode_of_the_reset_command():
    for mode in RestartMode:
        if not mode.startswith("reset-"):
            continue
        when = "2026-01-31T12:00:00Z" if mode is RestartMode.RESET_TO_DATETIME else None
        d = decide(mode, registry_compat="1", recorded_compat="1", when=when)
        assert d.action is RestartAction.RESET and d.reset_mode == ResetMode(mode.removeprefix("reset-"))


def test_the_plan_json_keeps_its_shape_and_plain_strings():
    doc = decide("restore", registry_compat="1", recorded_compat="1",
                 backup_id="20260131T120000000Z-b4-aa").to_dict()
    assert list(doc) == ["action", "reset_mode", "restore_backup_id", "to_datetime", "why", "tolerate_block", "probe"]
    assert type(doc["action"]) is str and doc["action"] == "restore" and doc["tolerate_block"] is True


@pytest.mark.parametrize("kw", [dict(mode="nuke"), dict(mode="restore"), dict(mode="restore", backup_id="../x"),
                                dict(mode="reset-to-datetime"), dict(mode="reset-to-datetime", when="yesterday")])
def test_bad_modes_and_arguments_are_one_line_errors(kw):
    mode = kw.pop("mode")
    with pytest.raises(UserError) as info:
        decide(mode, registry_compat="1", recorded_compat="1", **kw)
    assert "\n" not in str(info.value)


def test_unchanged_since_backup_counts_pending_starting_offsets_as_a_change():
    now = {"query_id": "q", "last_committed_batch": 4, "last_planned_batch": 5}
    kw = dict(query_id="q", last_committed_batch=4, pending_batch=5)
    assert unchanged_since_backup(now, **kw, next_starting_offsets=False)
    assert not unchanged_since_backup(now, **kw, next_starting_offsets=True)
    assert not unchanged_since_backup({**now, "query_id": "other"}, **kw, next_starting_offsets=False)


def test_local_driver_control_sees_a_process_end_and_a_cluster_driver_needs_its_master():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        info = DriverInfo(kind=DriverKind.LOCAL.value, id=str(proc.pid), host=socket.gethostname())
        ctl = drivers.control(info)
        assert ctl.is_alive()
        ctl.kill()
        proc.wait(timeout=10)
        assert not ctl.is_alive()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    with pytest.raises(UserError, match="no cluster endpoint was recorded"):
        drivers.control(DriverInfo(kind="yarn", id="application_1_2"))
