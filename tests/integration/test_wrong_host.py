"""A client/local-mode driver checked from another host fails at once, with the fix in one line.

The other host is real as far as the product can tell: a child process in its own UTS namespace
(``unshare --uts``, root only) whose hostname differs from the one recorded with the driver. There
the deferred health gate's trigger must end FAILED at its first look (not wait for its deadline and
roll back a deploy that may be healthy), and a stop must refuse before it writes the stop marker.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from airflow_kafka_spark.lifecycle.events import DriverKind

pytestmark = pytest.mark.integration

SCRIPT = r"""
import asyncio, json, sys, time
from airflow_kafka_spark.lifecycle.model import DriverInfo
from airflow_kafka_spark.runtime import drivers
from airflow_kafka_spark.triggers.health import StreamingHealthTrigger

drv, ck = json.loads(sys.argv[1]), sys.argv[2]
trigger = StreamingHealthTrigger(checkpoint=ck, topics=["t"], kafka_conn_id="kafka_default", min_batches=1,
                                 baseline_batch=None, baseline_query_id=None, driver=drv,
                                 deadline_epoch_s=time.time() + 600, poll_interval_s=5)

async def first():
    async for event in trigger.run():
        return event.payload

t0 = time.monotonic()
out = {"event": asyncio.run(first()), "gate_s": time.monotonic() - t0}
ctl = drivers.control(DriverInfo(**drv))
try:
    drivers.stop(ck, ck + ".stop", is_alive=ctl.is_alive, kill=ctl.kill, timeout_s=600)
    out["stop"] = "no error"
except drivers.WrongHost as exc:
    out["stop"] = str(exc)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux unshare is not installed")
def test_gate_and_stop_of_a_local_driver_from_another_hostname_fail_at_once(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test needs root for a UTS namespace (unshare --uts)")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        driver = {"kind": DriverKind.LOCAL.value, "id": str(proc.pid), "host": socket.gethostname(),
                  "started_at": int(time.time() * 1000)}
        checkpoint = tmp_path / "ckpt"
        checkpoint.mkdir()
        env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home")}
        started = time.monotonic()
        run = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname elsewhere-host && exec "$0" "$@"',
                              sys.executable, "-c", SCRIPT, json.dumps(driver), str(checkpoint)],
                             capture_output=True, text=True, timeout=120, env=env)
        took = time.monotonic() - started
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
        assert line, run.stdout[-2000:] + run.stderr[-3000:]
        out = json.loads(line[len("RESULT "):])
        event = out["event"]
        assert event["state"] == "failed" and event.get("wrong_host"), event
        assert f"on host {socket.gethostname()}" in event["reason"] and "from elsewhere-host" in event["reason"]
        assert "use cluster deploy mode" in event["reason"] and "on the submitting host" in event["reason"]
        assert "\n" not in event["reason"]
        # its first look comes one poll interval (5 s) after the worker's (triggers/_pace.py), not its deadline (600 s)
        assert out["gate_s"] < 10, f"the gate should fail at its first look, took {out['gate_s']:.1f}s"
        assert "use cluster deploy mode" in out["stop"], out["stop"]
        assert not (tmp_path / "ckpt.stop").exists(), "a refused stop must not write the stop marker"
        assert proc.poll() is None, "the driver must be left alone"
        assert took < 60
    finally:
        proc.kill()
        proc.wait()
