"""A generated corpus of hostile checkpoint / backup-root variants (issue 17's acceptance corpus).

Why: checkpoints, lifecycle records, journals and backup roots live on shared storage that other
people (and other jobs) can write. Every command must treat what it reads there as untrusted input:
one line and exit 2/3 for anything it cannot use, no hang, no write outside its own folders, and the
checkpoint untouched. This module builds the inputs; ``tests/integration/test_hostile_corpus.py``
runs every ``aks`` command against each of them (through ``tests/support/hostile_worker.py``).

Each :class:`Variant` has a unique name and a ``build`` function that damages a sandbox made from a
real base: a checkpoint written by :mod:`tests.support.checkpoint_factory`, its lifecycle record
written by a real ``aks validate`` and a real ``aks backup`` of it. Everything is deterministic:
random bytes come from a ``random.Random`` seeded with the variant's name. Absolute paths the
variants plant all point *inside* the sandbox (``<v>/outside``), so a write through them is seen by
the harness's before/after snapshot and never touches the machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

JOB = "orders"
DEPTH = 10_000
HUGE = 1 << 30          # sparse: costs no disk until someone copies it
ALL_COMMANDS = ("validate", "backups", "verify", "restore-dry", "reset-dry", "restore", "backup")


@dataclass
class Sandbox:
    """The paths of one variant's world; ``v`` is the folder the harness snapshots."""

    v: Path
    topic: str
    bootstrap: str
    ck_name: str = "ck"
    backup_id: str = ""
    seal_key_file: Path | None = None     # set: the base backup and every command use the keyed seal

    @property
    def ck(self) -> Path:
        return self.v / "jobs" / self.ck_name

    @property
    def other(self) -> Path:
        return self.v / "jobs" / "other"

    @property
    def root(self) -> Path:
        return self.v / "store" / "backups"

    @property
    def job_dir(self) -> Path:
        return self.root / JOB

    @property
    def outside(self) -> Path:
        return self.v / "outside"

    @property
    def cwd(self) -> Path:
        return self.v / "cwd"

    @property
    def record(self) -> Path:
        return Path(f"{self.ck}.lifecycle.json")

    @property
    def journal(self) -> Path:
        return Path(f"{self.ck}.operation.json")

    @property
    def manifest(self) -> Path:
        """The one published manifest of the base backup."""
        return self.job_dir / "backups" / f"{self.backup_id}.json"

    def manifest_doc(self) -> dict:
        return json.loads(self.manifest.read_bytes())

    def blob(self, rel: str = "metadata") -> Path:
        """The stored body of checkpoint file ``rel`` in the base backup."""
        sha = next(f["sha256"] for f in self.manifest_doc()["files"] if f["path"] == rel)
        return next((self.job_dir / "blobs").rglob(sha))

    def subst(self, text: str) -> str:
        """``{ck}``, ``{v}``, ``{outside}``, ``{root}``, ``{other}`` in a template → this sandbox's paths."""
        return text.format(ck=self.ck, v=self.v, outside=self.outside, root=self.root, other=self.other)


@dataclass(frozen=True)
class Variant:
    """One hostile input. ``must_not_pass``: validate may not exit 0. ``must_refuse``: these commands
    must exit non-zero. ``must_succeed``: these must exit 0 (the control variant, so the harness
    cannot pass vacuously). ``keyed``: the base backup and the commands use a seal key file.
    ``ck_arg``/``job_arg``/``job_name_arg`` replace command arguments."""

    name: str
    build: Callable[[Sandbox], None]
    must_not_pass: bool = False
    must_refuse: frozenset[str] = frozenset()
    must_succeed: frozenset[str] = frozenset()
    ck_name: str = "ck"
    keyed: bool = False
    ck_arg: str | None = None
    job_arg: str | None = None
    job_name_arg: str | None = None
    notes: str = field(default="", compare=False)


# --------------------------------------------------------------------------------------------------
# damage primitives (shared with hostile_paths)
# --------------------------------------------------------------------------------------------------

def rng_for(name: str) -> random.Random:
    return random.Random(zlib.crc32(name.encode()))


def clear(path: Path) -> None:
    """Remove whatever is at ``path`` (file, link, FIFO or folder) without following links."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def put(path: Path, data: bytes | str) -> None:
    clear(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def fifo(path: Path) -> None:
    clear(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def link(path: Path, target: str | Path) -> None:
    clear(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(str(target), path)


def sparse(path: Path, prefix: bytes = b"", size: int = HUGE) -> None:
    put(path, prefix)
    os.truncate(path, size)


def deep_list(depth: int = DEPTH) -> bytes:
    return b"[" * depth + b"]" * depth


def deep_dict(depth: int = DEPTH) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def reseal(doc: dict) -> dict:
    """Recompute the unkeyed manifest digest the way anyone with write access to the root can.

    The digest covers the manifest's canonical body, in which ``totals`` is derived from ``files``:
    an attacker who adds or resizes an entry updates it too (else the seal, not the path check,
    would refuse the manifest and the variant would prove nothing)."""
    import hashlib

    body = {k: v for k, v in doc.items() if k not in ("digest", "hmac")}
    files = body.get("files")
    if isinstance(files, list) and all(isinstance(f, dict) and type(f.get("size")) is int for f in files):
        body["totals"] = {"files": len(files), "bytes": sum(f["size"] for f in files)}
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return {**body, "digest": digest, **({"hmac": doc["hmac"]} if "hmac" in doc else {})}   # no key: old hmac


def write_json(path: Path, doc: object) -> None:
    put(path, json.dumps(doc, indent=1) + "\n")


# --------------------------------------------------------------------------------------------------
# the payload × target matrix
# --------------------------------------------------------------------------------------------------

def _framed(kind: str, body: bytes) -> bytes:
    """Wrap a JSON body the way the target's format frames it (so the damage reaches the JSON parser)."""
    if kind == "log":
        return b"v1\n" + body
    if kind == "source0":
        return b"\x00v1\n" + body
    return body


Payload = Callable[[Sandbox, Path, bytes, str, random.Random], None]

PAYLOADS: dict[str, Payload] = {
    "empty": lambda sb, p, valid, kind, r: put(p, b""),
    "truncated": lambda sb, p, valid, kind, r: put(p, valid[: max(1, len(valid) // 2)]),
    "garbled": lambda sb, p, valid, kind, r: put(p, r.randbytes(max(16, len(valid)))),
    "nul_bytes": lambda sb, p, valid, kind, r: put(p, valid[:8] + b"\x00" * 64 + valid[8:]),
    "not_utf8": lambda sb, p, valid, kind, r: put(p, _framed(kind, b'{"id":"\xff\xfe\xc3("}')),
    "json_list": lambda sb, p, valid, kind, r: put(p, _framed(kind, b"[1,2,3]")),
    "json_string": lambda sb, p, valid, kind, r: put(p, _framed(kind, b'"../../outside/pwned"')),
    "json_number": lambda sb, p, valid, kind, r: put(p, _framed(kind, b"1e999")),
    "json_null": lambda sb, p, valid, kind, r: put(p, _framed(kind, b"null")),
    "json_empty_object": lambda sb, p, valid, kind, r: put(p, _framed(kind, b"{}")),
    "deep_list": lambda sb, p, valid, kind, r: put(p, _framed(kind, deep_list())),
    "deep_dict": lambda sb, p, valid, kind, r: put(p, _framed(kind, deep_dict())),
    "huge_sparse": lambda sb, p, valid, kind, r: sparse(p, valid),
    "fifo": lambda sb, p, valid, kind, r: fifo(p),
    "link_dev_zero": lambda sb, p, valid, kind, r: link(p, "/dev/zero"),
    "link_dev_urandom": lambda sb, p, valid, kind, r: link(p, "/dev/urandom"),
    "link_out_secret": lambda sb, p, valid, kind, r: link(p, sb.outside / "secret.txt"),
    "link_out_valid_copy": lambda sb, p, valid, kind, r: _link_to_copy(sb, p, valid),
    "link_broken": lambda sb, p, valid, kind, r: link(p, sb.outside / "no-such-file"),
    "link_loop": lambda sb, p, valid, kind, r: link(p, p.name),
    "directory": lambda sb, p, valid, kind, r: (clear(p), p.mkdir(parents=True), (p / "x").write_bytes(valid)),
}


def _link_to_copy(sb: Sandbox, path: Path, valid: bytes) -> None:
    copy = sb.outside / "copies" / f"{zlib.crc32(str(path).encode()):08x}-{path.name}"
    put(copy, valid)
    link(path, copy)


def _valid_journal(sb: Sandbox) -> bytes:
    return json.dumps({"format": 1, "op": "restore", "operation_id": "20260101T000000Z-abcdef",
                       "checkpoint": str(sb.ck), "created_at_ms": 1_767_225_600_000, "done": [],
                       "payload": {"staging": f"{sb.ck}.staging-20260101T000000Z-abcdef",
                                   "aside": f"{sb.ck}.restore-20260101T000000Z-abcdef"}}, indent=1).encode()


# name → (path of the target in a sandbox, format kind, valid bytes (None: read the file),
#         validate must not pass, commands that must refuse)
Target = tuple[Callable[[Sandbox], Path], str, Callable[[Sandbox], bytes] | None, bool, frozenset[str]]
_BACKUP_READERS = frozenset({"restore-dry", "restore", "verify"})
TARGETS: dict[str, Target] = {
    "metadata": (lambda sb: sb.ck / "metadata", "json", None, True, frozenset()),
    "sources0": (lambda sb: sb.ck / "sources" / "0" / "0", "source0", None, False, frozenset()),
    "offsets_latest": (lambda sb: sb.ck / "offsets" / "2", "log", None, True, frozenset()),
    "commits_latest": (lambda sb: sb.ck / "commits" / "2", "log", None, True, frozenset()),
    "offsets_first": (lambda sb: sb.ck / "offsets" / "0", "log", None, False, frozenset()),
    "commits_first": (lambda sb: sb.ck / "commits" / "0", "log", None, False, frozenset()),
    "metadata_crc": (lambda sb: sb.ck / ".metadata.crc", "raw", None, False, frozenset()),
    "record": (lambda sb: sb.record, "json", None, True, frozenset()),
    "journal": (lambda sb: sb.journal, "json", _valid_journal, True, frozenset()),
    "manifest": (lambda sb: sb.manifest, "json", None, False, _BACKUP_READERS),
    "staging_manifest": (lambda sb: sb.job_dir / "staging" / f"{sb.backup_id}.json", "json",
                         lambda sb: sb.manifest.read_bytes(), False, frozenset()),
    "blob": (lambda sb: sb.blob("metadata"), "raw", None, False, frozenset({"restore", "verify"})),
}


def _matrix_variant(target: str, payload: str) -> Variant:
    where, kind, valid_of, must_not_pass, refuse = TARGETS[target]
    name = f"{target}__{payload}"

    def build(sb: Sandbox) -> None:
        path = where(sb)
        valid = valid_of(sb) if valid_of is not None else path.read_bytes()
        PAYLOADS[payload](sb, path, valid, kind, rng_for(name))

    # Spark itself reads through a link to a valid copy, and reads commits "{}" as watermark 0; a
    # dangling link where a record or journal would be is "none there": validate may pass those
    tolerated = payload == "link_out_valid_copy" or (target == "commits_latest" and payload == "json_empty_object") \
        or (target in ("record", "journal") and payload == "link_broken")
    not_pass = must_not_pass and not tolerated
    return Variant(name, build, must_not_pass=not_pass, must_refuse=refuse)


def _control(sb: Sandbox) -> None:
    """Nothing damaged: every command must succeed (keeps the harness honest)."""


def generate() -> list[Variant]:
    """Every variant, in a fixed order; names are unique."""
    from tests.support import hostile_semantic as sem

    out = [Variant("control__pristine", _control, must_succeed=frozenset(ALL_COMMANDS))]
    out += [_matrix_variant(t, p) for t in TARGETS for p in PAYLOADS]
    for group in (sem.checkpoint_variants, sem.record_variants, sem.journal_variants, sem.manifest_variants,
                  sem.store_variants, sem.argument_variants, sem.keyed_variants):
        out += group()
    names = [v.name for v in out]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise AssertionError(f"duplicate hostile variant names: {sorted(dupes)}")
    return out


# --------------------------------------------------------------------------------------------------
# the commands each variant is run through
# --------------------------------------------------------------------------------------------------

def commands(sb: Sandbox, variant: Variant, timeout_s: float = 5.0) -> list[tuple[str, list[str]]]:
    """``(label, argv)`` for every command, in run order: the real restore before the backup (a backup
    re-stores a damaged blob it needs, which would hide a restore that accepts one)."""
    ck = sb.subst(variant.ck_arg) if variant.ck_arg else str(sb.ck)
    job = variant.job_arg if variant.job_arg is not None else JOB
    kafka = ["--bootstrap-servers", sb.bootstrap, "--timeout", str(timeout_s)]
    store = ["--backup-root", str(sb.root), "--job", job]
    if sb.seal_key_file is not None:
        store += ["--seal-key-file", str(sb.seal_key_file)]
    validate = ["validate", "--checkpoint", ck, *kafka]
    if variant.job_name_arg is not None:
        validate += ["--job-name", variant.job_name_arg]
    restore = ["restore", "--checkpoint", ck, *store, "--backup", sb.backup_id, *kafka, "--settle", "0"]
    # reset and restore plan unless --execute is given
    return [
        ("validate", validate),
        ("backups", ["backups", *store]),
        ("verify", ["backups", *store, "--verify", sb.backup_id]),
        ("restore-dry", restore),
        ("reset-dry", ["reset", "--checkpoint", ck, *store, *kafka, "--mode", "preserve", "--settle", "0"]),
        ("restore", [*restore, "--execute"]),
        ("backup", ["backup", "--checkpoint", ck, *store, "--settle", "0", "--reason", "hostile corpus"]),
    ]


def owned_checkpoint(sb: Sandbox, variant: Variant) -> Path:
    """The checkpoint folder the commands were given (a restore may create it)."""
    if variant.ck_arg and "::" not in variant.ck_arg:
        return Path(os.path.normpath(sb.subst(variant.ck_arg)))
    return sb.ck


DRY_RUNS = frozenset({"restore-dry", "reset-dry"})
