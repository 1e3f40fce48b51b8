"""Build the users'-style Java applications (tests/support/user_jobs) for both Spark lines.

Test material, not product: ``com.example.orders.OrdersStream`` stands for a user's jar that the
product must stop on a batch boundary without changing it (docs/your-jobs.md, docs/agent.md). Built by Maven like
``devstack/dstream_job.py``: once per (line, variant, source digest) into
``<cache>/user-jobs/<profile>-<variant>-<digest>/orders-stream.jar``, offline first, Maven Central
only when the local repository lacks something. ``v2`` is a real recompile with a stateful operator
(checkpoint-breaking). The jar has no ``Main-Class``: callers pass ``--class`` (:data:`MAIN_CLASS`).

``com.example.payments.PaymentsStream`` (``payments-dstream``, :func:`build_dstream`) is a user's DStream
job: the Kafka direct API with its own group and ``commitAsync``, its ``.properties`` file as its one
argument; the connector's runtime jars are copied beside it (``deps``), passed as the job's ``jars``.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars

MODULE = jars.REPO_ROOT / "tests" / "support" / "user_jobs" / "orders-java"
MAIN_CLASS = "com.example.orders.OrdersStream"
DSTREAM_MODULE = MODULE.parent / "payments-dstream"
DSTREAM_MAIN_CLASS = "com.example.payments.PaymentsStream"
VARIANTS = ("v1", "v2", "v3")   # v3: v1 plus a projected column (compatible)
# runtime name (devstack.spark_runtimes) -> Maven profile of the Spark line
PROFILES = {"3.5": "spark35", "default": "spark4"}


def source_digest(profile: str, variant: str, module: Path = MODULE) -> str:
    files = [
        module / "pom.xml",
        *sorted((module / "src" / "main").rglob("*.java")),
        *sorted((module / "src" / variant).rglob("*.java")),
    ]
    h = hashlib.sha256(f"{profile}/{variant}".encode())
    for f in files:
        h.update(str(f.relative_to(module)).encode() + b"\0" + f.read_bytes())
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


@dataclass(frozen=True)
class DStreamAppBuild:
    """The user's DStream jar and the connector's runtime jars it is submitted with."""

    jar: Path
    deps: tuple[Path, ...]


def build_dstream(runtime: str = "default") -> DStreamAppBuild:
    """``payments-dstream`` for the Spark runtime ``runtime`` ("default" = 4.2, "3.5"), built once per digest."""
    if runtime not in PROFILES:
        raise UserError(f"unknown runtime {runtime!r} for the DStream user job: use one of {list(PROFILES)}")
    profile = PROFILES[runtime]
    digest = source_digest(profile, "main", DSTREAM_MODULE)
    target = jars.cache_dir() / "user-jobs" / f"dstream-{profile}-{digest}"
    jar = target / "payments-dstream.jar"
    if not (target / ".stamp").is_file():
        with jars.file_lock(target.parent / f".dstream-{profile}.lock"):
            if not (target / ".stamp").is_file():
                staging = target.with_name(target.name + ".partial")
                shutil.rmtree(staging, ignore_errors=True)
                base = ["mvn", "-B", "-q", "-s", str(jars.JVM_DIR / "settings.xml"), "-f",
                        str(DSTREAM_MODULE / "pom.xml"), f"-P{profile}", f"-DbuildDir={staging}", "package",
                        "dependency:copy-dependencies", "-DincludeScope=runtime",
                        f"-DoutputDirectory={staging / 'deps'}"]
                print(f"[user-jobs] building payments-dstream {profile} ({digest}) ...", file=sys.stderr, flush=True)
                proc = subprocess.run([*base, "-o"], capture_output=True, text=True)
                if proc.returncode != 0:  # not everything cached yet: once online, from Maven Central
                    proc = subprocess.run(base, capture_output=True, text=True)
                if proc.returncode != 0:
                    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
                    raise UserError(f"mvn could not build payments-dstream ({profile}): {tail}")
                (staging / ".stamp").write_text(digest)
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    if not jar.is_file():
        raise UserError(f"the payments-dstream build left no jar in {target}")
    return DStreamAppBuild(jar, tuple(sorted((target / "deps").glob("*.jar"))))


def write_dstream_properties(path: Path, *, bootstrap: str, topics: str, group: str, output: Path,
                             batch_seconds: int = 2) -> Path:
    """The DStream application's own configuration file (its one positional argument)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"bootstrap.servers={bootstrap}\ntopics={topics}\ngroup.id={group}\noutput={output}\n"
                    f"batch.seconds={batch_seconds}\n")
    return path


if __name__ == "__main__":
    for rt in PROFILES:
        for v in VARIANTS:
            print(build(rt, v), file=sys.stderr)
        print(build_dstream(rt).jar, file=sys.stderr)
