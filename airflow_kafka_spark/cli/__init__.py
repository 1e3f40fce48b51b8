"""``aks``: the command line over the core (validate, backup(s), restore, reset, lag, mirror, audit, status, stop).

Why it looks like this:

* It must start fast and work on a host without Airflow or PySpark: only ``argparse`` and the
  light :mod:`airflow_kafka_spark.cli.output` are imported at start; a subcommand imports what it
  needs (confluent-kafka, fsspec) inside its ``run`` function.
* Subcommands are :class:`~airflow_kafka_spark.cli._args.Command` entries (a name, a help line, a
  function that adds its arguments, one that runs it and returns the exit code), listed by each
  command module (:mod:`.validate`, :mod:`.backup`, :mod:`.checkpoint`, :mod:`.watch`) and gathered statically in
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

* Exit codes are one convention for all (:data:`EPILOG`): 0 = fine (PASS/WARN), 2 = bad input,
  3 = BLOCK, 4 = Kafka or storage unreachable; errors are one ``error: ...`` line (never a traceback).
* Commands that change something print their plan and change nothing unless ``--execute`` is given.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence

from airflow_kafka_spark.cli import backup, checkpoint, control, metrics, validate, watch
from airflow_kafka_spark.cli import output as report
from airflow_kafka_spark.cli._args import Command, Parser
from airflow_kafka_spark.errors import ExitCode

PROG = "aks"

COMMANDS: dict[str, Command] = {c.name: c for c in (*validate.COMMANDS, *backup.COMMANDS, *checkpoint.COMMANDS,
                                                    *watch.COMMANDS, *control.COMMANDS, *metrics.COMMANDS)}

EPILOG = """\
exit codes:
  0    done; the verdict is PASS or WARN; a plan that would pass
  2    bad input (a typo, a missing file, an unknown job): nothing was changed
  3    BLOCK: the verdict or the plan refuses, or the operation was refused (nothing was changed)
  4    Kafka or the storage did not answer (refused, timed out, unknown host): retry or fix the address
  130  interrupted (Ctrl-C)

reset, restore, backups --prune, mirror and stop print their plan and change nothing unless
--execute is given. --job NAME takes the checkpoint, backup root, topics, sink and Kafka
connection from the job registry; flags given on the command line win.
settings: `airflow config list --section kafka_spark` (env AIRFLOW__KAFKA_SPARK__<NAME>)."""


def register(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],
             run: Callable[[argparse.Namespace], int]) -> None:
    """Add a subcommand; ``run`` returns the exit code and may raise :class:`~airflow_kafka_spark.errors.UserError`."""
    COMMANDS[name] = Command(name, help, configure, run)


# --------------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Lifecycle tools for Spark Structured Streaming jobs on Kafka.",
                    epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for cmd in COMMANDS.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


class _Version(argparse.Action):
    """``aks --version``: the installed distribution's version, looked up only when asked (fast start)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs.get("help")))

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("airflow-kafka-spark")
        except PackageNotFoundError:
            text = "unknown (not installed)"
        report.emit(f"{PROG} {text}")
        parser.exit(0)


def entry() -> int:
    """The ``aks`` process: :func:`main` with confluent-kafka's import trimmed (see ``_lazy_kafka``)."""
    from airflow_kafka_spark.cli import _lazy_kafka

    _lazy_kafka.install()
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    report.remember_secrets(report.argv_secrets(argv))
    parser = build_parser()
    wants_json = "--json" in argv

    def parse_and_run() -> int:
        args = parser.parse_args(argv)
        if getattr(args, "_run", None) is None:
            parser.print_help()
            return ExitCode.USER_ERROR
        return args._run(args)

    with warnings.catch_warnings():
        # A deprecated setting (AKS_JOB_REGISTRY ...) is one "warning:" line, not Python's two.
        warnings.showwarning = _warning_line
        return report.guarded(parse_and_run, json_errors=wants_json)


def _warning_line(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
    report.emit(f"warning: {message}", sys.stderr)

