"""The manifest's fast parse (issue 15) accepts and refuses exactly what the per-field checks do.

``Manifest.from_json`` checks its 40,000 file entries in one pass; what it lets through is used
to build paths and to trust blobs, so every malformed field must still be refused, naming it.
"""

from __future__ import annotations

import json
import random

import pytest

from airflow_kafka_spark._util.paths import check_relative
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.ops import seal
from airflow_kafka_spark.ops.backup.manifest import FileEntry, Manifest, _file_entries


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
        _file_entries([good, bad, good])


def test_a_digest_with_a_line_break_cannot_pass_as_two():
    """One entry's "digest" holding two digests and a newline must not slip through the joined check."""
    two = "a" * 64 + "\n" + "b" * 64
    with pytest.raises(ValueError, match="sha256 hex digest"):
        _file_entries([{"path": "a", "size": 1, "sha256": two}])
    with pytest.raises(ValueError, match="sha256 hex digest"):
        _file_entries([{"path": "a", "size": 1, "sha256": "a" * 63 + "\n"}, {"path": "b", "size": 1,
                                                                             "sha256": "b" * 64}])


def test_a_tampered_entry_in_a_sealed_manifest_is_one_line():
    m = _manifest((FileEntry("offsets/0", 10, "a" * 64, 1.5, 2.5),))
    _, raw = m.sealed_json()
    doc = json.loads(raw)
    doc["files"][0]["size"] = "10"
    with pytest.raises(UserError, match=r"damaged or was modified.*non-negative integer"):
        Manifest.from_json(json.dumps(doc).encode(), where="t")
