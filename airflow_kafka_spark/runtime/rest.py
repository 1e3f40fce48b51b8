"""One JSON-over-HTTP call on the standard library, for the cluster managers' REST APIs.

Why not ``requests``: the triggerer calls these from a thread on every poll, and the point of the
REST path is that a worker or triggerer image needs nothing but this package (no cluster client,
no JVM). Errors are one line naming the URL and what to check.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from airflow_kafka_spark.errors import UserError


class RestError(UserError):
    """The server could not be reached, or answered with an error status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def call(method: str, url: str, *, body: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
         timeout: float = 10.0, ca_file: str | None = None, raw: bool = False) -> Any:
    """``method url`` with a JSON body; the parsed JSON answer (``raw``: the text)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Accept": "text/plain" if raw else "application/json", **(headers or {})})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    context = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            payload = resp.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace").strip().splitlines()
        raise RestError(f"{method} {url} answered HTTP {exc.code}: {(text[0] if text else exc.reason)[:300]}",
                        exc.code) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError) as exc:
        raise RestError(f"{method} {url} failed ({getattr(exc, 'reason', exc)}); check the address and that this "
                        f"host can reach it (timeout {timeout:g}s)") from None
    text = payload.decode("utf-8", "replace")
    if raw:
        return text
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        raise RestError(f"{method} {url} answered with something that is not JSON: {text[:200]!r}") from None
