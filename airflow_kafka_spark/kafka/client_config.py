"""Where a Kafka client's settings come from when no Airflow connection holds them: files, environment, argv.

Kafka's own tools take credentials from a file (``--command-config client.properties``) because an
argument is visible to every user of the host in ``ps`` and lands in shell history. This module reads
the same files (Java ``.properties`` with Java's separators, or a JSON object), an environment form
for containers (``AKS_KAFKA_SASL_PASSWORD`` → ``sasl.password``), and value references that keep a
secret off the command line (``-X sasl.password=@env:KAFKA_PASSWORD``, ``@file:/run/secrets/pw``).

Why errors never quote the input: a malformed line of a client config is, more often than not, the
line holding the password (``sasl.password hunter2`` written without ``=`` by someone used to
another tool). Messages name the file, the line number and the key, never a value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import is_secret_key

ENV_PREFIX = "AKS_KAFKA_"
ENV_REF = "@env:"
FILE_REF = "@file:"
MAX_CONFIG_BYTES = 1 << 20          # a client config is a few lines; a larger file is the wrong file
MAX_SECRET_FILE_BYTES = 64 << 10    # a password, a token or a PEM key

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_config_file(path: Path) -> dict[str, Any]:
    """A Kafka client config file: a JSON object, or Java ``.properties`` (``=``, ``:`` or whitespace).

    Java clients' ``sasl.jaas.config`` with a username/password is translated to librdkafka's
    ``sasl.username``/``sasl.password`` because librdkafka does not know the JAAS syntax.
    """
    text = _read_text(path, what="Kafka config file", limit=MAX_CONFIG_BYTES)
    if path.suffix.lower() == ".json":
        from airflow_kafka_spark._util.jsonfile import load_json

        try:
            doc = load_json(text, what=f"Kafka config file {path}")
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if not isinstance(doc, dict):
            raise UserError(f"Kafka config file {path} must hold a JSON object of librdkafka settings")
        return {str(k): v for k, v in doc.items()}
    return translate_jaas(parse_properties(text, source=str(path)))


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    """Java ``Properties.load`` semantics: ``key=value``, ``key: value``, ``key value``, ``\\`` continuations.

    A key with no value is an empty value, as in Java. The only malformed lines are those whose key
    is empty or that end inside an escape; the error names the line, never its content.
    """
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_logical_line(line, source=source, number=number)
        out[key] = value
    return out


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_logical_line(line: str, *, source: str, number: int) -> tuple[str, str]:
    key_chars: list[str] = []
    pos = 0
    while pos < len(line):
        ch = line[pos]
        if ch == "\\":
            pos += 1
            if pos >= len(line):
                break
            key_chars.append(_unescape_one(line, pos, source=source, number=number))
            pos += 6 if line[pos] == "u" else 1
            continue
        if ch in "=: \t\f":
            break
        key_chars.append(ch)
        pos += 1
    rest = line[pos:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    key = "".join(key_chars)
    if not key:
        raise UserError(f"{source} line {number}: a setting without a key (write key=value; the line is not "
                        "shown because it may hold a secret)")
    return key, _unescape(rest, source=source, number=number)


def _unescape(text: str, *, source: str, number: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\":
            out.append(ch)
            pos += 1
            continue
        pos += 1
        if pos >= len(text):
            break
        out.append(_unescape_one(text, pos, source=source, number=number))
        pos += 6 if text[pos] == "u" else 1
    return "".join(out)


def _unescape_one(text: str, pos: int, *, source: str, number: int) -> str:
    ch = text[pos]
    if ch == "u":
        digits = text[pos + 1:pos + 5]
        if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
            raise UserError(f"{source} line {number}: a malformed \\uXXXX escape (the line is not shown because "
                            "it may hold a secret)")
        return chr(int(digits, 16))
    return _ESCAPES.get(ch, ch)


def translate_jaas(props: dict[str, str]) -> dict[str, str]:
    """Java's ``sasl.jaas.config`` PlainLoginModule/ScramLoginModule line → librdkafka's username/password."""
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


def env_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Settings from ``AKS_KAFKA_<KEY>`` variables: ``AKS_KAFKA_SASL_PASSWORD`` → ``sasl.password``.

    The form Confluent's images use for ``KAFKA_*``; librdkafka keys hold no ``_``, so the mapping
    (lower case, ``_`` → ``.``) is unambiguous.
    """
    env = os.environ if environ is None else environ
    return {name[len(ENV_PREFIX):].lower().replace("_", "."): value
            for name, value in env.items() if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX)}


def resolve_references(config: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``@env:NAME`` and ``@file:PATH`` values replaced by what they name; other values unchanged."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, str) and value.startswith(ENV_REF):
            name = value[len(ENV_REF):]
            if not name or name not in env:
                raise UserError(f"Kafka setting {key} refers to environment variable {name or '(empty name)'}, "
                                "which is not set; export it, or give the value in --kafka-config FILE")
            out[key] = env[name]
        elif isinstance(value, str) and value.startswith(FILE_REF):
            path = Path(value[len(FILE_REF):]).expanduser()
            out[key] = _read_text(path, what=f"the file named by Kafka setting {key}",
                                  limit=MAX_SECRET_FILE_BYTES).strip("\r\n")
        else:
            out[key] = value
    return out


def secrets_on_argv(pairs: Iterable[tuple[str, str]]) -> list[str]:
    """Keys of ``-X`` settings that put a secret value itself (not a reference) on the command line."""
    return [key for key, value in pairs
            if is_secret_key(key) and value and not value.startswith((ENV_REF, FILE_REF))]


def _read_text(path: Path, *, what: str, limit: int) -> str:
    try:
        if not path.is_file():
            hint = "is a directory" if path.is_dir() else "does not exist" if not path.exists() else \
                "is not a regular file"
            raise UserError(f"{what} {path} {hint}")
        with open(path, "rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > limit:
        raise UserError(f"{what} {path} is larger than {limit:,} bytes; it is not a Kafka client setting")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path} is not UTF-8 text") from None
