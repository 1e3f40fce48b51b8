"""Detached local drivers under real spark-submit: graceful stop on a batch boundary (with the safe restart's
pre-copy beside its wait), and the kill fallback."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.ops.backup.precopy import precopy_checkpoint
from airflow_kafka_spark.ops.backup.reuse import PRECOPY_NAME
from airflow_kafka_spark.ops.commands import backup_checkpoint
from airflow_kafka_spark.runtime import drivers as driver
from airflow_kafka_spark.runtime import local_start
from airflow_kafka_spark.runtime.stop_precopy import stop_with_precopy
from devstack import oracle, spark, topics
from devstack.produce import produce
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
JOB = "drv"


def _args(bootstrap, topic, root, *extra):
    return ["--topics", topic, "--bootstrap-servers", bootstrap, "--checkpoint", str(root / "ck"),
            "--output", str(root / "out"), "--trigger", "processing:1s", "--max-offsets-per-trigger", "50", *extra]


def _committed_batches(root) -> int:
    st = read_checkpoint(str(root / "ck"))
    return len(st.commit_batch_ids)


@contextlib.contextmanager
def _running(args: list[str], tmp_path: Path) -> Iterator[Any]:
    """A local driver for the block; killed on the way out if still alive (a failed wait must not
    leave a Spark driver running for the rest of the session)."""
    d = local_start.start_local(spark.submit_command(args), env=spark.spark_env(), log_path=tmp_path / "driver.log")
    try:
        yield d
    finally:
        if driver.local_alive(d):
            driver.kill_local(d)


def test_graceful_stop_ends_on_a_batch_boundary_and_passes_beside_its_wait_spare_the_backup(broker, topic_name,
                                                                                           tmp_path):
    """The stop with the safe restart's pre-copy beside its wait (``runtime.stop_precopy``, as the stop task
    runs it): the graceful stop is unchanged, and the passes beside the wait pay the backup's reads.

    The stop's wait for a batch boundary spans batches on a cluster (17-28 s on YARN, docs/benchmarks.md
    round 9); here the stop callable lets the job commit two more batches, and a pass list after them,
    before it writes the marker. Proven: passes ran beside the wait and read those batches' files, which
    no pass before the stop saw; the backup after the stop reused every file the passes stored and read
    only the rest, so fewer files than after the passes before the stop alone.
    """
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 400, partitions=2)
    marker, ck, root = tmp_path / "STOP", str(tmp_path / "ck"), str(tmp_path / "backups")
    stored: dict[bool, list[set[str]]] = {False: [], True: []}   # precopy.json's paths after each pass
    at_stop: list[int] = []                                      # the last batch committed when the stop began
    with _running(_args(broker.bootstrap_servers, topic_name, tmp_path, "--stop-marker", str(marker)), tmp_path) as d:
        assert driver.local_alive(d)
        # What the safe restart's submit task waits for with a local driver: the new query's first commit.
        assert local_start.wait_first_commit_local(d, ck, None, timeout_s=180) == 0
        assert (tmp_path / "ck" / "commits" / "0").is_file()
        wait_until(lambda: _committed_batches(tmp_path) >= 2, timeout=180, what="two committed batches")

        def stop() -> driver.StopResult:
            at_stop.append(read_checkpoint(ck).latest_committed.batch_id)
            wait_until(lambda: read_checkpoint(ck).latest_committed.batch_id >= at_stop[0] + 2, timeout=180,
                       interval=0.2, what="two batches during the stop's wait")
            seen = len(stored[True])            # one pass in flight may have listed before: wait for one more
            wait_until(lambda: len(stored[True]) >= seen + 2, timeout=120, interval=0.2, what="a pass after them")
            return driver.stop(ck, str(marker), is_alive=lambda: driver.local_alive(d),
                               kill=lambda: driver.kill_local(d), timeout_s=120, poll_s=0.5)

        # beside=True: passes beside the wait as on HDFS or an object store (for this local disk the product
        # asks beside_rule, which says no: the backup after the stop reads the wait's few files in milliseconds)
        done = stop_with_precopy(stop, job=JOB, log=logging.getLogger("test"), beside=True,
                                 still_running=lambda: driver.local_alive(d),
                                 one_pass=lambda abandon: precopy_checkpoint(ck, root, job=JOB, abandon=abandon),
                                 on_pass=lambda r, during: stored[during].append(precopied_paths(root)))
    res = done.stop
    assert res.outcome == "STOPPED" and res.graceful and not res.killed, res
    assert res.last_planned == res.last_committed
    assert not driver.local_alive(d)
    assert not marker.exists(), "the marker is removed so the next start does not stop at once"
    t = time.monotonic()     # an exited driver commits nothing more: the wait ends at once, with no batch
    assert local_start.wait_first_commit_local(d, ck, res.last_committed, timeout_s=60) is None
    assert time.monotonic() - t < 5

    pre = done.precopy
    assert pre.error is None and pre.error_during is None and len(pre.during) >= 2
    assert pre.to_dict()["passes_during_stop"] == [p.to_dict() for p in pre.during]
    beside = stored[True][-1] - stored[False][-1]               # stored beside the wait only
    at = at_stop[0]                  # offsets/<at + 1> may have been planned while a pass before the stop ran
    assert {f"commits/{at + 1}", f"offsets/{at + 2}", f"commits/{at + 2}"} <= beside
    assert sum(p.files_read for p in pre.during) >= len(beside)
    after = backup_checkpoint(ck, root, job=JOB, settle_s=0)
    backed = {f.path for f in after.manifest.files}
    assert after.files_from_previous == after.files_from_precopy == len(backed & stored[True][-1])   # no backup before
    assert after.files_hashed == len(backed - stored[True][-1])  # only what no pass stored was read
    assert backed >= beside and after.files_hashed < len(backed - stored[False][-1])   # fewer than without
    print(f"\n[driver] {len(pre.before)} pass(es) before the stop, {len(pre.during)} beside its wait "
          f"({len(beside)} files stored there); the backup after read {after.files_hashed} of {after.files} files")


def precopied_paths(root: str) -> set[str]:
    """The paths of the pre-copy's stat cache (``<job>/precopy.json``) as it stands now."""
    return {f["path"] for f in json.loads((Path(root) / JOB / PRECOPY_NAME).read_text())["files"]}


def test_kill_fallback_reports_the_batch_that_will_replay(broker, topic_name, tmp_path):
    """A job that ignores the marker and sits inside a batch is killed and the cut batch is named."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produce(broker.bootstrap_servers, topic_name, 400, partitions=2)
    with _running(_args(broker.bootstrap_servers, topic_name, tmp_path, "--sleep-in-batch", "60"), tmp_path) as d:
        wait_until(lambda: (read_checkpoint(str(tmp_path / "ck")).latest_planned is not None), timeout=180,
                   what="the first planned batch")
        res = driver.stop(str(tmp_path / "ck"), str(tmp_path / "STOP"), is_alive=lambda: driver.local_alive(d),
                          kill=lambda: driver.kill_local(d, grace_s=5), timeout_s=3, poll_s=0.5)
    assert res.killed and not res.graceful
    assert res.outcome == "STOPPED_MID_BATCH", res
    assert res.replay_batch == res.last_planned and res.last_committed != res.last_planned
    assert not driver.local_alive(d)


def test_stop_when_nothing_runs(tmp_path):
    res = driver.stop(str(tmp_path / "ck"), str(tmp_path / "STOP"), is_alive=lambda: False,
                      kill=lambda: None, timeout_s=1)
    assert res.outcome == "NOT_RUNNING" and not (tmp_path / "STOP").exists()


def test_a_job_that_is_always_behind_still_stops_on_a_boundary(broker, topic_name, tmp_path):
    """No gap between batches: after --stop-grace the batch is cut and replayed once, exactly."""
    topics.create_topic(broker.bootstrap_servers, topic_name, 2)
    produced = produce(broker.bootstrap_servers, topic_name, 2000, partitions=2)
    marker = tmp_path / "STOP"
    args = _args(broker.bootstrap_servers, topic_name, tmp_path, "--stop-marker", str(marker),
                 "--sleep-in-batch", "1.5", "--stop-grace", "2")
    args[args.index("processing:1s")] = "processing:100ms"
    with _running(args, tmp_path) as d:
        wait_until(lambda: _committed_batches(tmp_path) >= 2, timeout=180, what="two committed batches")
        res = driver.stop(str(tmp_path / "ck"), str(marker), is_alive=lambda: driver.local_alive(d),
                          kill=lambda: driver.kill_local(d), timeout_s=120, poll_s=0.5)
    assert res.outcome == "STOPPED" and res.graceful, (res, (tmp_path / "driver.log").read_text()[-2000:])
    rows = oracle.read_sink(tmp_path / "out", "idempotent")
    cmp = oracle.compare(produced, rows)
    assert not cmp.duplicated and not cmp.unexpected
    ends = read_checkpoint(str(tmp_path / "ck")).latest_committed.kafka_offsets
    assert len(rows) == sum(ends.values()), "the sink holds exactly what the committed offsets cover"
