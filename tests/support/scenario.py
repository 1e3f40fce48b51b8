"""One scenario job for the Spark-oracle tests, wherever its checkpoint lives (local, HDFS, S3).

Shared by tests/integration/test_scenarios.py (local disk) and tests/cluster/test_scenarios_cluster.py
(HDFS, S3) so both build a scenario the same way: create the topic, produce records and keep what
Kafka acknowledged, run the reference query with availableNow on the shared SparkSession, and
compare the sink with the produced records. Only where the checkpoint lives differs: Spark writes
it under ``spark_checkpoint`` (a path, ``hdfs://…`` or ``s3a://…``); the product and the test open
the same place as ``checkpoint_url`` with ``storage_options`` (a path, ``hdfs://`` or ``s3://``).
The sink stays on local disk: the oracle reads it there.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack import oracle
from devstack.broker import LocalBroker
from devstack.produce import ProducedRecord, produce
from tests.support import spark_session


@dataclass
class Job:
    """One topic set, one checkpoint, one sink — and everything that was produced."""

    broker: LocalBroker
    root: Path
    topics: list[str]
    sink: str = "idempotent"
    partitions: int = 3
    spark_checkpoint: str | None = None     # where Spark writes it (default: <root>/checkpoint)
    checkpoint_url: str | None = None       # how the product opens it (default: the same path)
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.checkpoint = self.root / "checkpoint"
        self.spark_checkpoint = self.spark_checkpoint or str(self.checkpoint)
        self.checkpoint_url = self.checkpoint_url or str(self.checkpoint)
        self.output = self.root / "out"
        self.produced: list[ProducedRecord] = []

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap_servers

    def produce(self, n: int, *, topic: str | None = None, partitions: int | None = None,
                start_id: int | None = None, **kw) -> list[ProducedRecord]:
        start = len(self.produced) if start_id is None else start_id
        recs = produce(self.bootstrap, topic or self.topics[0], n, partitions=partitions or self.partitions,
                       start_id=start, **kw)
        self.produced += recs
        return recs

    def run(self, *, topics: list[str] | None = None, **options) -> spark_session.RunResult:
        return spark_session.run_available_now(self.bootstrap, ",".join(topics or self.topics),
                                               self.spark_checkpoint, self.output, sink=self.sink, **options)

    def sink_rows(self) -> list[dict]:
        return oracle.read_sink(self.output, self.sink)

    def compare(self, produced=None) -> oracle.Comparison:
        return oracle.compare(self.produced if produced is None else produced, self.sink_rows())

    def validate(self, kafka_bootstrap: str | None = None, **options):
        """The in-process validator on this checkpoint (the cluster tests go through ``aks validate``)."""
        from airflow_kafka_spark.verdict.options import DeployOptions
        from airflow_kafka_spark.verdict.validate import validate

        opts = DeployOptions(**({"topics": self.topics} | options))
        return validate(checkpoint_location=self.checkpoint_url,
                        kafka_config={"bootstrap.servers": kafka_bootstrap or self.bootstrap}, options=opts,
                        storage_options=self.storage_options or None)

    def filesystem(self) -> tuple[Any, str]:
        """The checkpoint's fsspec file system and its path there (to damage it as a crash would).

        Opened as the product opens it (``hdfs://`` through WebHDFS, no libhdfs).
        """
        from airflow_kafka_spark._util.fs import open_location

        loc = open_location(self.checkpoint_url, self.storage_options or None)
        return loc.fs, loc.path

    def committed(self) -> dict:
        """End offsets of the last committed batch, as the product's reader sees them."""
        from airflow_kafka_spark.checkpoint.reader import read_checkpoint

        state = read_checkpoint(self.checkpoint_url, storage_options=self.storage_options or None)
        return state.latest_committed.kafka_offsets


def drop_latest(j: Job, log: str, *, back: int = 0, keep_crc: bool = False) -> int:
    """Delete ``<log>/<latest - back>`` as a crash or an edit would; return the batch id.

    A crash between ``offsets/N`` and ``commits/N`` leaves no commit file and, on a local file
    system, no ``.N.crc`` either (they are renamed together); HDFS and S3A keep no ``.crc`` files.
    """
    fs, root = j.filesystem()
    folder = posixpath.join(root, log)
    names = [posixpath.basename(p.rstrip("/")) for p in fs.ls(folder, detail=False)]
    n = max(int(name) for name in names if name.isdigit()) - back
    fs.rm(posixpath.join(folder, str(n)))
    crc = posixpath.join(folder, f".{n}.crc")
    if not keep_crc and fs.exists(crc):
        fs.rm(crc)
    return n


def short(text: str | None, n: int = 160) -> str:
    """The telling part of a Spark failure (its data-loss / corruption marker onwards), on one line."""
    if not text:
        return ""
    for marker in ("KAFKA_DATA_LOSS", "COULD_NOT_READ", "OffsetOutOfRange", "Cannot fetch", "offset was changed",
                   "have been deleted", "PartitionDoesNotStartFromZero", "Incomplete log", "doesn't exist",
                   "concurrently", "FileAlreadyExists", "Exception:"):
        i = text.find(marker)
        if i >= 0:
            return " ".join(text[i:i + n].split())
    return " ".join(text[:n].split())


def write_observed(rows: list[dict], name: str) -> None:
    """Keep what Spark did in ``.cache/<name>.json`` (the source of docs/scenarios.md's observed columns)."""
    if rows:
        out = Path(__file__).resolve().parents[2] / ".cache" / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=1))
