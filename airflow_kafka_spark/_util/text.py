"""Times and one-line messages, in the formats the product writes.

Each timestamp format below is written somewhere a reader depends on (manifests, lifecycle records,
audit reports, stop markers), so each keeps its exact shape; the names say which is which.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime


def now_ms() -> int:
    """Wall-clock epoch milliseconds (what every record and event stores)."""
    return int(time.time() * 1000)


MAX_MS = 253_402_300_799_999   # 9999-12-31T23:59:59.999Z, the last instant datetime can show


def _utc(ms: int | float, fmt: str) -> str | None:
    """``ms`` formatted, or None when it is no representable instant (a number read from a file
    can be anything: 10**20 raised OSError EOVERFLOW / OverflowError from the C library)."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(fmt)
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def iso_seconds(ms: int | None = None) -> str:
    """``2026-11-23T23:08:11Z``: lifecycle events and messages, stop markers (now when ``ms`` is None)."""
    ms = now_ms() if ms is None else ms
    return _utc(ms, "%Y-%m-%dT%H:%M:%SZ") or f"epoch-ms {ms}"


def iso_millis(ms: int) -> str:
    """``2026-11-23T23:08:11.123Z``: backup manifests (two backups a second apart must differ)."""
    text = _utc(ms, "%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z" if text else f"epoch-ms {ms}"


def utc_display(ms: int | None) -> str:
    """``2026-11-23 23:08:11 UTC`` for reports a person reads; ``-`` when unknown."""
    if ms is None:
        return "-"
    return _utc(ms, "%Y-%m-%d %H:%M:%S UTC") or f"epoch-ms {ms} (out of range)"


def one_line(exc: BaseException, limit: int = 200) -> str:
    """An exception's message on one line, at most ``limit`` characters (its type if it has none)."""
    text = " ".join(str(exc).split())
    return (text[:limit] + "…") if len(text) > limit else text or type(exc).__name__


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``12h``, ``7d``, ``2w`` or plain seconds -> seconds (``--max-age`` and friends)."""
    from airflow_kafka_spark.errors import UserError

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)\s*", str(text))
    if not m:
        raise UserError(f"{text!r} is not a duration; use e.g. 90s, 15m, 12h, 7d or 2w")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def fmt_duration(seconds: float | None) -> str:
    """``42 s``, ``7.5 min``, ``3.2 h``, ``2.1 d``; ``-`` when unknown (every report's one format)."""
    if seconds is None:
        return "-"
    s = float(seconds)
    if abs(s) < 120:
        return f"{s:.1f} s" if abs(s) < 10 else f"{s:.0f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


# Query parameters that carry a credential in a storage URL: WebHDFS delegation tokens, S3 presigned
# signatures and session tokens, Azure SAS signatures, OAuth tokens. Library errors quote the URL they
# failed on (requests: "Max retries exceeded with url: /webhdfs/v1/...?op=CREATE&delegation=..."), and
# those errors reach stderr, --json output, task logs and the failure XCom.
_URL_SECRET = re.compile(
    r"([?&](?:delegation|token|access_token|x-amz-signature|x-amz-credential|x-amz-security-token|sig|signature)=)"
    r"[^&\s'\")\]]+", re.IGNORECASE)


def redact_url_secrets(text: str) -> str:
    """``text`` with the value of every credential-bearing URL query parameter replaced by ``***``."""
    return _URL_SECRET.sub(r"\1***", text)
