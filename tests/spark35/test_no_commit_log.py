"""Spark 3.5 is the oracle for a checkpoint without commit log (issue 27): the verdict, the backup and
the restore agree with what Spark 3.5.1 does on it.

Spark 2.1 wrote no ``commits/``; Spark restarts such a checkpoint by re-running its newest batch from
``offsets/L-1`` to ``offsets/L``. The layout is made from a real Spark 3.5 Kafka checkpoint by
removing ``commits/``. The verdict must not BLOCK it and must announce the replay; the backup must
copy it whole (before issue 27 it kept ``metadata`` only); and Spark 3.5, restarted from the
restored copy and from a plain copy of the original on the same new records, must write the same
rows, with exactly the announced replay as duplicates in a non-idempotent sink.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from airflow_kafka_spark.ops.commands import backup_checkpoint, restore_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from devstack import oracle

pytestmark = [pytest.mark.integration, pytest.mark.spark35]


def ends(checkpoint, batch: int) -> int:
    """The sum of a batch's Kafka end offsets, read from offsets/<batch> here (not by the product)."""
    source_line = (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2]
    return sum(sum(parts.values()) for parts in json.loads(source_line).values())


def test_no_commit_log_restarts_on_spark_35_from_its_restored_copy_as_from_itself(job35, tmp_path):
    j = job35(sink="append")
    j.produce(300)
    assert j.run(max_offsets_per_trigger=100).ok                  # batches 0-3
    shutil.rmtree(j.checkpoint / "commits")                       # Spark 2.1's layout

    v = j.validate(idempotent_sink=False)
    assert v.severity == "WARN", [(f.code, f.message) for f in v.findings]
    [pending] = [f for f in v.findings if f.code == "PENDING_BATCH_REPLAY"]
    announced = pending.numbers["records_to_replay"]
    last = max(int(p.name) for p in (j.checkpoint / "offsets").iterdir() if p.name.isdigit())
    assert announced == ends(j.checkpoint, last) - ends(j.checkpoint, last - 1) > 0   # batch L, re-run

    twin_ck, twin_out = tmp_path / "twin-ck", tmp_path / "twin-out"
    shutil.copytree(j.checkpoint, twin_ck)
    shutil.copytree(j.output, twin_out)
    m = backup_checkpoint(str(j.checkpoint), str(tmp_path / "backups"), settle_s=0).manifest
    assert m.selection["mode"] == "whole" and "no commit log" in m.selection["why"]
    shutil.rmtree(j.checkpoint)
    restore_checkpoint(str(j.checkpoint), str(tmp_path / "backups"), m.backup_id, {"bootstrap.servers": j.bootstrap},
                       run=RunOptions(backup_settle_s=0))

    j.produce(60)
    assert j.run().ok
    twin = j.worker.run(["--topics", j.topics[0], "--bootstrap-servers", j.bootstrap, "--checkpoint", str(twin_ck),
                         "--output", str(twin_out), "--sink", "append"])
    assert twin.ok, twin.error

    def keys(rows):
        return Counter((r["topic"], int(r["partition"]), int(r["offset"])) for r in rows)

    restored_rows, original_rows = oracle.read_sink(j.output, "append"), oracle.read_sink(twin_out, "append")
    assert keys(restored_rows) == keys(original_rows)
    cmp = oracle.compare(j.produced, restored_rows)
    assert not cmp.missing and cmp.duplicate_count == announced, cmp.summary()
