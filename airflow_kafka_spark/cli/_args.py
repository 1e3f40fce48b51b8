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
        raise UsageError(f"{message} (see {self.prog} --help)")


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


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
