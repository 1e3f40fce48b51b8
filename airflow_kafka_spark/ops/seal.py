"""The keyed seal of backup manifests: an HMAC-SHA256 with a key only the operators hold.

Why: a manifest's ``digest`` is a plain sha256 of its content. It catches accidents (a torn copy, a
hand edit) but not an attacker: anyone who can write to the backup root can edit a manifest and
recompute the digest. With a key configured (``--seal-key-file``, the ``[kafka_spark] seal_key_file`` setting, or the
password of an Airflow connection passed by the operators), every manifest written also carries
``hmac`` — HMAC-SHA256 of the same canonical body — and every manifest read must carry a valid
one, or it is refused. Without a key nothing changes (old backups stay readable).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from airflow_kafka_spark import settings
from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark.errors import UserError

KEY_FILE_ENV = settings.BY_NAME["seal_key_file"].env   # AIRFLOW__KAFKA_SPARK__SEAL_KEY_FILE
_MAX_KEY_BYTES = 4096
_MIN_KEY_BYTES = 16


def canonical(body: Mapping[str, Any]) -> bytes:
    """The bytes both seals cover: sorted keys, no whitespace."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def digest(body: Mapping[str, Any]) -> str:
    """The unkeyed seal: detects accidents, not tampering."""
    return digest_bytes(canonical(body))


def digest_bytes(canonical_body: bytes) -> str:
    """:func:`digest` of a body already in :func:`canonical` form."""
    return hashlib.sha256(canonical_body).hexdigest()


def keyed(body: Mapping[str, Any], key: bytes) -> str:
    """The keyed seal: ``hmac-sha256:<hex>``."""
    return keyed_bytes(canonical(body), key)


def keyed_bytes(canonical_body: bytes, key: bytes) -> str:
    """:func:`keyed` of a body already in :func:`canonical` form."""
    return "hmac-sha256:" + hmac.new(key, canonical_body, hashlib.sha256).hexdigest()


def keyed_ok(body: Mapping[str, Any], key: bytes, value: object) -> bool:
    return isinstance(value, str) and hmac.compare_digest(keyed(body, key), value)


def keyed_ok_bytes(canonical_body: bytes, key: bytes, value: object) -> bool:
    """:func:`keyed_ok` over the exact bytes a seal was computed on."""
    return isinstance(value, str) and hmac.compare_digest(keyed_bytes(canonical_body, key), value)


def check_key(key: object, *, source: str) -> bytes:
    """A usable key (bytes, 16 to 4096 long, surrounding whitespace removed) or a one-line error."""
    if isinstance(key, str):
        key = key.encode()
    if not isinstance(key, bytes | bytearray):
        raise UserError(f"seal key from {source} is not text or bytes")
    key = bytes(key).strip()
    if len(key) < _MIN_KEY_BYTES:
        raise UserError(f"seal key from {source} is {len(key)} bytes, shorter than {_MIN_KEY_BYTES}; use a random "
                        "key, e.g. head -c 32 /dev/urandom | base64 > key")
    if len(key) > _MAX_KEY_BYTES:
        raise UserError(f"seal key from {source} is longer than {_MAX_KEY_BYTES} bytes; is it the right file?")
    return key


def read_key_file(path: str) -> bytes:
    """The key in ``path`` (a regular file, read bounded), or a one-line error naming it."""
    loc = open_location(path, None, what="seal key file")
    raw = read_bytes(loc, limit=_MAX_KEY_BYTES + 64)
    if raw is None:
        raise UserError(f"seal key file {path} does not exist; pass the file that holds the key")
    return check_key(raw, source=path)


def resolve_key(seal_key: bytes | None) -> bytes | None:
    """The key to use: the one passed, else the ``[kafka_spark] seal_key_file`` setting's, else None (unkeyed)."""
    if seal_key is not None:
        return check_key(seal_key, source="the caller")
    path = settings.value("seal_key_file")
    return read_key_file(path) if path else None
