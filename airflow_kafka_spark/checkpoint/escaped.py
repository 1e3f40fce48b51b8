"""Spark 2.x's escaped checkpoint folders: a checkpoint path with spaces or ``%``/``#`` (SPARK-26824).

Spark 2.4 and earlier turned the checkpoint path into a URI string three times before creating
the folder, so ``chk %@#chk`` was written to disk as ``chk%252520%252525@%252523chk``. Spark 3.0
fixed the escaping and, to keep an old query from silently starting over in the right-named empty
folder, refuses to start while the legacy folder exists (``StreamExecution``, checked by Spark's
own test "detect escaped path and report the migration guide", which ships such a checkpoint:
``escaped-path-2.4.0`` in its test jar; tests/integration/test_spark_corpus.py runs it). Its fix:
move the folder's contents to the correct path, or set
``spark.sql.streaming.checkpoint.escapedPathCheck.enabled=false``. Without this module both readers
said "does not exist" about such a checkpoint, with no hint.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

#: Characters ``java.net.URI`` leaves as they are in a path (unreserved, punct, ``@``, ``/``).
_URI_PATH_SAFE = "/@_-!.~'()*,;:$&+="

ESCAPED_PATH_CONF = "spark.sql.streaming.checkpoint.escapedPathCheck.enabled"


def _escaped(path: str) -> str:
    """What ``new Path(p).toUri.toString`` makes of ``p``: ASCII characters a URI path may not hold are
    %-escaped (``%`` itself too); other characters stay as they are, as ``java.net.URI`` leaves them."""
    return "".join(c if ord(c) > 127 else quote(c, safe=_URI_PATH_SAFE) for c in path)


def legacy_escaped_path(root: str) -> str | None:
    """The folder Spark 2.x created for ``root`` when that differs from ``root`` (else None)."""
    once = _escaped(root)
    if once == root:
        return None
    return _escaped(_escaped(once))


def find_legacy_folder(fs: Any, root: str) -> str | None:
    """The legacy folder of ``root`` when it exists (as Spark 3+ checks before every start)."""
    legacy = legacy_escaped_path(root)
    if legacy is None:
        return None
    try:
        return legacy if fs.exists(legacy) else None
    except OSError:
        return None


def legacy_message(root: str, legacy: str) -> str:
    """One line: what Spark does about the legacy folder, and Spark's own fix."""
    return (f"Spark 2.x wrote this checkpoint under the escaped folder {legacy} (a path with spaces or "
            f"%@#), and Spark 3+ refuses to start while that folder exists: move its contents to {root} "
            f"and delete it, or set {ESCAPED_PATH_CONF}=false if it belongs to another query")
