"""With the job stopped: what a full backup, the store's own copy and a restore copy cost (``downtime_bench.py``).

Apart from ``downtime_bench.py`` only to keep each module short; its ``one_size`` calls
:func:`stopped_copies` once per size, before the restarts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from downtime_bench import JOB, PY, Bench, child_rss_mib

FULL_BACKUP = """
import json, sys
from airflow_kafka_spark.ops.commands import backup_checkpoint
r = backup_checkpoint(sys.argv[1], sys.argv[2], job=sys.argv[3], settle_s=0)
print(json.dumps({k: v for k, v in r.to_dict().items() if k != "selection"}))
"""

RESTORE_COPY = """
import sys, time
from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark.ops.backup.catalog import load_backup
from airflow_kafka_spark.ops.backup.store import materialize
m = load_backup(sys.argv[1], sys.argv[2], sys.argv[3])
materialize(m, sys.argv[1], open_location(sys.argv[4]))
"""


def stopped_copies(b: Bench) -> dict:
    """With the job stopped: a full backup into an empty root, ``cp -a``, and a restore copy of that backup."""
    root = b.work / "full-backups"
    shutil.rmtree(root, ignore_errors=True)
    secs, rss, out = child_rss_mib([PY, "-c", FULL_BACKUP, b.ck, str(root), JOB], b.env)
    full = json.loads(out)
    subprocess.run(["sync"], check=True)
    t = time.monotonic()
    subprocess.run(["cp", "-a", b.ck, str(b.work / "cp-copy")], check=True)
    subprocess.run(["sync"], check=True)
    cp_s = time.monotonic() - t
    shutil.rmtree(b.work / "cp-copy")
    backup_id = full["backup"]["backup_id"]
    rsecs, rrss, _ = child_rss_mib([PY, "-c", RESTORE_COPY, str(root), JOB, backup_id, str(b.work / "restored")], b.env)
    subprocess.run(["sync"], check=True)
    shutil.rmtree(b.work / "restored")
    shutil.rmtree(root)
    return {"full_backup_s": round(secs, 3), "full_backup_rss_mib": rss, "full_backup_bytes_read": full["bytes_hashed"],
            "full_backup_files": full["files"], "cp_a_sync_s": round(cp_s, 3),
            "restore_copy_s": round(rsecs, 3), "restore_rss_mib": rrss}
