"""The gate's start check (airflow_kafka_spark/runtime/start_check.py), on checkpoint states."""

from __future__ import annotations

from dataclasses import replace

from airflow_kafka_spark.runtime.start_check import first_batch_mismatch
from tests.support.verdict_states import batch, checkpoint

PLAN = '{"a":{"0":40,"1":40}}'


def first_batch(end, initial):
    """A new query that planned (and committed) batch 0 ending at ``end``, started at ``initial``."""
    cp = checkpoint(end, batch_id=0, initial=initial)
    return replace(cp, history=[batch(0, end)])


def test_no_plan_or_no_batch_yet_is_not_judged():
    assert first_batch_mismatch(first_batch({("a", 0): 50, ("a", 1): 50}, {("a", 0): 0, ("a", 1): 0}), None) is None
    assert first_batch_mismatch(checkpoint(initial={("a", 0): 0, ("a", 1): 0}), PLAN) is None


def test_started_at_the_plan_passes():
    assert first_batch_mismatch(first_batch({("a", 0): 50, ("a", 1): 40}, {("a", 0): 40, ("a", 1): 40}), PLAN) is None


def test_the_applications_earliest_won():
    why = first_batch_mismatch(first_batch({("a", 0): 50, ("a", 1): 50}, {("a", 0): 0, ("a", 1): 0}), PLAN)
    assert why is not None and "\n" not in why
    assert why.startswith('the new query\'s first batch started at {"a":{"0":0,"1":0}}, the reset planned '
                          '{"a":{"0":40,"1":40}}: a-0 0 instead of 40; a-1 0 instead of 40')


def test_no_start_file_and_a_first_batch_ending_before_the_start():
    none = first_batch_mismatch(first_batch({("a", 0): 50, ("a", 1): 50}, None), PLAN)
    assert "no sources/<id>/0" in none
    short = first_batch({("a", 0): 30, ("a", 1): 50}, {("a", 0): 40, ("a", 1): 40})
    assert "a-0 batch 0 ended at 30, before the planned start 40" in first_batch_mismatch(short, PLAN)

