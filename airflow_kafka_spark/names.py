"""The names that become folder and file names: job names and backup ids (one rule each).

Why here, just above ``errors``: a job name names a backup folder, a lifecycle record, and the job
validate binds a checkpoint to; a backup id names a manifest file and is typed into DAG forms. The
lifecycle record, the verdict, the backup code and the Airflow forms must all apply the same rule,
so it lives below all of them. ``../../etc`` or ``"orders\\n"`` never reaches a path.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from datetime import UTC, datetime

from airflow_kafka_spark.errors import UserError

JOB_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A job name as a folder name: letters, digits, ``.``, ``_``, ``-``; at most 128; no leading dot."""
BACKUP_ID_PATTERN = r"^[0-9]{8}T[0-9]{9}Z-[A-Za-z0-9._-]{1,40}$"
"""``20260101T120000000Z-b41-1a2b3c``: creation time in ms (sortable), last committed batch, random."""

DSTREAM_BACKUP_PREFIX = "dstream-"
"""A DStream job's backup is ``<backup_root>/<job>/dstream-<stamp>/`` (the group's offsets, a checkpoint copy)."""
DSTREAM_BACKUP_OFFSETS = "group-offsets.json"
"""The file in a DStream backup that holds the group's offsets; a folder without it is not a backup."""

_JOB_NAME = re.compile(JOB_NAME_PATTERN)
_BACKUP_ID = re.compile(BACKUP_ID_PATTERN)


def is_job_name(job: object) -> bool:
    return isinstance(job, str) and _JOB_NAME.fullmatch(job) is not None


def is_backup_id(backup_id: object) -> bool:
    return isinstance(backup_id, str) and _BACKUP_ID.fullmatch(backup_id) is not None


def validate_job_name(job: str) -> str:
    """``job`` unchanged, or a one-line :class:`UserError` saying what a job name may hold."""
    if not is_job_name(job):
        raise UserError(f"job name {job!r} cannot name a backup folder; use letters, digits, '.', '_' or '-' "
                        "(at most 128, starting with a letter or digit)")
    return job


def validate_backup_id(backup_id: str) -> str:
    """``backup_id`` unchanged, or a one-line :class:`UserError` showing what one looks like."""
    if not is_backup_id(backup_id):
        raise UserError(f"{backup_id!r} is not a backup id (like 20260101T120000000Z-b41-1a2b3c); "
                        "list the backups of the job with aks backups")
    return backup_id


def default_job_name(checkpoint_location: str, recorded: str | None = None) -> str:
    """The job name the lifecycle record holds (``recorded``), else the checkpoint folder's name cleaned
    to the job-name rule (``my ck`` -> ``my_ck``)."""
    if recorded is not None:
        return recorded
    name = posixpath.basename(str(checkpoint_location).rstrip("/")) or "checkpoint"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip("._-") or "checkpoint"
    return cleaned[:128]


def new_backup_id(created_ms: int, committed: int | None) -> str:
    """A backup id matching :data:`BACKUP_ID_PATTERN` for a backup made at ``created_ms`` of batch ``committed``."""
    t = datetime.fromtimestamp(created_ms / 1000, tz=UTC)
    return f"{t:%Y%m%dT%H%M%S}{created_ms % 1000:03d}Z-b{'none' if committed is None else committed}-" \
           f"{uuid.uuid4().hex[:6]}"
