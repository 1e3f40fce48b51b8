"""A user's DStream jar (tests/support/user_jobs/payments-dstream) managed by the product with the agent.

Shared by the Spark 4.2 test (runtime functions) and the Spark 3.5 test (the safe-restart DAG): the
registry entry as a user writes it (``kind: dstream``, no ``integration`` key: the agent is the
default), the job's own ``.properties`` file, and the oracle: Spark's own output. The job writes one
file per (batch, Kafka partition), named by the range it covers, each record on its own line; a record
read again lands in a second file, so the sink counts every time Spark wrote a record.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_kafka_spark.agent import report_path
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.kafka.view import KafkaView
from airflow_kafka_spark.registry.loader import load_registry
from airflow_kafka_spark.registry.model import JobSpec
from devstack import user_jobs
from devstack.produce import ProducedRecord
from tests.support.waiting import wait_until

JOB = "payments"
PARTITIONS = 2


@dataclass(frozen=True)
class Staged:
    """Where one test's job lives: its registry, its properties file and its output folder."""

    registry: Path
    props: Path
    output: Path
    data: Path

    def spec(self) -> JobSpec:
        return load_registry(str(self.registry)).get(JOB)


def stage(tmp_path: Path, runtime: str, *, bootstrap: str, topic: str, spark_version: str | None) -> Staged:
    """Install the jar and its connector jars under the data root and write the user's registry entry."""
    build = user_jobs.build_dstream(runtime)
    data = tmp_path / "data"
    apps = data / "apps"
    (apps / "deps").mkdir(parents=True)
    jar = Path(shutil.copy(build.jar, apps / "payments-dstream.jar"))
    deps = [Path(shutil.copy(d, apps / "deps" / d.name)) for d in build.deps]
    output = data / "sinks" / JOB
    props = user_jobs.write_dstream_properties(apps / "payments.properties", bootstrap=bootstrap, topics=topic,
                                               group=f"payments-{topic}", output=output, batch_seconds=2)
    entry: dict[str, Any] = {
        "name": JOB, "kind": "dstream", "group": f"payments-{topic}", "topics": [topic],
        "application": str(jar), "main_class": user_jobs.DSTREAM_MAIN_CLASS, "application_args": [str(props)],
        "checkpoint": str(data / "state" / JOB), "backup_root": str(data / "backups"), "sink": "idempotent",
        "stop_timeout_s": 120, "health_gate": {"min_batches": 2, "timeout_s": 240},
        # spark.jars rather than jars: on a local master a job naming no spark.jars gets the SQL Kafka connector
        "spark_conf": {"spark.jars": ",".join(str(d) for d in deps), "spark.driver.memory": "640m"},
    }
    if spark_version:
        entry["spark_version"] = spark_version
    registry = tmp_path / "streaming_jobs.yaml"
    registry.write_text(yaml.safe_dump({"version": 1, "allowed_roots": [str(data)], "jobs": [entry]}, sort_keys=False))
    return Staged(registry, props, output, data)


def written(output: Path) -> Counter[tuple[str, int, int]]:
    """Every (topic, partition, offset) the job wrote, with how many times it was written."""
    out: Counter[tuple[str, int, int]] = Counter()
    for f in sorted(output.glob("*.tsv")) if output.is_dir() else ():
        for line in f.read_text().splitlines():
            topic, partition, offset, _ = line.split("\t", 3)
            out[(topic, int(partition), int(offset))] += 1
    return out


def written_end(output: Path) -> dict[TopicPartition, int]:
    """Per partition, one past the highest offset the job wrote: where its processed output ends."""
    end: dict[TopicPartition, int] = {}
    for (t, p, o) in written(output):
        tp = TopicPartition(t, p)
        end[tp] = max(end.get(tp, 0), o + 1)
    return end


def report(spec: JobSpec) -> dict[str, Any]:
    path = Path(report_path(spec.checkpoint))
    return json.loads(path.read_text()) if path.exists() else {}


def dstream(doc: dict[str, Any]) -> dict[str, Any]:
    return doc.get("dstream") or {}


def ranges_end(batch: dict[str, Any], key: str) -> dict[TopicPartition, int]:
    return {TopicPartition(r["topic"], int(r["partition"])): int(r[key]) for r in batch.get("offset_ranges") or ()}


def processed_end(doc: dict[str, Any]) -> dict[TopicPartition, int]:
    end = dstream(doc).get("processed_end") or {}
    return {TopicPartition(t, int(p)): int(o) for t, parts in end.items() for p, o in parts.items()}


def check_graceful_stop(stop: dict[str, Any], doc: dict[str, Any], output: Path) -> dict[str, Any]:
    """The product's stop and the agent's report agree, and Spark's output ends where the report says.

    Returns the report's DStream stop section (for the numbers the test prints).
    """
    assert (stop["outcome"], stop["graceful"], stop["killed"]) == ("STOPPED", True, False), stop
    # the product says what a DStream stop was (no checkpoint batch ids to name): runtime/kinds.py
    assert stop["message"].startswith("stopped gracefully") and "batch None" not in stop["message"], stop
    ds = dstream(doc)
    ds_stop = ds.get("stop") or {}
    assert ds_stop.get("graceful_stop_returned") is True and ds_stop.get("stop_error") is None, ds_stop
    assert ds_stop.get("batches_not_completed") == [] and ds_stop.get("stopped_on_boundary") is True, ds_stop
    last = ds["last_completed_batch"]
    # Spark's own JobGenerator says the last batch it processed is the last one the agent saw complete
    assert ds_stop["spark_last_processed_batch_ms"] == last["time_ms"] == ds_stop["last_submitted_batch_ms"], ds_stop
    assert stop["job_reported"]["stopped_on_boundary"] is True and "dstream_graceful" in stop["job_reported"]["how"]
    # Spark as the oracle: the files the job wrote end exactly at the processed end the agent reported,
    # and the last batch's ranges end there too (a cut batch would have written less, or more)
    ended = {tp: o for tp, o in processed_end(doc).items() if o}
    assert written_end(output) == ended, (written_end(output), ended)
    assert {tp: o for tp, o in ranges_end(last, "until").items() if o} == {
        tp: o for tp, o in processed_end(doc).items() if o}
    return ds_stop


def check_stop_witness(stop: dict[str, Any]) -> dict[tuple[str, int], int]:
    """What the product's stop kept of the agent's report (``job_reported``, in the DAG's XCom): a graceful
    stop of the StreamingContext with every batch completed. Returns its processed end per partition."""
    assert (stop["outcome"], stop["graceful"], stop["killed"]) == ("STOPPED", True, False), stop
    assert stop["message"].startswith("stopped gracefully"), stop
    seen = stop["job_reported"]
    assert seen["stopped_on_boundary"] is True and "dstream_graceful" in seen["how"], seen
    ds = seen["dstream"]
    assert ds["graceful_stop_returned"] is True and ds["batches_not_completed"] == [], ds
    return {(t, int(p)): int(o) for t, parts in ds["processed_end"].items() for p, o in parts.items()}


def wait_group_caught_up(bootstrap: str, spec: JobSpec, produced: list[ProducedRecord], timeout: float) -> None:
    """Until the job's group has committed every produced record (``commitAsync`` trails by one batch:
    the job's next, empty, batch sends the last commit)."""
    ends: dict[tuple[str, int], int] = {}
    for r in produced:
        ends[(r.topic, r.partition)] = max(ends.get((r.topic, r.partition), 0), r.offset + 1)

    def caught_up() -> bool:
        view = KafkaView({"bootstrap.servers": bootstrap})
        try:
            now = view.group_offsets(spec.group or "", spec.topics)
        finally:
            view.close()
        return {(tp.topic, tp.partition): o for tp, o in now.items()} == ends
    wait_until(caught_up, timeout=timeout, interval=1.0, what="the group to commit every record")
