"""Errors that carry one line for a person, and the exit codes of the command line: the one place for both.

Everything a user can cause (a bad path, a tampered manifest) is raised as a :class:`UserError`;
the command line prints its message alone and exits 2, the Airflow layer fails the task with it.
Kafka or storage that does not answer is an :class:`Unreachable` (exit 4): the input may be fine
and a retry may work, so scripts must be able to tell it from a typo. A refusal because the
situation (not the input) is unsafe is an :class:`OperationBlocked`, exit 3 like a BLOCK verdict.
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any


class ExitCode(IntEnum):
    """What ``aks`` returns; an ``int``, so it goes into JSON output and ``sys.exit`` unchanged."""

    OK = 0
    BUG = 1  # an internal error: its traceback is printed, secrets scrubbed (what Python itself returns)
    USER_ERROR = 2
    BLOCKED = 3
    UNREACHABLE = 4
    INTERRUPTED = 130


class UserError(Exception):
    """Bad input or an unreachable dependency, explained in one line."""

    exit_code = ExitCode.USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class CheckpointWritten(UserError):
    """A checkpoint file changed while a backup copied it: something still writes there (a running query,
    or on a cluster manager an executor of a finished application finishing its write)."""

    #: The file's path inside the checkpoint, where the copy that saw the change knows it.
    path: str | None = None


class Unreachable(UserError):
    """Kafka or the storage did not answer (refused, timed out, name not resolved): exit 4, not 2."""

    exit_code = ExitCode.UNREACHABLE


# Exception class names (anywhere in the MRO) that mean "no answer from the other side", known by name
# so that this module imports neither requests, botocore nor aiohttp.
_CONNECTIVITY_NAMES = frozenset({
    "ConnectionError", "TimeoutError", "gaierror", "EndpointConnectionError", "ConnectTimeoutError",
    "ReadTimeoutError", "ConnectTimeout", "ReadTimeout", "NewConnectionError", "MaxRetryError",
    "ClientConnectorError", "ServerTimeoutError", "ConnectionClosedError",
})


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) means the other side did not answer, rather than answered no."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if any(c.__name__ in _CONNECTIVITY_NAMES for c in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


class CheckpointFormatError(UserError):
    """A checkpoint file does not have the format Spark writes."""


class BlockReason(StrEnum):
    """Why an operation was refused although its input was fine: the type to test, not the message.

    The value is the ``code`` ``--json`` prints (unchanged); a refusal by the plan or verdict
    carries its worst finding's code there instead, and :attr:`PLAN_BLOCKED` here. A refusal raised
    with a ``code`` only (``ops/restore.py`` and ``ops/backup/take.py`` still pass
    ``code="QUERY_RUNNING"`` or the worst finding's code) gets the reason of that name, else
    :attr:`PLAN_BLOCKED` (:meth:`of_code`).
    """

    #: a job holds the lease, or wrote batches while the operation read the checkpoint
    QUERY_RUNNING = "QUERY_RUNNING"
    #: a submit would start a second driver on the checkpoint (a live recorded, unrecorded or leased one)
    ALREADY_RUNNING = "ALREADY_RUNNING"
    #: the plan or verdict blocks (``code``: its worst finding)
    PLAN_BLOCKED = "PLAN_BLOCKED"
    #: a reset/restore was interrupted here and must be finished first
    INTERRUPTED_OPERATION = "INTERRUPTED_OPERATION"
    #: finishing an interrupted reset/restore would undo what ran since
    STALE_INTERRUPTED_OPERATION = "STALE_INTERRUPTED_OPERATION"
    #: an interrupted operation was finished instead; the requested one was not started
    INTERRUPTED_OPERATION_FINISHED = "INTERRUPTED_OPERATION_FINISHED"
    #: ``auto`` asked Spark (the compatibility probe) whether the new build breaks the checkpoint and got no answer
    COMPATIBILITY_UNKNOWN = "COMPATIBILITY_UNKNOWN"

    @classmethod
    def of_code(cls, code: str) -> BlockReason:
        """The reason a ``code`` string stands for (a finding code: :attr:`PLAN_BLOCKED`)."""
        try:
            return cls(code)
        except ValueError:
            return cls.PLAN_BLOCKED


class OperationBlocked(UserError):
    """The operation was refused because doing it would lose data, break a run, or half-finish.

    Exit code 3 (as a BLOCK verdict), not 2: the input was fine, the situation is not. ``reason``
    says which refusal it is (a :class:`BlockReason`: callers and tests check it, never the
    message); ``code`` is what ``--json`` prints (the reason's value, or the blocking finding's
    code); ``details`` carries the plan or verdict for ``--json`` output.
    """

    exit_code = ExitCode.BLOCKED

    def __init__(self, message: str, *, reason: BlockReason | None = None, code: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else BlockReason.of_code(code or "")
        self.code = code if code is not None else reason.value if reason is not None else "BLOCKED"
        self.details = details or {}
