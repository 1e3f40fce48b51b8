"""The entry points' typed options still take the keyword arguments they replaced (callers not moved yet)."""

from __future__ import annotations

import pytest

from airflow_kafka_spark.ops.options import DEFAULT_RUN, RunOptions, Stores, with_legacy


def test_old_keyword_arguments_land_in_run_options():
    run = with_legacy(DEFAULT_RUN, {"backup_settle_s": 0, "storage_options": {"anon": True}, "seal_key": b"k"},
                      where="restore_checkpoint")
    assert run == RunOptions(stores=Stores(checkpoint={"anon": True}), backup_settle_s=0, seal_key=b"k")
    assert with_legacy(DEFAULT_RUN, {}, where="x") is DEFAULT_RUN


def test_a_misspelt_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="backup_setle_s"):
        with_legacy(DEFAULT_RUN, {"backup_setle_s": 0}, where="restore_checkpoint")
