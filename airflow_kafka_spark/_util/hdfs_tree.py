"""Listing a folder tree on HDFS through WebHDFS, many folders at once.

Apart from ``stores`` (one call per WebHDFS operation) because it is a walk with its own threads;
``fs.list_files`` calls it for every ``hdfs://`` and ``webhdfs://`` location.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: ``LISTSTATUS`` requests at once in :func:`webhdfs_tree` (each a NameNode round trip).
_TREE_THREADS = 8


def webhdfs_tree(fs: Any, root: str) -> dict[str, dict]:
    """Every file below the folder ``root`` on HDFS, as path (below ``root``) -> the listing's info.

    Why not fsspec's ``find``: it lists one folder after the other, and a checkpoint's state is a
    folder per operator, partition and store (RocksDB adds ``SSTs/``), 400 and more for a job with
    200 shuffle partitions: 25 folders took 0.3 s of a backup after a stop on the minicluster
    (docs/benchmarks.md, round 14). Here each level's folders are listed :data:`_TREE_THREADS` at a
    time. A folder that vanishes meanwhile is left out, as ``find`` does; a missing ``root`` raises
    ``FileNotFoundError``.
    """
    def ls(folder: str) -> list[dict]:
        try:
            return fs.ls(folder, detail=True)
        except FileNotFoundError:
            if folder == root:
                raise
            return []

    root = root.rstrip("/") or "/"
    out: dict[str, dict] = {}
    level = [root]
    with ThreadPoolExecutor(max_workers=_TREE_THREADS) as pool:
        while level:
            below: list[str] = []
            for folder, infos in zip(level, pool.map(ls, level) if len(level) > 1 else [ls(level[0])], strict=True):
                for info in infos:
                    if not info.get("pathSuffix"):   # LISTSTATUS of a file answers the file itself
                        continue
                    name = f"{folder.rstrip('/')}/{info['pathSuffix']}"
                    if info.get("type") == "directory":
                        below.append(name)
                    else:
                        out[name[len(root.rstrip('/')) + 1:]] = info
            level = below
    return out
