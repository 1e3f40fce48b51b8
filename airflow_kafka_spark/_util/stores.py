"""HDFS and S3 as the product writes to them: no libhdfs, and no write that needs an atomic rename-over.

Why a module of its own: :mod:`airflow_kafka_spark._util.fs` answers the storage questions every
operation asks; the answers for HDFS and S3 need store-specific requests that fsspec does not
expose (or exposes unsafely), and they are kept here, behind four small functions:

* ``hdfs://`` URLs are served by fsspec's ``webhdfs`` (REST on the NameNode's HTTP port), so no
  JVM, libhdfs or Hadoop install is needed where Airflow runs. The NameNode host comes from the
  URL; the HTTP port from storage options, else ``dfs.namenode.http-address`` in
  ``$HADOOP_CONF_DIR``, else 9870.
* **Exclusive create** (the lock files): HDFS ``op=CREATE&overwrite=false`` (the NameNode refuses
  an existing path: ``FileAlreadyExistsException``); S3 ``PutObject`` with ``If-None-Match: *``
  (412 for an existing key).
* **Rename** on HDFS: ``op=RENAME&renameoptions=…`` (the NameNode's ``rename2``): ``OVERWRITE``
  replaces a file atomically; ``NONE`` refuses an existing destination with an error. The plain
  WebHDFS rename that fsspec's ``mv`` sends answers ``{"boolean": false}`` onto an existing file
  (nothing raised) and moves a folder *into* an existing folder.
* **Compare-and-swap** on S3: read the ETag, then ``PutObject`` with ``If-Match: <etag>`` (or
  ``If-None-Match: *`` when there was no object): a writer holding a stale copy is refused.
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from airflow_kafka_spark._util.hadoop_errors import datanode_refused
from airflow_kafka_spark.errors import UserError

HDFS_DEFAULT_HTTP_PORT = 9870
#: The version token of an S3 object that did not exist when it was read (``If-None-Match: *``).
ABSENT = "*"
_PRECONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
#: What the NameNode answers a CREATE of a path that exists, or that another client is creating
#: right now (its file still open): either way, someone else holds it.
_HDFS_TAKEN = ("FileAlreadyExistsException", "AlreadyBeingCreatedException", "already exists")


# --------------------------------------------------------------------------- hdfs:// through WebHDFS


def hdfs_as_webhdfs(url: str, storage_options: dict | None) -> tuple[dict[str, Any], str]:
    """(fsspec ``webhdfs`` options, path) for ``hdfs://host[:rpcport]/path`` (the RPC port is not used)."""
    parts = urlsplit(url)
    opts = dict(storage_options or {})
    site = hadoop_site()
    host = parts.hostname
    if not host:
        default = urlsplit(site.get("fs.defaultFS", ""))
        if default.scheme != "hdfs" or not default.hostname:
            raise UserError(f"{url} names no NameNode and HADOOP_CONF_DIR has no hdfs:// fs.defaultFS; write "
                            "hdfs://<namenode-host>/<path>")
        host = default.hostname
    http_host, http_port = namenode_http_address(host, site)
    opts.setdefault("host", http_host)
    opts.setdefault("port", http_port)
    if "user" not in opts and "token" not in opts:
        import getpass  # here, not at start: only hdfs:// needs it (``aks`` start-up time)

        opts["user"] = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
    return opts, parts.path or "/"


def namenode_http_address(host: str, site: dict[str, str]) -> tuple[str, int]:
    """The NameNode's HTTP (WebHDFS) host and port for ``host`` (a NameNode or an HA nameservice)."""
    if host in {n.strip() for n in site.get("dfs.nameservices", "").split(",")}:
        for nn in site.get(f"dfs.ha.namenodes.{host}", "").split(","):
            address = site.get(f"dfs.namenode.http-address.{host}.{nn.strip()}")
            if address and ":" in address:
                h, p = address.rsplit(":", 1)
                return h, int(p)
        raise UserError(f"nameservice {host} has no dfs.namenode.http-address.{host}.<nn> in HADOOP_CONF_DIR; "
                        "pass the NameNode's HTTP host and port as storage options host= and port=")
    address = site.get("dfs.namenode.http-address", "")
    port = address.rsplit(":", 1)[1] if ":" in address else ""
    return host, int(port) if port.isdigit() else HDFS_DEFAULT_HTTP_PORT


def hadoop_site() -> dict[str, str]:
    """Properties of ``core-site.xml`` and ``hdfs-site.xml`` in ``$HADOOP_CONF_DIR`` ({} if unset)."""
    import xml.etree.ElementTree as ET  # trusted input (the operator's own files); here: start-up time

    conf_dir = os.environ.get("HADOOP_CONF_DIR")
    out: dict[str, str] = {}
    for name in ("core-site.xml", "hdfs-site.xml"):
        path = os.path.join(conf_dir, name) if conf_dir else ""
        if not path or not os.path.isfile(path):
            continue
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as exc:
            raise UserError(f"cannot read {path} (HADOOP_CONF_DIR): {exc}") from None
        for prop in root.iter("property"):
            key, value = prop.findtext("name"), prop.findtext("value")
            if key and value is not None:
                out[key.strip()] = value.strip()
    return out


def is_webhdfs(fs: Any) -> bool:
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    return "webhdfs" in protocols


def webhdfs_rename(fs: Any, src: str, dst: str, *, overwrite: bool) -> None:
    """Atomic rename (``rename2``); without ``overwrite`` an existing ``dst`` is ``FileExistsError``.

    The RENAME is sent first: ``rename2`` refuses a missing parent folder of ``dst`` with
    ``FileNotFoundException``, and only then is the folder made (``MKDIRS``) and the RENAME sent
    again, so a folder that exists costs no request per file (a missing ``src`` fails both times)."""
    try:
        _rename2(fs, src, dst, overwrite=overwrite)
    except FileNotFoundError:
        fs.makedirs(posixpath.dirname(dst), exist_ok=True)
        _rename2(fs, src, dst, overwrite=overwrite)
    fs.invalidate_cache(posixpath.dirname(dst))


def _rename2(fs: Any, src: str, dst: str, *, overwrite: bool) -> None:
    try:
        fs._call("RENAME", "put", src, destination=dst, renameoptions="OVERWRITE" if overwrite else "NONE")
    except RuntimeError as exc:
        if "already exists" in str(exc):
            raise FileExistsError(f"{dst} already exists") from None
        raise OSError(str(exc).splitlines()[0]) from None


def webhdfs_create_exclusive(fs: Any, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data``; False if it exists (``overwrite=false``: the NameNode decides)."""
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    try:
        out = fs._call("CREATE", "put", path, redirect=False, overwrite="false")
    except RuntimeError as exc:
        if any(t in str(exc) for t in _HDFS_TAKEN):
            return False
        raise OSError(str(exc).splitlines()[0]) from None
    if "Location" not in out.headers:
        raise OSError(f"WebHDFS CREATE {path} answered HTTP {out.status_code} without a DataNode to write to")
    put = fs.session.put(fs._apply_proxy(out.headers["Location"]), data=data,
                         headers={"content-type": "application/octet-stream"})
    if put.status_code >= 400 and any(t in put.text for t in _HDFS_TAKEN[:2]):
        return False
    if put.status_code >= 400:
        raise datanode_refused(put, path)
    fs.invalidate_cache(posixpath.dirname(path))
    return True


# --------------------------------------------------------------------------- HDFS: a small file in two requests
#
# fsspec's ``webhdfs`` file objects cost a small file seven requests where two and two do: a read asks
# ``GETFILESTATUS`` (the size) before ``OPEN`` (NameNode, then the DataNode it redirects to); a write
# sends ``CREATE`` with an empty body, then ``APPEND`` with the data (NameNode and DataNode each). The
# backup after a stop copies the files Spark wrote since the pre-copy inside the downtime window
# (docs/benchmarks.md, "After round 9"), so each request there is paid per file. Both go through the
# file system's own ``requests`` session: connections to the NameNode and the DataNode are kept alive.


def webhdfs_read(fs: Any, path: str, limit: int) -> bytes:
    """At most ``limit`` bytes of the file at ``path`` in one ``OPEN`` with ``length`` (the NameNode
    redirects, the DataNode sends at most ``length`` bytes); ``FileNotFoundError`` when there is none."""
    if limit <= 0:
        return b""
    return fs._call("OPEN", "get", path, offset=0, length=limit).content


def webhdfs_cat(fs: Any, path: str, limit: int | None = None) -> bytes:
    """The whole file at ``path`` in one ``OPEN`` (at most ``limit + 1`` bytes with a ``limit``, so that the
    caller can tell a file larger than it). ``FileNotFoundError`` when there is none, ``IsADirectoryError``
    for a folder (the NameNode answers "Path is not a file")."""
    try:
        if limit is None:
            return fs._call("OPEN", "get", path).content
        return fs._call("OPEN", "get", path, offset=0, length=limit + 1).content
    except FileNotFoundError as exc:
        if "is not a file" in str(exc):
            raise IsADirectoryError(str(exc).splitlines()[0]) from None
        raise


def webhdfs_write(fs: Any, path: str, data: bytes, *, overwrite: bool) -> None:
    """A file at ``path`` holding ``data``: ``CREATE`` without following its redirect, then the body to the
    DataNode it names. ``CREATE`` makes missing parent folders (WebHDFS's ``createParent``): no ``MKDIRS``.
    Without ``overwrite`` an existing file is ``FileExistsError``."""
    try:
        out = fs._call("CREATE", "put", path, redirect=False, overwrite="true" if overwrite else "false")
    except RuntimeError as exc:
        if "already exists" in str(exc):
            raise FileExistsError(f"{path} already exists") from None
        raise OSError(str(exc).splitlines()[0]) from None
    if "Location" not in out.headers:
        raise OSError(f"WebHDFS CREATE {path} answered HTTP {out.status_code} without a DataNode to write to")
    put = fs.session.put(fs._apply_proxy(out.headers["Location"]), data=data,
                         headers={"content-type": "application/octet-stream"})
    if put.status_code >= 400:
        raise datanode_refused(put, path)


# --------------------------------------------------------------------------- S3: conditional PutObject


def is_s3(fs: Any) -> bool:
    """s3fs (``s3://``, ``s3a://``): the one object store whose conditional writes are used here."""
    return hasattr(fs, "call_s3") and hasattr(fs, "split_path")


def s3_read_versioned(fs: Any, path: str) -> tuple[bytes | None, str]:
    """(body, ETag), or (None, :data:`ABSENT`). The ETag is read *first*: if the object changes
    before the body is read, the stale ETag makes the later conditional write fail (never succeed)."""
    fs.invalidate_cache(path)
    try:
        etag = fs.info(path)["ETag"]
        return cat_checked(fs, path), etag
    except FileNotFoundError:
        return None, ABSENT


def cat_checked(fs: Any, path: str, attempts: int = 3) -> bytes:
    """``fs.cat_file``, read again when the body does not match the checksum the store sent.

    Why: botocore checks a GET's body against its ``x-amz-checksum-*`` header and raises
    ``FlexibleChecksumError`` (not an ``OSError``) on a mismatch; S3Proxy's filesystem backend
    answers one when an object is read while another client replaces it. A re-read is the answer.
    """
    for attempt in range(attempts):
        try:
            return fs.cat_file(path)
        except Exception as exc:
            if type(exc).__name__ != "FlexibleChecksumError" or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def s3_put_if(fs: Any, path: str, data: bytes, version: str) -> bool:
    """PutObject only if the object is still ``version`` (an ETag, or :data:`ABSENT`); False if not."""
    bucket, key, _ = fs.split_path(path)
    condition = {"IfNoneMatch": "*"} if version == ABSENT else {"IfMatch": version}
    try:
        fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **condition)
    except FileExistsError:
        return False
    except OSError as exc:
        if precondition_failed(exc):
            return False
        raise
    finally:
        fs.invalidate_cache(path)
    return True


def precondition_failed(exc: BaseException) -> bool:
    """True for S3's 412 PreconditionFailed (or 409 ConditionalRequestConflict) behind an s3fs error."""
    response = getattr(exc.__cause__, "response", None) or getattr(exc, "response", None) or {}
    code = str((response.get("Error") or {}).get("Code", ""))
    status = str((response.get("ResponseMetadata") or {}).get("HTTPStatusCode", ""))
    return code in _PRECONDITION_CODES or status in {"409", "412"}


# --------------------------------------------------------------------------- S3: checksums and server-side copy


class S3Head(NamedTuple):
    """What HeadObject says of an object: enough to copy exactly it and to prove a copy by its kept SHA-256."""

    size: int
    etag: str | None
    sha256: str | None   # the full-object SHA-256 the store keeps (hex); None when none, or only per part
    mtime: float | None


def s3_head(fs: Any, path: str) -> S3Head:
    """HeadObject with ``ChecksumMode=ENABLED``: size, ETag, last-modified and the full-object
    SHA-256 the store keeps for the object (hex; None when it keeps none, or only a per-part one)."""
    import base64
    import binascii

    bucket, key, _ = fs.split_path(path)
    head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    sha = head.get("ChecksumSHA256")
    full = head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" and "-" not in str(sha or "")
    try:
        hexsha = base64.b64decode(sha, validate=True).hex() if sha and full else None
    except (binascii.Error, ValueError):
        hexsha = None
    if hexsha is not None and len(hexsha) != 64:
        hexsha = None
    modified = head.get("LastModified")
    return S3Head(size=int(head.get("ContentLength") or 0), etag=head.get("ETag"), sha256=hexsha,
                  mtime=float(modified.timestamp()) if hasattr(modified, "timestamp") else None)


def s3_copy(fs: Any, src: str, dst: str, *, if_match: str | None) -> bool:
    """CopyObject ``src`` -> ``dst`` inside the store (no byte through this process); the object's
    checksum goes with it. With ``if_match``, only while ``src`` is still that ETag: False if not."""
    sb, sk, _ = fs.split_path(src)
    db, dk, _ = fs.split_path(dst)
    condition = {"CopySourceIfMatch": if_match} if if_match else {}
    try:
        fs.call_s3("copy_object", Bucket=db, Key=dk, CopySource={"Bucket": sb, "Key": sk}, **condition)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if precondition_failed(exc) or "preconditions" in str(exc):
            return False
        raise
    finally:
        fs.invalidate_cache(dst)
    return True


def s3_put_sha256(fs: Any, path: str, data: bytes, sha256_hex: str) -> None:
    """PutObject with ``x-amz-checksum-sha256``: the store checks the body against it (a mismatch is
    refused, 400 ``BadDigest``) and keeps it, so the object's SHA-256 can later be read without its bytes."""
    import base64

    bucket, key, _ = fs.split_path(path)
    fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data,
               ChecksumSHA256=base64.b64encode(bytes.fromhex(sha256_hex)).decode())
    fs.invalidate_cache(path)


def s3_endpoint(fs: Any) -> str | None:
    """The endpoint URL the s3fs client talks to (two stores on one endpoint can copy between them)."""
    try:
        return str(fs.connect().meta.endpoint_url)
    except Exception:   # any client set-up failure: treat as unknown, never as "the same store"
        return None


# --------------------------------------------------------------------------- HDFS: the NameNode's file checksum


def webhdfs_file_checksum(fs: Any, path: str) -> str:
    """``GETFILECHECKSUM``: the cluster's checksum of a file (``MD5-of-<n>MD5-of-<b>CRC32C:<hex>``),
    computed by the DataNodes from the CRCs they keep beside each block; no byte of the file passes
    through this process. Two files have equal checksums when their bytes are equal and they were
    written with the same block size and bytes-per-checksum."""
    out = fs._call("GETFILECHECKSUM", "get", path).json()["FileChecksum"]
    return f"{out['algorithm']}:{out['bytes']}"


# --------------------------------------------------------------------------- HDFS: snapshots


def webhdfs_snapshot_root(fs: Any, path: str) -> str | None:
    """The snapshottable folder that holds ``path`` (``path`` itself or its nearest ancestor), or None.

    What tells: the NameNode's FileStatus of a folder an administrator ran ``hdfs dfsadmin
    -allowSnapshot`` on carries ``"snapshotEnabled": true`` (GETFILESTATUS; nested snapshottable
    folders are refused by HDFS, so the nearest is the only one). One GETFILESTATUS per level,
    not GETSNAPSHOTTABLEDIRECTORYLIST: that lists only the caller's own folders unless it is the
    superuser, and older clusters lack it. The root folder is never the answer: the NameNode marks
    it snapshot-enabled with a quota of 0 snapshots (the minicluster's CREATESNAPSHOT there: "the
    snapshot quota is 0"), and a snapshot of the whole namespace is not a checkpoint's backup.
    Never made snapshottable here: ALLOWSNAPSHOT needs the superuser.
    """
    at = posixpath.normpath("/" + path.lstrip("/"))
    while at != "/":
        try:
            status = fs._call("GETFILESTATUS", "get", at).json()["FileStatus"]
        except FileNotFoundError:
            status = {}
        if status.get("type") == "DIRECTORY" and status.get("snapshotEnabled") is True:
            return at
        at = posixpath.dirname(at)
    return None


def webhdfs_create_snapshot(fs: Any, folder: str, name: str) -> str:
    """CREATESNAPSHOT ``name`` of the snapshottable ``folder``: its path (``<folder>/.snapshot/<name>``).

    ``PermissionError`` when the caller may not (only the folder's owner or the superuser may)."""
    out = fs._call("CREATESNAPSHOT", "put", folder, snapshotname=name).json()
    return str(out["Path"])


def webhdfs_delete_snapshot(fs: Any, folder: str, name: str) -> bool:
    """DELETESNAPSHOT ``name`` of ``folder``; False when there was none (deleted already, or the folder moved)."""
    try:
        fs._call("DELETESNAPSHOT", "delete", folder, snapshotname=name)
    except FileNotFoundError:
        return False
    except RuntimeError as exc:
        if "not exist" in str(exc) or "not a snapshottable" in str(exc):
            return False
        raise
    fs.invalidate_cache(folder)
    return True


def webhdfs_same_cluster(a: Any, b: Any) -> bool:
    """Do two WebHDFS file systems talk to the same NameNode (so a path of one is a path of the other)?"""
    return is_webhdfs(a) and is_webhdfs(b) and getattr(a, "url", None) == getattr(b, "url", None) is not None
