"""Build the users'-style Java application (tests/support/user_jobs/orders-java) for both Spark lines.

Test material, not product: ``com.example.orders.OrdersStream`` stands for a user's jar that the
product must stop on a batch boundary without changing it (issue 25). Built by Maven like
``devstack/dstream_job.py``: once per (line, variant, source digest) into
``<cache>/user-jobs/<profile>-<variant>-<digest>/orders-stream.jar``, offline first, Maven Central
only when the local repository lacks something. ``v2`` is a real recompile with a stateful operator
(checkpoint-breaking). The jar has no ``Main-Class``: callers pass ``--class`` (:data:`MAIN_CLASS`).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars

MODULE = jars.REPO_ROOT / "tests" / "support" / "user_jobs" / "orders-java"
MAIN_CLASS = "com.example.orders.OrdersStream"
VARIANTS = ("v1", "v2", "v3")   # v3: v1 plus a projected column (compatible)
# runtime name (devstack.spark_runtimes) -> Maven profile of the Spark line
PROFILES = {"3.5": "spark35", "default": "spark4"}


def source_digest(profile: str, variant: str) -> str:
    files = [
        MODULE / "pom.xml",
        *sorted((MODULE / "src" / "main").rglob("*.java")),
        *sorted((MODULE / "src" / variant).rglob("*.java")),
    ]
    h = hashlib.sha256(f"{profile}/{variant}".encode())
    for f in files:
        h.update(str(f.relative_to(MODULE)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def build(runtime: str = "default", variant: str = "v1") -> Path:
    """The application jar for the Spark runtime ``runtime`` ("default" = 4.x, "3.5"), built once per digest."""
    if runtime not in PROFILES or variant not in VARIANTS:
        raise UserError(f"unknown user job build {runtime}/{variant}: runtimes {list(PROFILES)}, variants {VARIANTS}")
    profile = PROFILES[runtime]
    digest = source_digest(profile, variant)
    target = jars.cache_dir() / "user-jobs" / f"{profile}-{variant}-{digest}"
    jar = target / "orders-stream.jar"
    if jar.is_file():
        return jar
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} not found on PATH: install a JDK 17 and Maven to build the users' test jobs")
    with jars.file_lock(target.parent / f".{profile}-{variant}.lock"):
        if jar.is_file():
            return jar
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        base = ["mvn", "-B", "-q", "-s", str(jars.JVM_DIR / "settings.xml"), "-f", str(MODULE / "pom.xml"),
                f"-P{profile}", f"-Dvariant={variant}", f"-DbuildDir={staging}", "package"]
        print(f"[user-jobs] building orders-stream {profile}/{variant} ({digest}) ...", file=sys.stderr, flush=True)
        proc = subprocess.run([*base, "-o"], capture_output=True, text=True)
        if proc.returncode != 0:  # not everything cached yet: once online, from Maven Central
            proc = subprocess.run(base, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise UserError(f"mvn could not build the orders stream ({profile}/{variant}): {tail}")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    if not jar.is_file():
        raise UserError(f"the orders stream build left no jar in {target}")
    return jar


def write_properties(path: Path, *, bootstrap: str, topic: str, checkpoint: Path, output: Path,
                     trigger_seconds: float = 1.0) -> Path:
    """The application's own configuration file (its one positional argument)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"bootstrap.servers={bootstrap}\ntopic={topic}\ncheckpoint={checkpoint}\noutput={output}\n"
        f"trigger.seconds={trigger_seconds:g}\n"
    )
    return path


if __name__ == "__main__":
    for rt in PROFILES:
        for v in VARIANTS:
            print(build(rt, v), file=sys.stderr)
