"""Build the agent jars (``jvm/agent/``) for both Spark lines into ``airflow_kafka_spark/agent/jars/``.

The agent is product, not dev stack: its jars ship in the wheel (package data) beside the Python
module that names them (``airflow_kafka_spark.agent``). Built here because the build needs Maven
and the repository's Maven settings; ``bin/setup`` calls it. ``mvn -P<line> package`` runs once per
source digest (pom + common sources + the line's own sources), offline first and Maven Central only
when the local repository lacks something; the digest is stamped beside the jars, so a second call
starts no Maven at all. ``python -m devstack.agent_build`` builds both.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from airflow_kafka_spark import agent
from airflow_kafka_spark.errors import UserError
from devstack import jars

MODULE = jars.REPO_ROOT / "jvm" / "agent"
# Maven profile -> the agent line it serves (airflow_kafka_spark.agent names the jar per line).
PROFILES = {"spark35": "3.5.1", "spark4": "4.2.0"}


def source_digest(profile: str) -> str:
    files = [
        MODULE / "pom.xml",
        *sorted((MODULE / "src" / "main").rglob("*.java")),
        *sorted((MODULE / "src" / profile).rglob("*.java")),
    ]
    h = hashlib.sha256(profile.encode())
    for f in files:
        h.update(str(f.relative_to(MODULE)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def target_jar(profile: str) -> Path:
    return agent.JARS_DIR / agent._LINES[agent.line_of(PROFILES[profile])]


def _stamp(profile: str) -> Path:
    return agent.JARS_DIR / f".{profile}.stamp"


def build(profile: str) -> Path:
    """The agent jar of one Spark line, built when its sources changed (a file lock keeps processes apart)."""
    if profile not in PROFILES:
        raise UserError(f"unknown agent profile {profile!r}: use one of {', '.join(PROFILES)}")
    digest, jar = source_digest(profile), target_jar(profile)
    if jar.is_file() and _stamp(profile).is_file() and _stamp(profile).read_text().strip() == digest:
        return jar
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found on PATH: install a JDK 17 and Maven to build the agent")
    work = jars.cache_dir() / "agent-build"
    work.mkdir(parents=True, exist_ok=True)
    with jars.file_lock(work / f".{profile}.lock"):
        if jar.is_file() and _stamp(profile).is_file() and _stamp(profile).read_text().strip() == digest:
            return jar
        build_dir = work / f"{profile}-{digest}"
        shutil.rmtree(build_dir, ignore_errors=True)
        base = ["mvn", "-B", "-q", "-s", str(jars.JVM_DIR / "settings.xml"), "-f", str(MODULE / "pom.xml"),
                f"-P{profile}", f"-DbuildDir={build_dir}", "package"]
        print(f"[agent] building {profile} ({digest}) ...", file=sys.stderr, flush=True)
        proc = subprocess.run([*base, "-o"], capture_output=True, text=True)
        if proc.returncode != 0:  # not everything cached yet: once online, from Maven Central
            proc = subprocess.run(base, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise UserError(f"mvn could not build the agent ({profile}): {tail}")
        built = build_dir / "aks-agent.jar"
        if not built.is_file():
            raise UserError(f"the agent build left no jar in {build_dir}")
        jar.parent.mkdir(parents=True, exist_ok=True)
        tmp = jar.with_name(jar.name + ".partial")
        shutil.copyfile(built, tmp)
        tmp.replace(jar)
        _stamp(profile).write_text(digest)
        shutil.rmtree(build_dir, ignore_errors=True)
    return jar


def build_all() -> list[Path]:
    return [build(p) for p in PROFILES]


if __name__ == "__main__":
    for j in build_all():
        print(f"agent: {j}", file=sys.stderr)
