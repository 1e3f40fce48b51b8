"""Real Airflow for tests: a throwaway ``AIRFLOW_HOME`` with a migrated SQLite metadata DB.

Why the environment is set when this file is imported, not inside the fixture: Airflow reads
``AIRFLOW_HOME`` and ``[database] sql_alchemy_conn`` once, at ``import airflow`` (configuration and
settings are module-level), and creates ``$AIRFLOW_HOME`` (``~/airflow`` when unset) right then.
A test module that imports anything from Airflow at module level is imported during collection,
before any fixture runs, so a fixture that sets the variables would already be too late. Pytest
imports this conftest before it collects the test modules next to it, which is early enough.

If Airflow was imported earlier in the session (a test elsewhere imported it at module level), the
settings point wherever that import found them, possibly a developer's real ``~/airflow``.
The session then stops instead of migrating (or resetting!) that database.

Everything here must run with no network and no running Airflow components.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMINGS: dict[str, float] = {}


def _configure_airflow_env() -> Path:
    if "airflow" in sys.modules:
        pytest.exit("airflow was imported before tests/airflow/conftest.py could point AIRFLOW_HOME at a "
                    "temp dir; import airflow inside tests (not at module level) in other test folders",
                    returncode=4)
    home = Path(tempfile.mkdtemp(prefix="aks-airflow-home-")).resolve()
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        # Four slashes: sqlite:/// + an absolute path. A relative path is refused by Airflow.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        # Airflow bounds a DAG file's parse with SIGALRM and, done, sets the timer to 0: every DagBag() and
        # every dag.test() (it parses the file again) cancelled pytest-timeout's alarm, so a test that then
        # hung was never failed (session 28's CI: the approval test waited 23 min in dag.test(), and the shard
        # ran into its 50-minute limit). 0 parses without the timer; the test's own timeout bounds the parse.
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "0",
    })
    return home


AIRFLOW_HOME = _configure_airflow_env()


def airflow_env(**extra: str) -> dict[str, str]:
    """The environment for an ``airflow`` subprocess: this session's home and DB, plus ``extra``."""
    return {**os.environ, **extra}


def run_airflow(*args: str, timeout: float = 180, **extra_env: str) -> subprocess.CompletedProcess[str]:
    """Run the venv's ``airflow`` CLI (next to this interpreter, so PATH does not matter)."""
    exe = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          env=airflow_env(**extra_env), cwd=REPO)


@pytest.fixture(scope="session")
def airflow_home(connector_jars: str) -> Iterator[Path]:
    """``$AIRFLOW_HOME`` of this session with a freshly migrated metadata DB (and $AKS_CONNECTOR_JARS set
    for the drivers the operators start on a local master)."""
    from airflow import settings
    from airflow.utils import db

    expected = f"sqlite:///{AIRFLOW_HOME}/airflow.db"
    configured = settings.SQL_ALCHEMY_CONN
    if configured != expected:   # never reset a database that is not ours
        pytest.exit(f"Airflow is configured for {configured}, not {expected}; refusing to reset it",
                    returncode=4)
    started = time.perf_counter()
    db.resetdb()   # drop + create from the ORM + stamp: the in-process `airflow db migrate` on a fresh DB
    TIMINGS["resetdb() in-process"] = time.perf_counter() - started
    yield AIRFLOW_HOME
    settings.dispose_orm(do_log=False)


@pytest.fixture
def kafka_connection(monkeypatch: pytest.MonkeyPatch):
    """Define a ``kafka`` connection through ``AIRFLOW_CONN_<ID>`` (no DB row, nothing to clean up)."""
    import json

    def define(conn_id: str, extra: dict) -> str:
        value = json.dumps({"conn_type": "kafka", "extra": extra})
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", value)
        return conn_id

    return define


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Here rather than in the fixture: the home exists (Airflow writes logs/ into it at import)
    # even when no test asked for the migrated DB. AKS_KEEP_AIRFLOW_HOME=1 keeps it for a look.
    if not os.environ.get("AKS_KEEP_AIRFLOW_HOME"):
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.write_sep("-", "airflow timings")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what}: {seconds:.2f}s")
