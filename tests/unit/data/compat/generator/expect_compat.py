# ruff: noqa: I001  (module paths of commit 2b586a6, some no longer exist)
"""Record what the code at 2b586a6 reads from the compat fixtures (run from the repo root).

It imports the module paths of that commit on purpose: run it there (see ../README.md), never on newer code.
"""
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, ".")
from airflow_kafka_spark._util import fs as storage
from airflow_kafka_spark.lifecycle.record import LifecycleRecord
from airflow_kafka_spark.ops.backup import list_backups, materialize, verify_backup
from airflow_kafka_spark.ops.journal import Journal, interrupted_finding

src = Path(sys.argv[1])
work = Path(tempfile.mkdtemp()) / "disk"
shutil.copytree(src, work)
key = (work / "seal.key").read_bytes()
root = str(work / "backups")
cat = list_backups(root, "orders", seal_key=None)
exp = {"catalog_unkeyed": cat.to_dict()}
exp["catalog_keyed_ids"] = [m.backup_id for m in list_backups(root, "orders", seal_key=key).backups]
exp["catalog_keyed_invalid"] = [n for n, _ in list_backups(root, "orders", seal_key=key).invalid]
trees = {}
for m in cat.backups:
    verify_backup(root, "orders", m.backup_id, deep=True)
    dest = work / f"restored-{m.backup_id}"
    materialize(m, root, storage.open_location(str(dest)))
    trees[m.backup_id] = {str(p.relative_to(dest)): hashlib.sha256(p.read_bytes()).hexdigest()
                          for p in sorted(dest.rglob("*")) if p.is_file()}
exp["materialized"] = trees
ck = storage.open_location(str(work / "ck"))
rec = LifecycleRecord.load(str(work / "ck"))
exp["record"] = rec.to_dict()
j = Journal.load(ck)
exp["journal"] = {"op": j.op, "operation_id": j.operation_id, "payload": j.payload, "done": j.doc["done"],
                  "guard": j.doc["guard"]}
f = interrupted_finding(str(work / "ck"))
exp["interrupted_finding"] = {"code": f.code, "severity": str(f.severity)}
s = json.dumps(exp, indent=1, sort_keys=True, default=str)
print(s.replace(str(work), "<DISK>"))
