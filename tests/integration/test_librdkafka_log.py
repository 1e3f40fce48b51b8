"""librdkafka's own log lines (``%4|<time>|GETPID|...``) never reach a terminal: every client is built with
its ``logger`` routed to Python logging (``kafka.client.with_log``). Real broker, a bootstrap address that
refuses connections for a few seconds (a broker restarting), real processes whose stderr is read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import write_checkpoint
from tests.support.proxy import LateProxy

pytestmark = pytest.mark.integration

AKS = Path(sys.executable).with_name("aks")
RDKAFKA_LINE = re.compile(r"^%\d\|", re.MULTILINE)   # librdkafka's default stderr logger: %<level>|<time>|<fac>|


def test_the_demo_producer_keeps_librdkafka_off_the_terminal_while_the_broker_is_away(broker, topic_name):
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    with LateProxy(broker.bootstrap_servers, delay_s=3.0) as proxy:
        code = ("import sys; from devstack.produce import produce; "
                f"print(len(produce('127.0.0.1:{proxy.port}', {topic_name!r}, 20, partitions=2)))")
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                             cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0 and res.stdout.strip() == "20", (res.stdout, res.stderr)   # delivered once it answered
    assert not RDKAFKA_LINE.search(res.stderr), res.stderr


def test_the_cli_keeps_librdkafka_off_the_terminal_while_the_broker_is_away(broker, topic_name, tmp_path):
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 60, partitions=2)   # 20 past the checkpoint
    ck = write_checkpoint(tmp_path / "ck", batches=2, sources=({topic_name: 2},), records_per_batch=10,
                          start_timestamp_ms=int(time.time() * 1000) - 2000)
    with LateProxy(broker.bootstrap_servers, delay_s=3.0) as proxy:
        res = subprocess.run([str(AKS), "lag", "--checkpoint", ck.location, "--bootstrap-servers",
                              f"127.0.0.1:{proxy.port}", "--timeout", "20", "--json"],
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.stdout, res.stderr)
    assert json.loads(res.stdout)["lag_records"] == 20, res.stdout   # it waited for the broker and measured
    assert not RDKAFKA_LINE.search(res.stderr), res.stderr
