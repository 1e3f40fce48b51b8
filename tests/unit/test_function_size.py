"""No function of the product takes ten or more parameters or runs over 80 lines, apart from the
allow-list below, each entry with the reason it stays.

Long parameter lists are where loosely typed values get threaded through layer after layer (a URL
string parsed again in every function, a store's options passed along 78 signatures); the cure is
a typed value built once at the edge (``ObserveTarget``, ``ops.options.RunOptions``). Measured with
``ast``: parameters are the named ones (``self``/``cls``, ``*args`` and ``**kwargs`` not counted),
lines run from ``def`` to the last line of the body, decorators and docstring included.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_kafka_spark"
MAX_PARAMS = 9
MAX_LINES = 80

NOT_YET = "not split yet (issue 29): "
#: "<path under the package>::<qualified name>": why it stays over a limit.
ALLOWED: dict[str, str] = {
    # ten or more parameters
    "triggers/health.py::StreamingHealthTrigger.__init__": "Airflow re-creates a trigger from the keyword "
    "arguments its serialize() stored in the metadata DB: they are a stored contract, like the class path",
    "triggers/lag.py::StreamingLagTrigger.__init__": "as StreamingHealthTrigger.__init__: serialized keyword arguments",
    "operators/checkpoint.py::ResetCheckpointOperator.__init__": "an operator's keyword arguments are what DAG files "
    "write: each is one documented (most of them templated) setting of the reset a DAG author chooses",
    "verdict/validate.py::validate": "tests/unit/test_cli.py asserts the keyword arguments the CLI passes it "
    "(timeout, kafka_config), and the suite's assertions stay this round",
    # over 80 lines
}


def _measure() -> dict[str, tuple[int, int]]:
    found: dict[str, tuple[int, int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(PACKAGE).as_posix()

        def visit(node: ast.AST, prefix: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = child.args
                    params = [x for x in (*a.posonlyargs, *a.args, *a.kwonlyargs) if x.arg not in ("self", "cls")]
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found[f"{rel}::{prefix}{child.name}"] = (len(params), child.end_lineno - start + 1)
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return found


def test_no_function_takes_ten_parameters_or_runs_over_80_lines():
    over = {name: size for name, size in _measure().items() if size[0] > MAX_PARAMS or size[1] > MAX_LINES}
    new = {name: f"{p} parameters, {n} lines" for name, (p, n) in over.items() if name not in ALLOWED}
    assert not new, f"over {MAX_PARAMS} parameters or {MAX_LINES} lines (pass a typed value, split it): {new}"


def test_the_allow_list_names_only_functions_still_over_a_limit():
    sizes = _measure()
    stale = [name for name in ALLOWED if name not in sizes
             or (sizes[name][0] <= MAX_PARAMS and sizes[name][1] <= MAX_LINES)]
    assert not stale, f"no longer over a limit (remove from ALLOWED): {stale}"
