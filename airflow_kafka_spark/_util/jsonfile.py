"""Untrusted JSON (docs/security.md): one bounded loader for every file a user or a third party can write."""

from __future__ import annotations

import json
from itertools import chain
from typing import Any

from airflow_kafka_spark.errors import UserError

#: Default size cap of one JSON document: the product's own files (journal, lifecycle record,
#: catalog) are kilobytes; 16 MiB leaves three orders of magnitude of room and still cannot
#: exhaust a worker's memory. Manifests of huge checkpoints pass a larger cap explicitly.
JSON_MAX_BYTES = 16 * 1024 * 1024
#: Default nesting cap: the deepest document the product writes (a journal holding a plan) is
#: about 6 levels deep; 64 is far beyond any of them and far below Python's recursion limit.
JSON_MAX_DEPTH = 64
#: Backup manifests list every file of a checkpoint (~200 bytes each): 256 MiB is over a million
#: files, far more than any checkpoint keeps, and still a bounded read.
MANIFEST_MAX_BYTES = 256 * 1024 * 1024


class UntrustedJSONError(UserError, ValueError):
    """A JSON document that is not JSON, too large or nested too deeply.

    A :class:`UserError` (one line, exit 2) and a ``ValueError``, so existing ``except ValueError``
    handlers that add their own context (a manifest is "tampered", a record "corrupt") keep working.
    """


def load_json(raw: bytes | str, *, what: str = "JSON document", max_bytes: int = JSON_MAX_BYTES,
              max_depth: int = JSON_MAX_DEPTH, **kwargs: Any) -> Any:
    """``json.loads`` for untrusted input: size and depth capped, every failure one line naming ``what``.

    Why: ``json.loads`` raises ``RecursionError`` (a traceback, not a message) on ~1,000 nested
    brackets, and a document nested a few hundred levels deep still breaks later recursive code.
    """
    size = len(raw)
    if size > max_bytes:
        raise UntrustedJSONError(f"{what} is {size:,} bytes, larger than the {max_bytes:,}-byte limit for "
                                 "this file; it is not a file airflow-kafka-spark or Spark wrote")
    try:
        doc = json.loads(raw, **kwargs)
    except RecursionError:
        raise UntrustedJSONError(f"{what} is nested too deeply (more than {max_depth} levels): it is not a "
                                 "file airflow-kafka-spark or Spark wrote") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UntrustedJSONError(f"{what} is not JSON ({' '.join(str(exc).split())[:160]})") from None
    if json_depth(doc, limit=max_depth) > max_depth:
        raise UntrustedJSONError(f"{what} is nested too deeply (more than {max_depth} levels): it is not a "
                                 "file airflow-kafka-spark or Spark wrote")
    return doc


def json_depth(doc: Any, *, limit: int = JSON_MAX_DEPTH) -> int:
    """Nesting depth of a parsed document without recursion; stops counting past ``limit``.

    A container whose children are all scalars (a manifest's 40,000 file entries) is settled by one
    C-level scan of their types instead of a Python step per child.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if _CONTAINERS.isdisjoint(map(type, children)):
            continue
        if type(node) is list and _flat_dicts(node):   # one level more, settled in one scan
            deepest = max(deepest, depth + 1)
            if deepest > limit:
                return deepest
            continue
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return deepest


_CONTAINERS = frozenset((dict, list))


def _flat_dicts(items: list) -> bool:
    """Every item a dict of scalars (a manifest's 40,000 file entries): C-level scans of all values at once."""
    return set(map(type, items)) == _JUST_DICT and _CONTAINERS.isdisjoint(
        map(type, chain.from_iterable(map(dict.values, items))))


_JUST_DICT = {dict}
