"""Issue 17's acceptance corpus: ≥ 300 hostile checkpoint / backup-root variants against every command.

Every variant (tests/support/hostile*.py) is run through ``aks validate``, ``backups``, ``backups
--verify``, ``restore --dry-run``, ``reset --dry-run``, ``backup`` and a real ``restore``, against
the real broker, each command bounded by a timer (a hang is a failure). Every run must: print no
traceback; exit 0, 2 or 3 (2: exactly one stderr line; 3: at most one, the verdict may be on
stdout); write nothing outside its own folders (dry runs: nothing at all); leave the checkpoint
byte-identical unless a real restore succeeded; never PASS validate on a variant marked
must-not-pass; refuse what a variant marks must-refuse. The failures are written to
``$AKS_HOSTILE_REPORT`` (default: the test's tmp dir) as JSON, one row per variant × command.

Runtime: the commands run in long-lived worker processes (tests/support/hostile_worker.py), so the
~3,400 runs (487 variants × 7 commands) cost no interpreter start-ups; see the module docstring there.
The variants are dealt to two corpora (``AKS_HOSTILE_SHARDS``), each with its own folders and worker,
run side by side (docs/benchmarks.md, "Test and CI wall time"); between two commands of a variant one
snapshot serves as the first one's "after" and the next one's "before". Each healthy command takes
5–350 ms; a hang costs its 20 s timer. ``AKS_HOSTILE_ONLY=<regex>`` re-runs some variants;
``AKS_HOSTILE_TIMEOUT`` sets the per-command timer.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import time
from pathlib import Path

import pytest

from devstack import topics
from devstack.produce import produce
from tests.support.hostile import ALL_COMMANDS, PAYLOADS, TARGETS, generate
from tests.support.hostile_harness import Corpus, Failure, render

pytestmark = pytest.mark.integration

TIMEOUT_S = float(os.environ.get("AKS_HOSTILE_TIMEOUT", "20"))
# Two workers, one per core of the CI machine: a command runs in one worker while the other's output is judged.
SHARDS = int(os.environ.get("AKS_HOSTILE_SHARDS", "2"))


def test_the_corpus_is_large_deterministic_and_uniquely_named(tmp_path: Path) -> None:
    first, second = generate(), generate()
    names = [v.name for v in first]
    assert len(names) >= 300
    assert names == [v.name for v in second]
    assert len(set(names)) == len(names)
    assert len([n for n in names if "__" in n]) == len(names)
    assert len(TARGETS) * len(PAYLOADS) <= len(names)
    assert any(v.must_succeed == frozenset(ALL_COMMANDS) for v in first)


def _run_shard(corpus: Corpus, variants: list) -> tuple[list[Failure], dict[str, dict]]:
    failures: list[Failure] = []
    rows = {}
    try:
        for variant in variants:
            found, answers = corpus.run_variant(variant)
            failures += found
            rows[variant.name] = answers
    finally:
        corpus.close()
    return failures, rows


def test_every_command_survives_every_hostile_variant(broker, tmp_path: Path) -> None:
    topic = f"hostile-{int(time.time())}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 100, partitions=2)       # 50 per partition; checkpoints end at 30
    only = re.compile(os.environ.get("AKS_HOSTILE_ONLY", ""))     # a regex over variant names, to re-run some
    variants = [v for v in generate() if only.search(v.name)]
    # SHARDS corpora side by side, each with its own folders and worker, every variant in exactly one of them:
    # a command's snapshot before/after covers only its own corpus's folders, so no shard sees another's writes.
    corpora = [Corpus(tmp_path / f"hostile-{i}", topic, broker.bootstrap_servers, timeout=TIMEOUT_S)
               for i in range(SHARDS)]
    failures: list[Failure] = []
    rows = {}
    started = time.monotonic()
    report = Path(os.environ.get("AKS_HOSTILE_REPORT", tmp_path / "hostile-report.json"))
    try:
        with concurrent.futures.ThreadPoolExecutor(SHARDS) as pool:
            shards = [pool.submit(_run_shard, c, variants[i::SHARDS]) for i, c in enumerate(corpora)]
            for shard in shards:
                found, answers = shard.result()
                failures += found
                rows.update(answers)
    finally:
        for c in corpora:
            c.close()
        seconds = time.monotonic() - started
        runs, restarts = sum(c.runs for c in corpora), sum(c.worker.restarts for c in corpora)
        report.write_text(json.dumps({"variants": len(variants), "runs": runs, "seconds": round(seconds, 1),
                                      "shards": SHARDS, "worker_restarts": restarts,
                                      "failures": [f.to_dict() for f in failures], "runs_by_variant": rows},
                                     indent=1))
    print(f"hostile corpus: {len(variants)} variants in {SHARDS} shards, {runs} runs, {seconds:.0f}s, "
          f"{len(failures)} failures, {restarts} worker starts; report {report}")
    assert len(rows) == len(variants), "every variant must have been run"
    assert not failures, f"{len(failures)} broken promises (report: {report}):\n{render(failures[:80])}"
