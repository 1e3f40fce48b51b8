"""The pure parts of the DStream safe restart (runtime/dstream.py, verdict/group.py): the exact replay from
Spark's KafkaRDD log lines, the job contract's flags, the health gate's rule. The real job runs in
tests/dstream/ (test_safe_path.py, test_safe_restart_dag.py)."""

from __future__ import annotations

import pytest

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from airflow_kafka_spark.registry.model import JobKind, JobSpec, Sink
from airflow_kafka_spark.runtime.dstream import GroupSample, job_arguments, judge_group_health, processed_end_from_log
from airflow_kafka_spark.runtime.submit import job_arguments as submit_arguments
from airflow_kafka_spark.verdict.group import evaluate_group
from airflow_kafka_spark.verdict.options import DeployOptions
from tests.support.verdict_states import broker, tps

# Lines as Spark 3.5.1's KafkaRDD logs them (tests/dstream driver logs), with a topic name holding a comma.
LOG = """\
26/11/24 01:58:45 INFO KafkaRDD: Beginning offset 50 is the same as ending offset skipping t-b 0
26/11/24 01:58:45 INFO KafkaRDD: Computing topic t, x, partition 0 offsets 150 -> 2150
26/11/24 01:58:45 INFO KafkaRDD: Computing topic t, x, partition 1 offsets 150 -> 2150
DSTREAM_JOB_STATUS {"event":"batch"}
26/11/24 01:58:47 INFO KafkaRDD: Computing topic t, x, partition 0 offsets 2150 -> 2160
26/11/24 01:58:47 INFO KafkaRDD: Beginning offset 2150 is the same as ending offset skipping t, x 1
"""


def test_processed_end_is_the_last_range_end_per_partition():
    assert processed_end_from_log(LOG) == {
        TopicPartition("t-b", 0): 50,
        TopicPartition("t, x", 0): 2160,
        TopicPartition("t, x", 1): 2150,
    }
    assert processed_end_from_log("no Spark lines here") == {}


def test_the_trail_is_exact_with_the_processed_end_and_at_most_without():
    """Committed 40/90, processed to 70/90, log end 100/95: 30 re-read, not the 65 behind the group."""
    group, state = tps({("t", 0): 40, ("t", 1): 90}), broker({("t", 0): (0, 100), ("t", 1): (0, 95)})
    options = DeployOptions(starting_offsets="earliest")
    bound = evaluate_group(group, state, options, group_id="g")
    exact = evaluate_group(group, state, options, group_id="g", processed_end=tps({("t", 0): 70, ("t", 1): 90}))
    [b] = bound.by_code("GROUP_COMMIT_TRAILS_ONE_BATCH")
    [e] = exact.by_code("GROUP_COMMIT_TRAILS_ONE_BATCH")
    assert b.numbers["records_to_replay"] == 65 and "at most 65 records" in b.message
    assert e.numbers["records_to_replay"] == 30 and exact.summary["records_to_replay"] == 30
    assert "exactly these are read again" in e.message and "the other 35 of the 65" in e.message
    partial = evaluate_group(group, state, options, group_id="g", processed_end=tps({("t", 0): 70}))
    assert partial.summary["records_to_replay"] == 65  # a partition without a known end: only the bound


def test_retention_past_the_group_says_a_dstream_shutdown_can_skip_more():
    v = evaluate_group(tps({("t", 0): 10}), broker({("t", 0): (70, 100)}), DeployOptions(), group_id="g")
    [below] = v.by_code("OFFSET_BELOW_LOG_START")
    assert below.numbers["records_lost"] == 60 and "skipping more than these" in below.message


def spec(**kw) -> JobSpec:
    base = dict(name="clicks", application="/apps/job.jar", topics=("a", "b"), checkpoint="/d/ck/clicks",
                backup_root="/d/backups", stop_marker="/d/stop", output="/d/sinks/clicks", sink=Sink.APPEND,
                kind=JobKind.DSTREAM, group="g1", dstream_checkpoint="/d/dck/clicks",
                application_args=("--batch-ms", "2000"))
    return JobSpec(**{**base, **kw})


def test_the_submit_passes_the_dstream_contract():
    args = submit_arguments(spec(), bootstrap_servers="k:9092")
    assert args == job_arguments(spec(), bootstrap_servers="k:9092")
    assert args == ["--bootstrap", "k:9092", "--topic", "a,b", "--group", "g1", "--sink", "/d/sinks/clicks",
                    "--stop-marker", "/d/stop", "--auto-offset-reset", "earliest", "--checkpoint", "/d/dck/clicks",
                    "--batch-ms", "2000"]
    with pytest.raises(UserError, match="security options"):
        submit_arguments(spec(), bootstrap_servers="k:9092", kafka_options=["kafka.sasl.mechanism=PLAIN"])
    with pytest.raises(UserError, match="needs output"):
        submit_arguments(spec(output=None), bootstrap_servers="k:9092")


def s(at, committed, lag):
    return GroupSample(at, committed, lag)


@pytest.mark.parametrize(("samples", "alive", "alive_for", "state"), [
    ([s(0, 0, 50), s(2, 40, 30), s(4, 80, 20)], True, 10, "healthy"),    # two advances, lag falling
    ([s(0, 0, 50), s(2, 40, 30)], True, 10, "waiting"),                   # one advance so far
    ([s(0, 10, 50), s(2, 20, 60), s(4, 30, 70)], True, 10, "waiting"),    # advancing but the lag grows
    ([s(0, 0, 0), s(2, 0, 0)], True, 200, "healthy"),                     # idle: nothing to read
    ([s(0, 0, 0), s(2, 0, 0)], True, 30, "waiting"),                      # not idle long enough yet
    ([s(0, 0, 50)], False, 10, "failed"),                                 # the driver is gone
])
def test_health_gate_on_the_group(samples, alive, alive_for, state):
    got, reason = judge_group_health(samples, min_batches=2, alive=alive, alive_for_s=alive_for, idle_pass_s=120)
    assert got == state, reason
