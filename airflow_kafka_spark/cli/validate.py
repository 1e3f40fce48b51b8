"""``aks validate``: the pre-deploy check (does the checkpoint or consumer group still agree with Kafka?).

``--job NAME`` judges a registry job as the Airflow operator does (its checkpoint or group, topics,
sink, confs, rate limit and Kafka connection: ``DeployOptions.for_job``); each deploy flag given here
overrides the registry's value.
"""

from __future__ import annotations

import argparse

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import (
    Command,
    add_json_argument,
    add_kafka_arguments,
    boolean,
    key_value,
    positive_int,
)
from airflow_kafka_spark.cli._job import add_registry_argument, kafka_config_for, refuse_conflicts, registry_job
from airflow_kafka_spark.registry.model import SINK_CHOICES, Sink


def _arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("offset source (--job, or one of --checkpoint / --group)")
    g.add_argument("--job", metavar="NAME", help="a registry job: its checkpoint (or group), topics, sink, confs and "
                                                 "Kafka connection; flags given here win")
    add_registry_argument(g)
    src = g.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", metavar="PATH",
                     help="Structured Streaming checkpoint (path or fsspec URL)")
    src.add_argument("--group", metavar="ID", help="consumer group of a DStream job that commits to Kafka")
    add_kafka_arguments(p)
    d = p.add_argument_group("the deploy")
    d.add_argument("--topics", metavar="A,B", help="subscribe list of the deploy (default: the checkpoint's)")
    d.add_argument("--fail-on-data-loss", metavar="true|false", type=boolean,
                   help="the deploy's failOnDataLoss (default: the registry job's, else true)")
    d.add_argument("--starting-offsets", metavar="earliest|latest|JSON",
                   help="the deploy's startingOffsets (for a consumer group: auto.offset.reset)")
    d.add_argument("--conf", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="a Spark conf of the deploy (repeatable), diffed against the confs the checkpoint "
                        "pins")
    d.add_argument("--new-checkpoint", action="store_true", help="the deploy starts a new query on purpose")
    d.add_argument("--spark-version", metavar="X.Y.Z", help="Spark version the deploy runs")
    d.add_argument("--sink", choices=SINK_CHOICES,
                   help="the job's sink, which decides whether a replayed batch duplicates output "
                        "(non-idempotent = append)")
    d.add_argument("--max-offsets-per-trigger", metavar="N", type=positive_int,
                   help="the deploy's rate limit")
    d.add_argument("--clock-skew-ms", metavar="MS", type=int, default=1000,
                   help="tolerance of the record-timestamp identity check (default 1000)")
    d.add_argument("--kafka-group-id", metavar="ID",
                   help="the deploy's kafka.group.id, if it sets one (checked for other live members, S24)")
    d.add_argument("--owner", metavar="NAME", help="who deploys (a lease held by NAME is not a conflict)")
    d.add_argument("--strict", action="store_true", help="warnings block (exit 3)")
    r = p.add_argument_group("lifecycle record and storage")
    r.add_argument("--lifecycle", metavar="PATH",
                   help="lifecycle record (default: <checkpoint>.lifecycle.json)")
    r.add_argument("--no-record", action="store_true",
                   help="do not save the cluster/topic identity seen now to the lifecycle record")
    r.add_argument("--job-name", metavar="NAME", help="job name for a newly created lifecycle record")
    r.add_argument("--storage-option", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="fsspec storage option for the checkpoint's file system (repeatable)")
    add_json_argument(p)
    p.add_argument("--all", action="store_true", help="list every healthy partition, however many")


def _run(args: argparse.Namespace) -> int:
    import dataclasses

    from airflow_kafka_spark.cli._args import UsageError
    from airflow_kafka_spark.verdict.options import DeployOptions
    from airflow_kafka_spark.verdict.validate import validate

    spec = registry_job(args, needed=not (args.checkpoint or args.group))
    refuse_conflicts(args, spec)
    checkpoint, group = args.checkpoint, args.group
    if spec is not None and not (checkpoint or group):
        checkpoint, group = spec.position_source
    if not (checkpoint or group):
        raise UsageError("no offset source: pass --job NAME, --checkpoint PATH or --group ID")
    config = kafka_config_for(args, spec)
    base = DeployOptions.for_job(spec) if spec is not None else DeployOptions()
    given = {"topics": tuple(args.topics.split(",")) if args.topics else None,
             "fail_on_data_loss": args.fail_on_data_loss, "starting_offsets": args.starting_offsets,
             "conf": {**base.conf, **dict(args.conf)} if args.conf else None,
             "idempotent_sink": None if args.sink is None else Sink.named(args.sink).replay_is_idempotent,
             "max_offsets_per_trigger": args.max_offsets_per_trigger}
    options = dataclasses.replace(
        base, **{k: v for k, v in given.items() if v is not None}, expect_new_checkpoint=args.new_checkpoint,
        target_spark_version=args.spark_version, strict=args.strict, clock_skew_ms=args.clock_skew_ms,
        owner=args.owner, kafka_group_id=args.kafka_group_id)
    verdict = validate(checkpoint_location=checkpoint, group_id=group, kafka_config=config,
                       options=options, lifecycle_location=args.lifecycle,
                       storage_options=dict(args.storage_option) or None, timeout=args.timeout,
                       record_identity=not args.no_record,
                       job_name=args.job_name or (spec.name if spec is not None else None))
    if args.json:
        report.emit(report.dump_json(verdict.to_dict()))
    else:
        report.emit(report.render_verdict(verdict, max_ok_rows=-1 if args.all else 20))
    return verdict.exit_code


COMMANDS = (Command("validate", "pre-deploy check: does the checkpoint (or consumer group) still agree with Kafka?",
                    _arguments, _run),)
