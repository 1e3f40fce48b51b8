"""A real S3-compatible object store for the dev stack: S3Proxy with its filesystem backend.

Why S3Proxy (``org.gaul:s3proxy`` 4.1.0 from Maven Central, see ``jvm/s3proxy/pom.xml``): it is an
HTTP server speaking the S3 REST protocol (SigV4, multipart, ListObjectsV2), so Spark's S3A (AWS
SDK v2) and Python's s3fs (aiobotocore) take their real request paths; it comes from the registry
the stack already uses; it starts in about 2 s in 256 MB; and since 4.x it honours conditional
writes (``If-None-Match: *`` and ``If-Match: <etag>`` on PutObject answer 412), which exclusive-
create locks on object stores need. Objects are plain files under ``<data_dir>/blobs/<bucket>/``.

Known quirk (S3Proxy, not S3): ``GetBucketLocation`` answers for any bucket name, so s3fs's
``exists("<bucket>")`` is True for a missing bucket and ``mkdir("<bucket>")`` refuses; the bucket
is therefore created here with ``CreateBucket`` directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import maven, process
from devstack.broker import free_port

LOGBACK = """\
<configuration>
  <appender name="F" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{ISO8601}} %-5level %logger{{20}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="F"/></root>
</configuration>
"""

REGION = "us-east-1"


def s3a_jars() -> list[Path]:
    """hadoop-aws (the pyspark wheel's Hadoop version) and the AWS SDK v2 bundle (~650 MB) for ``s3a://``."""
    return maven.fetch("s3a")


@dataclass
class S3Store:
    """Lifecycle of one S3Proxy server with one bucket: ``start()`` returns once the bucket exists."""

    data_dir: Path
    bucket: str = "devstack"
    access_key: str = "devstack"
    secret_key: str = "devstack-secret-key"
    port: int = field(default_factory=free_port)
    heap: str = "256m"
    process: subprocess.Popen | None = None
    start_seconds: float = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "s3proxy.log"

    def url(self, key: str = "") -> str:
        """``s3://<bucket>/<key>`` (what Python users write; Spark needs :meth:`s3a_url`)."""
        return f"s3://{self.bucket}/{key.lstrip('/')}"

    def s3a_url(self, key: str = "") -> str:
        return f"s3a://{self.bucket}/{key.lstrip('/')}"

    def storage_options(self) -> dict[str, object]:
        """``fsspec.filesystem("s3", **options)`` / s3fs options for this store."""
        return {
            "key": self.access_key,
            "secret": self.secret_key,
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": REGION},
            # Path-style: bucket names are not resolvable host names here.
            "config_kwargs": {"s3": {"addressing_style": "path"}},
        }

    def spark_conf(self) -> dict[str, str]:
        """The ``spark.hadoop.fs.s3a.*`` settings for ``s3a://`` URLs on this store."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": self.access_key,
            "spark.hadoop.fs.s3a.secret.key": self.secret_key,
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }

    def filesystem(self):
        """A fresh s3fs filesystem on this store (no instance cache: tests restart stores)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())

    def start(self, timeout: float = 60.0) -> S3Store:
        if self.process is not None:
            return self
        t0 = time.monotonic()
        jar_list = maven.fetch("s3proxy")
        blobs = self.data_dir / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "s3proxy.conf"
        props.write_text("".join(f"{k}={v}\n" for k, v in {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": "filesystem-nio2",
            "jclouds.filesystem.basedir": str(blobs),
            "jclouds.identity": self.access_key,
            "jclouds.credential": self.secret_key,
        }.items()))
        (self.data_dir / "logback.xml").write_text(LOGBACK.format(log=self.log_file))
        self.process = process.spawn(
            ["java", f"-Xmx{self.heap}", f"-Dlogback.configurationFile={self.data_dir / 'logback.xml'}",
             "-cp", os.pathsep.join(str(j) for j in jar_list), "org.gaul.s3proxy.Main", "--properties", str(props)],
            stdout=self.data_dir / "s3proxy.out", pid_file=self.data_dir / "s3proxy.pid")
        try:
            self._wait_ready(t0 + timeout)
            self.filesystem().call_s3("create_bucket", Bucket=self.bucket)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        def probe() -> str | None:
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                return None
            except urllib.error.HTTPError:
                return None  # an S3 error document (anonymous request): the server answers
            except OSError as exc:
                return str(exc)

        last = process.wait_ready(
            probe, deadline=deadline, interval=0.1,
            exited=[(self.process, lambda rc: f"S3Proxy exited with {rc} at start; see {self.log_file}")])
        if last is not None:
            raise UserError(f"S3Proxy did not answer on {self.endpoint} in time ({last}); see {self.log_file}")

    def stop(self, timeout: float = 20.0) -> None:
        process.stop_group(self.process, timeout)
        self.process = None

    def __enter__(self) -> S3Store:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    """``python -m devstack.s3 [DATA_DIR]``: run the object store until Ctrl-C."""
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="devstack-s3-"))
    store = S3Store(data_dir=data)
    return process.serve(
        store, lambda: (f"S3 store ready in {store.start_seconds:.1f}s at {store.endpoint}, bucket "
                        f"{store.bucket!r} (access key {store.access_key}, secret {store.secret_key}); "
                        f"objects under {data / 'blobs'}"),
        lambda: store.process is not None and store.process.poll() is None)


if __name__ == "__main__":
    raise SystemExit(main())
