# ruff: noqa: I001  (module paths of commit 2b586a6, some no longer exist)
"""Write the on-disk compat fixtures with the code at commit 2b586a6 (run from the repo root).

It imports the module paths of that commit on purpose: run it there (see ../README.md), never on newer code.
"""
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, ".")
from airflow_kafka_spark._util import fs as storage
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import backup_checkpoint
from airflow_kafka_spark.ops.options import RunOptions
from airflow_kafka_spark.ops.journal import Journal
from airflow_kafka_spark.ops.plan import PartitionMove, Plan
from airflow_kafka_spark.ops.reset import ResetRequest, parse_to_offsets
from airflow_kafka_spark.verdict.alignment import WARN
from tests.support.checkpoint_factory import commit_file, offsets_file, write_checkpoint

out = Path(sys.argv[1])
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
KEY = b"compat-fixture-seal-key-0123456789"
ck = write_checkpoint(out / "ck", batches=3, state=True)
rec = LifecycleRecord.create("orders", ck.location)
rec.save()
rec = LifecycleRecord.load(ck.location)
rec.acquire_lease("airflow-run-1", 600)
rec = LifecycleRecord.load(ck.location)
rec.release_lease("airflow-run-1")
rec = LifecycleRecord.load(ck.location)
rec.add_event("deployed", actor="compat", run_id="run-1")
rec.set_next_starting_offsets('{"orders":{"0":30,"1":30}}', actor="compat")
rec.save()
root = out / "backups"
b1 = backup_checkpoint(ck.location, str(root), job="orders", reason="compat first", settle_s=0.0,
                       now_ms=1_760_000_000_000)
for b in (3, 4):
    ends = {"orders": {"0": (b + 1) * 10, "1": (b + 1) * 10}}
    ck.write(f"offsets/{b}", offsets_file([json.dumps(ends, separators=(",", ":"))], batch_timestamp_ms=b))
    ck.write(f"commits/{b}", commit_file())
    for p in range(2):
        ck.write(f"state/0/{p}/{b + 1}.delta", f"delta {b}".encode())
b2 = backup_checkpoint(ck.location, str(root), job="orders", reason="compat second (sealed)", settle_s=0.0,
                       now_ms=1_760_000_060_000, run=RunOptions(seal_key=KEY))
(out / "seal.key").write_bytes(KEY)
REQUEST = ResetRequest(mode="to-offsets", to_offsets=parse_to_offsets('{"orders":{"0":30,"1":30}}'))
plan = Plan(kind="reset", subject=ck.location)
plan.moves.append(PartitionMove("orders", 0, old=50, new=30, log_start=0, log_end=60, source="to-offsets"))
plan.moves.append(PartitionMove("orders", 1, old=50, new=30, log_start=0, log_end=60, source="to-offsets"))
plan.add("REPLAY", WARN, "40 records are read again", "make the sink idempotent")
payload = {"job": "orders", "actor": "compat", "request": REQUEST.to_dict(),
           "backup_root": str(root), "backup_id": b2.backup_id, "aside": ck.location + ".reset-x",
           "sink_output": None, "sink_aside": None, "starting_offsets": '{"orders":{"0":30,"1":30}}',
           "old_query_id": ck.query_id, "skipped": 0, "replayed": 40, "pending_replay": 0, "plan": plan.to_dict()}
j = Journal.begin(storage.open_location(ck.location), "reset", "20260101T000000Z-abcdef", payload)
j.mark("record")
print(json.dumps({"b1": b1.backup_id, "b2": b2.backup_id}))
