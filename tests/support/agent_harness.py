"""Running the users' unchanged applications (tests/support/user_jobs) under spark-submit, with or
without the agent, against continuous load, and reading back what their checkpoint says.

Why a harness of its own: the agent's claim is about a real driver process ending by itself on a
batch boundary, so every run here is a real ``spark-submit`` (local master, own process group), the
load is a real producer that keeps Kafka's acknowledgements (the oracle's ground truth), and the
boundary is read from Spark's files (``offsets/`` vs ``commits/``), never from the agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer

from devstack.produce import ProducedRecord
from devstack.spark_runtimes import SparkRuntime

USER_JOBS = Path(__file__).parent / "user_jobs"
PY_JOB = USER_JOBS / "orders_stream.py"
PY_JOB_V2 = USER_JOBS / "orders_stream_v2.py"
JAVA_MAIN = "com.example.orders.OrdersStream"


class ContinuousProducer:
    """Produces ``rate`` records a second, round robin over ``partitions``, until stopped; keeps the acked ones."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 200.0) -> None:
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self.acked: list[ProducedRecord] = []
        self.errors: list[str] = []
        self._next_id = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="continuous-producer", daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        rid = json.loads(msg.value())["id"]
        self.acked.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), rid, msg.timestamp()[1]))

    def _run(self) -> None:
        step = 0.05
        per_step = max(1, round(self.rate * step))
        while not self._stop.is_set():
            for _ in range(per_step):
                i = self._next_id
                self._next_id += 1
                value = json.dumps({"id": i, "p": i % self.partitions, "ts": int(time.time() * 1000)}).encode()
                self.producer.produce(self.topic, value=value, key=str(i % 10).encode(),
                                      partition=i % self.partitions, on_delivery=self._on_delivery)
            self.producer.poll(0)
            time.sleep(step)

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def stop(self) -> list[ProducedRecord]:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(30)
        if self.errors:
            raise AssertionError(f"{len(self.errors)} deliveries failed, e.g. {self.errors[0]}")
        return list(self.acked)


@dataclass
class Driver:
    """One spark-submit driver of a user application (its own process group) and its log."""

    proc: subprocess.Popen
    log: Path
    started: float = field(default_factory=time.monotonic)

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it is still running after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """Ends the whole group (the test's own driver only) and reaps it."""
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def submit(rt: SparkRuntime, application: Path, args: list[str], log: Path, *, conf: dict[str, str] | None = None,
           main_class: str | None = None, jars: list[Path] | None = None,
           env: dict[str, str] | None = None) -> Driver:
    """``spark-submit`` the user's application unchanged; ``conf`` is everything the product adds."""
    cmd = [rt.spark_submit(), "--master", "local[2]", "--driver-memory", "640m",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2"]
    if main_class:
        cmd += ["--class", main_class]
    all_jars = [str(j) for j in (jars or rt.kafka_jars())]
    user_conf = dict(conf or {})
    extra = user_conf.pop("spark.jars", "")
    cmd += ["--jars", ",".join([*all_jars, *[j for j in extra.split(",") if j]])]
    for k, v in user_conf.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [str(application), *args]
    log.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log, "ab")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env={**rt.env(), **(env or {})},
                            start_new_session=True)
    fh.close()
    return Driver(proc, log)


def newest(checkpoint: Path, log: str) -> int:
    """Newest batch id in ``<checkpoint>/<log>`` (-1 if none): what Spark resumes from."""
    d = checkpoint / log
    ids = [int(p.name) for p in d.iterdir() if p.name.isdigit()] if d.is_dir() else []
    return max(ids, default=-1)


def boundary(checkpoint: Path) -> tuple[int, int]:
    """(newest offsets/N, newest commits/N): equal means the checkpoint ends on a batch boundary."""
    return newest(checkpoint, "offsets"), newest(checkpoint, "commits")


def committed_position(checkpoint: Path, topic: str) -> dict[int, int]:
    """Where the next run resumes: the end offsets of the newest committed batch (its ``offsets/N``).

    Spark's offset file is a version line, a metadata line and one JSON line per source; the Kafka
    source's is ``{"<topic>": {"<partition>": <next offset>}}``.
    """
    n = newest(checkpoint, "commits")
    if n < 0:
        return {}
    lines = (checkpoint / "offsets" / str(n)).read_text().splitlines()
    for line in lines[2:]:
        doc = json.loads(line)
        if isinstance(doc, dict) and topic in doc:
            return {int(p): int(o) for p, o in doc[topic].items()}
    return {}


def read_report(path: Path) -> dict:
    return json.loads(path.read_text())
