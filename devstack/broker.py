"""A real single-node Apache Kafka broker (KRaft, broker+controller in one JVM) for demos and tests.

Started from the jars fetched by :mod:`devstack.jars` with plain ``java``: no
ZooKeeper, no Docker. Each broker gets free ports on 127.0.0.1, its own data folder and its own log
file (kept after a failure). Settings make retention observable within seconds: small segments,
a 1 s retention check, and immediate segment deletion once retention passes them.
"""

from __future__ import annotations

import base64
import random
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from airflow_kafka_spark.errors import UserError
from devstack import jars, process

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1, chosen *below* the kernel's ephemeral range.

    An ephemeral port (what binding to port 0 gives) can be taken by any outgoing connection
    between this call and the server's own bind, which happens seconds later in a JVM: a CI run
    lost every cluster test to ``BindException: Address already in use`` on a minicluster port that
    way. Ports below the range are only ever taken by listeners, and each is handed out once per process.
    """
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(500):
        port = rng.randint(max(1025, low - 12000), low - 1)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:   # a crowded machine: the old way
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def kafka_uuid() -> str:
    """A Kafka ``Uuid`` in its base64 text form (what ``kafka-storage random-uuid`` prints).

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``: ``format -t -abc…`` reads the id as
    an option and fails (one broker start in 64 did).
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclass
class LocalBroker:
    """Lifecycle of one local broker: ``start()`` waits until metadata requests answer."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    heap: str = "512m"
    extra_config: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    cluster_id: str = ""

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def config(self) -> dict[str, str]:
        cfg = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "3",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Retention that bites within seconds in tests.
            "log.retention.check.interval.ms": "1000",
            "log.segment.bytes": "1048576",
            "log.segment.delete.delay.ms": "0",
            "file.delete.delay.ms": "0",
        }
        cfg.update(self.extra_config)
        return cfg

    def _java(self, main_class: str, *args: str, **kw) -> subprocess.CompletedProcess:
        cp = jars.kafka_classpath().as_java_classpath()
        return subprocess.run(
            ["java", f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}", "-cp", cp,
             main_class, *args],
            capture_output=True, text=True, **kw)

    def start(self, timeout: float = 60.0) -> LocalBroker:
        if self.process is not None:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.config().items()))
        (self.data_dir / "log4j2.properties").write_text(LOG4J2.format(log=self.log_file))
        meta = self.data_dir / "logs" / "meta.properties"
        if not meta.exists():
            self.cluster_id = kafka_uuid()
            fmt = self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props))
            if fmt.returncode != 0:
                raise UserError(f"kafka-storage format failed: {fmt.stderr.strip()[-400:]}")
        else:
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    self.cluster_id = line.split("=", 1)[1]
        cp = jars.kafka_classpath().as_java_classpath()
        self.process = process.spawn(
            ["java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
             f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
             "-cp", cp, "kafka.Kafka", str(props)],
            stdout=self.data_dir / "broker.stdout", pid_file=self.data_dir / "broker.pid")
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        from airflow_kafka_spark.kafka.client import with_log

        admin = None

        def probe() -> str | None:
            nonlocal admin
            if admin is None:
                # Wait for the port first: librdkafka logs every refused connection.
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                except OSError as exc:
                    return str(exc)
                admin = AdminClient(with_log({"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": 2000}))
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers and md.controller_id >= 0:
                    return None
                return "no broker or controller in the metadata yet"
            except Exception as exc:  # not ready yet
                return str(exc)

        last = process.wait_ready(
            probe, deadline=time.monotonic() + timeout, interval=0.2,
            exited=[(self.process, lambda rc: f"Kafka broker exited with {rc} at start; see {self.log_file}")])
        if last is not None:
            self.stop()
            raise UserError(f"Kafka broker did not answer metadata requests in {timeout:.0f}s ({last}); "
                            f"see {self.log_file}")

    def stop(self, timeout: float = 30.0) -> None:
        process.stop_group(self.process, timeout)
        self.process = None

    def run_tool(self, main_class: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run a Kafka command-line tool (e.g. kafka-consumer-groups) from the same jars."""
        return self._java(main_class, *args, timeout=timeout)

    def consumer_groups(self, *args: str) -> str:
        """``kafka-consumer-groups.sh --bootstrap-server ... <args>``: an independent witness for lag."""
        proc = self.run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                             "--bootstrap-server", self.bootstrap_servers, *args)
        if proc.returncode != 0:
            raise RuntimeError(f"kafka-consumer-groups failed: {proc.stderr[-500:]}")
        return proc.stdout

    def __enter__(self) -> LocalBroker:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    """``python -m devstack.broker [DATA_DIR]``: run a broker until Ctrl-C."""
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else jars.cache_dir() / "broker"
    try:
        broker = LocalBroker(data_dir=data).start()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"Kafka broker ready at {broker.bootstrap_servers} (cluster id {broker.cluster_id}, data {data})")
    try:
        broker.process.wait()
    except KeyboardInterrupt:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
