"""Jars for the distributed dev stack, fetched from Maven Central with ``mvn`` once and stamped.

Same scheme as the broker's and the connector's jars: a small POM per component under
``devstack/jvm/<name>/``, copied with ``dependency:copy-dependencies`` into
``<cache>/jars/<name>/``; a stamp holding the POM's hash makes a second call a no-op (no Maven
start, no network). Also compiles the tiny Java launchers next to their POMs, stamped the same way.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars

JVM_DIR = Path(__file__).parent / "jvm"
# Route every repository to Maven Central (Spark's and Hadoop's POMs name mirrors we cannot reach).
SETTINGS = jars.JVM_DIR / "settings.xml"


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _require(tool: str, hint: str) -> None:
    if shutil.which(tool) is None:
        raise UserError(f"{tool} not found on PATH: {hint}")


def fetch(name: str, *, quiet: bool = False) -> list[Path]:
    """The runtime closure of ``devstack/jvm/<name>/pom.xml`` in the jar cache (fetched once)."""
    pom = JVM_DIR / name / "pom.xml"
    target = jars.cache_dir() / "jars" / name
    stamp = target / ".stamp"
    digest = _digest(pom)
    if stamp.exists() and stamp.read_text().strip() == digest and any(target.glob("*.jar")):
        return sorted(target.glob("*.jar"))
    _require("java", "install a Java 17 runtime (e.g. apt-get install openjdk-17-jdk-headless)")
    _require("mvn", "install Apache Maven (e.g. apt-get install maven)")
    staging = target.with_name(name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if not quiet:
        print(f"[jars] fetching {name} jars from Maven Central into {target} ...", file=sys.stderr, flush=True)
    cmd = ["mvn", "-B", "-q", "-s", str(SETTINGS), "-f", str(pom), "dependency:copy-dependencies",
           "-DincludeScope=runtime", f"-DoutputDirectory={staging}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise UserError(f"mvn could not fetch the {name} jars (is Maven Central reachable?): {tail}")
    (staging / ".stamp").write_text(digest)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return sorted(target.glob("*.jar"))


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
