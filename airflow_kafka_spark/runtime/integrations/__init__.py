"""What the product adds to a user's application at submit, one implementation per :class:`Integration`.

Why a type and not flags: the application is the user's (``application``, ``main_class``, its own
arguments verbatim, as the Flink Kubernetes operator keeps ``jarURI``/``entryClass``/``args``); what
the product owns it passes by configuration Spark itself reads, and only the reference contract
passes command-line flags. Each integration answers one question — "what do I add to this job's
submit?" (:meth:`JobIntegration.launch`) — and says whether the job stops on its stop marker. A new
integration is one new module here and one enum value, not a branch in the operators, the submit
and the stop.

The three: :mod:`.agent` (the JVM agent by ``spark.plugins``; the default), :mod:`.reference`
(the bundled reference jobs' flags), :mod:`.plain` (``none``: nothing added).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.registry.fields import PLACEHOLDERS, arg_pieces, placeholders_in
from airflow_kafka_spark.registry.model import Integration, JobSpec


@dataclass(frozen=True)
class LaunchFacts:
    """What the product knows at submit time that an integration may pass on."""

    bootstrap_servers: str
    kafka_options: tuple[str, ...] = ()          # non-secret kafka.<key>=<value> of the connection
    starting_offsets_file: str | None = None     # a reset's offsets, for the reference contract
    spark_version: Callable[[], str] = field(default=lambda: "")  # asked only by integrations that need it


@dataclass(frozen=True)
class Launch:
    """An integration's additions to one submit: the application's arguments, Spark conf, jars."""

    args: tuple[str, ...]
    conf: Mapping[str, str] = field(default_factory=dict)
    jars: tuple[str, ...] = ()


class JobIntegration(Protocol):
    """One way of reaching a user's job; see the module doc."""

    #: True when the job (or the agent in it) watches the stop marker and stops on a batch boundary.
    stops_on_marker: bool
    #: True when the job reads a reset's offsets from ``--starting-offsets-file`` (only the reference contract).
    reads_starting_offsets_file: bool

    def launch(self, spec: JobSpec, facts: LaunchFacts) -> Launch: ...

    def stop_witness(self, spec: JobSpec) -> Mapping[str, Any] | None:
        """What the job itself reported about its last stop (None: it reports nothing)."""


#: One module per integration, imported only when a job uses it (the agent's module finds its jars).
_MODULES = {Integration.AGENT: "agent", Integration.REFERENCE: "reference", Integration.NONE: "plain"}


def integration_for(spec: JobSpec) -> JobIntegration:
    """The implementation of the job's declared integration (each module exports ``INTEGRATION``)."""
    module = importlib.import_module(f"{__name__}.{_MODULES[spec.integration]}")
    return module.INTEGRATION


def own_arguments(spec: JobSpec, facts: LaunchFacts) -> list[str]:
    """The job's own ``application_args`` with the registry's placeholders filled in (``{{``/``}}`` literal)."""
    values = {"name": spec.name, "checkpoint": spec.checkpoint, "bootstrap_servers": facts.bootstrap_servers,
              "topics": ",".join(spec.topics), "output": spec.output, "stop_marker": spec.stop_marker}
    assert set(values) == set(PLACEHOLDERS)
    out = []
    for arg in spec.application_args:
        for name in placeholders_in(arg):
            if values.get(name) is None:
                raise UserError(f"job {spec.name}: application_args uses {{{name}}}, which the registry does not set; "
                                f"set {name} for the job or remove the placeholder")
        out.append(_fill(arg, values))
    return out


def _fill(arg: str, values: Mapping[str, str | None]) -> str:
    # One pass over the registry's own reading of the argument: a value holding "{x}" is never expanded again.
    return "".join(str(values[v]) if kind == "name" and v in values else "{" + v + "}" if kind == "name" else v
                   for kind, v in arg_pieces(arg))


def merged_list(*parts: Sequence[str] | str | None) -> str:
    """Comma-joined, in order, without repeats: how spark.jars-like settings are combined, never replaced."""
    seen: list[str] = []
    for part in parts:
        items = part.split(",") if isinstance(part, str) else (part or ())
        for item in items:
            item = item.strip()
            if item and item not in seen:
                seen.append(item)
    return ",".join(seen)
