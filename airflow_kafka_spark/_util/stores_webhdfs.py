"""A small file read or written through WebHDFS in the fewest requests the protocol allows.

Why: fsspec's ``webhdfs`` file objects cost a small file seven requests where two and two do: a read
asks ``GETFILESTATUS`` (the size) before ``OPEN`` (NameNode, then the DataNode it redirects to); a
write sends ``CREATE`` with an empty body, then ``APPEND`` with the data (NameNode and DataNode each).
The backup after a stop copies the state files Spark wrote since the pre-copy one by one inside the
downtime window (docs/benchmarks.md, "After round 9"), so each request there is paid per file.

* :func:`webhdfs_read`: one ``OPEN`` with ``length`` (the NameNode redirects to a DataNode, which
  sends at most ``length`` bytes): two requests.
* :func:`webhdfs_write`: ``CREATE`` without following the redirect, then the body to the DataNode
  it names: two requests. ``CREATE`` makes missing parent folders (WebHDFS's ``createParent``), so no
  ``MKDIRS`` first.

All go through the file system's own ``requests`` session (``fs.session``), so connections to the
NameNode and the DataNode are kept alive and shared by the threads of a copy.
"""

from __future__ import annotations

from typing import Any


def webhdfs_read(fs: Any, path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the file at ``path`` (``FileNotFoundError`` when there is none)."""
    if limit <= 0:
        return b""
    return fs._call("OPEN", "get", path, offset=0, length=limit).content


def webhdfs_write(fs: Any, path: str, data: bytes, *, overwrite: bool) -> None:
    """A file at ``path`` holding ``data``; without ``overwrite`` an existing file is ``FileExistsError``."""
    try:
        out = fs._call("CREATE", "put", path, redirect=False, overwrite="true" if overwrite else "false")
    except RuntimeError as exc:
        if "already exists" in str(exc):
            raise FileExistsError(f"{path} already exists") from None
        raise OSError(str(exc).splitlines()[0]) from None
    if "Location" not in out.headers:
        raise OSError(f"WebHDFS CREATE {path} answered HTTP {out.status_code} without a DataNode to write to")
    put = fs.session.put(fs._apply_proxy(out.headers["Location"]), data=data,
                         headers={"content-type": "application/octet-stream"})
    if put.status_code >= 400:
        first = (put.text.splitlines() or [""])[0][:200]
        raise OSError(f"WebHDFS CREATE {path} answered HTTP {put.status_code}: {first}")
