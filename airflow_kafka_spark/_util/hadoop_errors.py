"""Hadoop's "could not reach another daemon" answers, told apart from its "no" answers.

Why a module of its own: a NameNode or DataNode that cannot reach another Hadoop daemon still answers
the HTTP request, with a RemoteException (``java.net.ConnectException`` and its kin) that fsspec raises
as a bare ``RuntimeError`` and a DataNode sends as HTTP 403. To the user that is the store not
answering (exit 4, retry later), not a bug in aks and not bad input (tests/cluster/test_store_restart.py
restarts a NameNode under a backup and reads through a DataNode while it is down).
"""

from __future__ import annotations

import functools
import re
from typing import Any

#: What a NameNode or DataNode relays when *it* could not reach another Hadoop daemon (Hadoop's
#: ``NetUtils.wrapException`` text, or HA's retry-elsewhere answers): the store did not answer, not "no".
HDFS_UNREACHABLE = re.compile(r"java\.net\.(Connect|SocketTimeout|NoRouteToHost|Socket)Exception|"
                              r"java\.io\.EOFException|Connection reset by peer|RetriableException|StandbyException")


@functools.cache
def webhdfs_class() -> type:
    """fsspec's ``webhdfs`` file system, with a Hadoop connection failure raised as ``ConnectionError``.

    Why: fsspec turns every RemoteException it has no Python type for into a bare ``RuntimeError``.
    While a NameNode restarts, a DataNode answers an ``OPEN`` with ``java.net.ConnectException`` (it
    could not reach the NameNode's RPC port): a backup then ended with a traceback as a bug in aks
    (tests/cluster/test_store_restart.py, CI of session 29), where the outage is exit 4. A NameNode
    stopping mid-call answers ``java.io.EOFException`` instead (seen in the same test). Made once
    (fsspec caches instances per class) and on first use (``aks``'s start-up does not import fsspec)."""
    from fsspec.implementations.webhdfs import WebHDFS

    class HadoopWebHDFS(WebHDFS):
        def _call(self, op, method="get", path=None, data=None, redirect=True, **kwargs):
            try:
                return super()._call(op, method, path, data, redirect, **kwargs)
            except RuntimeError as exc:
                if HDFS_UNREACHABLE.search(str(exc)):
                    raise ConnectionError(f"WebHDFS {op} {path}: {str(exc).splitlines()[0][:300]}") from exc
                raise

    return HadoopWebHDFS


def datanode_refused(put: Any, path: str) -> OSError:
    """The error for a DataNode's answer >= 400 to a CREATE's body: its RemoteException's message when it
    sent one; a ``ConnectionError`` when the DataNode could not reach the NameNode (a restart, seen in
    tests/cluster/test_store_restart.py: HTTP 403 carrying ``java.net.ConnectException``)."""
    try:
        reason = put.json()["RemoteException"]["message"]
    except (ValueError, KeyError, TypeError):
        reason = put.text
    line = f"WebHDFS CREATE {path} answered HTTP {put.status_code}: {(reason.splitlines() or [''])[0][:300]}"
    return ConnectionError(line) if HDFS_UNREACHABLE.search(reason) else OSError(line)
