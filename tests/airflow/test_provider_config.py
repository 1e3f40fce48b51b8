"""The ``[kafka_spark]`` section as Airflow sees it: ``airflow config list`` shows it, ``get-value`` reads the
``AIRFLOW__KAFKA_SPARK__*`` form, and an option set in ``airflow.cfg`` reaches the core through the Airflow layer
(the old ``AKS_*`` name still works, with one deprecation line).

Real ``airflow`` commands in subprocesses: the section is declared through the provider's ``config``
entry, which Airflow reads while it initialises its configuration, so only a fresh process shows it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_kafka_spark import settings
from tests.airflow.conftest import REPO, airflow_env, run_airflow

pytestmark = pytest.mark.airflow


def test_airflow_config_list_shows_the_section_and_get_value_reads_the_env_form(tmp_path):
    listed = run_airflow("config", "list", "--section", "kafka_spark", "--include-descriptions")
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert "[kafka_spark]" in listed.stdout
    for s in settings.SETTINGS:
        assert f"{s.name} =" in listed.stdout, s.name
        if s.legacy:   # a setting new in the section (docs_url) replaces no variable
            assert f"Replaces ${s.legacy}" in listed.stdout, s.legacy
        else:
            assert "Replaces $None" not in listed.stdout
    got = run_airflow("config", "get-value", "kafka_spark", "audit_dir",
                      AIRFLOW__KAFKA_SPARK__AUDIT_DIR=str(tmp_path / "audit"))
    assert got.returncode == 0 and got.stdout.strip().splitlines()[-1] == str(tmp_path / "audit"), got.stderr


# Airflow routes warnings to its logging (a task's log); recorded here to count them.
_READ = """
import warnings
import airflow_kafka_spark.airflow_glue   # hands Airflow's configuration to the core's settings
from airflow_kafka_spark.registry.loader import default_registry_path
from airflow_kafka_spark.watch.audit.report import default_audit_dir
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("REGISTRY", default_registry_path())
    print("AUDIT", default_audit_dir(None))
    print("AUDIT", default_audit_dir(None))
for w in caught:
    print("WARNING", w.category.__name__, w.message)
"""


def test_an_option_in_airflow_cfg_reaches_the_core_and_the_old_name_still_works(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "airflow.cfg").write_text(f"[kafka_spark]\njob_registry = {tmp_path}/cfg.yaml\n")
    env = airflow_env(AIRFLOW_HOME=str(home), AKS_AUDIT_DIR=str(tmp_path / "old-audit"))
    env.pop("AIRFLOW__KAFKA_SPARK__JOB_REGISTRY", None)
    env.pop("AKS_JOB_REGISTRY", None)
    proc = subprocess.run([sys.executable, "-c", _READ], capture_output=True, text=True, timeout=180, env=env,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"REGISTRY {tmp_path}/cfg.yaml" in proc.stdout
    assert f"AUDIT {tmp_path}/old-audit" in proc.stdout
    warned = [line for line in proc.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1, proc.stdout     # once per process, and none for the airflow.cfg option
    assert "SettingDeprecationWarning AKS_AUDIT_DIR is deprecated" in warned[0]
