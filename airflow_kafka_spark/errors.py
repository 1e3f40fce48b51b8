"""Errors that carry one line for a person: what is wrong and how to fix it.

Everything a user can cause (a bad path, an unreachable broker, a tampered manifest) is raised
as a :class:`UserError`; the command line prints its message alone and exits 2, the Airflow
layer fails the task with it. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input or an unreachable dependency, explained in one line."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class CheckpointFormatError(UserError):
    """A checkpoint file does not have the format Spark writes."""
