"""Regenerate tests/fixtures/checkpoints/spark-<version>/: checkpoints written by each real Spark runtime.

Why committed fixtures: the format reader, the verdict and lag are unit-tested on what each Spark
line really writes (offsets v1 metadata and conf keys, commits, ``metadata``, ``sources/0/0``,
``state/0/_metadata`` ...), without a broker or a JVM in the unit tests. The unit tests
(tests/unit/test_checkpoint_fixtures.py) read ``fixture.json`` for what was produced.

Each runtime (devstack/spark_runtimes.py) writes two queries on one topic of 2 partitions and
120 records (60 per partition), 50 offsets per trigger (3 batches), 2 shuffle partitions:
``stateless`` (the reference job, idempotent sink) and ``stateful`` (``--stateful count_by_key``).
The sinks are not kept. Run: ``.venv/bin/python -m devstack.checkpoint_fixtures`` (~2 min).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from devstack import topics
from devstack.broker import LocalBroker
from devstack.produce import produce
from devstack.spark_runtimes import NAMES, runtime
from devstack.spark_worker import SparkWorker

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "checkpoints"
TOPIC, PARTITIONS, RECORDS, PER_TRIGGER = "fx-orders", 2, 120, 50
QUERIES = {"stateless": [], "stateful": ["--stateful", "count_by_key"]}


def generate(target: Path = FIXTURES) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix="aks-fixtures-") as tmp, LocalBroker(data_dir=Path(tmp) / "kafka") as b:
        topics.create_topic(b.bootstrap_servers, TOPIC, PARTITIONS)
        produced = produce(b.bootstrap_servers, TOPIC, RECORDS, partitions=PARTITIONS)
        ends = {str(p): 1 + max(r.offset for r in produced if r.partition == p) for p in range(PARTITIONS)}
        for name in NAMES:
            rt = runtime(name)
            with SparkWorker(rt, log_path=Path(tmp) / f"worker-{name}.log") as worker:
                for query, extra in QUERIES.items():
                    work = Path(tmp) / name / query
                    argv = ["--topics", TOPIC, "--bootstrap-servers", b.bootstrap_servers, "--checkpoint",
                            str(work / "checkpoint"), "--output", str(work / "out"), "--sink", "idempotent",
                            "--max-offsets-per-trigger", str(PER_TRIGGER), *extra]
                    res = worker.run(argv)
                    if not res.ok:
                        raise SystemExit(f"Spark {rt.version} failed writing the {query} fixture: {res.error}")
                    dest = target / f"spark-{rt.version}" / query
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.copytree(work / "checkpoint", dest)
                    (dest.parent / "fixture.json").write_text(json.dumps({
                        "spark_version": rt.version, "scala": rt.scala, "topic": TOPIC, "partitions": PARTITIONS,
                        "records": RECORDS, "max_offsets_per_trigger": PER_TRIGGER, "end_offsets": ends,
                        "shuffle_partitions": 2, "queries": {q: " ".join(a) or "stateless" for q, a in QUERIES.items()},
                    }, indent=1, sort_keys=True) + "\n")
                    written.append(dest)
    return written


def main() -> int:
    for path in generate():
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
