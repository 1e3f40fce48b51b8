"""Secrets in Kafka configs and Spark source options: recognise, redact, scrub.

A librdkafka dict of an Airflow connection holds passwords and JAAS lines; nothing may put such a
value in a message, a log line or a lifecycle record without going through :func:`redact` (a copy
safe to show) or :func:`scrub` (a third-party message with the secret values replaced).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REDACTED = "***"

# Key fragments that mark a secret in a librdkafka dict or in Spark source options (``kafka.``
# prefixed). Over-redacting a harmless value costs a little diagnosability; leaking a password in
# an Airflow task log costs a credential rotation, so the list errs on the wide side.
_SECRET_KEY_PARTS = (
    "password", "secret", "jaas", "sasl.oauthbearer", "token", "credential", "key.pem",
    "private", "api.key", "apikey", "user.info", "auth.info",
)
# Keys under a secret-looking prefix that name, not prove, who connects: the OAuth client id is to the
# token endpoint what ``sasl.username`` is to the broker. Scrubbing them garbled every message that
# contained their (often short) value (``Failed to a***quire ...`` for ``client.id=c``).
_NOT_SECRET_KEYS = frozenset({"sasl.oauthbearer.client.id", "sasl.oauthbearer.scope"})
#: Secret values shorter than this are replaced only where they stand as a whole token (not inside a
#: word): a one-letter password must not turn "connect" into "***onne***t"; a longer one is
#: replaced wherever it occurs.
WHOLE_TOKEN_BELOW = 8
_JAAS_PASSWORD = re.compile(r"""password\s*=\s*"([^"]*)"|password\s*=\s*'([^']*)'""", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """True for keys whose values must never be shown (``sasl.password``, ``kafka.sasl.jaas.config``...)."""
    k = str(key).lower()
    if k.removeprefix("kafka.") in _NOT_SECRET_KEYS:
        return False
    return any(part in k for part in _SECRET_KEY_PARTS)


def redact(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``config`` that is safe to log, print or store: secret values become ``***``.

    Callables (``oauth_cb``, ``error_cb``) are shown by name only; they are not data and may close
    over credentials. Nested objects (and lists of them) are redacted too: audit events carry
    options and plans inside their details.
    """
    out: dict[str, Any] = {}
    for key, value in (config or {}).items():
        if callable(value) and not isinstance(value, str):
            out[key] = f"<{getattr(value, '__name__', type(value).__name__)}>"
        elif is_secret_key(key) and value not in (None, ""):
            out[key] = REDACTED
        elif isinstance(value, Mapping):
            out[key] = redact(value)
        elif isinstance(value, list):
            out[key] = [redact(v) if isinstance(v, Mapping) else v for v in value]
        else:
            out[key] = value
    return out


def secret_values(config: Mapping[str, Any] | None) -> list[str]:
    """Every secret string in ``config``, longest first (so a password inside a JAAS line is caught)."""
    found: set[str] = set()
    for key, value in (config or {}).items():
        if not is_secret_key(key) or not isinstance(value, str | bytes) or not value:
            continue
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        found.add(text)
        for m in _JAAS_PASSWORD.finditer(text):
            inner = m.group(1) or m.group(2)
            if inner:
                found.add(inner)
    return sorted(found, key=len, reverse=True)


def scrub(text: str, config: Mapping[str, Any] | None) -> str:
    """``text`` with every secret value of ``config`` replaced by ``***`` (for third-party messages).

    A value shorter than :data:`WHOLE_TOKEN_BELOW` is replaced only where no letter or digit touches
    it, so the words around it survive; a longer one wherever it occurs.
    """
    for secret in secret_values(config):
        if len(secret) >= WHOLE_TOKEN_BELOW:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", REDACTED, text)
    return text


def bootstrap_servers_of(config: Mapping[str, Any]) -> str:
    return str(config.get("bootstrap.servers") or config.get("metadata.broker.list") or "")
