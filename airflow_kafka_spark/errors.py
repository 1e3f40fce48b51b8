"""Errors that carry one line for a person, and the exit codes of the command line: the one place for both.

Everything a user can cause (a bad path, an unreachable broker, a tampered manifest) is raised
as a :class:`UserError`; the command line prints its message alone and exits 2, the Airflow
layer fails the task with it. A refusal because the situation (not the input) is unsafe is an
:class:`OperationBlocked`, exit 3 like a BLOCK verdict. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """What ``aks`` returns; an ``int``, so it goes into JSON output and ``sys.exit`` unchanged."""

    OK = 0
    USER_ERROR = 2
    BLOCKED = 3
    INTERRUPTED = 130


class UserError(Exception):
    """Bad input or an unreachable dependency, explained in one line."""

    exit_code = ExitCode.USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class CheckpointFormatError(UserError):
    """A checkpoint file does not have the format Spark writes."""


class OperationBlocked(UserError):
    """The operation was refused because doing it would lose data, break a run, or half-finish.

    Exit code 3 (as a BLOCK verdict), not 2: the input was fine, the situation is not. ``details``
    carries the plan or verdict for ``--json`` output.
    """

    exit_code = ExitCode.BLOCKED

    def __init__(self, message: str, *, code: str = "BLOCKED", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or {}
