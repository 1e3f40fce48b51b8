"""S12 in the format matrix: a stateful query changed on its checkpoint, on Spark 3.5.1 and on 4.x.

v1 counts by key (``groupBy(key).count()``, state operator 0 = an aggregation keyed by ``key``); v2
deduplicates by ``(topic, partition, offset)`` (state operator 0 = a deduplication with another key
schema). The static validator cannot see the new code (the compatibility probe, docs/probe.md, asks
Spark for that): it reads a healthy stateful checkpoint. Each Spark line refuses v2 its own way:
3.5.1 plans the batch and fails inside it, on the schema file ``state/0/<p>/_metadata/schema``
(``StateSchemaNotCompatible``) or, seen in a fresh driver, reading the old state rows with the new
key schema (``InvalidUnsafeRowException``); 4.2.0 compares the plan with the operator metadata it keeps in
``state/0/_metadata/metadata`` (3.5 writes none) and fails before reading
(``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``). The refused run writes nothing.
"""

from __future__ import annotations

import json

import pytest

from devstack import spark_runtimes
from tests.support.scenario import Job, short

pytestmark = [pytest.mark.integration, pytest.mark.spark35]  # the 4.x side shares the 3.5 fixtures

ERRORS = {  # what each line says (any one of them)
    "3": ("StateSchemaNotCompatible", "InvalidUnsafeRowException"),
    "4": ("STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "SCHEMA_NOT_COMPATIBLE"),
}


@pytest.mark.parametrize("line", ["3.5", "default"])
def test_s12_stateful_operator_changed(job35, line):
    j = job35()
    run = j.run if line == "3.5" else lambda **kw: Job.run(j, **kw)
    version = spark_runtimes.runtime(line).version
    j.produce(300)
    assert run(stateful="count_by_key").ok
    rows_before = len(j.sink_rows())

    v = j.validate(target_spark_version=version)
    assert v.severity == "PASS", v.to_dict()   # the code change is invisible to a checkpoint reader
    j.produce(90)
    res = run(stateful="dedup")
    assert not res.ok, "Spark accepted a different stateful operator on the old state"
    said = [m for m in ERRORS[version[0]] if m in res.error]
    assert said, res.error[:2000]
    assert len(j.sink_rows()) == rows_before, "the refused run wrote nothing"
    print("SCENARIO " + json.dumps({"scenario": f"S12 count_by_key -> dropDuplicates on Spark {version}",
                                    "verdict": v.severity, "spark": f"fails: {said[0]}: " + short(res.error, 220)}))
