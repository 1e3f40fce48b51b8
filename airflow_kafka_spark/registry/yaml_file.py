"""Reading the registry file: bounded, UTF-8, YAML without surprises.

A registry is a hand-written list of jobs, so anything over 1 MiB is a mistake (or a YAML bomb);
PyYAML's safe loader is used, but one that refuses duplicate keys, which plain PyYAML resolves
silently in favour of the last one (for this file: a job pointed at another folder). Every problem
is one :class:`~airflow_kafka_spark.errors.UserError` line with the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry.context import Context

MAX_REGISTRY_BYTES = 1024 * 1024


def read_text(reg_path: Path, hint: str) -> str:
    """The file's text; ``hint`` says where the registry path comes from (for a missing file)."""
    try:
        size = reg_path.stat().st_size
        if not reg_path.is_file():
            raise UserError(f"job registry {reg_path} is not a file; {hint}")
        if size > MAX_REGISTRY_BYTES:
            raise UserError(
                f"job registry {reg_path} is {size} bytes, over the {MAX_REGISTRY_BYTES} "
                "byte limit; a registry lists jobs, keep data elsewhere"
            )
        return reg_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"job registry {reg_path} does not exist; {hint}") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"job registry {reg_path} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise UserError(
            f"job registry {reg_path} cannot be read ({exc.strerror}); fix its permissions or the path"
        ) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys. Plain PyYAML keeps the *last* of two ``checkpoint:``
    lines without a word, which for this file means silently pointing a job at another folder."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' entries may be overridden by explicit keys, as YAML intends
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable key: PyYAML itself reports it below
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (the second one would silently win)", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_yaml(ctx: Context, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        fix = (
            "remove or rename one of them"
            if "duplicate key" in problem
            else "fix the YAML syntax there (indentation, quoting, a missing ':' or '-')"
        )
        ctx.fail("not valid YAML" + at, problem, fix)
    except yaml.YAMLError as exc:
        ctx.fail("not valid YAML", str(exc).splitlines()[0] if str(exc) else "parse error", "fix the YAML syntax")
    except RecursionError:  # PyYAML composes recursively: thousands of nested [ or { overflow it
        ctx.fail("not valid YAML", "it is nested too deeply", "a registry is a flat list of jobs: remove the nesting")
