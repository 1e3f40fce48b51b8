"""JVM parts of the local stack, fetched from Maven Central with ``mvn`` into a cache folder.

Two classpaths are needed and they must not mix: the Kafka broker (plus the Kafka command-line
tools, used as an independent witness in tests) and the ``spark-sql-kafka-0-10`` connector at
exactly the Spark version of the installed ``pyspark``. Each is described by a small POM under
``devstack/jvm/``; ``mvn dependency:copy-dependencies`` copies it into ``<cache>/jars/<name>/``. A
stamp file holding the POM's hash makes a second run a no-op (no Maven start, no network).

A third set is no classpath: Spark's own test jars (``spark-test-resources``), whose checkpoints
tests/integration/test_spark_corpus.py extracts at test time and runs through the product.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from airflow_kafka_spark.errors import UserError

JVM_DIR = Path(__file__).parent / "jvm"
REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_dir() -> Path:
    """Where jars, broker data and logs live: ``$AKS_CACHE_DIR`` or ``<repo>/.cache``."""
    return Path(os.environ.get("AKS_CACHE_DIR", REPO_ROOT / ".cache")).resolve()


@dataclass(frozen=True)
class Classpath:
    """One fetched set of jars."""

    name: str
    directory: Path

    @property
    def jars(self) -> list[Path]:
        return sorted(self.directory.glob("*.jar"))

    def as_java_classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)


def _require_tools() -> None:
    if shutil.which("java") is None:
        raise UserError("java not found on PATH: install a Java 17 runtime (e.g. apt-get install openjdk-17-jre)")
    if shutil.which("mvn") is None:
        raise UserError("mvn not found on PATH: install Apache Maven (e.g. apt-get install maven)")


def _pom_hash(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An flock on a local file: two processes (test runs, helpers) fetch or install only once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fetch(name: str, *, quiet: bool = False) -> Classpath:
    """Copy the runtime dependencies of ``devstack/jvm/<name>/pom.xml`` into the cache, once."""
    pom = JVM_DIR / name / "pom.xml"
    target = cache_dir() / "jars" / name
    stamp = target / ".stamp"
    digest = _pom_hash(pom)
    if stamp.exists() and stamp.read_text().strip() == digest and any(target.glob("*.jar")):
        return Classpath(name, target)
    _require_tools()
    with file_lock(cache_dir() / "jars" / f".{name}.lock"):
        if stamp.exists() and stamp.read_text().strip() == digest and any(target.glob("*.jar")):
            return Classpath(name, target)  # another process fetched it while this one waited
        return _fetch_locked(name, pom, target, digest, quiet)


def _fetch_locked(name: str, pom: Path, target: Path, digest: str, quiet: bool) -> Classpath:
    staging = target.with_name(name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if not quiet:
        print(f"[jars] fetching {name} jars from Maven Central into {target} ...", file=sys.stderr, flush=True)
    cmd = [
        "mvn", "-B", "-q", "-s", str(JVM_DIR / "settings.xml"), "-f", str(pom),
        "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise UserError(f"mvn could not fetch the {name} jars (is Maven Central reachable?): {tail}")
    (staging / ".stamp").write_text(digest)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return Classpath(name, target)


def kafka_classpath() -> Classpath:
    return fetch("kafka")


def spark_home() -> Path:
    """The Spark distribution bundled in the ``pyspark`` wheel."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise UserError("pyspark is not installed: run ./bin/setup")
    return Path(spec.origin).parent


def spark_kafka_jars() -> list[Path]:
    """The default runtime's connector jars (``devstack.spark_runtimes`` has the 3.5 runtime's)."""
    return connector_jars("spark-kafka", spark_home())


def connector_jars(pom: str, home: Path) -> list[Path]:
    """The connector of ``devstack/jvm/<pom>`` and the dependencies the Spark at ``home`` does not ship.

    Maven's runtime closure also contains Hadoop, Scala and compression jars that the pyspark
    wheel already has (``pyspark/jars``); adding a second copy to the classpath invites version
    clashes, so those are left out.
    """
    cp = fetch(pom)
    shipped = {_artifact(j.name) for j in (home / "jars").glob("*.jar")}
    return [j for j in cp.jars if _artifact(j.name) not in shipped]


def _artifact(jar_name: str) -> str:
    """``kafka-clients-3.9.0.jar`` -> ``kafka-clients``."""
    stem = jar_name[:-4] if jar_name.endswith(".jar") else jar_name
    parts = stem.split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def spark_test_jars() -> list[Path]:
    """Spark's own test jars (``devstack/jvm/spark-test-resources``): the checkpoints its suites restart."""
    return fetch("spark-test-resources").jars


def main() -> int:
    try:
        k = kafka_classpath()
        s = spark_kafka_jars()
        t = spark_test_jars()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"kafka: {len(k.jars)} jars in {k.directory}")
    print("spark-kafka connector: " + ", ".join(j.name for j in s))
    print("spark test jars: " + ", ".join(j.name for j in t))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
