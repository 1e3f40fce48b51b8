"""docs/architecture.md names every module of the package, and every module path it names exists.

A module counts as named when the page holds its path (``ops/guards.py``, or ```ops/guards``` in
backticks), or its name in backticks in the table row of its top-level package (the ``| `ops/` |``
row naming ```guards```) or of its own folder (``| `airflow_glue/kinds/` |`` naming ```base.py```).
A new module without a line there fails this test, so the page stays the map a newcomer can trust."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_kafka_spark"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for line in DOC.splitlines():
        m = re.match(r"\| `((?:\w+/)*\w+)/?`", line)
        if m:
            rows[m.group(1)] = rows.get(m.group(1), "") + line
    return rows


def _named(rel: Path, rows: dict[str, str]) -> bool:
    if rel.as_posix() in DOC or f"`{rel.with_suffix('').as_posix()}`" in DOC:
        return True
    top = rows.get(rel.parts[0] if len(rel.parts) > 1 else rel.stem, "")
    folder = rows.get(rel.parent.as_posix(), "")
    return f"`{rel.stem}`" in top or any(f"`{rel.stem}{end}`" in folder for end in ("", ".py"))


def test_every_module_of_the_package_is_named():
    rows = _rows()
    modules = [p.relative_to(PACKAGE) for p in sorted(PACKAGE.rglob("*.py"))
               if p.name not in ("__init__.py", "__main__.py")]
    assert len(modules) > 100
    assert [m.as_posix() for m in modules if not _named(m, rows)] == []


def test_every_module_path_the_page_names_exists():
    paths = set(re.findall(r"`((?:\w+/)+\w+\.py)`", DOC)) | set(re.findall(r"\| `((?:\w+/)+\w+\.py)`", DOC))
    assert paths
    assert sorted(p for p in paths if not (PACKAGE / p).exists() and not (ROOT / p).exists()) == []


# -- references from the code lead somewhere in the repository ---------------------------------------------------

#: Cited where they were written, left for the refactor editing those modules now (ops/backup, the registry model).
_LEFT = {"ops/backup/precopy.py": "issue 28", "registry/model.py": "user story 1"}


def _sources() -> dict[str, str]:
    return {p.relative_to(PACKAGE).as_posix(): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_scenario_id_the_code_cites_is_in_docs_scenarios():
    scenarios = (ROOT / "docs" / "scenarios.md").read_text()
    cited = {s for text in _sources().values() for s in re.findall(r"\bS\d{2}\b", text)}
    assert len(cited) > 20
    assert sorted(s for s in cited if not re.search(rf"\b{s}\b", scenarios)) == []


def test_every_document_the_code_cites_is_in_the_repository():
    missing = []
    for rel, text in _sources().items():
        for doc in re.findall(r"\b((?:docs/)?[\w-]+\.md)\b", text):
            if doc in ("latest.md",):   # a file the audit writes, not a document
                continue
            if not ((ROOT / doc).exists() or (ROOT / "docs" / doc).exists()):
                missing.append(f"{rel}: {doc}")
        for ref in re.findall(r"\b(?:issue \d+|user[- ]stor(?:y|ies)\b[^)]*|failure-scenarios)", text):
            if _LEFT.get(rel) != ref:
                missing.append(f"{rel}: {ref}")
    assert missing == []
