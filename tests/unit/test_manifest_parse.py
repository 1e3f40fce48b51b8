"""The manifest's fast parse (issue 15) accepts and refuses exactly what the per-field checks do.

``Manifest.from_json`` checks its 40,000 file entries in one pass; what it lets through is used
to build paths and to trust blobs, so every malformed field must still be refused, naming it.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from airflow_kafka_spark._util.paths import all_plain_relative, check_relative
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.entries import file_entries
from airflow_kafka_spark.ops.backup.manifest import FileEntry, Manifest


def _sha(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(64))


ODD_PATHS = ["state/0/1/1.delta", "a b/c", 'quo"te', "back\\slash", "tab\there", "nul\x00x", "é/ü", "日本/語",
             "emoji/😀", "del\x7f", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", "\u2028line"]
ODD_NUMBERS = [None, 0.0, 1.0, 5e-324, 1e-7, 1e16, 1e22, 123456789.123456, 1795532379.080, 17, 0, 10**20,
               float("nan"), float("inf"), -float("inf"), -0.0]


def _entries(rng: random.Random, n: int) -> tuple[FileEntry, ...]:
    out = []
    for i in range(n):
        path = rng.choice(ODD_PATHS) + f"/{i}" if rng.random() < 0.3 else f"state/0/{i % 200}/{i}.delta"
        out.append(FileEntry(path, rng.randrange(0, 10**9), _sha(rng), rng.choice(ODD_NUMBERS),
                             rng.choice(ODD_NUMBERS)))
    return tuple(out)


def _manifest(files: tuple[FileEntry, ...], reason: str = "test") -> Manifest:
    return Manifest(backup_id="20261124T000000000Z-b3-abcdef", job="shop", created_at_ms=1, reason=reason,
                    checkpoint_location="/x/ck", query_id="q", last_committed_batch=3, committed_offsets=None,
                    pending_batch=None, pending_offsets=None, initial_offsets=None, spark_version=None,
                    kafka_cluster_id=None, topics={}, forced=False, running=False, state={}, problems=[],
                    files=files)


def _safe(path: str) -> bool:
    try:
        check_relative(path)
    except UserError:
        return False
    return True


def test_a_sealed_manifest_with_odd_paths_and_times_parses_back_to_the_same_entries():
    rng = random.Random(7)
    files = tuple(f for f in _entries(rng, 300) if _safe(f.path) and all(
        t is None or (t == t and abs(t) != float("inf")) for t in (f.mtime, f.ctime)))
    assert len(files) > 100 and any(not f.path.isascii() for f in files)
    # a reason that looks like the placeholder the encoder uses, and one that holds the list's own text
    m = _manifest(files, reason='aks-files-0000 "files":[] ' + json.dumps(files[0].to_dict()))
    key = b"k" * 32
    sealed, raw = m.sealed_json(key)
    canonical = seal.canonical(m.body())
    assert raw == canonical[:-1] + f',"digest":"{sealed.digest}","hmac":"{sealed.hmac}"}}\n'.encode()
    assert sealed.digest == seal.digest(m.body()) and sealed.hmac == seal.keyed(m.body(), key)
    back = Manifest.from_json(raw, where="t", seal_key=key)
    assert back.files == files and back.reason == m.reason


@pytest.mark.parametrize("bad, field", [
    ({"path": "a", "size": True, "sha256": "0" * 64}, "non-negative integer"),
    ({"path": "a", "size": -1, "sha256": "0" * 64}, "non-negative integer"),
    ({"path": "", "size": 1, "sha256": "0" * 64}, "non-empty string"),
    ({"path": 5, "size": 1, "sha256": "0" * 64}, "non-empty string"),
    ({"path": "a", "size": 1, "sha256": "0" * 63}, "sha256 hex digest"),
    ({"path": "a", "size": 1, "sha256": "0" * 63 + "G"}, "sha256 hex digest"),
    ({"path": "a", "size": 1, "sha256": "0" * 64, "mtime": "1"}, "expected a number"),
    ({"path": "a", "size": 1, "sha256": "0" * 64, "ctime": False}, "expected a number"),
    ({"size": 1, "sha256": "0" * 64}, "lacks path"),
    ("not an entry", "lacks path"),
])
def test_a_bad_entry_is_refused_naming_what_is_wrong(bad, field):
    good = {"path": "b", "size": 1, "sha256": "1" * 64}
    with pytest.raises(ValueError, match=field):
        file_entries([good, bad, good])


def test_a_digest_with_a_line_break_cannot_pass_as_two():
    """One entry's "digest" holding two digests and a newline must not slip through the joined check."""
    two = "a" * 64 + "\n" + "b" * 64
    with pytest.raises(ValueError, match="sha256 hex digest"):
        file_entries([{"path": "a", "size": 1, "sha256": two}])
    with pytest.raises(ValueError, match="sha256 hex digest"):
        file_entries([{"path": "a", "size": 1, "sha256": "a" * 63 + "\n"}, {"path": "b", "size": 1,
                                                                             "sha256": "b" * 64}])


def test_a_tampered_entry_in_a_sealed_manifest_is_one_line():
    m = _manifest((FileEntry("offsets/0", 10, "a" * 64, 1.5, 2.5),))
    _, raw = m.sealed_json()
    doc = json.loads(raw)
    doc["files"][0]["size"] = "10"
    with pytest.raises(UserError, match=r"damaged or was modified.*non-negative integer"):
        Manifest.from_json(json.dumps(doc).encode(), where="t")


# ---- a re-backup carries the previous manifest's file list as bytes (issue 15) ---------------------


def _odd_files(seed: int, n: int = 300) -> tuple[FileEntry, ...]:
    files = tuple(f for f in _entries(random.Random(seed), n) if _safe(f.path) and all(
        t is None or (t == t and abs(t) != float("inf")) for t in (f.mtime, f.ctime)))
    assert len(files) > 100
    return files


@pytest.mark.parametrize("reason", ["scheduled", "holds the mark \x00files\x00 itself", '"files":[]'])
def test_a_carried_file_list_seals_to_the_bytes_a_full_encoding_gives(reason):
    key = b"k" * 32
    _, raw = _manifest(_odd_files(11)).sealed_json(key)
    previous = Manifest.from_json(raw, where="t", seal_key=key)
    assert previous.files_json is not None and previous.files_json.startswith(b"[{")
    again = dataclasses.replace(previous, backup_id="20261124T000001000Z-b3-fedcba", created_at_ms=2,
                                reason=reason, stats={"files_from_previous": len(previous.files)})
    carried, carried_raw = again.sealed_json(key)
    encoded, encoded_raw = dataclasses.replace(again, files_json=None).sealed_json(key)
    assert carried_raw == encoded_raw and carried.digest == encoded.digest and carried.hmac == encoded.hmac
    back = Manifest.from_json(carried_raw, where="t", seal_key=key)
    assert back.files == previous.files and back.reason == reason


def test_a_manifest_not_in_canonical_form_is_read_but_its_bytes_are_not_carried():
    """A hand-written (re-spaced) manifest with a recomputed digest parses; a re-backup encodes anew."""
    m = _manifest(_odd_files(12))
    body = seal.canonical(m.body()).replace(b'{"backup_id"', b'{ "backup_id"', 1)
    digest = seal.digest_bytes(body)
    raw = body[:-1] + f',"digest":"{digest}"}}\n'.encode()
    back = Manifest.from_json(raw, where="t")
    assert back.files == m.files and back.files_json is None
    # and one written with its keys in another order (to_json) is read through the slow path
    other = Manifest.from_json(m.sealed().to_json(), where="t")
    assert other.files == m.files and other.files_json is None


def test_all_plain_relative_never_passes_a_path_check_relative_refuses():
    rng = random.Random(5)
    pool = [*ODD_PATHS, "", ".", "..", "a/..", "../a", "/abs", "./a", "a/./b", "a//b", "a/", "a/.", "C:x",
            "a\nb", "\n", "a\n", "\na", "x" * 4097, "s3://b/k", "a::b", "ok/1.delta", "offsets/7", "a..b"]
    for path in pool:
        assert not all_plain_relative([path]) or _safe(path), path
    good = [f"state/0/{i}/{i}.delta" for i in range(50)]
    assert all_plain_relative(good) and all_plain_relative([])
    for _ in range(2000):
        paths = rng.sample(pool, rng.randrange(1, 4)) + rng.sample(good, 3)
        rng.shuffle(paths)
        assert all_plain_relative(paths) == all(_safe(p) and p == p.strip("\n") and "\n" not in p and ".." not in p
                                                 and ":" not in p for p in paths), paths
