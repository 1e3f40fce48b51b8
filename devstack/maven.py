"""Jars for the distributed dev stack, fetched from Maven Central with ``mvn`` once and stamped.

The very scheme (and code, :func:`devstack.jars.fetch`) of the broker's and the connector's jars: a
small POM per component under ``devstack/jvm/<name>/``, copied with ``dependency:copy-dependencies``
into ``<cache>/jars/<name>/``; a stamp holding the POM's hash makes a second call a no-op (no Maven
start, no network). Also compiles the tiny Java launchers next to their POMs, stamped the same way.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars

JVM_DIR = jars.JVM_DIR


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _require(tool: str, hint: str) -> None:
    if shutil.which(tool) is None:
        raise UserError(f"{tool} not found on PATH: {hint}")


def fetch(name: str, *, quiet: bool = False) -> list[Path]:
    """The runtime closure of ``devstack/jvm/<name>/pom.xml`` in the jar cache (fetched once by :func:`jars.fetch`)."""
    return jars.fetch(name, quiet=quiet).jars


def compile_launcher(name: str, source: str, classpath: list[Path]) -> Path:
    """``javac`` ``devstack/jvm/<name>/<source>`` once into ``<cache>/jars/<name>-launcher/``."""
    src = JVM_DIR / name / source
    target = jars.cache_dir() / "jars" / f"{name}-launcher"
    stamp = target / ".stamp"
    digest = _digest(src, JVM_DIR / name / "pom.xml")
    if stamp.exists() and stamp.read_text().strip() == digest:
        return target
    _require("javac", "install a Java 17 JDK (e.g. apt-get install openjdk-17-jdk-headless)")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    cp = ":".join(str(j) for j in classpath)
    proc = subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(target), str(src)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"javac could not compile {src}: {proc.stderr.strip().splitlines()[:1]}")
    stamp.write_text(digest)
    return target
