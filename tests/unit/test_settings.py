"""The ``[kafka_spark]`` settings resolver: Airflow's env form first, then Airflow's config, then the old
``AKS_*`` name with one deprecation line; and the modules that read a setting read it through it.

Pure logic (environments passed as mappings or monkeypatched); ``airflow config list`` itself is in
tests/airflow/test_provider_config.py.
"""

from __future__ import annotations

import warnings

import pytest

from airflow_kafka_spark import settings
from airflow_kafka_spark.errors import UserError


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(settings, "_warned", set())
    monkeypatch.setattr(settings, "_airflow_reader", None)
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.env, raising=False)
        if s.legacy:
            monkeypatch.delenv(s.legacy, raising=False)


def test_every_setting_is_declared_once_with_its_old_name():
    assert {s.legacy for s in settings.SETTINGS if s.legacy} == {
        "AKS_JOB_REGISTRY", "AKS_DATA_DIR", "AKS_AUDIT_DIR", "AKS_SEAL_KEY_FILE", "AKS_CONNECTOR_JARS",
        "AKS_K8S_TOKEN_FILE", "AKS_HEALTH_GATE_POLL_S"}
    assert settings.BY_NAME["job_registry"].env == "AIRFLOW__KAFKA_SPARK__JOB_REGISTRY"
    section = settings.provider_config()["kafka_spark"]
    assert set(section["options"]) == set(settings.BY_NAME)
    for name, option in section["options"].items():
        legacy = settings.BY_NAME[name].legacy
        assert option["default"] == "" and (legacy is None or legacy in option["description"])
    assert [s.name for s in settings.SETTINGS if s.legacy is None] == ["docs_url"]   # new: nothing deprecated


def test_order_env_then_airflow_then_old_name_with_one_warning(monkeypatch):
    assert settings.value("audit_dir") is None
    monkeypatch.setenv("AKS_AUDIT_DIR", "/old")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert settings.value("audit_dir") == "/old"
        assert settings.value("audit_dir") == "/old"          # warned once per process
    assert len(caught) == 1 and issubclass(caught[0].category, settings.SettingDeprecationWarning)
    assert "AKS_AUDIT_DIR" in str(caught[0].message) and "AIRFLOW__KAFKA_SPARK__AUDIT_DIR" in str(caught[0].message)
    settings.use_airflow_config(lambda section, option: f"/cfg/{section}/{option}")
    assert settings.value("audit_dir") == "/cfg/kafka_spark/audit_dir"
    monkeypatch.setenv("AIRFLOW__KAFKA_SPARK__AUDIT_DIR", "/new")
    assert settings.value("audit_dir") == "/new"
    settings.use_airflow_config(lambda section, option: "")    # declared but empty: falls through
    monkeypatch.delenv("AIRFLOW__KAFKA_SPARK__AUDIT_DIR")
    assert settings.value("audit_dir") == "/old"


def test_float_setting_and_a_bad_value_is_one_line():
    assert settings.float_value("health_gate_poll_s", 15.0, {}) == 15.0
    assert settings.float_value("health_gate_poll_s", 15.0, {"AIRFLOW__KAFKA_SPARK__HEALTH_GATE_POLL_S": "2"}) == 2.0
    with pytest.raises(UserError, match=r"\[kafka_spark\] health_gate_poll_s must be a number"):
        settings.float_value("health_gate_poll_s", 15.0, {"AIRFLOW__KAFKA_SPARK__HEALTH_GATE_POLL_S": "soon"})


def test_readers_use_the_new_and_the_old_names(monkeypatch, tmp_path):
    from airflow_kafka_spark.ops import seal
    from airflow_kafka_spark.registry.loader import default_registry_path
    from airflow_kafka_spark.runtime import clusters

    monkeypatch.setenv("AIRFLOW__KAFKA_SPARK__JOB_REGISTRY", str(tmp_path / "new.yaml"))
    assert default_registry_path() == tmp_path / "new.yaml"
    monkeypatch.delenv("AIRFLOW__KAFKA_SPARK__JOB_REGISTRY")
    monkeypatch.setenv("AKS_JOB_REGISTRY", str(tmp_path / "old.yaml"))
    with pytest.warns(settings.SettingDeprecationWarning):
        assert default_registry_path() == tmp_path / "old.yaml"

    key = tmp_path / "seal.key"
    key.write_bytes(b"k" * 32)
    monkeypatch.setenv(seal.KEY_FILE_ENV, str(key))
    assert seal.KEY_FILE_ENV == "AIRFLOW__KAFKA_SPARK__SEAL_KEY_FILE"
    assert seal.resolve_key(None) == b"k" * 32

    with pytest.warns(settings.SettingDeprecationWarning):
        ep = clusters.k8s_endpoint("k8s://https://api:6443", spark_conf={}, conn_extra={},
                                   env={"AKS_K8S_TOKEN_FILE": "/old/token"})
    assert ep.token_file == "/old/token"


def test_data_dir_in_the_registry_file_is_the_setting(monkeypatch, tmp_path):
    from airflow_kafka_spark.registry.loader import load_registry

    (tmp_path / "app.py").write_text("")
    reg = tmp_path / "jobs.yaml"
    reg.write_text(f"version: 1\nallowed_roots: ['${{AKS_DATA_DIR}}', '{tmp_path}']\njobs:\n  - name: a\n"
                   f"    application: {tmp_path}/app.py\n    topics: [t]\n    checkpoint: ${{AKS_DATA_DIR}}/ck\n"
                   "    backup_root: ${AKS_DATA_DIR}/b\n")
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("AIRFLOW__KAFKA_SPARK__DATA_DIR", str(tmp_path / "data"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the new name: no deprecation warning
        spec = load_registry(reg).get("a")
    assert spec.checkpoint == str(tmp_path / "data" / "ck")
