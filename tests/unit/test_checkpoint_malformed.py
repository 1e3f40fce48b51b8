"""read_checkpoint on many broken checkpoints: never a traceback, always an explanation, never a write.

Each case starts from a healthy checkpoint (factory, exact Spark bytes), breaks it one way, and
reads it twice (default and ``read_history=True``). The contract checked for every case:

* the only exception allowed is :class:`UserError`, and its message is one line;
* otherwise at least one problem, with a known code (the case's expected code among them) and a
  one-line message;
* no file or directory changed, appeared or disappeared (path -> size, mtime, sha256).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.model import (
    CHECKPOINT_CORRUPT,
    INITIAL_OFFSETS_UNREADABLE,
    LOG_GAP,
    MISSING_QUERY_ID,
    STRAY_TEMP_FILE,
    UNSUPPORTED_LOG_VERSION,
)
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import UserError
from tests.support.checkpoint_factory import (
    START_TIMESTAMP_MS,
    FakeCheckpoint,
    commit_file,
    offsets_file,
    write_checkpoint,
)

KNOWN_CODES = {CHECKPOINT_CORRUPT, MISSING_QUERY_ID, UNSUPPORTED_LOG_VERSION, STRAY_TEMP_FILE, LOG_GAP,
               INITIAL_OFFSETS_UNREADABLE}
USER_ERROR = "UserError"
SOURCES = ({"orders": 2, "refunds": 1}, {"payments": 3})
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's JSON parser recursion limit


@dataclass(frozen=True)
class Case:
    name: str
    expect: str                                  # a problem code, or USER_ERROR
    breaks: Callable[[FakeCheckpoint], str | None]  # mutates; may return another location to read
    batches: int = 6                             # base checkpoint: batches 0..5 committed, L = C = 5
    pending: bool = False


CASES: list[Case] = []


def case(name: str, expect: str, *, batches: int = 6, pending: bool = False):
    def register(fn: Callable[[FakeCheckpoint], str | None]):
        CASES.append(Case(name, expect, fn, batches, pending))
        return fn
    return register


def replace_offsets(batch_id: int, name: str, expect: str, make: Callable[[bytes], bytes | str]) -> None:
    def breaks(ck: FakeCheckpoint) -> None:
        original = ck.path(f"offsets/{batch_id}").read_bytes()
        ck.write(f"offsets/{batch_id}", make(original))
    CASES.append(Case(name, expect, breaks))


def replace_commit(batch_id: int, name: str, expect: str, data: bytes | str) -> None:
    CASES.append(Case(name, expect, lambda ck: ck.write(f"commits/{batch_id}", data) and None))


def replace_line(original: bytes, index: int, line: str) -> bytes:
    lines = original.decode().split("\n")
    lines[index] = line
    return "\n".join(lines).encode()


def meta_line(**doc) -> str:
    return json.dumps(doc, separators=(",", ":"))


# --------------------------------------------------------------------------- offsets/L content

for _name, _make in {
    "offsets-empty": lambda b: b"",
    "offsets-truncated-half": lambda b: b[: len(b) // 2],
    "offsets-version-only": lambda b: b"v1",
    "offsets-version-and-newline": lambda b: b"v1\n",
    "offsets-no-source-lines": lambda b: b"\n".join(b.split(b"\n")[:2]),
    "offsets-random-binary": lambda b: random.Random(5).randbytes(300),
    "offsets-nul-bytes": lambda b: b"\x00" * 64,
    "offsets-invalid-utf8": lambda b: b"v1\n\xff\xfe\xfd",
    "offsets-utf8-bom": lambda b: b"\xef\xbb\xbf" + b,
    "offsets-v0": lambda b: b.replace(b"v1", b"v0", 1),
    "offsets-v-negative": lambda b: b.replace(b"v1", b"v-1", 1),
    "offsets-uppercase-V": lambda b: b.replace(b"v1", b"V1", 1),
    "offsets-version-word": lambda b: b.replace(b"v1", b"version1", 1),
    "offsets-version-trailing-space": lambda b: b.replace(b"v1", b"v1 ", 1),
    "offsets-version-v-alone": lambda b: b.replace(b"v1", b"v", 1),
    "offsets-version-overflow": lambda b: b.replace(b"v1", b"v99999999999999999999", 1),
    "offsets-version-fullwidth-digit": lambda b: b.replace(b"v1", "v１".encode(), 1),
    "offsets-metadata-bad-json": lambda b: replace_line(b, 1, '{"batchWatermarkMs":0,'),
    "offsets-metadata-array": lambda b: replace_line(b, 1, "[1,2]"),
    "offsets-metadata-number": lambda b: replace_line(b, 1, "42"),
    "offsets-metadata-timestamp-text": lambda b: replace_line(b, 1, meta_line(batchTimestampMs="today")),
    "offsets-metadata-timestamp-huge": lambda b: replace_line(b, 1, meta_line(batchTimestampMs=2**70)),
    "offsets-metadata-timestamp-bool": lambda b: replace_line(b, 1, meta_line(batchTimestampMs=True)),
    "offsets-metadata-conf-list": lambda b: replace_line(b, 1, meta_line(conf=["a"])),
    "offsets-metadata-conf-nested": lambda b: replace_line(b, 1, meta_line(conf={"k": {"x": 1}})),
    "offsets-metadata-nan": lambda b: replace_line(b, 1, '{"batchTimestampMs":NaN}'),
    "offsets-metadata-deep-nesting": lambda b: replace_line(b, 1, '{"conf":' + DEEP + "}"),
    "offsets-kafka-offset-string": lambda b: replace_line(b, 2, '{"orders":{"0":"12"}}'),
    "offsets-kafka-partition-name": lambda b: replace_line(b, 2, '{"orders":{"zero":12}}'),
    "offsets-kafka-offset-overflow": lambda b: replace_line(b, 2, '{"orders":{"0":18446744073709551616}}'),
    "offsets-kafka-partition-overflow": lambda b: replace_line(b, 2, '{"orders":{"4294967296":1}}'),
    "offsets-kafka-offset-negative": lambda b: replace_line(b, 2, '{"orders":{"0":-5}}'),
    "offsets-kafka-offset-float": lambda b: replace_line(b, 2, '{"orders":{"0":12.5}}'),
    "offsets-source-truncated": lambda b: replace_line(b, 2, '{"orders":{"0":1'),
    "offsets-source-not-json": lambda b: replace_line(b, 2, "orders=12"),
    "offsets-source-missing": lambda b: b"\n".join(b.split(b"\n")[:-1]),
    "offsets-source-extra": lambda b: b + b'\n{"extra":{"0":1}}',
    "offsets-source-kind-changed": lambda b: replace_line(b, 3, "5"),
    "offsets-kafka-topic-is-a-list": lambda b: replace_line(b, 3, '{"payments":[1,2]}'),
    "offsets-extra-blank-line": lambda b: b + b"\n\n",
    "offsets-unicode-garbage": lambda b: '{"ключ":1}\n订单\n{"订单":{"0":"五"}}'.encode(),
    "offsets-unicode-offset": lambda b: replace_line(b, 2, '{"订单":{"0":"五"}}'),
    "offsets-v2-header-on-v1-lines": lambda b: b'v2\n\n{"orders":{"0":1}}\n{"payments":{"0":1}}',
    "offsets-v2-line-without-colon": lambda b: b'v2\n\n0:{"orders":{"0":1}}\n-',
    "offsets-v2-duplicate-source-id": lambda b: b'v2\n\n0:{"orders":{"0":1}}\n0:{"orders":{"0":2}}',
}.items():
    replace_offsets(5, _name, CHECKPOINT_CORRUPT, _make)

for _version in (b"v3", b"v99", b"v2147483647"):
    replace_offsets(5, f"offsets-{_version.decode()}", UNSUPPORTED_LOG_VERSION,
                    lambda b, v=_version: b.replace(b"v1", v, 1))

replace_offsets(4, "offsets-previous-garbage", CHECKPOINT_CORRUPT, lambda b: b"garbage")
replace_offsets(2, "offsets-history-empty", CHECKPOINT_CORRUPT, lambda b: b"")
replace_offsets(2, "offsets-history-garbage", CHECKPOINT_CORRUPT, lambda b: b"\x00garbage")
replace_offsets(1, "offsets-history-v99", UNSUPPORTED_LOG_VERSION, lambda b: b.replace(b"v1", b"v99", 1))


# --------------------------------------------------------------------------- offsets/ structure


@case("offsets-latest-is-a-directory", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/5")
    ck.write("offsets/5/part", b"v1")


@case("offsets-previous-is-a-directory", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/4")
    ck.path("offsets/4").mkdir()


@case("offsets-latest-is-a-fifo", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/5")
    os.mkfifo(ck.path("offsets/5"))


@case("offsets-latest-dangling-symlink", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/5")
    ck.path("offsets/5").symlink_to(ck.root / "nowhere")


@case("offsets-latest-huge-file", CHECKPOINT_CORRUPT)
def _(ck):
    with open(ck.path("offsets/5"), "r+b") as fh:
        fh.truncate(65 * 1024 * 1024)  # sparse: far larger than any log file


@case("offsets-gap-before-latest", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/4")


@case("offsets-gap-uncommitted", CHECKPOINT_CORRUPT, pending=True)
def _(ck):
    ck.remove("offsets/5")


@case("offsets-hole-in-history", LOG_GAP)
def _(ck):
    ck.remove("offsets/2")
    ck.remove("commits/2")


@case("offsets-huge-batch-id", CHECKPOINT_CORRUPT)
def _(ck):
    ck.write("offsets/9223372036854775807", ck.path("offsets/5").read_bytes())


@case("offsets-huge-batch-ids-both-logs", CHECKPOINT_CORRUPT)
def _(ck):
    ck.write("offsets/9223372036854775807", ck.path("offsets/5").read_bytes())
    ck.write("commits/9223372036854775806", commit_file())


@case("offsets-dir-is-a-file", CHECKPOINT_CORRUPT)
def _(ck):
    for f in ck.path("offsets").iterdir():
        f.unlink()
    ck.path("offsets").rmdir()
    ck.write("offsets", b"v1\n\n{}")


@case("offsets-all-purged-commits-kept", CHECKPOINT_CORRUPT)
def _(ck):
    for f in ck.path("offsets").iterdir():
        f.unlink()


@case("offsets-everything-zero-bytes", CHECKPOINT_CORRUPT)
def _(ck):
    for log in ("offsets", "commits"):
        for f in ck.path(log).iterdir():
            f.write_bytes(b"")


@case("offsets-only-pending-batch-zero-empty", CHECKPOINT_CORRUPT, batches=0, pending=True)
def _(ck):
    ck.write("offsets/0", b"")


# --------------------------------------------------------------------------- commits/


replace_commit(5, "commits-empty", CHECKPOINT_CORRUPT, b"")
replace_commit(5, "commits-garbage-binary", CHECKPOINT_CORRUPT, b"\x00\xffgarbage")
replace_commit(5, "commits-bad-json", CHECKPOINT_CORRUPT, b'v1\n{"nextBatchWatermarkMs":')
replace_commit(5, "commits-empty-json-line", CHECKPOINT_CORRUPT, b"v1\n\n")
replace_commit(5, "commits-v0", CHECKPOINT_CORRUPT, b'v0\n{"nextBatchWatermarkMs":0}')
replace_commit(5, "commits-json-array", CHECKPOINT_CORRUPT, b"v1\n[0]")
replace_commit(5, "commits-watermark-string", CHECKPOINT_CORRUPT, b'v1\n{"nextBatchWatermarkMs":"0"}')
replace_commit(5, "commits-state-ids-list", CHECKPOINT_CORRUPT, b'v2\n{"stateUniqueIds":[1]}')
replace_commit(5, "commits-v3", UNSUPPORTED_LOG_VERSION, b'v3\n{"nextBatchWatermarkMs":0}')
replace_commit(3, "commits-history-empty", CHECKPOINT_CORRUPT, b"")
replace_commit(4, "commits-previous-empty", CHECKPOINT_CORRUPT, b"")


@case("commits-latest-is-a-directory", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("commits/5")
    ck.path("commits/5").mkdir()


@case("commits-ahead-of-offsets", CHECKPOINT_CORRUPT)
def _(ck):
    ck.write("commits/6", commit_file())
    ck.write("commits/7", commit_file())


@case("commits-latest-without-offsets", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/5")


@case("commits-far-behind-offsets", CHECKPOINT_CORRUPT)
def _(ck):
    for i in (3, 4, 5):
        ck.remove(f"commits/{i}")


@case("commits-none-at-all", CHECKPOINT_CORRUPT)
def _(ck):
    for f in ck.path("commits").iterdir():
        f.unlink()


@case("commits-orphan-inside-window", CHECKPOINT_CORRUPT)
def _(ck):
    ck.remove("offsets/2")


@case("commits-dir-is-a-file", CHECKPOINT_CORRUPT)
def _(ck):
    for f in ck.path("commits").iterdir():
        f.unlink()
    ck.path("commits").rmdir()
    ck.write("commits", b"v1")


# --------------------------------------------------------------------------- metadata


for _name, _data in {
    "metadata-empty": b"",
    "metadata-garbage": b"\x89PNG\r\n\x1a\n",
    "metadata-truncated": b'{"id":"6f1c9b0e-2f4a',
    "metadata-id-number": b'{"id":5}',
    "metadata-id-empty": b'{"id":""}',
    "metadata-no-id": b'{"name":"q"}',
    "metadata-array": b'["6f1c9b0e"]',
    "metadata-unicode-truncated": '{"id":"ünïcödé'.encode(),
    "metadata-deep-nesting": b'{"id":' + DEEP.encode() + b"}",
}.items():
    CASES.append(Case(_name, MISSING_QUERY_ID, lambda ck, d=_data: ck.write("metadata", d) and None))


@case("metadata-missing", MISSING_QUERY_ID)
def _(ck):
    ck.remove("metadata")


@case("metadata-is-a-directory", MISSING_QUERY_ID)
def _(ck):
    ck.remove("metadata")
    ck.path("metadata").mkdir()


@case("metadata-garbage-before-any-batch", CHECKPOINT_CORRUPT, batches=0)
def _(ck):
    ck.write("metadata", b"{{{")


# --------------------------------------------------------------------------- sources/<n>/0


@case("sources-empty-before-first-commit", CHECKPOINT_CORRUPT, batches=0, pending=True)
def _(ck):
    ck.write("sources/0/0", b"")


for _name, _data in {
    "sources-garbage-after-nul": b"\x00v1\n{garbage",
    "sources-missing-nul-byte": b'v1\n{"orders":{"0":0}}',
    "sources-nul-byte-only": b"\x00",
    "sources-version-without-newline": b"\x00v1",
    "sources-json-array": b"\x00v1\n[1,2]",
    "sources-invalid-utf8": b"\x00v1\n\xff",
    "sources-empty": b"",
}.items():
    CASES.append(Case(_name, INITIAL_OFFSETS_UNREADABLE,
                      lambda ck, d=_data: ck.write("sources/1/0", d) and None))

CASES.append(Case("sources-v2", UNSUPPORTED_LOG_VERSION,
                  lambda ck: ck.write("sources/0/0", b'\x00v2\n{"orders":{"0":0}}') and None))


@case("sources-file-is-a-directory", INITIAL_OFFSETS_UNREADABLE)
def _(ck):
    ck.remove("sources/1/0")
    ck.path("sources/1/0").mkdir()


# --------------------------------------------------------------------------- strays and combinations


@case("stray-tmp-in-offsets", STRAY_TEMP_FILE)
def _(ck):
    ck.write("offsets/.6.1b2c3d4e-0000-4000-8000-000000000000.tmp", b"v1\n")


@case("stray-tmp-in-root", STRAY_TEMP_FILE)
def _(ck):
    ck.write(".metadata.1b2c3d4e-0000-4000-8000-000000000000.tmp", b"")


@case("stray-tmp-in-sources", STRAY_TEMP_FILE)
def _(ck):
    ck.write("sources/0/.0.1b2c3d4e.tmp", b"\x00")


@case("pending-batch-damaged-and-metadata-gone", CHECKPOINT_CORRUPT, pending=True)
def _(ck):
    ck.write("offsets/6", b"v1\n{")
    ck.remove("metadata")


@case("v2-offsets-damaged", CHECKPOINT_CORRUPT)
def _(ck):
    ck.write("offsets/5", offsets_file(["{", None], version=2, batch_timestamp_ms=START_TIMESTAMP_MS))


# --------------------------------------------------------------------------- not a checkpoint at all


@case("location-is-a-file", USER_ERROR)
def _(ck):
    return str(ck.path("metadata"))


@case("location-is-a-fifo", USER_ERROR)
def _(ck):
    os.mkfifo(ck.root.parent / "fifo")
    return str(ck.root.parent / "fifo")


# --------------------------------------------------------------------------- the contract


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything under ``root`` (itself included), without following links or opening FIFOs."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            path = Path(dirpath) / name if name != "." else Path(dirpath)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            else:
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "other", st.st_mode, st.st_mtime_ns)
    return out


def check_contract(location: str, root: Path, expect: str | None) -> None:
    before = snapshot(root)
    seen_codes: set[str] = set()
    for read_history in (False, True):
        try:
            state = read_checkpoint(location, read_history=read_history)
        except UserError as exc:
            assert "\n" not in str(exc) and str(exc).strip(), repr(str(exc))
            seen_codes.add(USER_ERROR)
            continue
        for p in state.problems:
            assert p.code in KNOWN_CODES, p
            assert p.message and "\n" not in p.message and "\r" not in p.message, p
            assert p.severity in ("WARN", "BLOCK")
        if read_history and expect is not None:
            assert state.problems, "a broken checkpoint read without any problem"
        seen_codes.update(p.code for p in state.problems)
    assert snapshot(root) == before, "the reader changed the checkpoint"
    if expect is not None:
        assert expect in seen_codes, f"expected {expect}, got {sorted(seen_codes)}"


def test_there_are_many_distinct_cases():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len(CASES) >= 50


@pytest.mark.parametrize("broken", CASES, ids=[c.name for c in CASES])
def test_broken_checkpoint(tmp_path, broken: Case):
    ck = write_checkpoint(tmp_path / "cp", batches=broken.batches, pending=broken.pending, sources=SOURCES)
    location = broken.breaks(ck) or ck.location
    check_contract(location, tmp_path, broken.expect)


@pytest.mark.parametrize("seed", range(40))
def test_random_damage_never_crashes_or_writes(tmp_path, seed):
    """Byte flips, truncations and insertions in random files: no promise of a problem (a flipped
    digit is still a valid file), but never a traceback, a multi-line message or a write."""
    rng = random.Random(seed)
    ck = write_checkpoint(tmp_path / "cp", batches=rng.randint(1, 8), pending=rng.random() < 0.5,
                          sources=SOURCES, state=rng.random() < 0.3)
    files = sorted(p for p in ck.root.rglob("*") if p.is_file() and not p.name.endswith(".crc"))
    for path in rng.sample(files, k=min(len(files), rng.randint(1, 4))):
        data = bytearray(path.read_bytes())
        action = rng.choice(["flip", "truncate", "insert", "delete"])
        if action == "delete":
            path.unlink()
            continue
        if not data:
            continue
        pos = rng.randrange(len(data))
        if action == "flip":
            data[pos] = rng.randrange(256)
        elif action == "truncate":
            del data[pos:]
        else:
            data[pos:pos] = rng.choice([b"\n", b"\r", b":", b"-", b"\x00", b"{", "ü".encode(), b"9" * 30])
        path.write_bytes(bytes(data))
    check_contract(ck.location, tmp_path, None)
