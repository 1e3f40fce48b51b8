"""The provider as Airflow sees it: discovered, schema-valid, consistent with the package, and
importable without deprecation warnings.

A broken ``get_provider_info`` is not a local failure: Airflow calls it while initialising its
configuration, so it breaks ``import airflow`` and every CLI command for every provider. These
tests are the guard.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import time
from importlib.metadata import distribution, entry_points
from importlib.resources import files
from pathlib import Path

import pytest

from tests.airflow.conftest import REPO, TIMINGS, airflow_env, run_airflow

pytestmark = pytest.mark.airflow

DIST = "airflow-kafka-spark"
PACKAGE = REPO / "airflow_kafka_spark"
SECTIONS = ("hooks", "operators", "sensors", "triggers")


def _json_from(stdout: str):
    """The CLI's JSON document; Airflow may print log lines to stdout before it."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(("[", "{")):
            return json.loads(line)
    raise AssertionError(f"no JSON in output: {stdout[-2000:]}")


def _public_modules(section: str) -> set[str]:
    folder = PACKAGE / section
    if not folder.is_dir():
        return set()
    return {f"airflow_kafka_spark.{section}.{m.name}" for m in pkgutil.iter_modules([str(folder)])
            if not m.name.startswith("_")}


def test_airflow_providers_list_shows_this_provider(airflow_home):
    started = time.perf_counter()
    proc = run_airflow("providers", "list", "-o", "json")
    TIMINGS["airflow providers list (subprocess)"] = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    providers = {p["package_name"]: p for p in _json_from(proc.stdout)}
    assert DIST in providers, sorted(providers)
    # The version comes from the installed distribution, never from the provider dict.
    assert providers[DIST]["version"] == distribution(DIST).version
    # The providers we build on are discovered in the same process.
    assert {"apache-airflow-providers-apache-kafka",
            "apache-airflow-providers-apache-spark"} <= set(providers)


def test_airflow_providers_get_returns_our_info(airflow_home):
    proc = run_airflow("providers", "get", DIST, "--full", "-o", "json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (info,) = _json_from(proc.stdout)
    assert info["package-name"] == DIST
    assert info["hooks"][0]["python-modules"] == ["airflow_kafka_spark.hooks.streaming"]


def test_entry_point_and_package_name_match_the_distribution():
    from packaging.utils import canonicalize_name

    from airflow_kafka_spark.provider_info import get_provider_info

    (ep,) = [e for e in entry_points(group="apache_airflow_provider") if e.dist and e.dist.name == DIST]
    assert ep.value == "airflow_kafka_spark.provider_info:get_provider_info"
    assert ep.load() is get_provider_info
    # Airflow raises (for every provider) when these differ.
    assert get_provider_info()["package-name"] == canonicalize_name(distribution(DIST).metadata["Name"])


def test_provider_info_validates_against_airflow_schema():
    import jsonschema

    from airflow_kafka_spark.provider_info import get_provider_info

    schema = json.loads(files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    integrations = {i["integration-name"] for i in info.get("integrations", [])}
    for section in SECTIONS:
        for entry in info.get(section, []):
            assert entry["integration-name"] in integrations, (section, entry)
    # No connection type of our own: the Kafka and Spark providers own "kafka" and "spark".
    assert "connection-types" not in info


@pytest.mark.parametrize("section", SECTIONS)
def test_declared_modules_match_the_package(section):
    from airflow_kafka_spark.provider_info import get_provider_info

    declared = {m for entry in get_provider_info().get(section, []) for m in entry["python-modules"]}
    on_disk = _public_modules(section)
    assert declared == on_disk, (
        f"provider_info {section!r} declares {sorted(declared)} but the package has {sorted(on_disk)}; "
        "add new modules to airflow_kafka_spark/provider_info.py (or remove stale ones)")
    for module in declared:
        importlib.import_module(module)


# Run in a fresh interpreter so that nothing imported earlier hides a deprecated import path.
# Why not simply `python -W error::DeprecationWarning`: Airflow's deprecated-import shims warn with
# DeprecatedImportWarning, which is a *FutureWarning* (airflow/utils/deprecation_tools.py), so that
# flag lets `from airflow.models.dagbag import DagBag` through. `import airflow` comes first
# because Airflow adjusts warning filters while it initialises; ours are installed after it.
_IMPORT_CHECK = """
import importlib, sys, warnings
import airflow
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name in sys.argv[1:]:
        importlib.import_module(name)
bad = [w for w in caught
       if issubclass(w.category, (DeprecationWarning, PendingDeprecationWarning, FutureWarning))]
for w in bad:
    print(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
print("deprecations:", len(bad))
sys.exit(1 if bad else 0)
"""


def _import_warnings(modules: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _IMPORT_CHECK, *modules], capture_output=True,
                          text=True, timeout=180, cwd=REPO, env=airflow_env())


def test_airflow_layer_imports_without_deprecation_warnings():
    modules = sorted({"airflow_kafka_spark.provider_info"}.union(*(_public_modules(s) for s in SECTIONS)))
    proc = _import_warnings(modules)
    assert proc.returncode == 0 and "deprecations: 0" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_the_deprecation_check_catches_airflow_deprecated_imports(tmp_path):
    """The check above is only worth something if it fails on a real deprecated import."""
    (tmp_path / "uses_old_dagbag.py").write_text("from airflow.models.dagbag import DagBag\n")
    proc = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, "uses_old_dagbag"], capture_output=True,
                          text=True, timeout=180, cwd=REPO,
                          env=airflow_env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "DeprecatedImportWarning" in proc.stdout


def test_dags_folder_parses_with_the_3_3_dagbag(airflow_home):
    """The DAGs beside the registry import cleanly. ``airflow.dag_processing.dagbag`` is the 3.3
    home of DagBag (``airflow.models.dagbag`` warns; ``include_examples`` is gone).

    And the parse leaves this test's own timeout armed: Airflow bounds a parse with SIGALRM and then
    sets the timer to 0, which cancelled pytest-timeout's alarm for the rest of the test (a hung
    ``dag.test()`` held a CI shard for 23 minutes); tests/airflow/conftest.py parses without that timer."""
    import signal

    from airflow.dag_processing.dagbag import DagBag

    # Armed here, as pytest-timeout arms it before the test (the session's resetdb() in an earlier setup
    # may have cancelled that one: tests/conftest.py's backstop covers such a test).
    signal.setitimer(signal.ITIMER_REAL, 600)
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    assert signal.getitimer(signal.ITIMER_REAL)[0] > 0, "the DAG parse cancelled the test's timeout"


def test_hook_has_the_attributes_airflow_requires():
    from airflow_kafka_spark.hooks.streaming import StreamingKafkaHook

    for attr in ("conn_type", "conn_name_attr", "hook_name", "default_conn_name"):
        assert getattr(StreamingKafkaHook, attr), attr
    assert StreamingKafkaHook.conn_type == "kafka"   # the Kafka provider's type, not a new one


def test_airflow_home_is_the_session_temp_dir(airflow_home):
    from airflow import settings
    from airflow.configuration import AIRFLOW_HOME

    assert Path(AIRFLOW_HOME) == airflow_home
    configured = settings.SQL_ALCHEMY_CONN
    assert configured == f"sqlite:///{airflow_home}/airflow.db"
    assert (airflow_home / "airflow.db").is_file()
