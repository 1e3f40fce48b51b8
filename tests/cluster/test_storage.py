"""HDFS (through WebHDFS) and the S3 store (through s3fs) as Python sees them: no JVM, no libhdfs."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.cluster


def test_hdfs_roundtrip_through_webhdfs(hadoop, webhdfs):
    base = "/storage-test/roundtrip"
    webhdfs.makedirs(base, exist_ok=True)
    webhdfs.pipe(f"{base}/offsets/0", b"v1\n{}\n")
    commit = b'v1\n{"nextBatchWatermarkMs":0}\n'
    with webhdfs.open(f"{base}/commits/0", "wb") as fh:
        fh.write(commit)
    assert webhdfs.cat(f"{base}/offsets/0") == b"v1\n{}\n"
    assert sorted(webhdfs.ls(base, detail=False)) == [f"{base}/commits", f"{base}/offsets"]
    assert webhdfs.info(f"{base}/commits/0")["size"] == len(commit)
    assert webhdfs.cat(f"{base}/commits/0") == commit
    webhdfs.rm(base, recursive=True)
    assert not webhdfs.exists(base)
    # The same namespace Spark sees as hdfs://: fs.defaultFS names this NameNode.
    assert hadoop.default_fs.startswith("hdfs://")


def test_hdfs_rename_never_replaces_an_existing_file(webhdfs):
    """Write-temp-then-rename is an exclusive publish on HDFS: the loser's rename is refused.

    WebHDFS answers ``{"boolean": false}`` (HTTP 200) and fsspec's ``mv`` does not raise, so a
    caller must check the destination (or the boolean) itself.
    """
    base = "/storage-test/rename"
    webhdfs.makedirs(base, exist_ok=True)
    webhdfs.pipe(f"{base}/LOCK", b"first")
    webhdfs.pipe(f"{base}/.LOCK.tmp", b"second")
    webhdfs.mv(f"{base}/.LOCK.tmp", f"{base}/LOCK")
    assert webhdfs.cat(f"{base}/LOCK") == b"first"
    assert webhdfs.exists(f"{base}/.LOCK.tmp")
    webhdfs.rm(base, recursive=True)


def test_s3_roundtrip_through_s3fs(s3):
    fs = s3.filesystem()
    root = s3.url("storage-test/roundtrip")
    fs.pipe(f"{root}/offsets/0", b"v1\n{}\n")
    assert fs.cat(f"{root}/offsets/0") == b"v1\n{}\n"
    assert fs.ls(root, detail=False) == [f"{s3.bucket}/storage-test/roundtrip/offsets"]
    fs.rm(root, recursive=True)
    assert not fs.exists(f"{root}/offsets/0")


def test_s3_exclusive_create_has_exactly_one_winner(s3):
    """``If-None-Match: *`` (s3fs mode "xb"): concurrent creators of one key, one succeeds."""
    fs = s3.filesystem()
    key = s3.url("storage-test/locks/reset.lock")
    winners: list[int] = []
    refused: list[int] = []
    start = threading.Barrier(6)

    def contend(i: int) -> None:
        start.wait()
        try:
            with fs.open(key, "xb") as fh:
                fh.write(f"owner {i}".encode())
            winners.append(i)
        except (OSError, FileExistsError):
            refused.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(refused) == 5
    assert fs.cat(key) == f"owner {winners[0]}".encode()


def test_s3_compare_and_swap_refuses_a_stale_etag(s3):
    """``If-Match: <etag>``: a writer holding an old version cannot overwrite a newer one."""
    fs = s3.filesystem()
    bucket, key = s3.bucket, "storage-test/cas/record.json"
    fs.pipe(s3.url(key), b'{"version": 1}')
    stale = fs.info(s3.url(key))["ETag"]
    fs.call_s3("put_object", Bucket=bucket, Key=key, Body=b'{"version": 2}', IfMatch=stale)
    with pytest.raises(OSError, match="precondition"):
        fs.call_s3("put_object", Bucket=bucket, Key=key, Body=b'{"version": 3}', IfMatch=stale)
    fs.invalidate_cache()
    assert fs.cat(s3.url(key)) == b'{"version": 2}'
