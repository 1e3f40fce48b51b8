"""``aks``: the command line over the core (validate now; backup, restore, reset, lag, audit later).

Why it looks like this:

* It must start fast and work on a host without Airflow or PySpark: only ``argparse`` and the
  light :mod:`airflow_kafka_spark.cli.output` are imported at start; a subcommand imports what it
  needs (confluent-kafka, fsspec) inside its ``run`` function.
* Subcommands are entries of :data:`COMMANDS`: a name, a help line, a function that adds its
  arguments and a function that runs it and returns the exit code. Adding one is a few lines::

      def _lag_arguments(p):
          p.add_argument("--checkpoint", required=True)
          add_kafka_arguments(p)
          add_json_argument(p)

      def _lag(args):
          from airflow_kafka_spark.watch.lag import ...   # heavy imports here, not at the top
          ...
          return ExitCode.OK

      register("lag", "lag of a checkpoint against Kafka", _lag_arguments, _lag)

* Exit codes are one convention for all: 0 = fine (PASS/WARN), 3 = BLOCK, 2 = bad input or an
  unreachable dependency, printed as one ``error: ...`` line (never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.errors import ExitCode, UserError
from airflow_kafka_spark.registry.model import SINK_CHOICES, Sink

PROG = "aks"


class UsageError(UserError):
    """A command line that cannot be run as given (exit 2, one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage mistakes as one ``error:`` line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def register(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace], int]) -> None:
    """Add a subcommand; ``run`` returns the exit code and may raise :class:`UserError`."""
    COMMANDS[name] = Command(name, help, configure, run)


# --------------------------------------------------------------------------------------------------
# shared argument helpers (for every subcommand that talks to Kafka or prints reports)
# --------------------------------------------------------------------------------------------------


def key_value(text: str) -> tuple[str, str]:
    """``k=v`` → ``(k, v)``; argparse turns the ValueError into a one-line usage error."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1", "on"):
        return True
    if value in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_kafka_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kafka")
    g.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", help="Kafka bootstrap servers")
    g.add_argument("--kafka-config", metavar="FILE", type=Path,
                   help="librdkafka settings as .json, or Java-style .properties (SASL/SSL...)")
    g.add_argument("-X", "--kafka-property", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="one more librdkafka setting (repeatable)")
    g.add_argument("--timeout", metavar="SECONDS", type=positive_float, default=10.0,
                   help="deadline of each Kafka request (default 10)")


def kafka_config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The librdkafka dict from ``--kafka-config``, ``-X`` and ``--bootstrap-servers`` (in that order)."""
    config: dict[str, Any] = {}
    if args.kafka_config is not None:
        config.update(read_kafka_config_file(args.kafka_config))
    config.update(dict(args.kafka_property))
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise UsageError("no Kafka cluster given: pass --bootstrap-servers HOST:PORT or --kafka-config FILE "
                         "with bootstrap.servers")
    return config


def read_kafka_config_file(path: Path) -> dict[str, Any]:
    """A Kafka client config file: JSON object, or Java ``.properties`` (``key=value``/``key: value``).

    Java clients' ``sasl.jaas.config`` with a username/password is translated to librdkafka's
    ``sasl.username``/``sasl.password`` because librdkafka does not know the JAAS syntax.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"Kafka config file {path} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"Kafka config file {path} is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read Kafka config file {path}: {exc}") from None
    if path.suffix.lower() == ".json":
        from airflow_kafka_spark._util.jsonfile import load_json

        try:
            doc = load_json(text, what="it")
        except ValueError as exc:
            raise UsageError(f"Kafka config file {path} is not valid JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise UsageError(f"Kafka config file {path} must hold a JSON object of librdkafka settings")
        return {str(k): v for k, v in doc.items()}
    return _translate_jaas(_parse_properties(text, path))


def _parse_properties(text: str, path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    logical = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        line, logical = logical + line, ""
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise UsageError(f"Kafka config file {path} line {number}: expected key=value, got "
                             f"{raw.strip()!r}")
        out[line[:cut].strip()] = line[cut + 1:].strip()
    return out


def _translate_jaas(props: dict[str, str]) -> dict[str, str]:
    import re

    jaas = props.get("sasl.jaas.config")
    if jaas is None:
        return props
    user = re.search(r"""username\s*=\s*["']([^"']*)["']""", jaas)
    password = re.search(r"""password\s*=\s*["']([^"']*)["']""", jaas)
    out = {k: v for k, v in props.items() if k != "sasl.jaas.config"}
    if user and password:
        out.setdefault("sasl.username", user.group(1))
        out.setdefault("sasl.password", password.group(1))
    return out


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")


# --------------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------------


def _validate_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("offset source (one of)").add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", metavar="PATH",
                     help="Structured Streaming checkpoint (path or fsspec URL)")
    src.add_argument("--group", metavar="ID", help="consumer group of a DStream job that commits to Kafka")
    add_kafka_arguments(p)
    d = p.add_argument_group("the deploy")
    d.add_argument("--topics", metavar="A,B", help="subscribe list of the deploy (default: the checkpoint's)")
    d.add_argument("--fail-on-data-loss", metavar="true|false", type=boolean, default=True,
                   help="the deploy's failOnDataLoss (default true)")
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


def _validate(args: argparse.Namespace) -> int:
    from airflow_kafka_spark.verdict.options import DeployOptions
    from airflow_kafka_spark.verdict.validate import validate

    config = kafka_config_from_args(args)
    options = DeployOptions(
        topics=tuple(args.topics.split(",")) if args.topics else None,
        fail_on_data_loss=args.fail_on_data_loss, starting_offsets=args.starting_offsets,
        conf=dict(args.conf), expect_new_checkpoint=args.new_checkpoint,
        target_spark_version=args.spark_version,
        idempotent_sink=None if args.sink is None else Sink.named(args.sink).replay_is_idempotent,
        strict=args.strict, max_offsets_per_trigger=args.max_offsets_per_trigger,
        clock_skew_ms=args.clock_skew_ms, owner=args.owner)
    verdict = validate(checkpoint_location=args.checkpoint, group_id=args.group, kafka_config=config,
                       options=options, lifecycle_location=args.lifecycle,
                       storage_options=dict(args.storage_option) or None, timeout=args.timeout,
                       record_identity=not args.no_record, job_name=args.job_name)
    if args.json:
        report.emit(report.dump_json(verdict.to_dict()))
    else:
        report.emit(report.render_verdict(verdict, max_ok_rows=-1 if args.all else 20))
    return verdict.exit_code


register("validate", "pre-deploy check: does the checkpoint (or consumer group) still agree with Kafka?",
         _validate_arguments, _validate)

from airflow_kafka_spark.cli.checkpoint import register_commands  # noqa: E402  (backup, backups, restore, reset)

register_commands(register)

from airflow_kafka_spark.cli.watch import register_commands as register_watch_commands  # noqa: E402  (lag, mirror, audit)

register_watch_commands(register)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Lifecycle tools for Spark Structured Streaming jobs on Kafka. "
                                            "Exit codes: 0 ok (PASS/WARN), 3 BLOCK, 2 bad input or "
                                            "unreachable dependency.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    wants_json = "--json" in argv

    def parse_and_run() -> int:
        args = parser.parse_args(argv)
        if getattr(args, "_run", None) is None:
            parser.print_help()
            return ExitCode.USER_ERROR
        return args._run(args)

    return report.guarded(parse_and_run, json_errors=wants_json)
