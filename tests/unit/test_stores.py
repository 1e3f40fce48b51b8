"""hdfs:// URLs resolved to WebHDFS options (pure: the NameNode's HTTP address from the URL,
storage options and $HADOOP_CONF_DIR), and S3 precondition failures told apart from other errors."""

from __future__ import annotations

import pytest

from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark._util.stores import HDFS_DEFAULT_HTTP_PORT, hdfs_as_webhdfs, precondition_failed
from airflow_kafka_spark.errors import UserError


def site(tmp_path, **props: str) -> str:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    (tmp_path / "hdfs-site.xml").write_text(f"<configuration>{body}</configuration>")
    return str(tmp_path)


def test_http_port_from_hadoop_conf_dir_and_the_host_from_the_url(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", site(tmp_path, **{"dfs.namenode.http-address": "0.0.0.0:50070"}))
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")
    opts, path = hdfs_as_webhdfs("hdfs://nn1.example:8020/streaming/ck", None)
    assert (opts["host"], opts["port"], opts["user"], path) == ("nn1.example", 50070, "etl", "/streaming/ck")


def test_storage_options_win_and_the_default_port_is_9870(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    opts, _ = hdfs_as_webhdfs("hdfs://nn:8020/ck", None)
    assert opts["port"] == HDFS_DEFAULT_HTTP_PORT == 9870
    opts, _ = hdfs_as_webhdfs("hdfs://nn:8020/ck", {"port": 14000, "user": "svc"})
    assert (opts["host"], opts["port"], opts["user"]) == ("nn", 14000, "svc")
    assert "user" not in hdfs_as_webhdfs("hdfs://nn/ck", {"token": "t0k"})[0]


def test_ha_nameservice_and_default_fs(tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", site(tmp_path, **{
        "fs.defaultFS": "hdfs://mycluster", "dfs.nameservices": "mycluster", "dfs.ha.namenodes.mycluster": "a,b",
        "dfs.namenode.http-address.mycluster.a": "nn-a:9870", "dfs.namenode.http-address.mycluster.b": "nn-b:9870"}))
    assert hdfs_as_webhdfs("hdfs://mycluster/ck", None)[0]["host"] == "nn-a"
    opts, path = hdfs_as_webhdfs("hdfs:///data/ck", None)
    assert (opts["host"], path) == ("nn-a", "/data/ck")


def test_an_hdfs_url_without_a_namenode_is_one_line(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with pytest.raises(UserError, match="names no NameNode") as info:
        open_location("hdfs:///data/ck", what="checkpoint location")
    assert "\n" not in str(info.value)


def test_the_location_keeps_the_users_url(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    loc = open_location("hdfs://nn:8020/streaming/ck/")
    assert (loc.url, loc.path) == ("hdfs://nn:8020/streaming/ck", "/streaming/ck")
    assert loc.sibling(".lifecycle.json").url == "hdfs://nn:8020/streaming/ck.lifecycle.json"
    assert "webhdfs" in loc.fs.protocol and loc.fs.url == "http://nn:9870/webhdfs/v1"


class _ClientError(Exception):
    def __init__(self, code: str, status: int) -> None:
        super().__init__(code)
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def test_precondition_failures_are_told_apart_from_other_errors():
    def wrapped(code: str, status: int) -> OSError:
        try:
            raise OSError(22, code) from _ClientError(code, status)
        except OSError as exc:
            return exc

    assert precondition_failed(wrapped("PreconditionFailed", 412))
    assert precondition_failed(wrapped("ConditionalRequestConflict", 409))
    assert not precondition_failed(wrapped("AccessDenied", 403))
    assert not precondition_failed(OSError("network down"))
