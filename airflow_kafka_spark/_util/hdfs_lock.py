"""An HDFS lock file without a body: its owner's token is an extended attribute, set before the file is the lock.

Why: a WebHDFS ``CREATE`` with a body is written by the DataNode's own HDFS client, which on close
waits ``dfs.client.block.write.locateFollowingBlock.initial.delay.ms`` (400 ms by default) whenever
the NameNode has not had the block's report yet. An empty file has no block, so its ``CREATE`` returns
at once, and ``SETXATTR``/``GETXATTRS`` are NameNode calls of a few milliseconds. Measured on the
minicluster: a lock file with its token in the body cost a median 421 ms, an empty one 13 ms, the
attribute 4 ms (docs/benchmarks.md, round 24). Every record write and every operation takes one lock,
and the safe restart's submit task takes several inside the downtime window.

The lock never exists without its owner: the file is made and named under a claim name of its own
(``.<lock>.claim-<random>`` beside it), then renamed onto the lock with ``rename2`` (no overwrite), which
the NameNode does atomically and refuses when the lock exists — exactly one of racing processes wins
(tests/cluster/test_ops_cluster.py races four processes for a lease). A process SIGKILLed between the
create and the attribute would otherwise leave an empty lock that no one can name for the grace of
:data:`~airflow_kafka_spark._util.lock.EMPTY_STALE_AFTER_S` (the YARN soak hit it: a retried ``stop`` gave
up on the record's lock); now it leaves at most its claim, a small dot file beside the lock. A NameNode
without extended attributes (``dfs.namenode.xattrs.enabled=false``) refuses ``SETXATTR``: the token then
goes into the claim's body, and the reader finds it there.
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from typing import Any

from airflow_kafka_spark._util.stores import cat_checked, webhdfs_create_exclusive, webhdfs_rename, webhdfs_write

#: The attribute holding the owner's token (the ``user`` namespace: the file's owner may set it).
OWNER_XATTR = "user.aks.lock-owner"


def create_owned(fs: Any, path: str, token: str) -> bool:
    """Make the lock at ``path``, ``token`` its owner from its first moment; False: another process holds it."""
    name = posixpath.basename(path).lstrip(".")
    claim = posixpath.join(posixpath.dirname(path), f".{name}.claim-{uuid.uuid4().hex[:12]}")
    if not webhdfs_create_exclusive(fs, claim, b""):
        raise OSError(f"the claim {claim} exists already")
    try:
        try:
            fs._call("SETXATTR", "put", claim, **{"xattr.name": OWNER_XATTR, "xattr.value": _hex(token),
                                                   "flag": "CREATE"})
        except (RuntimeError, PermissionError):   # no extended attributes here: the token goes into the body
            webhdfs_write(fs, claim, token.encode(), overwrite=True)
        webhdfs_rename(fs, claim, path, overwrite=False)
    except FileExistsError:
        _drop(fs, claim)
        return False
    except BaseException:
        _drop(fs, claim)
        raise
    return True


def _drop(fs: Any, claim: str) -> None:
    with contextlib.suppress(Exception):   # best effort: a claim left behind is a small dot file, never a lock
        fs.rm_file(claim)


def owner_of(fs: Any, path: str, limit: int) -> str | None:
    """The lock's token (its attribute, else its body: a lock of an earlier version, or a NameNode without
    extended attributes); "" for a lock without one (written by hand, or by a version before claims);
    None when there is no lock."""
    try:
        answer = fs._call("GETXATTRS", "get", path, encoding="hex").json()
    except FileNotFoundError:
        return None
    except (RuntimeError, PermissionError):
        answer = {}
    for attr in answer.get("XAttrs") or []:
        if attr.get("name") == OWNER_XATTR and str(attr.get("value", "")).startswith("0x"):
            return bytes.fromhex(attr["value"][2:])[:limit].decode(errors="replace")
    try:
        return cat_checked(fs, path)[:limit].decode(errors="replace")
    except FileNotFoundError:
        return None


def _hex(text: str) -> str:
    return "0x" + text.encode().hex()
