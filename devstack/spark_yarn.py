"""Submit the reference job to YARN in cluster deploy mode with the pip-installed pyspark.

What a YARN container needs and how it gets it here (each uploaded to HDFS once per cluster, so a
submit copies nothing big):

* Spark's jars: ``spark.yarn.archive`` = a zip of ``pyspark/jars`` (~440 MB) on HDFS. Without it
  every ``spark-submit`` zips and uploads all of them to the application's staging folder.
* PySpark for the driver (it runs in the ApplicationMaster container) and the Python workers:
  ``PYSPARK_ARCHIVES_PATH`` = ``pyspark.zip`` and ``py4j-*-src.zip`` on HDFS. The pyspark 4.0.0
  wheel ships both in ``pyspark/python/lib``; when an install lacks them they are built from the
  installed packages (cached under ``.cache/spark-yarn``).
* The Kafka connector jars: ``--jars`` with ``hdfs://`` URLs (localized by the NodeManager).
* S3A (optional): hadoop-aws + the AWS SDK v2 bundle (~530 MB) as ``local:`` jars, i.e. already on
  the node, which is how managed clusters (EMR, Dataproc) provide S3 support.
* The interpreter: ``spark.pyspark.python`` = this venv's python (present on the single dev node).
* The cluster: ``HADOOP_CONF_DIR``/``YARN_CONF_DIR`` in the submitting process's environment.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars
from devstack import spark as local_spark
from devstack.hadoop import HadoopCluster

HDFS_ROOT = "/devstack/spark"
SUBMITTED = re.compile(r"Submitted application (application_\d+_\d+)")
# Not needed by a container: the JVM side (shipped as the archive), launch scripts, examples.
_PYSPARK_SKIP = {"jars", "bin", "sbin", "examples", "data", "licenses", "python", "__pycache__"}


def spark_version() -> str:
    from pyspark.version import __version__

    return __version__


def _cache() -> Path:
    d = jars.cache_dir() / "spark-yarn" / spark_version()
    d.mkdir(parents=True, exist_ok=True)
    return d


def _zip_package(root: Path, target: Path, *, skip: set[str] = frozenset()) -> Path:
    """Zip the package folder ``root`` (as ``<name>/...``) into ``target``, once."""
    if target.exists():
        return target
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if path.is_dir() or rel.parts[0] in skip or "__pycache__" in rel.parts:
                continue
            zf.write(path, f"{root.name}/{rel.as_posix()}")
    partial.rename(target)
    return target


def python_archives() -> list[Path]:
    """``pyspark.zip`` and ``py4j-<v>-src.zip``: the wheel's own, else built from the installed packages."""
    lib = local_spark_home() / "python" / "lib"
    shipped = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))]
    if len(shipped) == 2 and all(p.exists() for p in shipped):
        return shipped
    import py4j

    py4j_version = getattr(py4j, "__version__", None) or _dist_version("py4j")
    return [_zip_package(local_spark_home(), _cache() / "pyspark.zip", skip=_PYSPARK_SKIP),
            _zip_package(Path(py4j.__file__).parent, _cache() / f"py4j-{py4j_version}-src.zip")]


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def local_spark_home() -> Path:
    return jars.spark_home()


def spark_jars_archive() -> Path:
    """``pyspark/jars/*.jar`` flat in one uncompressed zip (jars are compressed already)."""
    target = _cache() / "spark-jars.zip"
    if target.exists():
        return target
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as zf:
        for jar in sorted((local_spark_home() / "jars").glob("*.jar")):
            zf.write(jar, jar.name)
    partial.rename(target)
    return target


def hdfs_put(cluster: HadoopCluster, local: list[Path], remote_dir: str) -> list[str]:
    """Copy files into HDFS with Hadoop's own FsShell (``hdfs dfs -put``), skipping ones present.

    Dev-stack only: the JVM client from the pyspark wheel writes at disk speed, where WebHDFS
    through fsspec manages ~15 MB/s.
    """
    import fsspec

    fs = fsspec.filesystem("webhdfs", **cluster.fsspec_options())
    missing = [p for p in local if not fs.exists(f"{remote_dir}/{p.name}")
               or fs.info(f"{remote_dir}/{p.name}")["size"] != p.stat().st_size]
    if missing:
        fs.makedirs(remote_dir, exist_ok=True)
        cp = os.pathsep.join([str(cluster.conf_dir), str(local_spark_home() / "jars" / "*")])
        proc = subprocess.run(["java", "-cp", cp, "org.apache.hadoop.fs.FsShell", "-put", "-f",
                               *map(str, missing), remote_dir], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise UserError(f"hdfs -put into {remote_dir} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return [f"{cluster.default_fs}{remote_dir}/{p.name}" for p in local]


@dataclass(frozen=True)
class YarnSubmit:
    """Everything ``spark-submit --master yarn --deploy-mode cluster`` needs for the reference job."""

    conf: dict[str, str]
    env: dict[str, str]
    jars: list[str] = field(default_factory=list)

    def command(self, job_args: list[str], *, name: str, tags: list[str] | None = None,
                conf: dict[str, str] | None = None,
                application: str | Path = local_spark.REFERENCE_JOB) -> list[str]:
        cmd = [local_spark.spark_submit_binary(), "--master", "yarn", "--deploy-mode", "cluster",
               "--name", name]
        if self.jars:
            cmd += ["--jars", ",".join(self.jars)]
        merged = dict(self.conf)
        if tags:
            merged["spark.yarn.tags"] = ",".join(tags)
        merged.update(conf or {})
        for k, v in merged.items():
            cmd += ["--conf", f"{k}={v}"]
        return [*cmd, str(application), *job_args]

    def submit(self, job_args: list[str], *, name: str, tags: list[str] | None = None,
               conf: dict[str, str] | None = None, timeout: float = 300) -> str:
        """Submit and return the YARN application id (spark-submit returns once YARN accepted it)."""
        proc = subprocess.run(self.command(job_args, name=name, tags=tags, conf=conf), capture_output=True,
                              text=True, env=self.env, timeout=timeout)
        m = SUBMITTED.search(proc.stdout + proc.stderr)
        if proc.returncode != 0 or m is None:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise UserError(f"spark-submit to YARN failed (exit {proc.returncode}): {tail}")
        return m.group(1)


def prepare(cluster: HadoopCluster, *, s3a_jars: list[Path] | None = None,
            extra_conf: dict[str, str] | None = None) -> YarnSubmit:
    """Upload what containers need once (per cluster) and return the submit settings."""
    version = spark_version()
    archive, = hdfs_put(cluster, [spark_jars_archive()], f"{HDFS_ROOT}/{version}")
    py_archives = hdfs_put(cluster, python_archives(), f"{HDFS_ROOT}/{version}/python")
    kafka = hdfs_put(cluster, jars.spark_kafka_jars(), f"{HDFS_ROOT}/{version}/kafka")
    conf = {
        "spark.yarn.archive": archive,
        "spark.yarn.submit.waitAppCompletion": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # Small containers: the dev NodeManager offers 4 GB; AM (driver) + one executor = 2 GB.
        "spark.driver.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.executor.instances": "1",
        "spark.executor.cores": "1",
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "4",
        # One attempt: a failing job must show up as FAILED, not silently restart.
        "spark.yarn.maxAppAttempts": "1",
    }
    conf.update(extra_conf or {})
    env = local_spark.spark_env() | cluster.env() | {"PYSPARK_ARCHIVES_PATH": ",".join(py_archives)}
    return YarnSubmit(conf=conf, env=env, jars=kafka + [f"local:{j}" for j in s3a_jars or []])
