"""The parts of a lifecycle record (topic identity, driver, lease), where it lives, and field checks.

Kept apart from :mod:`~airflow_kafka_spark.lifecycle.document` (the record's contents, JSON form and
events) and :mod:`~airflow_kafka_spark.lifecycle.record` (persistence, lease calls): this one holds
the plain values the record stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_kafka_spark._util import text
from airflow_kafka_spark._util.localfs import split_protocol
from airflow_kafka_spark.errors import UserError

RECORD_SUFFIX = ".lifecycle.json"


def record_location(checkpoint_location: str) -> str:
    """``<checkpoint>.lifecycle.json``: a sibling of the checkpoint folder, not a file inside it."""
    loc = str(checkpoint_location).rstrip("/")
    protocol, path = split_protocol(loc)
    if not path or path.strip("/") == "" or (protocol and "/" not in path.strip("/")):
        raise UserError(
            f"checkpoint location {checkpoint_location!r} has no parent folder to keep the "
            "lifecycle record beside it; use a checkpoint path below a folder or bucket"
        )
    return loc + RECORD_SUFFIX


@dataclass
class TopicIdentity:
    """One topic incarnation: the id changes when the topic is deleted and recreated (S02/S03)."""

    topic_id: str | None
    partitions: int


@dataclass
class DriverInfo:
    """Where the job's driver runs, so stop/kill/status can reach it."""

    kind: str  # a DriverKind value
    id: str  # pid, YARN application id, k8s pod name, standalone driver id
    host: str | None = None
    started_at: int | None = None  # epoch ms


@dataclass
class Lease:
    """Who may run the job now (S16). Expired leases may be taken over."""

    holder: str
    run_id: str
    expires_at_ms: int

    def live(self, now_ms: int | None = None) -> bool:
        return self.expires_at_ms > (now_ms if now_ms is not None else text.now_ms())


# field checks of a stored record (ValueError: the caller says which record is corrupt)


def req_str(v: Any, name: str) -> str:
    if not isinstance(v, str) or not v:
        raise ValueError(f"{name} must be a non-empty string, got {v!r}")
    return v


def opt_str(v: Any, name: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ValueError(f"{name} must be a string or null, got {v!r}")
    return v


def req_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    return v


def opt_int(v: Any, name: str) -> int | None:
    return None if v is None else req_int(v, name)


def obj(v: Any, name: str) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError(f"{name} must be an object, got {type(v).__name__}")
    return v
