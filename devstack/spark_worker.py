"""A long-lived Spark driver under another runtime's interpreter, driven over stdin/stdout (JSON lines).

Why: one interpreter holds one pyspark, so the tests cannot open a Spark 3.5 session next to the
in-process 4.x one, and a spark-submit per query restart costs ~30-60 s on the shared CI machine.
This worker starts one SparkSession of its runtime (with that runtime's Kafka connector) and runs
the reference job's own ``build_query`` with ``availableNow`` on request, as
tests/support/spark_session.py does in-process: one JVM per test session.

The same file is both sides. :class:`SparkWorker` (the caller's side, any interpreter) starts
``<runtime python> devstack/spark_worker.py <jars>``; the bottom half runs there and imports only
the standard library and that runtime's pyspark (the reference job is loaded from its file).

Protocol: one JSON request per line on stdin (``{"op": "run", "argv": [...], "timeout": s}``,
``{"op": "conf", "set": {...}}``, ``{"op": "version"}``); one reply per request on stdout, on a
line starting with ``AKS_WORKER `` (Spark may print other lines there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from devstack.spark_runtimes import SparkRuntime

PREFIX = "AKS_WORKER "
REFERENCE_JOB = Path(__file__).resolve().parents[1] / "airflow_kafka_spark" / "jobs" / "reference_job.py"


@dataclass
class WorkerResult:
    """Same fields as tests.support.spark_session.RunResult: the scenario code reads either."""

    ok: bool
    error: str | None
    seconds: float


class SparkWorker:
    """The caller's handle on one worker process (``with SparkWorker(rt) as w: w.run(argv)``)."""

    def __init__(self, rt: SparkRuntime, *, log_path: Path, start_timeout: float = 300) -> None:
        self.runtime = rt
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        jars = ",".join(str(j) for j in rt.kafka_jars())
        self._proc = subprocess.Popen([str(rt.python), "-u", __file__, jars], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log, env=rt.env(), text=True,
                                      start_new_session=True)
        self._lock = threading.Lock()
        self.version = self._call({"op": "version"}, start_timeout)["version"]

    def run(self, argv: list[str], *, timeout: float = 180) -> WorkerResult:
        """The reference query once with availableNow; Spark's failure text in ``error``."""
        reply = self._call({"op": "run", "argv": argv, "timeout": timeout}, timeout + 60)
        return WorkerResult(reply["ok"], reply.get("error"), reply["seconds"])

    def set_conf(self, settings: dict[str, str]) -> None:
        self._call({"op": "conf", "set": settings}, 60)

    def _call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            if self._proc.poll() is not None:
                raise RuntimeError(f"the Spark {self.runtime.version} worker exited: {self._tail()}")
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            reply: list[dict] = []
            reader = threading.Thread(target=self._read_reply, args=(reply,), daemon=True)
            reader.start()
            reader.join(timeout)
            if not reply:
                self.close()
                raise RuntimeError(f"no answer from the Spark {self.runtime.version} worker to {request['op']} "
                                   f"within {timeout:.0f}s: {self._tail()}")
            return reply[0]

    def _read_reply(self, out: list[dict]) -> None:
        for line in self._proc.stdout:
            if line.startswith(PREFIX):
                out.append(json.loads(line[len(PREFIX):]))
                return

    def _tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(30)
        self._log.close()

    def __enter__(self) -> SparkWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- the worker's side


def _load_reference_job():
    import importlib.util

    spec = importlib.util.spec_from_file_location("aks_reference_job", REFERENCE_JOB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def error_text(exc: BaseException) -> str:
    """The whole story of a Spark failure: message, JVM stack and the chain of causes (any PySpark)."""
    parts = [str(exc)]
    for attr in ("_stackTrace", "_cause"):
        value = getattr(exc, attr, None)
        if value:
            parts.append(str(value))
    cause = exc.__cause__ or exc.__context__
    if cause is not None and cause is not exc:
        parts.append(str(cause))
    return "\n".join(parts)


def _run(spark, job, argv: list[str], timeout: float) -> dict[str, Any]:
    args = job.parse_args([*argv, "--trigger", "availableNow"])
    t0 = time.monotonic()
    try:
        query = job.build_query(spark, args)
        if not query.awaitTermination(timeout):
            query.stop()
            return {"ok": False, "error": f"timeout after {timeout}s", "seconds": time.monotonic() - t0}
    except Exception as exc:  # refused at start or failed in a batch: the text is the evidence
        return {"ok": False, "error": error_text(exc), "seconds": time.monotonic() - t0}
    exc = query.exception()
    return {"ok": exc is None, "error": error_text(exc) if exc else None, "seconds": time.monotonic() - t0}


def _serve(jars: str) -> int:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("aks-worker")
             .config("spark.jars", jars)
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "1g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    job = _load_reference_job()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request["op"]
        if op == "version":
            reply: dict[str, Any] = {"version": spark.version}
        elif op == "conf":
            for key, value in request["set"].items():
                spark.conf.set(key, value)
            reply = {"ok": True}
        elif op == "run":
            reply = _run(spark, job, request["argv"], float(request.get("timeout", 180)))
        else:
            reply = {"ok": False, "error": f"unknown op {op!r}", "seconds": 0.0}
        print(PREFIX + json.dumps(reply), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    here = Path(__file__).resolve().parent  # devstack/'s modules must not shadow anything pyspark imports
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    raise SystemExit(_serve(sys.argv[1]))
