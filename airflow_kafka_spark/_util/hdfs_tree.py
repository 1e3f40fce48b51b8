"""Listing many HDFS folders at once through WebHDFS: a folder tree, or a given set of folders.

Apart from ``stores`` (one call per WebHDFS operation) because these walk with their own threads;
``fs.list_files`` lists every ``hdfs://`` and ``webhdfs://`` tree here, and the HDFS blob index
(``ops.backup.store``) its ``blobs/<aa>`` folders.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: ``LISTSTATUS`` requests at once (each a NameNode round trip; within ``requests``' 10 kept connections).
LIST_THREADS = 8


def webhdfs_ls_many(fs: Any, folders: list[str]) -> list[list[dict]]:
    """The detailed listing of each folder, :data:`LIST_THREADS` at a time; a folder gone meanwhile lists empty."""
    def ls(folder: str) -> list[dict]:
        try:
            return fs.ls(folder, detail=True)
        except FileNotFoundError:
            return []

    if len(folders) < 2:
        return [ls(f) for f in folders]
    with ThreadPoolExecutor(max_workers=LIST_THREADS) as pool:
        return list(pool.map(ls, folders))


def webhdfs_tree(fs: Any, root: str) -> dict[str, dict]:
    """Every file below the folder ``root`` on HDFS, as path (below ``root``) -> the listing's info.

    Why not fsspec's ``find``: it lists one folder after the other, and a checkpoint's state is a
    folder per operator, partition and store (RocksDB adds ``SSTs/``), 400 and more for a job with
    200 shuffle partitions: 25 folders took 0.3 s of a backup after a stop on the minicluster
    (docs/benchmarks.md, round 14). Here each level's folders are listed at once
    (:func:`webhdfs_ls_many`). A folder that vanishes meanwhile is left out, as ``find`` does; a
    missing ``root`` raises ``FileNotFoundError``.
    """
    root = root.rstrip("/") or "/"
    prefix = len(root.rstrip("/")) + 1
    out: dict[str, dict] = {}
    level, listings = [root], [fs.ls(root, detail=True)]
    while level:
        below: list[str] = []
        for folder, infos in zip(level, listings, strict=True):
            for info in infos:
                if not info.get("pathSuffix"):   # LISTSTATUS of a file answers the file itself
                    continue
                name = f"{folder.rstrip('/')}/{info['pathSuffix']}"
                if info.get("type") == "directory":
                    below.append(name)
                else:
                    out[name[prefix:]] = info
        level, listings = below, webhdfs_ls_many(fs, below)
    return out
