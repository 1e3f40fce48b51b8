"""runtime.yarn against the real ResourceManager: HA order, unknown apps, one-line errors."""

from __future__ import annotations

import socket

import pytest

from airflow_kafka_spark.runtime.yarn import ApplicationNotFound, ResourceManager, YarnError

pytestmark = pytest.mark.cluster


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_ha_list_reaches_the_live_rm_after_a_dead_one(hadoop):
    client = ResourceManager([dead_url(), hadoop.rm_url], timeout=5)
    assert client.cluster_state() == "STARTED"
    assert client.find(tag="no-such-tag-anywhere") == []


def test_unknown_application_is_a_one_line_not_found(hadoop):
    with pytest.raises(ApplicationNotFound) as e:
        ResourceManager([hadoop.rm_url]).app("application_1_0001")
    assert "application_1_0001" in str(e.value) and "\n" not in str(e.value)


def test_a_nodemanager_url_is_not_mistaken_for_the_rm(hadoop):
    """The NM answers /ws/v1/cluster/* with an HTML 404 page: named as a wrong address, not a crash."""
    with pytest.raises(YarnError, match=r"HTTP 404|not JSON"):
        ResourceManager([hadoop.nm_url]).cluster_state()
