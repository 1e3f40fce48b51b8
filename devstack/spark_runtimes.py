"""The Spark runtimes of the dev stack: the default 4.x and Spark 3.5, each with its own connector.

Why two: checkpoints are written by the user's Spark, which is often 3.5 (Scala 2.12), and the
format reader, the verdicts and the oracle scenarios must meet checkpoints of both lines. One
interpreter holds one ``pyspark``, so the default runtime is the project venv's pyspark and Spark
3.5 lives in its own venv under ``<cache>/spark-<version>/venv``, created once (``pip install
pyspark==<version>``) and stamped. Each runtime's version is set in exactly one place, the
``spark.version`` of its connector POM (``devstack/jvm/<pom>/pom.xml``); the project venv's pyspark
must equal it (pinned in the constraints, checked by tests/integration/test_stack.py).

``python -m devstack.spark_runtimes --all`` installs every runtime and fetches its jars (bin/setup).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars


@dataclass(frozen=True)
class _Spec:
    pom: str  # devstack/jvm/<pom>/pom.xml: connector + spark.version
    own_venv: bool  # False: the project venv's pyspark (the interpreter running this code)


_SPECS = {"default": _Spec("spark-kafka", own_venv=False), "3.5": _Spec("spark-kafka-3.5", own_venv=True)}
NAMES = tuple(_SPECS)


@dataclass(frozen=True)
class SparkRuntime:
    """One installed Spark: its interpreter, its distribution (the pyspark package) and its connector."""

    name: str  # "default" (4.x) or "3.5"
    version: str  # e.g. "3.5.1"
    scala: str  # "2.12" / "2.13"
    python: Path  # interpreter of the venv holding this pyspark
    home: Path  # SPARK_HOME (the pyspark package dir)
    pom: str = "spark-kafka"

    def spark_submit(self) -> str:
        return str(self.home / "bin" / "spark-submit")

    def env(self) -> dict[str, str]:
        """The caller's environment with this runtime's SPARK_HOME and Python forced.

        Forced, not defaulted: a test process that started the in-process 4.x session has set
        PYSPARK_PYTHON to its own interpreter, and a 3.5 job must never run its workers there.
        """
        env = dict(os.environ)
        env["SPARK_HOME"] = str(self.home)
        env["PYSPARK_PYTHON"] = str(self.python)
        env["PYSPARK_DRIVER_PYTHON"] = str(self.python)
        env["PATH"] = os.pathsep.join([str(self.python.parent), env.get("PATH", "")])
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        if "JAVA_HOME" not in env and shutil.which("java") is None:
            raise UserError("java not found on PATH: install a Java 17 runtime (e.g. apt-get install openjdk-17-jre)")
        return env

    def kafka_jars(self) -> list[Path]:
        """The Structured Streaming connector and the dependencies this Spark does not already ship."""
        return jars.connector_jars(self.pom, self.home)

    def connector_jar(self) -> Path:
        """``spark-sql-kafka-0-10_<scala>-<version>.jar`` itself."""
        [jar] = [j for j in self.kafka_jars() if j.name.startswith("spark-sql-kafka-0-10_")]
        return jar


def pom_version(pom: str) -> tuple[str, str]:
    """(spark.version, scala.binary.version) of ``devstack/jvm/<pom>/pom.xml``."""
    text = (jars.JVM_DIR / pom / "pom.xml").read_text()
    found = {k: re.search(rf"<{re.escape(k)}>([^<]+)</", text) for k in ("spark.version", "scala.binary.version")}
    if not all(found.values()):
        raise UserError(f"devstack/jvm/{pom}/pom.xml lacks <spark.version> or <scala.binary.version>")
    return found["spark.version"].group(1).strip(), found["scala.binary.version"].group(1).strip()


_CACHE: dict[str, SparkRuntime] = {}
_THREAD_LOCK = threading.Lock()


def runtime(name: str = "default") -> SparkRuntime:
    """The runtime ``name``, installed (own venv) and with its connector fetched, once per machine."""
    if name not in _SPECS:
        raise UserError(f"unknown Spark runtime {name!r}: use one of {', '.join(NAMES)}")
    with _THREAD_LOCK:
        if name not in _CACHE:
            spec = _SPECS[name]
            version, scala = pom_version(spec.pom)
            rt = _own_venv(name, spec, version, scala) if spec.own_venv else _project(name, spec, version, scala)
            jars.fetch(spec.pom)  # once, stamped; its own file lock keeps two processes apart
            _CACHE[name] = rt
        return _CACHE[name]


def _project(name: str, spec: _Spec, version: str, scala: str) -> SparkRuntime:
    home = jars.spark_home()
    try:
        installed = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:  # pyspark-client alone: Python files, no jars
        raise UserError("pyspark is not installed (only pyspark-client?): run ./bin/setup") from None
    if installed != version:
        raise UserError(
            f"the project venv has pyspark {installed} but the dev stack's Spark is {version} "
            f"(devstack/jvm/{spec.pom}/pom.xml): run ./bin/setup"
        )
    return SparkRuntime(name, version, scala, Path(sys.executable), home, spec.pom)


def venv_dir(version: str) -> Path:
    return jars.cache_dir() / f"spark-{version}" / "venv"


def _own_venv(name: str, spec: _Spec, version: str, scala: str) -> SparkRuntime:
    venv = venv_dir(version)
    requirement = f"pyspark=={version}"
    stamp = venv / ".aks-installed"
    with jars.file_lock(venv.parent / ".lock"):
        if not (stamp.exists() and stamp.read_text().strip() == requirement):
            _install_venv(venv, requirement)
            stamp.write_text(requirement)
    [home] = sorted(venv.glob("lib/python*/site-packages/pyspark")) or [None]
    if home is None:
        raise UserError(f"{venv} has no pyspark package: delete {venv.parent} and run ./bin/setup")
    return SparkRuntime(name, version, scala, venv / "bin" / "python", home, spec.pom)


def _install_venv(venv: Path, requirement: str) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    print(f"[spark] installing {requirement} into {venv} (once) ...", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    for cmd in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", requirement],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = " ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
            raise UserError(f"could not install {requirement} into {venv} (is PyPI reachable?): {tail}")
    print(f"[spark] {requirement} installed in {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    names = list(NAMES) if not argv or argv == ["--all"] else argv
    try:
        for name in names:
            rt = runtime(name)
            print(
                f"spark runtime {rt.name}: Spark {rt.version} (Scala {rt.scala}) at {rt.home}; connector "
                + ", ".join(j.name for j in rt.kafka_jars()),
                file=sys.stderr,
            )
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
