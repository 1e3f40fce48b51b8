"""Build the states the benchmarks measure: a real broker, topics with N partitions, checkpoints in Spark's format.

* :func:`broker` starts one KRaft broker (``devstack.broker``) for the whole bench run.
* :func:`make_topic` creates a topic with ``partitions`` partitions and ``records`` records in each.
* :func:`build_checkpoint` writes a checkpoint of ``batches`` committed batches whose last committed end
  offsets are ``ends - behind`` (so ``aks lag`` sees ``behind`` records per partition), in the exact
  files Spark writes (``metadata``, ``sources/0/0``, ``offsets/N``, ``commits/N`` and their ``.crc``),
  using the byte builders of ``tests/support/checkpoint_factory.py``; the offsets of batch ``b`` grow
  linearly from 0 to the end, so a long history holds many flat stretches, as a slow topic does.
* :func:`commit_group` commits a consumer group at the same position, for ``kafka-consumer-groups``.
* :func:`peer_describe` runs ``kafka-consumer-groups --describe`` as its script does (same JVM options).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_kafka_spark.kafka.offsets import PartitionOffsets, TopicPartition, to_offsets_json  # noqa: E402
from devstack import jars  # noqa: E402
from devstack.broker import LocalBroker  # noqa: E402
from devstack.topics import add_partitions, create_topic  # noqa: E402
from tests.support.checkpoint_factory import (  # noqa: E402
    commit_file,
    hadoop_crc,
    kafka_initial_offsets_file,
    metadata_file,
    offsets_file,
)

#: kafka-run-class.sh defaults (KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS) as of Kafka 4.1.
PEER_JVM = ["-Xmx256M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]
PEER_MAIN = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def broker(data_dir: Path) -> LocalBroker:
    """A started broker; the bench's 5,000-partition topics need a larger heap than the tests' 512 MiB."""
    b = LocalBroker(data_dir=data_dir, heap="1g", extra_config={"log.segment.bytes": "1048576",
                                                                 "num.io.threads": "2", "num.network.threads": "2"})
    return b.start(timeout=120)


def make_topic(bootstrap: str, topic: str, partitions: int, records: int) -> PartitionOffsets:
    """Create ``topic`` and put ``records`` records in every partition; returns the log ends."""
    from confluent_kafka import Producer

    # A KRaft controller refuses more than ~10,000 records in one operation: create, then grow.
    # Generous timeouts: a 5,000-partition topic took over 30 s to appear on a loaded machine.
    create_topic(bootstrap, topic, min(partitions, 4000), timeout=300)
    grown = min(partitions, 4000)
    while grown < partitions:
        grown = min(partitions, grown + 4000)
        add_partitions(bootstrap, topic, grown, timeout=300)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000})
    now = int(time.time() * 1000)
    for r in range(records):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(topic, value=b"x" * 32, partition=p, timestamp=now - (records - r) * 1000)
                    break
                except BufferError:
                    producer.poll(0.1)
    if producer.flush(120):
        raise RuntimeError("records not delivered")
    return {TopicPartition(topic, p): records for p in range(partitions)}


def build_checkpoint(root: Path, ends: PartitionOffsets, *, batches: int, behind: int = 0,
                     pending: bool = False, crc: bool = True) -> Path:
    """A Spark-format checkpoint whose last committed batch ends ``behind`` records before ``ends``."""
    root.mkdir(parents=True, exist_ok=True)
    for rel in ("offsets", "commits", "sources/0"):
        (root / rel).mkdir(parents=True, exist_ok=True)
    _write(root / "metadata", metadata_file(), crc)
    _write(root / "sources" / "0" / "0", kafka_initial_offsets_file({tp: 0 for tp in ends}), crc)
    target = {tp: max(0, o - behind) for tp, o in ends.items()}
    planned = batches + (1 if pending else 0)
    step = 1000  # a trigger per second, the last batch planned now (records are older than their batch)
    start_ts = int(time.time() * 1000) - (planned - 1) * step
    for b in range(planned):
        offs = {tp: o * (b + 1) // batches for tp, o in target.items()} if b < batches else dict(ends)
        line = to_offsets_json(offs)
        _write(root / "offsets" / str(b), offsets_file([line], batch_timestamp_ms=start_ts + b * step), crc)
        if b < batches:
            _write(root / "commits" / str(b), commit_file(), crc)
    return root


def _write(path: Path, data: bytes, crc: bool) -> None:
    path.write_bytes(data)
    if crc:
        (path.parent / f".{path.name}.crc").write_bytes(hadoop_crc(data))


def commit_group(bootstrap: str, group: str, offsets: PartitionOffsets, *, timeout: float = 120.0) -> None:
    """Commit ``group`` at ``offsets`` (an empty group: what Spark's position would look like there).

    On a fresh broker the group coordinator (``__consumer_offsets``) may still be loading: the commit
    then answers COORDINATOR_LOAD_IN_PROGRESS per partition, or is lost, and ``kafka-consumer-groups``
    says "Group not found". So commit, then read the group's offsets back, and repeat until they are
    the ones asked for (or ``timeout`` passes).
    """
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    want = {(tp.topic, tp.partition): o for tp, o in offsets.items()}
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            req = ConsumerGroupTopicPartitions(group, [KTP(t, p, o) for (t, p), o in want.items()])
            for fut in admin.alter_consumer_group_offsets([req]).values():
                fut.result(60)
            got = {}
            # Described first, as the product's group_offsets does: librdkafka crashes the process when an
            # OffsetFetch is answered NOT_COORDINATOR while a fresh broker's coordinator loads (#5040).
            for fut in admin.describe_consumer_groups([group]).values():
                fut.result(60)
            for fut in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values():
                got = {(k.topic, k.partition): k.offset for k in fut.result(60).topic_partitions if not k.error}
            if got == want:
                return
            last = f"{sum(got.get(k) == v for k, v in want.items())} of {len(want)} offsets committed"
        except Exception as exc:   # KafkaException while the coordinator loads
            last = exc
        if time.monotonic() > deadline:
            raise RuntimeError(f"group {group} not committed in {timeout:.0f} s: {last}")
        time.sleep(0.5)


def peer_command(bootstrap: str, group: str) -> list[str]:
    cp = jars.kafka_classpath().as_java_classpath()
    log4j = Path(tempfile.gettempdir()) / "aks-bench-tools-log4j2.properties"   # WARN to stderr, as the script
    if not log4j.exists():
        log4j.write_text("rootLogger.level = WARN\nrootLogger.appenderRef.stderr.ref = STDERR\n"
                         "appender.stderr.type = Console\nappender.stderr.name = STDERR\n"
                         "appender.stderr.target = SYSTEM_ERR\n"
                         "appender.stderr.layout.type = PatternLayout\n"
                         "appender.stderr.layout.pattern = [%d] %p %m (%c)%n\n")
    return ["java", *PEER_JVM, f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, PEER_MAIN,
            "--bootstrap-server", bootstrap, "--describe", "--group", group]


def aks_command(*args: str) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / "aks"), *args]


class Timed(NamedTuple):
    """One process run: wall seconds, peak RSS (KiB), stdout and CPU seconds (user + system, children included).

    CPU time is the figure to compare across runs on a shared machine: other work stretches the wall
    time of both sides, but barely the CPU a run needs.
    """

    wall: float
    rss: int
    out: str
    cpu: float

    @property
    def wrc(self) -> tuple[float, int, float]:
        return self.wall, self.rss, self.cpu


def run_timed(cmd: list[str], env: dict | None = None) -> Timed:
    """Wall seconds, peak RSS (KiB, of the child: GNU time's %M), stdout and CPU seconds (%U + %S) of one run."""
    full = ["/usr/bin/time", "-f", "%M %U %S", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(full, capture_output=True, text=True, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t0
    lines = proc.stderr.strip().splitlines()
    try:
        rss_s, user, system = lines[-1].split()
        rss, cpu = int(rss_s), float(user) + float(system)
    except (ValueError, IndexError):
        rss, cpu = -1, float("nan")
    if proc.returncode not in (0, 1, 2, 3, 4):
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}): {proc.stderr[-800:]}")
    return Timed(wall, rss, proc.stdout, cpu)


def compile_package() -> None:
    """Byte-compile the package once, as ``pip install`` does for a wheel: with PYTHONDONTWRITEBYTECODE
    set (as on this machine) every ``aks`` run of an editable install would otherwise compile every
    module it imports again (~100 ms), which no installed copy pays."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "airflow_kafka_spark")], check=True,
                   stdout=subprocess.DEVNULL)


def build_state_checkpoint(root: Path, *, state_partitions: int = 200, versions: int = 100,
                           delta_bytes: int = 4400) -> Path:
    """The 40,000-file checkpoint of the backup comparison: 100 batches of a 200-partition topic and a
    stateful operator with ``state_partitions`` stores × ``versions`` ``.delta`` files (random bodies,
    as compressed state is), each with its ``.crc``: 40,406 files, 89 MB."""
    shutil.rmtree(root, ignore_errors=True)
    build_checkpoint(root, {TopicPartition("t200", p): 1000 for p in range(200)}, batches=versions)
    meta = root / "state" / "0" / "_metadata"
    meta.mkdir(parents=True)
    _write(meta / "metadata", b'v1\n{"operatorInfo":{"operatorId":0,"operatorName":"stateStoreSave"},'
           b'"stateStoreInfo":[{"storeName":"default","numColsPrefixKey":0,"numPartitions":%d}]}' % state_partitions,
           True)
    for p in range(state_partitions):
        folder = root / "state" / "0" / str(p)
        folder.mkdir(parents=True)
        for v in range(1, versions + 1):
            _write(folder / f"{v}.delta", os.urandom(delta_bytes), True)
    return root


def spark_checkpoint(bootstrap: str, work: Path, *, partitions: int = 4, batches: int = 100) -> tuple[Path, str]:
    """A checkpoint written by real Spark (the reference job, ``--stateful dedup``, ``availableNow``)
    reading topic ``spark<partitions>`` of this broker in ``batches`` batches; returns it and its topic."""
    from airflow_kafka_spark.jobs import reference_job
    from devstack import jars as devjars
    from devstack.produce import produce

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_HOME", None)
    from pyspark.sql import SparkSession

    topic, ck = f"spark{partitions}", work / "ck"
    if (ck / "commits" / str(batches - 1)).exists():
        return ck, topic
    shutil.rmtree(work, ignore_errors=True)
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, batches * 200, partitions=partitions)
    spark = (SparkSession.builder.master("local[2]").appName("bench-peer")
             .config("spark.jars", ",".join(str(j) for j in devjars.spark_kafka_jars()))
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        args = reference_job.parse_args([
            "--topics", topic, "--bootstrap-servers", bootstrap, "--checkpoint", str(ck),
            "--output", str(work / "out"), "--sink", "idempotent", "--trigger", "availableNow",
            "--stateful", "dedup", "--max-offsets-per-trigger", "200"])
        reference_job.build_query(spark, args).awaitTermination()
    finally:
        spark.stop()
    return ck, topic
