"""Locations in the registry: local paths (resolved with realpath) and remote URLs (checked, never
interpreted), and the "is this under that root" rule every destructive path must pass.

Why so strict: a path in the registry decides what a reset deletes. Local paths are resolved, which
defeats ``..`` and symlinks that leave a root; remote URLs cannot be resolved here, so ``.``/``..``
segments (also percent-encoded), empty segments, credentials, queries and fragments are rejected.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from airflow_kafka_spark.registry.context import Context, show

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(//)?")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Location:
    """A normalised location. ``scheme`` is "" for local paths (plain or file://)."""

    text: str          # what the job uses (local: resolved path, URL: as written minus trailing '/')
    scheme: str
    netloc: str
    path: str          # local: realpath; URL: the path part, no trailing '/'

    def within(self, other: Location) -> bool:
        """Equal to, or below, ``other`` (on a path-segment boundary: /data2 is not in /data)."""
        if (self.scheme, self.netloc) != (other.scheme, other.netloc):
            return False
        base = other.path.rstrip("/")
        return self.path == other.path or self.path.startswith(base + "/")

    def overlaps(self, other: Location) -> bool:
        return self.within(other) or other.within(self)


def location(ctx: Context, where: str, raw: Any) -> Location:
    """``raw`` as a normalised :class:`Location`, or one error line saying what is wrong with it."""
    if not isinstance(raw, str) or not raw:
        ctx.fail(where, f"must be a non-empty path or URL string, got {show(raw)}",
                 "set it to a path or URL")
    if _CONTROL.search(raw):
        ctx.fail(where, f"{raw!r} contains a control character", "remove it")
    m = _SCHEME.match(raw)
    if m and len(m.group(1)) > 1:  # one letter would be a Windows drive, never valid here anyway
        scheme = m.group(1).lower()
        if not m.group(2):
            ctx.fail(where, f"{raw!r} has a scheme but no '//'", f"write {scheme}://host/path (or {scheme}:///path)")
        rest = raw[m.end():]
        netloc, slash, upath = rest.partition("/")
        upath = slash + upath
        if scheme == "file":
            if netloc not in ("", "localhost"):
                ctx.fail(where, f"{raw!r} names a remote host in a file:// URL", "write file:///absolute/path")
            if "%" in upath or "?" in upath or "#" in upath:
                ctx.fail(where, f"{raw!r} uses %-encoding, '?' or '#' in a file:// URL",
                         "write the plain local path instead")
            real = _realpath(ctx, where, upath)
            return Location(text="file://" + real, scheme="", netloc="", path=real)
        return _remote(ctx, where, raw, scheme, netloc, upath)
    if raw.startswith("~"):
        ctx.fail(where, f"{raw!r} starts with '~', which is not expanded (workers run as other users)",
                 "write an absolute path or use ${HOME}")
    path = raw if os.path.isabs(raw) else os.path.join(ctx.base_dir, raw)
    real = _realpath(ctx, where, path)
    return Location(text=real, scheme="", netloc="", path=real)


def _realpath(ctx: Context, where: str, path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError) as exc:
        ctx.fail(where, f"{path!r} cannot be resolved ({exc})", "fix the path")


def _remote(ctx: Context, where: str, raw: str, scheme: str, netloc: str, upath: str) -> Location:
    if "@" in netloc:
        ctx.fail(where, f"the URL has credentials in it ({scheme}://<user>@...)",
                 "remove them; credentials belong in the connection or the cluster's config, "
                 "never in the registry")
    if "?" in upath or "#" in upath or "?" in netloc or "#" in netloc:
        ctx.fail(where, f"{raw!r} has a query or fragment", "write a plain scheme://host/path URL")
    path = upath.rstrip("/")
    segments = path.split("/")[1:] if path else []
    for seg in segments:
        decoded = unquote(seg)
        if decoded in (".", "..") or "/" in decoded:
            ctx.fail(where, f"{raw!r} contains a '{seg}' segment; remote URLs are not normalised here",
                     "write the full path without '.', '..' or encoded '/'")
        if seg == "":
            ctx.fail(where, f"{raw!r} contains an empty segment ('//')", "remove the doubled '/'")
    return Location(text=f"{scheme}://{netloc}{path}", scheme=scheme, netloc=netloc, path=path)
