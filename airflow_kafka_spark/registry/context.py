"""The error context of one registry load: the file (named in every message), its folder, its variables.

Why its own module: the loader, the field checks and the location rules all report problems the same
way, as one :class:`~airflow_kafka_spark.errors.UserError` line "job registry <file>: <where>:
<problem>; <fix>"; they share this context instead of each formatting its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

from airflow_kafka_spark import settings
from airflow_kafka_spark.errors import UserError

# Variables every registry may use; they cannot be redefined under ``vars:``.
BUILTIN_VARS = ("AKS_PACKAGE_DIR", "AKS_REGISTRY_DIR")


class Context:
    """What every check needs: the file (for messages), its folder, the variables."""

    def __init__(self, reg_path: Path) -> None:
        self.path = reg_path
        self.base_dir = Path(os.path.abspath(reg_path)).parent
        self.builtins = {
            "AKS_PACKAGE_DIR": str(Path(__file__).resolve().parents[1]),
            "AKS_REGISTRY_DIR": str(self.base_dir),
        }
        self.vars: dict[str, str] = {}

    def fail(self, where: str, problem: str, fix: str) -> NoReturn:
        raise UserError(f"job registry {self.path}: {where}: {problem}; {fix}")

    def lookup(self, name: str) -> str | None:
        """A variable's value: registry vars, then the built-ins, then the settings (``${AKS_DATA_DIR}`` is
        ``[kafka_spark] data_dir``), then the environment."""
        if name in self.vars:
            return self.vars[name]
        if name in self.builtins:
            return self.builtins[name]
        if name in settings.BY_LEGACY:
            return settings.legacy_value(name)
        return os.environ.get(name)


def kind(value: Any) -> str:
    """How a YAML value reads to its author ('a mapping', 'a boolean' ...), for error messages."""
    return {dict: "a mapping", list: "a list", bool: "a boolean", type(None): "nothing (null)",
            int: "a number", float: "a number", str: "a string"}.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    """repr, shortened: error messages must stay one readable line even for hostile input."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
