"""The keyed-seal key comes from an Airflow connection's password (real Airflow connection lookup)."""

from __future__ import annotations

import json

import pytest

from airflow_kafka_spark.errors import UserError


def test_seal_key_from_a_generic_connection(monkeypatch, tmp_path):
    from airflow_kafka_spark.operators.checkpoint import seal_key_from_connection
    from airflow_kafka_spark.ops.backup.catalog import list_backups
    from airflow_kafka_spark.ops.commands import backup_checkpoint
    from airflow_kafka_spark.ops.options import RunOptions
    from tests.support.checkpoint_factory import write_checkpoint

    key = "k3y-from-a-connection-0123456789"
    monkeypatch.setenv("AIRFLOW_CONN_AKS_SEAL", json.dumps({"conn_type": "generic", "password": key}))
    monkeypatch.setenv("AIRFLOW_CONN_AKS_EMPTY", json.dumps({"conn_type": "generic"}))
    got = seal_key_from_connection("aks_seal")
    assert got == key.encode()
    assert seal_key_from_connection(None) is None and seal_key_from_connection("") is None
    for conn_id, needle in (("aks_missing", "is not defined"), ("aks_empty", "has no password")):
        with pytest.raises(UserError, match=needle) as err:
            seal_key_from_connection(conn_id)
        assert "\n" not in str(err.value)
    ck = write_checkpoint(tmp_path / "ck", batches=2)
    m = backup_checkpoint(ck.location, str(tmp_path / "b"), job="orders", settle_s=0,
                          run=RunOptions(seal_key=got)).manifest
    assert m.hmac.startswith("hmac-sha256:")
    assert [b.backup_id for b in list_backups(str(tmp_path / "b"), "orders", seal_key=got).backups] == [m.backup_id]
    assert list_backups(str(tmp_path / "b"), "orders", seal_key=b"another-key-0123456789").backups == []
