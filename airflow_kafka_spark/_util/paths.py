"""Untrusted paths: manifests, catalogs, journals and checkpoints are input, not instructions.

A relative path read from a file anyone with write access to shared storage can edit must be proven
to stay below the folder it is joined to before anything is opened there; a checkpoint that holds a
symbolic link or a FIFO is refused before it is copied.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import stat
from collections.abc import Sequence

from airflow_kafka_spark._util.fs import Location, file_kind, os_reason
from airflow_kafka_spark.errors import UserError

_CONTROL = frozenset(chr(c) for c in [*range(0x20), 0x7F])
_GLOB = frozenset("*?[]")   # Spark never writes them; fsspec's rm/cp/find would expand them
_SUSPECT = re.compile(r"[\x00-\x1f\x7f\\*?\[\]:]")   # any character the slow path must look at


def check_relative(rel: object, *, what: str = "path") -> str:
    """``rel`` if it is a plain relative path that cannot leave the folder it is joined to.

    Why: manifests, catalogs and journals live on shared storage anyone with write access there can
    edit; a path read from them is input. Refused (one-line :class:`UserError` naming the path):
    not a string, empty, absolute (``/x``, ``C:``), a backslash, a ``..``, ``.`` or empty segment,
    a NUL or control character, ``::`` (fsspec URL chaining) or a glob character ``*?[]``.
    """
    def bad(why: str) -> UserError:
        return UserError(f"{what} {rel!r} is not a safe relative path ({why}); it was not opened")

    if not isinstance(rel, str) or not rel:
        raise bad("empty or not a string")
    if len(rel) > 4096:
        raise bad("longer than 4096 characters")
    if _SUSPECT.search(rel) is None and ".." not in rel and "//" not in rel and not rel.startswith(("/", "./")) \
            and not rel.endswith(("/", "/.")) and "/./" not in rel and rel != "." and (len(rel) < 2 or rel[1] != ":"):
        return rel    # the common case, decided in a few C-level scans (manifests list 10,000s of paths)
    if any(ch in _CONTROL for ch in rel):
        raise bad("it contains a NUL or control character")
    if "\\" in rel:
        raise bad("it contains a backslash")
    if "::" in rel:
        raise bad("it contains '::', fsspec URL chaining")
    if any(ch in _GLOB for ch in rel):
        raise bad("it contains a glob character (* ? [ ]), which fsspec expands in copies and deletes")
    if rel.startswith("/") or (len(rel) > 1 and rel[1] == ":"):
        raise bad("it is absolute")
    if "://" in rel:
        raise bad("it is a URL")
    for seg in rel.split("/"):
        if seg in ("", ".", ".."):
            raise bad(f"it has a {seg or 'empty'!r} segment" if seg else "it has an empty segment")
    return rel


def all_plain_relative(paths: Sequence[str]) -> bool:
    """True when every one of ``paths`` takes :func:`check_relative`'s common case, decided for all at once.

    The same tests on the paths joined by newlines (a few C-level scans for a manifest's 40,000
    paths instead of a call each). False means "ask :func:`check_relative` one by one", which
    names the bad path; a path that holds a newline itself always goes that way.
    """
    if not paths:
        return True
    if set(map(type, paths)) != _JUST_STR or max(map(len, paths)) > 4096:
        return False
    joined = "\n".join(paths)
    if joined.count("\n") != len(paths) - 1:
        return False
    framed = f"\n{joined}\n"
    return (_SUSPECT_OR_SEPARATOR.search(joined) is None and ".." not in joined and "//" not in joined
            and "/./" not in joined and not any(edge in framed for edge in _EDGES))


_JUST_STR = {str}
_SUSPECT_OR_SEPARATOR = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\\*?\[\]:]")   # _SUSPECT but the joining newline
#: A path that is empty, starts with "/" or "./", ends with "/" or "/.", or is ".", seen between newlines.
_EDGES = ("\n\n", "\n/", "\n./", "/\n", "/.\n", "\n.\n")


def safe_child(root: Location, rel: object, *, what: str = "path") -> Location:
    """``root.child(rel)``, proven to stay below ``root`` before anything is opened there.

    :func:`check_relative` first, then the normalised joined path must start with ``root/`` (and,
    on a local disk, no existing component below ``root`` may be a symbolic link, so a link
    planted in a destination folder cannot redirect a write). For many paths below one root use
    :class:`Contained`, which checks each folder once.
    """
    return Contained(root).child(rel, what=what)


class Contained:
    """:func:`safe_child` for many paths below one ``root``: each folder below it is ``lstat``-ed once.

    Why: a manifest or a state store lists tens of thousands of files in a few folders; checking
    every component of every path again made a 20,000-file restore quadratic in practice (and
    stalled the dry run). A folder proven a real directory (not a link) is remembered for the life
    of this object — build one per operation, not per process.
    """

    def __init__(self, root: Location) -> None:
        self.root = root
        self.base = posixpath.normpath(root.path)
        self._prefix = self.base.rstrip("/") + "/"
        self._proven: set[str] = set()

    def child(self, rel: object, *, what: str = "path") -> Location:
        rel = check_relative(rel, what=what)
        child = self.root.child(rel)
        if not posixpath.normpath(child.path).startswith(self._prefix):
            raise UserError(f"{what} {rel!r} leaves {self.root.url}; it was not opened")
        if self.root.local:
            segs = rel.split("/")
            cur = self.base
            for i, seg in enumerate(segs):
                cur = posixpath.join(cur, seg)
                folder = i < len(segs) - 1
                if folder and cur in self._proven:
                    continue
                try:
                    mode = os.lstat(cur).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    break            # nothing below a missing component can be a link yet
                except OSError as exc:
                    raise UserError(f"cannot check {what} {rel!r} under {self.root.url}: {os_reason(exc)}") from None
                if stat.S_ISLNK(mode):
                    raise UserError(f"{what} {rel!r} under {self.root.url} goes through the symbolic link {cur}; "
                                    "it was not opened")
                if folder and stat.S_ISDIR(mode):
                    self._proven.add(cur)
        return child


def irregular_entries(loc: Location, *, limit: int = 5) -> list[tuple[str, str]]:
    """(relative path, what it is) of symbolic links and special files below a local ``loc``.

    Walks with ``lstat`` semantics (never through a link), so a link to ``/`` or a FIFO costs one
    entry each. Empty on other file systems (no links there) and for a missing ``loc``.
    """
    if not loc.local:
        return []
    found: list[tuple[str, str]] = []
    pending = [""]
    while pending and len(found) < limit:
        rel_dir = pending.pop()
        try:
            entries = list(os.scandir(os.path.join(loc.path, rel_dir) if rel_dir else loc.path))
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            return []
        except OSError as exc:
            raise UserError(f"cannot list {loc.url}/{rel_dir}: {os_reason(exc)}") from None
        # The directory entry's type answers for regular files and folders without a syscall (40,000
        # ``lstat`` calls per backup of a large state store); regular files are dropped before sorting.
        others = [e for e in entries if not e.is_file(follow_symlinks=False)]
        for entry in sorted(others, key=lambda e: e.name):
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(rel)
                    continue
                mode = entry.stat(follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(mode):
                pending.append(rel)
            elif stat.S_ISLNK(mode):
                with contextlib.suppress(OSError):
                    found.append((rel, f"a symbolic link to {os.readlink(entry.path)}"))
            elif not stat.S_ISREG(mode):
                found.append((rel, file_kind(mode)))
    return found[:limit]
