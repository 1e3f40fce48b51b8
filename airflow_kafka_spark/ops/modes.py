"""The modes of the checkpoint operations, as enums: the one list the CLI, operators and DAGs use.

Kept apart from the planning code so that ``aks`` can build its argument parser from them at
start-up without importing fsspec or Kafka clients.
"""

from __future__ import annotations

from enum import StrEnum


class ResetMode(StrEnum):
    """Where a reset puts the new run (``ops.reset_plan`` says what each one computes)."""

    PRESERVE = "preserve"
    EARLIEST = "earliest"
    LATEST = "latest"
    TO_DATETIME = "to-datetime"
    SHIFT_BY = "shift-by"
    TO_OFFSETS = "to-offsets"


class SinkLogPolicy(StrEnum):
    """What a reset does with a file sink's ``_spark_metadata`` (S20)."""

    REFUSE = "refuse"
    MOVE_ASIDE = "move-aside"
