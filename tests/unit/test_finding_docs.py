"""Every finding code has its section in docs/findings.md, which the validate tasks' links point at."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_kafka_spark.verdict.findings import CODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "findings.md"


def test_every_code_has_an_anchor_and_every_anchor_a_code():
    text = DOC.read_text()
    anchors = re.findall(r'<a id="([a-z0-9_]+)"></a>\s+### ([A-Z0-9_]+)\n', text)
    assert {a for a, _ in anchors} == {c.lower() for c in CODES}
    assert all(a == h.lower() for a, h in anchors)            # the explicit id equals the heading's own anchor
    for code, (severity, _) in CODES.items():
        section = text.split(f"### {code}\n", 1)[1].split("<a id=", 1)[0]
        assert f"**{severity}**" in section, code
