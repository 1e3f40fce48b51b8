"""Hostile backup-root variants (manifests, catalog, staging, locks, blobs) and hostile arguments.

Why: a backup root is shared storage (HDFS/S3) that more people can write than the Airflow worker
trusts. An attacker there can rewrite a manifest and recompute its unkeyed seal; these variants do
exactly that (``__resealed``) and also leave the seal stale (``__unsealed``), so the corpus checks
the containment guards themselves and not only the seal.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.hostile import JOB, Sandbox, Variant, clear, deep_list, fifo, link, put, reseal, sparse, write_json
from tests.support.hostile_semantic import CK_COMMANDS, NEWER, READERS, STORE_COMMANDS

Edit = Callable[[Sandbox, dict], None]


def _entry(rel: str, **over) -> Edit:
    """Change the manifest entry of checkpoint file ``rel``."""
    def edit(sb: Sandbox, doc: dict) -> None:
        entry = next(f for f in doc["files"] if f["path"] == rel)
        entry.update({k: sb.subst(v) if isinstance(v, str) else v for k, v in over.items()})
    return edit


def _add(**entry) -> Edit:
    """Add one more file entry, pointing at the stored body of ``metadata`` (a blob that exists)."""
    def edit(sb: Sandbox, doc: dict) -> None:
        base = dict(next(f for f in doc["files"] if f["path"] == "metadata"))
        base.update({k: sb.subst(v) if isinstance(v, str) else v for k, v in entry.items()})
        doc["files"].append(base)
    return edit


def _field(**over) -> Edit:
    return lambda sb, doc: doc.update({k: (v(sb) if callable(v) else v) for k, v in over.items()})


def _many(n: int) -> Edit:
    def edit(sb: Sandbox, doc: dict) -> None:
        meta = next(f for f in doc["files"] if f["path"] == "metadata")
        doc["files"] += [{**meta, "path": f"junk/{i}"} for i in range(n)]
    return edit


def _swap_blob(sb: Sandbox, doc: dict) -> None:
    """The undetectable tamper: ``metadata`` now names the body of ``sources/0/0`` (a valid blob)."""
    src = next(f for f in doc["files"] if f["path"] == "sources/0/0")
    meta = next(f for f in doc["files"] if f["path"] == "metadata")
    meta.update(sha256=src["sha256"], size=src["size"])


MANIFEST_EDITS: dict[str, tuple[Edit, bool]] = {     # name → (edit, must be refused even when re-sealed)
    "path_parent": (_add(path="../../outside/pwned"), True),
    "path_parent_record": (_add(path="../ck.lifecycle.json"), True),
    "path_replaces_metadata_with_parent": (_entry("metadata", path="../../outside/pwned"), True),
    "path_absolute": (_add(path="{outside}/abs-pwned"), True),
    "path_inner_traversal": (_add(path="offsets/../../../outside/inner"), True),
    "path_double_colon": (_add(path="metadata::file://{outside}/chained"), True),
    "path_nul": (_add(path="metadata\u0000x"), True),
    "path_empty": (_add(path=""), True),
    "path_dot": (_add(path="."), True),
    "path_trailing_newline": (_add(path="metadata\n"), True),
    "path_glob": (_add(path="offsets/*"), True),
    "path_backslash_traversal": (_add(path="..\\..\\outside\\bs"), True),
    "path_very_long": (_add(path="a/" * 3000 + "x"), True),
    "path_duplicate": (_add(path="metadata", sha256="0" * 64), True),
    "path_not_string": (_entry("metadata", path=["metadata"]), True),
    "size_lie": (_entry("metadata", size=1 << 40), True),
    "size_negative": (_entry("metadata", size=-1), True),
    "sha_traversal": (_entry("metadata", sha256="../../../../outside/secret.txt"), True),
    "sha_other_blob": (_swap_blob, False),
    "checkpoint_location_outside": (_field(checkpoint_location=lambda sb: str(sb.outside)), False),
    "backup_id_traversal": (_field(backup_id="../../../outside/x"), True),
    "job_mismatch": (_field(job="other-job"), True),
    "created_at_huge": (_field(created_at_ms=10**20), False),
    "created_at_string": (_field(created_at_ms="yesterday"), True),
    "last_committed_batch_string": (_field(last_committed_batch="2"), False),
    "last_committed_batch_huge": (_field(last_committed_batch=10**30), False),
    "committed_offsets_traversal_topic": (_field(committed_offsets={"../../x": {"0": 30}}), False),
    "committed_offsets_empty": (_field(committed_offsets={}), False),
    "topics_huge_partitions": (_field(topics=lambda sb: {sb.topic: {"partitions": 10**9}}), False),
    "files_not_list": (_field(files={"metadata": 1}), True),
    "files_many": (_many(20_000), False),
    "format_future": (_field(format=999), True),
    "kind_wrong": (_field(kind="something else"), True),
}


def _manifest(edit: Edit, sealed: bool) -> Callable[[Sandbox], None]:
    def build(sb: Sandbox) -> None:
        doc = sb.manifest_doc()
        edit(sb, doc)
        write_json(sb.manifest, reseal(doc) if sealed else doc)
    return build


def _deep_field(key: str) -> Callable[[Sandbox], None]:
    def build(sb: Sandbox) -> None:
        doc = sb.manifest_doc()
        doc[key] = "__DEEP__"
        put(sb.manifest, json.dumps(doc).replace('"__DEEP__"', deep_list().decode()))
    return build


def manifest_variants() -> list[Variant]:
    out = []
    for name, (edit, always) in MANIFEST_EDITS.items():
        out.append(Variant(f"manifest__{name}__resealed", _manifest(edit, True),
                           must_refuse=READERS if always else frozenset()))
        out.append(Variant(f"manifest__{name}__unsealed", _manifest(edit, False), must_refuse=READERS))
    for key in ("files", "committed_offsets", "topics", "state"):
        out.append(Variant(f"manifest__deep_{key}", _deep_field(key), must_refuse=READERS))
    return out


# --------------------------------------------------------------------------------------------------
# the rest of the backup root
# --------------------------------------------------------------------------------------------------

def _catalog(name: str, make: Callable[[Sandbox, Path], object]) -> Callable[[Sandbox], None]:
    return lambda sb: make(sb, sb.job_dir / "backups" / name)


def _copy_manifest(sb: Sandbox, path: Path) -> None:
    put(path, sb.manifest.read_bytes())


def _link_to_copy(sb: Sandbox, path: Path) -> None:
    copy = sb.outside / "manifest-copy.json"
    put(copy, sb.manifest.read_bytes())
    link(path, copy)


def _many_junk(sb: Sandbox, _path: Path) -> None:
    for i in range(500):
        put(sb.job_dir / "backups" / f"2099010{i % 10}T000000000Z-junk{i}.json", b'{"kind":"x"}')


def _dir_link_out(rel: str, *, copy: bool = True) -> Callable[[Sandbox], None]:
    def build(sb: Sandbox) -> None:
        src = sb.job_dir / rel if rel else sb.job_dir
        target = sb.outside / f"store-{rel or 'job'}"
        if copy:
            shutil.copytree(src, target, symlinks=True)
        else:
            target.mkdir(parents=True)
        link(src, target)
    return build


def _blob_prefix_out(sb: Sandbox) -> None:
    prefix = sb.blob("metadata").parent
    shutil.copytree(prefix, sb.outside / "blob-prefix")
    link(prefix, sb.outside / "blob-prefix")


CATALOG_JUNK: dict[str, Callable[[Sandbox], None]] = {
    "fifo_newest": _catalog(f"{NEWER}fifo.json", lambda sb, p: fifo(p)),
    "fifo_odd_name": _catalog("zzz.json", lambda sb, p: fifo(p)),
    "dev_zero_newest": _catalog(f"{NEWER}zero.json", lambda sb, p: link(p, "/dev/zero")),
    "dev_urandom_newest": _catalog(f"{NEWER}random.json", lambda sb, p: link(p, "/dev/urandom")),
    "link_out_copy_newest": _catalog(f"{NEWER}copy.json", _link_to_copy),
    "broken_link_newest": _catalog(f"{NEWER}broken.json", lambda sb, p: link(p, sb.outside / "gone")),
    "directory_newest": _catalog(f"{NEWER}dir.json", lambda sb, p: p.mkdir()),
    "deep_newest": _catalog(f"{NEWER}deep.json", lambda sb, p: put(p, deep_list())),
    "deep_dict_newest": _catalog(f"{NEWER}deepd.json", lambda sb, p: put(
        p, b'{"kind":"airflow-kafka-spark checkpoint backup","files":' + deep_list() + b"}")),
    "huge_sparse_newest": _catalog(f"{NEWER}huge.json", lambda sb, p: sparse(p, b'{"kind":')),
    "garbled_newest": _catalog(f"{NEWER}garbled.json", lambda sb, p: put(p, bytes(range(256)) * 4)),
    "copy_under_other_id": _catalog(f"{NEWER}copy2.json", _copy_manifest),
    "name_trailing_newline": _catalog(f"{NEWER}nl\n.json", _copy_manifest),
    "name_glob": _catalog("[0-9]*.json", _copy_manifest),
    "five_hundred_junk": _catalog("", _many_junk),
}

STORE_DAMAGE: dict[str, tuple[Callable[[Sandbox], None], frozenset[str]]] = {
    "staging_fifo": (lambda sb: fifo(sb.job_dir / "staging" / f"{NEWER}s.json"), frozenset()),
    "staging_link_to_victim": (lambda sb: link(sb.job_dir / "staging" / f"{NEWER}v.json",
                                               sb.outside / "victim.txt"), frozenset()),
    "staging_deep": (lambda sb: put(sb.job_dir / "staging" / f"{NEWER}d.json", deep_list()), frozenset()),
    "lock_fifo": (lambda sb: fifo(sb.job_dir / ".lock"), frozenset()),
    "tmp_dir_link_out": (_dir_link_out(".tmp", copy=False), frozenset()),
    "blobs_dir_link_out": (_dir_link_out("blobs"), frozenset()),     # blob names are hashes: reads are moot
    "blob_prefix_link_out": (_blob_prefix_out, frozenset({"verify", "restore"})),
    "backups_dir_link_out": (_dir_link_out("backups"), frozenset()),
    "backups_dir_is_fifo": (lambda sb: (clear(sb.job_dir / "backups"), fifo(sb.job_dir / "backups")), READERS),
    "backups_dir_is_file": (lambda sb: put(sb.job_dir / "backups", b"x"), READERS),
    "job_dir_link_out": (_dir_link_out(""), frozenset()),
    "job_dir_is_fifo": (lambda sb: (clear(sb.job_dir), fifo(sb.job_dir)), READERS),
    "root_is_fifo": (lambda sb: (clear(sb.root), fifo(sb.root)), READERS),
    "blob_extra_fifo": (lambda sb: fifo(sb.job_dir / "blobs" / "zz" / "fifo"), frozenset()),
}


def store_variants() -> list[Variant]:
    keep_working = frozenset({"backups", "backup"})     # junk in the catalog must not break later backups
    out = [Variant(f"catalog__{k}", f, must_succeed=keep_working) for k, f in CATALOG_JUNK.items()]
    out += [Variant(f"store__{k}", f, must_refuse=refuse) for k, (f, refuse) in STORE_DAMAGE.items()]
    return out


# --------------------------------------------------------------------------------------------------
# hostile arguments and checkpoint names
# --------------------------------------------------------------------------------------------------

def _no_record(sb: Sandbox) -> None:
    clear(sb.record)


def _other(sb: Sandbox) -> None:
    from tests.support.checkpoint_factory import write_checkpoint

    write_checkpoint(sb.other, batches=5, sources=({sb.topic: 2},), start_timestamp_ms=int(time.time() * 1000))


def _neighbour(name: str) -> Callable[[Sandbox], None]:
    """A neighbour job's staging folder that a glob built from our name would also match."""
    def build(sb: Sandbox) -> None:
        put(sb.ck.parent / f"{name}.staging-20260101T000000Z-abcdef" / "metadata", b'{"id":"neighbour"}')
    return build


def argument_variants() -> list[Variant]:
    store_refuse = STORE_COMMANDS
    ck_refuse = CK_COMMANDS
    out = [
        Variant("arg__job_trailing_newline", lambda sb: None, job_arg=f"{JOB}\n", must_refuse=store_refuse),
        Variant("arg__job_traversal", lambda sb: None, job_arg="../../outside", must_refuse=store_refuse),
        Variant("arg__job_glob", lambda sb: None, job_arg="ord*", must_refuse=store_refuse),
        Variant("arg__job_double_colon", lambda sb: None, job_arg="orders::x", must_refuse=store_refuse),
        Variant("arg__validate_job_name_traversal", _no_record, job_name_arg="../../etc", must_not_pass=True),
        Variant("arg__validate_job_name_newline", _no_record, job_name_arg=f"{JOB}\n", must_not_pass=True),
        Variant("arg__checkpoint_double_colon_other", _other, ck_arg="{ck}::{other}", must_not_pass=True,
                must_refuse=ck_refuse),
        Variant("arg__checkpoint_double_colon_reversed", _other, ck_arg="{other}::{ck}", must_not_pass=True,
                must_refuse=ck_refuse),
        Variant("arg__checkpoint_simplecache_chain", lambda sb: None, ck_arg="simplecache::{ck}",
                must_not_pass=True, must_refuse=ck_refuse),
        Variant("arg__checkpoint_trailing_slash", lambda sb: None, ck_arg="{ck}/"),
        Variant("arg__checkpoint_dotdot_inside", lambda sb: None, ck_arg="{v}/jobs/../jobs/ck"),
        Variant("arg__checkpoint_trailing_newline", lambda sb: None, ck_arg="{ck}\n"),
    ]
    names = {"brackets": ("job[12]", "job1"), "star": ("job*", "jobX"), "question": ("job?", "jobA"),
             "newline": ("ck\n", None), "space": ("ck name", None), "hash": ("ck#1", None),
             "percent": ("ck%2F..%2Fx", None), "colon": ("ck:1", None)}
    for key, (name, neighbour) in names.items():
        build = _neighbour(neighbour) if neighbour else (lambda sb: None)
        out.append(Variant(f"ckname__{key}", build, ck_name=name))
    return out


# --------------------------------------------------------------------------------------------------
# the keyed seal: the same tampering by someone without the key is refused, whatever it is
# --------------------------------------------------------------------------------------------------

def _strip_hmac(sb: Sandbox, doc: dict) -> None:
    doc.pop("hmac", None)


def keyed_variants() -> list[Variant]:
    out = [Variant("keyed__control_pristine", lambda sb: None, keyed=True,
                   must_succeed=frozenset({"validate", "backups", "verify", "restore-dry", "reset-dry", "restore",
                                           "backup"})),
           Variant("keyed__hmac_removed__resealed", _manifest(_strip_hmac, True), keyed=True, must_refuse=READERS),
           Variant("keyed__hmac_garbage", _manifest(_field(hmac="hmac-sha256:" + "0" * 64), True), keyed=True,
                   must_refuse=READERS)]
    out += [Variant(f"keyed__{name}__resealed", _manifest(edit, True), keyed=True, must_refuse=READERS)
            for name, (edit, _always) in MANIFEST_EDITS.items()]
    return out
