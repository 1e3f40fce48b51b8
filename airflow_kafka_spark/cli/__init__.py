"""``aks``: the command line over the core (validate, backup, backups, restore, reset, lag, mirror, audit).

Why it looks like this:

* It must start fast and work on a host without Airflow or PySpark: only ``argparse`` and the
  light :mod:`airflow_kafka_spark.cli.output` are imported at start; a subcommand imports what it
  needs (confluent-kafka, fsspec) inside its ``run`` function.
* Subcommands are :class:`~airflow_kafka_spark.cli._args.Command` entries (a name, a help line, a
  function that adds its arguments, one that runs it and returns the exit code), listed by each
  command module (:mod:`.validate`, :mod:`.checkpoint`, :mod:`.watch`) and gathered statically in
  :data:`COMMANDS` below. The command modules import the shared helpers from :mod:`._args`, never
  this package's ``__init__``, so there is no import cycle. :func:`register` adds one more at run
  time (tests, site extensions)::

      def _arguments(p):
          add_kafka_arguments(p)
          add_json_argument(p)

      def _run(args):
          from airflow_kafka_spark.watch.lag import ...   # heavy imports here, not at the top
          ...
          return ExitCode.OK

      register("hello", "a test command", _arguments, _run)

* Exit codes are one convention for all: 0 = fine (PASS/WARN), 3 = BLOCK, 2 = bad input or an
  unreachable dependency, printed as one ``error: ...`` line (never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from airflow_kafka_spark.cli import checkpoint, metrics, validate, watch
from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, Parser
from airflow_kafka_spark.errors import ExitCode

PROG = "aks"

COMMANDS: dict[str, Command] = {c.name: c for c in (*validate.COMMANDS, *checkpoint.COMMANDS, *watch.COMMANDS,
                                                    *metrics.COMMANDS)}


def register(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace], int]) -> None:
    """Add a subcommand; ``run`` returns the exit code and may raise :class:`~airflow_kafka_spark.errors.UserError`."""
    COMMANDS[name] = Command(name, help, configure, run)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Lifecycle tools for Spark Structured Streaming jobs on Kafka. "
                                           "Exit codes: 0 ok (PASS/WARN), 3 BLOCK, 2 bad input or "
                                           "unreachable dependency.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
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

