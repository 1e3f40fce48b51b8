""""Probe" names the compatibility probe alone; the health gate's look and the record lookups were renamed.

The old names stay importable (sensors, users' code and pickled references may name them) and are
the same objects; the trigger's class path, which Airflow stores, is checked in
tests/airflow/test_operators.py (``test_health_trigger_serializes_round_trip_and_reports_a_dead_driver``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_kafka_spark"


def test_the_old_names_still_import_and_are_the_new_objects():
    from airflow_kafka_spark.kafka import client, records
    from airflow_kafka_spark.kafka.view import KafkaView
    from airflow_kafka_spark.runtime import health
    from airflow_kafka_spark.verdict import evaluate

    assert health.HealthProbe is health.HealthCheck and health.probe_health is health.check_health
    assert health.probe_or_wait is health.check_or_wait
    assert records.RecordProbe is records.RecordLookup and issubclass(KafkaView, records.RecordLookup)
    assert evaluate.identity_probes is evaluate.identity_lookups
    assert client.PROBE_GROUP_ID == client.LOOKUP_GROUP_ID == "airflow-kafka-spark-probe"   # what ACLs know


def test_the_health_gate_and_the_record_lookups_define_nothing_named_probe():
    """Elsewhere (agent, reference job, safe restart, runtime/probe*) "probe" is the compatibility probe."""
    modules = ["runtime/health.py", "triggers/health.py", "kafka/records.py", "kafka/view.py", "kafka/listing.py",
               "verdict/evaluate.py", "verdict/validate.py", "ops/restore_plan.py"]
    named = []
    for rel in modules:
        for node in ast.walk(ast.parse((PACKAGE / rel).read_text())):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and "probe" in node.name.lower():
                named.append(f"{rel}:{node.lineno} {node.name}")
    assert named == []
