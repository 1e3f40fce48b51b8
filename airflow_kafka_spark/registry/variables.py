"""``${VAR}`` expansion in registry values: registry ``vars``, then the built-ins, then the environment.

Why strict: a variable that is unset *or empty* is an error, because ``${AKS_DATA_DIR}/checkpoints``
with an empty variable silently becomes ``/checkpoints``. Expansion runs after YAML parsing, so an
environment value can never inject YAML structure. ``$$`` is a literal ``$``.
"""

from __future__ import annotations

import re
from typing import Any

from airflow_kafka_spark.registry.context import BUILTIN_VARS, Context, kind, show

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VAR_REF = re.compile(r"\$\$|\$\{([^}]*)\}")


def expand(ctx: Context, where: str, value: str) -> str:
    """Replace ``${VAR}``/``${VAR:-default}``/``$$`` in one string value."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        body = m.group(1)
        name, sep, default = body.partition(":-")
        if not _VAR_NAME.fullmatch(name) or "${" in default:
            ctx.fail(where, f"${{{body}}} is not a variable reference this registry understands",
                     "write ${NAME} or ${NAME:-default} (no nesting), or $${...} for a literal '${'")
        found = ctx.lookup(name)
        if found:
            return found
        if sep:
            return default
        ctx.fail(where, f"uses ${{{name}}}, which is not set (or empty)",
                 f"export {name}=..., define it under 'vars:', or write ${{{name}:-default}}")

    out = _VAR_REF.sub(repl, value)
    # A '${' left after substitution was never closed (the '$$' escape has become '$' already,
    # so look at the input).
    if "${" in _VAR_REF.sub("", value):
        ctx.fail(where, f"has an unclosed '${{' in {value!r}",
                 "close it with '}', or write $$ for a literal '$'")
    return out


def expand_tree(ctx: Context, where: str, value: Any) -> Any:
    """:func:`expand` applied to every string inside lists and mappings."""
    if isinstance(value, str):
        return expand(ctx, where, value)
    if isinstance(value, list):
        return [expand_tree(ctx, f"{where}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: expand_tree(ctx, f"{where}.{k}", v) for k, v in value.items()}
    return value


def parse_vars(ctx: Context, raw: Any) -> dict[str, str]:
    """The registry's ``vars:``, expanded in order (each may use those above it); stored in ``ctx``."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        ctx.fail("vars", f"must be a mapping of NAME: value, got {kind(raw)}",
                 "write vars: {data: /srv/aks}")
    for name, value in raw.items():
        where = f"vars.{name}"
        if not isinstance(name, str) or not _VAR_NAME.fullmatch(name):
            ctx.fail("vars", f"{show(name)} is not a variable name", "use letters, digits and '_'")
        if name in BUILTIN_VARS:
            ctx.fail(where, f"{name} is built in and cannot be redefined", "pick another name")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            ctx.fail(where, f"must be a string, got {kind(value)}", "quote the value")
        # Each var may use the ones defined above it (and built-ins and the environment).
        ctx.vars[name] = expand(ctx, where, str(value))
    return ctx.vars
