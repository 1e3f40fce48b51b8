"""The reference Structured Streaming job: Kafka -> sink, with a checkpoint and a graceful stop.

It is what the demo, the tests and the example DAGs manage, and a template to copy. Run it with
``spark-submit`` and the connector jars (``devstack.spark.submit_command``)::

    spark-submit --jars ... reference_job.py --topics orders --bootstrap-servers 127.0.0.1:9092 \
        --checkpoint /data/ckpt --output /data/out --sink idempotent --stop-marker /data/STOP

Every output row carries ``topic, partition, offset, key, value, batch_id`` so a sink can be
compared with what was produced, record by record.

Sinks:
  * ``parquet``    Spark's file sink (keeps ``<output>/_spark_metadata``, a batch-id keyed log).
  * ``idempotent`` foreachBatch writing ``<output>/query=<query id>/batch=<id>`` with overwrite: a
                   replayed batch replaces its own output, a new checkpoint gets a new folder.
  * ``append``     foreachBatch appending: a replayed batch is written twice (duplicates), which is
                   what a non-idempotent sink (JDBC insert, a plain Kafka producer) does.

Graceful stop: when the ``--stop-marker`` file appears (on any Hadoop file system: local, HDFS,
S3A; it is read from the driver JVM), the job waits until no trigger is active,
stops the query, and, if a batch was cut anyway (``offsets/N`` without ``commits/N``), runs one
``once`` pass on the same checkpoint, which replays exactly that batch's recorded range. A job that
is always behind never shows a gap between batches; after ``--stop-grace`` seconds it is stopped
inside a batch and that batch is replayed the same way.
It exits 0 only when the last planned batch is committed; it prints one JSON status line.

Compatibility probe (``--aks-probe``, docs/probe.md): the product starts the new application on a
staged copy of the checkpoint to learn whether Spark accepts it. The query then writes to Spark's
``noop`` sink (never the real one), runs the one batch the staged copy has pending (``once``
trigger) and exits: 0 when the batch ran, 1 with Spark's error otherwise. It prints
``AKS_PROBE {...}`` lines: the first acknowledges the swapped sink, the last carries the outcome.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--topics", required=True, help="comma separated topics (subscribe)")
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--starting-offsets", default="earliest",
                   help="earliest | latest | Spark offsets JSON; used only when the checkpoint is new")
    p.add_argument("--starting-offsets-file", help="read --starting-offsets from this file (a reset plan)")
    p.add_argument("--fail-on-data-loss", default="true", choices=["true", "false"])
    p.add_argument("--max-offsets-per-trigger", type=int)
    p.add_argument("--trigger", default="processing:1s", help="processing:<interval> | availableNow")
    p.add_argument("--sink", default="idempotent", choices=["parquet", "idempotent", "append"])
    p.add_argument("--stateful", default="none", choices=["none", "dedup", "count_by_key"],
                   help="add a stateful stage (changes the checkpoint in a way Spark cannot recover from)")
    p.add_argument("--stop-marker", help="stop on a batch boundary when this file appears")
    p.add_argument("--stop-grace", type=float, default=15.0,
                   help="seconds to wait for a gap between batches before stopping inside one (then replayed)")
    p.add_argument("--sleep-in-batch", type=float, default=0.0, help="widen kill windows in tests")
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--query-name", default="reference_job")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra kafka.* consumer options (e.g. kafka.security.protocol=SASL_SSL)")
    p.add_argument("--fail-at-start", action="store_true", help="exit 1 right away (a broken build, for tests)")
    p.add_argument("--aks-probe", action="store_true",
                   help="compatibility probe: noop sink, one batch (the staged checkpoint's pending one), then exit")
    return p.parse_args(argv)


def _status(**fields) -> None:
    print("REFERENCE_JOB_STATUS " + json.dumps(fields, sort_keys=True), flush=True)


def _read_small_file(spark, path: str) -> str:
    """A small text file read by the driver through Hadoop's FileSystem (in cluster mode the file sits
    beside an HDFS/S3 checkpoint). Not ``spark.read.text(...).collect()``: that is a Spark job, which
    waits for an executor before the streaming query can even start; a restart with recorded
    starting offsets paid it inside its downtime (docs/benchmarks.md, round 10)."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    stream = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(hpath)
    try:
        return jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def build_query(spark, args: argparse.Namespace, *, trigger: str | None = None):
    from pyspark.sql import functions as F

    starting = args.starting_offsets
    if args.starting_offsets_file:
        starting = _read_small_file(spark, args.starting_offsets_file).strip()
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topics)
              .option("startingOffsets", starting)
              .option("failOnDataLoss", args.fail_on_data_loss))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    for kv in args.kafka_option:
        key, _, value = kv.partition("=")
        reader = reader.option(key if key.startswith("kafka.") else f"kafka.{key}", value)
    df = reader.load().select(
        "topic", "partition", "offset",
        F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
        F.col("timestamp"))

    if args.stateful == "dedup":
        # A stateful operator that still emits every record once: the sink stays comparable.
        df = df.dropDuplicates(["topic", "partition", "offset"])
    elif args.stateful == "count_by_key":
        df = df.groupBy("key").count()

    writer = df.writeStream.queryName(args.query_name).option("checkpointLocation", args.checkpoint)
    mode = "update" if args.stateful == "count_by_key" else "append"
    if getattr(args, "aks_probe", False):
        return start_probe(writer, mode)
    trig = trigger or args.trigger
    if trig == "availableNow":
        writer = writer.trigger(availableNow=True)
    elif trig == "once":
        writer = writer.trigger(once=True)  # runs exactly one batch: the pending one, when there is one
    elif trig.startswith("processing:"):
        interval = trig.split(":", 1)[1]
        if interval[-1:].isalpha() and interval[:-1].replace(".", "").isdigit():
            # Spark wants "1 second"; accept the compact forms people type (500ms, 1s, 2m).
            unit = {"s": "seconds", "m": "minutes", "h": "hours"}.get(interval[-1], "")
            interval = f"{interval[:-1]} {unit}" if unit else interval
        if interval.endswith("ms") and interval[:-2].isdigit():
            interval = f"{interval[:-2]} milliseconds"
        writer = writer.trigger(processingTime=interval)
    else:
        raise SystemExit(f"error: unknown --trigger {trig!r}; use processing:<interval> or availableNow")

    if args.sink == "parquet":
        if args.stateful == "count_by_key":
            raise SystemExit("error: the parquet file sink needs append mode; use --stateful dedup or none")
        return writer.format("parquet").option("path", args.output).outputMode("append").start()

    query_id_holder: dict[str, str] = {}

    def query_id() -> str:
        # The query id lives in <checkpoint>/metadata, written before the first batch runs. A new
        # checkpoint (after a reset) has a new id, so its batch ids cannot collide with old output.
        if "id" not in query_id_holder:
            text = "".join(r.value for r in spark.read.text(args.checkpoint.rstrip("/") + "/metadata").collect())
            query_id_holder["id"] = json.loads(text)["id"]
        return query_id_holder["id"]

    def write_batch(batch_df, batch_id: int) -> None:
        out = batch_df.withColumn("batch_id", F.lit(batch_id))
        if args.sleep_in_batch:
            time.sleep(args.sleep_in_batch)
        if args.sink == "idempotent":
            out.write.mode("overwrite").json(f"{args.output}/query={query_id()}/batch={batch_id}")
        else:
            out.write.mode("append").json(args.output)

    return writer.foreachBatch(write_batch).outputMode(mode).start()


PROBE_PREFIX = "AKS_PROBE "


def start_probe(writer, mode: str):
    """The probe's side of the contract: the same query into the ``noop`` sink, one batch (``once``).

    Same output mode as the real sink (Spark checks it against the plan). ``once`` runs exactly the
    batch the staged checkpoint has pending and plans no new one.
    """
    print(PROBE_PREFIX + json.dumps({"event": "sink", "sink": "noop", "trigger": "once"}), flush=True)
    return writer.format("noop").outputMode(mode).trigger(once=True).start()


def run_probe(query) -> int:
    """Wait for the probe's one batch; print its outcome; 0 if it ran, 1 with Spark's error if not."""
    error = None
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: Spark's own error class is in the text
        error = str(exc)
    if error is None and query.exception() is not None:
        error = str(query.exception())
    progress = query.lastProgress or {}
    print(PROBE_PREFIX + json.dumps({"event": "result", "ok": error is None, "error": (error or "")[:4000],
                                     "batch_id": progress.get("batchId")}), flush=True)
    return 0 if error is None else 1


def probe_refused(exc: BaseException) -> None:
    """The outcome line when Spark refused the query before its batch (``start()`` raised)."""
    print(PROBE_PREFIX + json.dumps({"event": "result", "ok": False, "error": str(exc)[:4000]}), flush=True)


def _checkpoint_boundary(spark, checkpoint: str) -> tuple[int | None, int | None]:
    """(last offsets/ id, last commits/ id), through Hadoop's FileSystem so any scheme works."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    result = []
    for sub in ("offsets", "commits"):
        path = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/" + sub)
        fs = path.getFileSystem(conf)
        ids = []
        if fs.exists(path):
            for st in fs.listStatus(path):
                name = st.getPath().getName()
                if name.isdigit():
                    ids.append(int(name))
        result.append(max(ids) if ids else None)
    return result[0], result[1]


def _marker_exists(spark, marker: str):
    """``exists()`` of the stop marker through Hadoop's FileSystem from the driver JVM.

    Why not ``os.path``: in cluster deploy mode the driver runs in a container on some node, and the
    marker sits beside the checkpoint on HDFS or an object store (the product writes it there with
    fsspec); any scheme the cluster's Hadoop configuration knows works.
    """
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(marker)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return lambda: bool(fs.exists(path))


def _wait_for_boundary(query, exists, grace_s: float, poll: float = 0.05) -> None:
    """Block until the marker exists and no trigger is running (or ``grace_s`` passed), then return."""
    seen_at = None
    while query.isActive:
        if exists():
            seen_at = seen_at or time.monotonic()
            if not query.status.get("isTriggerActive", False) or time.monotonic() - seen_at > grace_s:
                return
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.fail_at_start:
        print("reference_job: --fail-at-start given, exiting 1", file=sys.stderr)
        return 1
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.appName(args.query_name)
             .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
             .config("spark.sql.streaming.stopTimeout", "60s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    if args.aks_probe:
        try:
            query = build_query(spark, args)
        except Exception as exc:  # refused at start (sources, analysis): the outcome line carries it
            probe_refused(exc)
            return 1
        return run_probe(query)
    query = build_query(spark, args)
    _status(event="started", query_id=str(query.id), run_id=str(query.runId), pid=os.getpid())
    if args.trigger == "availableNow" or not args.stop_marker:
        query.awaitTermination()
        planned, committed = _checkpoint_boundary(spark, args.checkpoint)
        _status(event="finished", last_planned=planned, last_committed=committed)
        return 0
    local = "://" not in args.stop_marker or args.stop_marker.startswith("file:")
    _wait_for_boundary(query, _marker_exists(spark, args.stop_marker), args.stop_grace, poll=0.05 if local else 0.5)
    if query.exception() is not None:
        _status(event="failed", error=str(query.exception())[:2000])
        return 1
    query.stop()
    planned, committed = _checkpoint_boundary(spark, args.checkpoint)
    drained = False
    if planned is not None and planned != committed:
        # A batch started between the check and the stop: replay exactly its recorded range.
        drain = build_query(spark, args, trigger="once")
        drain.awaitTermination()
        drained = True
        planned, committed = _checkpoint_boundary(spark, args.checkpoint)
    _status(event="stopped", graceful=planned == committed, drained_pending_batch=drained,
            last_planned=planned, last_committed=committed)
    spark.stop()
    return 0 if planned == committed else 3


if __name__ == "__main__":
    sys.exit(main())
