"""Which functions return a loosely keyed ``dict[str, Any]`` to another layer, and docs/architecture.md says why each
stays (issue 29: a renamed key should be a type error where it is read, not a silent ``None`` a layer up).

Counted with ``ast``: a module-level function of the package annotated ``-> dict[str, Any]`` (or ``| None``),
called (by name through a ``from ... import``, or as ``module.name(...)``) from a module of another top-level
package: the layers of ``.importlinter``. Methods (the ``to_dict()`` serialisers, the JSON edge by design) are not
counted. Run as a script it prints the list: ``.venv/bin/python tests/unit/test_dict_returns.py``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_kafka_spark"
LOOSE = {"dict[str, Any]", "dict[str, Any] | None"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    return module.split(".")[1]


def _imports(module: str, tree: ast.AST) -> dict[str, tuple[str, str | None]]:
    """Local name -> (module, attribute or None for a module), from every import of the file (any scope)."""
    names: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*module.split(".")[:-node.level], *([node.module] if node.module else [])])
            names.update({a.asname or a.name: (base, a.name) for a in node.names})
        elif isinstance(node, ast.Import):
            names.update({a.asname: (a.name, None) for a in node.names if a.asname})
    return names


def crossing() -> dict[str, set[str]]:
    """``package.module.function`` (without the package's name) -> the layers that call it."""
    trees = {_module(p): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}
    loose = {(m, n.name) for m, tree in trees.items() for n in tree.body
             if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.returns is not None
             and ast.unparse(n.returns).strip("'\"") in LOOSE}
    found: dict[str, set[str]] = {}
    for module, tree in trees.items():
        names = _imports(module, tree)
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            f, target = call.func, None
            if isinstance(f, ast.Name) and f.id in names:
                target = names[f.id]
            elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in names:
                base, attr = names[f.value.id]
                target = (f"{base}.{attr}" if attr else base, f.attr)
            if target in loose and _layer(target[0]) != _layer(module):
                found.setdefault(f"{target[0].split('.', 1)[1]}.{target[1]}", set()).add(_layer(module))
    return found


def _documented() -> tuple[set[str], str]:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc.split("**`dict[str, Any]` returns across layers.**", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([\w.]+)`", row)}, section


def test_every_dict_return_across_a_layer_is_in_the_architecture_doc_with_its_reason():
    found = crossing()
    documented, section = _documented()
    assert len(found) >= 10   # the counter still finds what it counts
    assert sorted(found) == sorted(documented)
    assert f"**{len(found)}** functions" in section


if __name__ == "__main__":
    for name, layers in sorted(crossing().items()):
        print(f"{name}  <- {', '.join(sorted(layers))}")
