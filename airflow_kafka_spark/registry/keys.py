"""The registry's job keys as documentation, generated from the one declaration (:class:`JobSpec`).

Why generated: the keys were listed by hand in the loader's docstring, in docs/your-jobs.md and in
the fields' comments, and the lists drifted. Now each field of :class:`JobSpec` carries its line
(``key(doc=...)``), the loader accepts exactly those fields, and docs/registry.md is this module's
output (``python -m airflow_kafka_spark.registry.keys > docs/registry.md``; a unit test keeps it current).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, fields
from enum import Enum
from typing import Any

from airflow_kafka_spark.registry.job import REQUIRED_JOB_KEYS
from airflow_kafka_spark.registry.model import JobSpec

_HEADER = """# The job registry's keys

Generated from `JobSpec` (`airflow_kafka_spark/registry/model.py`), the one declaration the loader
checks every entry against: `python -m airflow_kafka_spark.registry.keys > docs/registry.md`.
What each integration adds to a job, with examples, is in docs/your-jobs.md; how values may use
`${VAR}` and `{name}`, and how paths are checked, is in the loader's docstring
(`airflow_kafka_spark/registry/loader.py`).

Unknown keys are errors (with a "did you mean"), and so are duplicate keys. *app*: part of the
application a submit records and a rollback resubmits.

| key | required / default | app | what it is |
|---|---|---|---|
"""


def _default(f: dataclasses.Field[Any]) -> str:
    if f.name in REQUIRED_JOB_KEYS:
        return "required"
    if f.name == "stop_marker":
        return "`<checkpoint>.stop`"
    value = f.default if f.default is not MISSING else (
        f.default_factory() if f.default_factory is not MISSING else None)
    if value is None or value in ((), {}):
        return "unset"
    if dataclasses.is_dataclass(value):
        return "see the text"
    if isinstance(value, Enum):
        value = value.value
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def markdown() -> str:
    """docs/registry.md: one row per job key, in the order :class:`JobSpec` declares them."""
    rows = [f"| `{f.name}` | {_default(f)} | {'yes' if f.metadata.get('app') else ''} | {f.metadata['doc']} |"
            for f in fields(JobSpec)]
    return _HEADER + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
