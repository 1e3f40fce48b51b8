"""What every ``aks`` subcommand shares: the one-line usage error, the command entry, argument types, Kafka flags.

Why a module of its own: the subcommand modules (validate, checkpoint, watch) need these helpers and
:mod:`airflow_kafka_spark.cli` needs the subcommands; with the helpers here, the package's
``__init__`` imports the subcommand modules and none of them imports it back (no cycle).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from airflow_kafka_spark.errors import UserError


class UsageError(UserError):
    """A command line that cannot be run as given (exit 2, one line)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports usage mistakes as one ``error:`` line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{_hide_values(message)} (see {self.prog} --help)")


def _hide_values(message: str) -> str:
    """argparse's "unrecognized arguments: a b" with every non-flag word hidden.

    ``-X sasl.password hunter2`` leaves ``hunter2`` unrecognized; quoting it would print the password.
    """
    head, sep, rest = message.partition("unrecognized arguments: ")
    if not sep:
        return message
    words = rest.split()
    flags = [w for w in words if w.startswith("-")]
    hidden = len(words) - len(flags)
    shown = " ".join(flags)
    if hidden:
        shown = f"{shown} and {hidden} value(s) not shown" if shown else f"{hidden} value(s), not shown"
    return f"{head}unrecognized arguments: {shown}"


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def key_value(text: str) -> tuple[str, str]:
    """``k=v`` → ``(k, v)``; argparse turns the error into a one-line usage error.

    The argument is not quoted back: ``-X sasl.password hunter2`` is the usual way to get this wrong.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError("expected KEY=VALUE (the argument is not shown: it may hold a secret)")
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
    g.add_argument("--kafka-config", "--command-config", metavar="FILE", type=Path,
                   help="client settings as Java .properties (key=value, key: value or key value) or a .json "
                        "object; the place for credentials (SASL/SSL). Also read: AKS_KAFKA_<KEY> variables "
                        "(AKS_KAFKA_SASL_PASSWORD -> sasl.password)")
    g.add_argument("-X", "--kafka-property", metavar="KEY=VALUE", type=key_value, action="append", default=[],
                   help="one more librdkafka setting (repeatable); for a secret give a reference, "
                        "-X sasl.password=@env:NAME or =@file:PATH, not the value (ps shows arguments)")
    g.add_argument("--timeout", metavar="SECONDS", type=positive_float, default=10.0,
                   help="deadline of each Kafka request (default 10)")


def kafka_config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The librdkafka dict from ``--kafka-config``, ``AKS_KAFKA_*``, ``-X`` and ``--bootstrap-servers`` (in that order).

    A secret given as a literal ``-X`` value works but is warned about on stderr: every user of the
    host sees it in ``ps``.
    """
    import sys

    from airflow_kafka_spark.cli.output import remember_secrets
    from airflow_kafka_spark.kafka.client_config import (
        env_config,
        read_config_file,
        resolve_references,
        secrets_on_argv,
    )
    from airflow_kafka_spark.kafka.secrets import secret_values

    config: dict[str, Any] = {}
    if args.kafka_config is not None:
        config.update(read_config_file(args.kafka_config))
    config.update(env_config())
    config.update(dict(args.kafka_property))
    for key in secrets_on_argv(args.kafka_property):
        print(f"warning: -X {key}=... puts a secret on the command line, where ps and shell history show it; "
              f"use --kafka-config FILE, AKS_KAFKA_{key.upper().replace('.', '_')} or -X {key}=@env:NAME",
              file=sys.stderr)
    config = resolve_references(config)
    remember_secrets(secret_values(config))   # a bug's traceback must not show them (cli.output.bug_report)
    if args.bootstrap_servers:
        config["bootstrap.servers"] = args.bootstrap_servers
    if not config.get("bootstrap.servers"):
        raise UsageError("no Kafka cluster given: pass --bootstrap-servers HOST:PORT or --kafka-config FILE "
                         "with bootstrap.servers")
    return config


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the machine-readable report (JSON)")
