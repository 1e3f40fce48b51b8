"""The local demo on embedded defaults: a real broker, the reference job under spark-submit, a graceful stop.

``./bin/demo`` runs it. Everything lives under ``demo-output/`` (or ``--workdir``) and the broker is
stopped at the end. It prints what was produced, what the sink holds (matched record by record)
and where the checkpoint stands against Kafka.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from airflow_kafka_spark.errors import UserError


def _step(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(workdir: Path, records: int, partitions: int) -> int:
    from airflow_kafka_spark.checkpoint import read_checkpoint
    from airflow_kafka_spark.stack import oracle, spark, topics
    from airflow_kafka_spark.stack.broker import LocalBroker
    from airflow_kafka_spark.stack.produce import produce

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    topic = "orders"
    _step("starting a single-node Kafka broker (KRaft) ...")
    t0 = time.monotonic()
    with LocalBroker(data_dir=workdir / "kafka") as broker:
        _step(f"broker ready at {broker.bootstrap_servers} in {time.monotonic() - t0:.1f}s")
        topics.create_topic(broker.bootstrap_servers, topic, partitions)
        produced = produce(broker.bootstrap_servers, topic, records, partitions=partitions)
        _step(f"produced {len(produced)} records to {topic} ({partitions} partitions)")
        checkpoint, output, marker = workdir / "checkpoint", workdir / "sink", workdir / "STOP"
        args = ["--topics", topic, "--bootstrap-servers", broker.bootstrap_servers, "--checkpoint", str(checkpoint),
                "--output", str(output), "--sink", "idempotent", "--trigger", "processing:1s",
                "--max-offsets-per-trigger", str(max(1, records // 4)), "--stop-marker", str(marker)]
        _step("submitting the reference job with spark-submit (local[*]) ...")
        proc = spark.start_job(args, workdir / "job.log", master="local[*]")
        ends = {tp: o for tp, o in _ends(broker.bootstrap_servers, topic).items()}
        deadline = time.monotonic() + 300
        last = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise UserError(f"the streaming job exited early ({proc.returncode}); see {workdir / 'job.log'}")
            st = read_checkpoint(str(checkpoint))
            if st.latest_committed and st.latest_committed.batch_id != last:
                last = st.latest_committed.batch_id
                _step(f"batch {last} committed: {sum(st.latest_committed.kafka_offsets.values())} of "
                      f"{sum(ends.values())} records processed")
            if st.latest_committed and st.latest_committed.kafka_offsets == ends:
                break
            time.sleep(1)
        _step("writing the stop marker; the job stops on a batch boundary ...")
        marker.touch()
        rc = proc.wait(180)
        status = spark.parse_statuses((workdir / "job.log").read_text())
        st = read_checkpoint(str(checkpoint))
        cmp = oracle.compare(produced, oracle.read_sink(output, "idempotent"))
    print()
    print(f"job exit code:        {rc} ({status[-1] if status else 'no status'})")
    print(f"produced:             {cmp.produced}")
    print(f"consumed (sink rows): {cmp.consumed_rows}  missing={len(cmp.missing)} duplicated={cmp.duplicate_count}")
    print(f"checkpoint:           {checkpoint}")
    print(f"  query id            {st.query_id}")
    print(f"  last planned batch  {st.latest_planned.batch_id if st.latest_planned else None}")
    print(f"  last committed      {st.latest_committed.batch_id if st.latest_committed else None}")
    for tp, off in sorted((st.latest_committed.kafka_offsets if st.latest_committed else {}).items()):
        print(f"  {tp!s:<20} checkpoint={off:<6} kafka end={ends.get(tp)}")
    return 0 if rc == 0 and cmp.exact else 1


def _ends(bootstrap: str, topic: str):
    from airflow_kafka_spark.kafka_view import KafkaView

    return KafkaView({"bootstrap.servers": bootstrap}).broker_state([topic]).latest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", type=Path, default=Path("demo-output"))
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--partitions", type=int, default=3)
    a = p.parse_args(argv)
    try:
        return run(a.workdir.resolve(), a.records, a.partitions)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
