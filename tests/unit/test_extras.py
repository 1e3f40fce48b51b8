"""What the optional extras ([spark], [chart]) leave behind when they are not installed.

PySpark and matplotlib are extras: the core and the CLI must import without them, and an audit
without matplotlib writes its report without the PNG (one warning line), instead of failing the
audit DAG. The install test (tests/install) checks the same in a real venv without them; these run
in the dev venv with the modules blocked (``sys.modules[name] = None`` makes ``import name`` fail).
"""

from __future__ import annotations

import logging
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_kafka_spark
from airflow_kafka_spark.errors import UserError

# The Airflow layer (needs airflow; covered by tests/airflow and tests/install) and the Spark-side job files.
NOT_CORE = ("hooks", "operators", "sensors", "triggers", "airflow_glue", "jobs", "provider_info")
BLOCK_EXTRAS = "import sys\nfor m in ('pyspark', 'matplotlib'):\n    sys.modules[m] = None\n"


def _core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(airflow_kafka_spark.__path__, "airflow_kafka_spark."):
        if info.name.split(".")[1] not in NOT_CORE and not info.name.endswith("__main__"):
            names.append(info.name)
    return sorted(names)


def test_core_and_cli_import_without_pyspark_and_matplotlib():
    modules = _core_modules()
    assert "airflow_kafka_spark.cli" in modules and "airflow_kafka_spark.watch.audit.chart" in modules
    code = BLOCK_EXTRAS + (
        "import importlib\n"
        "for name in sys.argv[1:]:\n    importlib.import_module(name)\n"
        "from airflow_kafka_spark.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print('imported', len(sys.argv) - 1)\n")
    proc = subprocess.run([sys.executable, "-c", code, *modules], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported {len(modules)}" in proc.stdout


def test_the_block_really_hides_the_extras():
    """The check above is only worth something if the block makes the imports fail."""
    proc = subprocess.run([sys.executable, "-c", BLOCK_EXTRAS + "import matplotlib"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr


def test_audit_report_without_matplotlib_has_no_png_and_one_warning(tmp_path, monkeypatch, caplog):
    from airflow_kafka_spark.watch.audit.chart import CHART_MISSING, render_chart
    from airflow_kafka_spark.watch.audit.report import write_report
    from tests.unit.test_audit import _audit

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UserError, match=r"^no PNG chart: matplotlib is not installed .*\[chart\]"):
        render_chart([])
    with caplog.at_level(logging.WARNING, logger="airflow_kafka_spark.watch.audit.report"):
        rep = write_report([_audit("orders")], str(tmp_path), now_ms=1_700_000_000_000)
    assert [r.getMessage() for r in caplog.records] == [CHART_MISSING]
    assert "png" not in rep.paths and {"json", "markdown", "history"} <= set(rep.paths)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in written if n.endswith(".png")] and "latest.md" in written
    assert ".png" not in (tmp_path / "latest.md").read_text()


def test_the_spark_extra_is_the_tested_runtime_pinned_as_in_the_dev_constraints():
    """pyspark and pyspark-client share the ``pyspark`` package: [spark] pins both to the release the
    dev environment (constraints/dev-py3.11.txt) runs, so a bump of one must bump the other."""
    import tomllib

    repo = Path(__file__).resolve().parents[2]
    extra = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]["spark"]
    pins = dict(line.split("==", 1) for line in (repo / "constraints" / "dev-py3.11.txt").read_text().splitlines()
                if line.startswith(("pyspark==", "pyspark-client==")))
    assert sorted(extra) == sorted(f"{name}=={version}" for name, version in pins.items()), (
        f"pyproject [spark] {extra} != constraints/dev-py3.11.txt {pins}: keep both on one Spark release")
    assert len(set(pins.values())) == 1, pins
