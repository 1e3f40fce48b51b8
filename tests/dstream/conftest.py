"""The DStream reference job (devstack/dstream_job.py) as the oracle: built once per session per variant,
run with the real spark-submit of the Spark 3.5 runtime against the session broker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devstack import dstream_job
from tests.support.waiting import wait_until

JOB_TIMEOUT = 240  # Spark on 2 shared cores: a start alone can take a minute


@pytest.fixture(scope="session")
def dstream_v1() -> dstream_job.DStreamBuild:
    return dstream_job.build("v1")


@pytest.fixture(scope="session")
def dstream_v2() -> dstream_job.DStreamBuild:
    return dstream_job.build("v2")


@dataclass
class DStreamRun:
    """One run of the job: its process, log and status lines."""

    build: dstream_job.DStreamBuild
    args: list[str]
    log: Path
    marker: Path
    proc: subprocess.Popen | None = None
    first_line: int = field(default=0)

    def start(self) -> DStreamRun:
        self.marker.unlink(missing_ok=True)
        self.first_line = len(dstream_job.statuses(self.log))
        self.proc = dstream_job.start(self.build, self.args, self.log)
        return self

    def statuses(self) -> list[dict]:
        return dstream_job.statuses(self.log)[self.first_line :]

    def batches(self) -> list[dict]:
        return [s for s in self.statuses() if s["event"] == "batch"]

    def processed(self) -> int:
        return sum(b["records"] for b in self.batches())

    def wait_processed(self, total: int, timeout: float = JOB_TIMEOUT) -> None:
        wait_until(
            lambda: self.processed() >= total or self._dead(),
            timeout=timeout,
            interval=0.2,
            what=f"the DStream job to process {total} records",
        )
        assert not self._dead(), self.tail()

    def wait_batches(self, more: int, timeout: float = JOB_TIMEOUT) -> None:
        """Wait for ``more`` further batches (empty ones too: each drains the commit queued before it)."""
        target = len(self.batches()) + more
        wait_until(
            lambda: len(self.batches()) >= target or self._dead(),
            timeout=timeout,
            interval=0.2,
            what=f"{more} more batches",
        )
        assert not self._dead(), self.tail()

    def stop(self, mode: str = "graceful", timeout: float = JOB_TIMEOUT) -> int:
        self.marker.write_text(mode)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = JOB_TIMEOUT) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            raise AssertionError(f"the DStream job did not stop in {timeout}s:\n{self.tail()}") from None

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def _dead(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""


@dataclass
class Sink:
    """The job's two sinks: the append sink shows every write (duplicates), the idempotent one each record once."""

    root: Path

    def appended(self) -> Counter[tuple[str, int, int]]:
        out: Counter[tuple[str, int, int]] = Counter()
        for f in sorted((self.root / "append").glob("*.log")):
            for line in f.read_text().splitlines():
                parts = line.split("\t", 3)
                if len(parts) == 4 and parts[3].endswith("}"):  # a line torn by kill -9 is no record
                    out[(parts[0], int(parts[1]), int(parts[2]))] += 1
        return out

    def duplicates(self) -> int:
        return sum(n - 1 for n in self.appended().values())

    def idempotent(self) -> set[tuple[str, int, int]]:
        out = set()
        for f in (self.root / "idempotent").glob("*"):
            if not f.name.startswith("."):
                topic, partition, offset = f.name.rsplit("-", 2)
                out.add((topic, int(partition), int(offset)))
        return out


def run_for(
    build: dstream_job.DStreamBuild,
    root: Path,
    *,
    bootstrap: str,
    topic: str,
    group: str,
    checkpoint: Path | None = None,
    batch_ms: int = 2000,
    name: str = "run",
) -> DStreamRun:
    marker = root / "stop-marker"
    args = dstream_job.job_args(
        bootstrap=bootstrap,
        topic=topic,
        group=group,
        sink=root / "sink",
        stop_marker=marker,
        checkpoint=checkpoint,
        batch_ms=batch_ms,
    )
    return DStreamRun(build, args, root / f"{name}.log", marker)


def wait_started(run: DStreamRun) -> None:
    t0 = time.monotonic()
    wait_until(
        lambda: any(s["event"] == "started" for s in run.statuses()) or run._dead(),
        timeout=JOB_TIMEOUT,
        interval=0.3,
        what="the DStream job to start",
    )
    assert not run._dead(), run.tail()
    run.started_after = time.monotonic() - t0  # type: ignore[attr-defined]
