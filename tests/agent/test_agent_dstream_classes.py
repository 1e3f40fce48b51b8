"""The agent's DStream side loads only where spark-streaming is (issue 25 item 4).

spark-streaming is ``provided`` in the agent's POM and absent from some runtimes; every application
loads ``AgentPlugin``, ``Stopper``, ``Report`` and the listener, and these reach the DStream side only
through ``DStreams`` (plain Java: a ``Class.forName`` check first). The JVM resolves a class reference
only from a class whose constant pool names it, so the claim is checkable in the built jars: no class
but ``DStreamStopper`` and ``DStreamBatches`` (and its listener) names an ``org/apache/spark/streaming``
class, and ``DStreams`` names neither of those two except behind its check.
"""

from __future__ import annotations

import zipfile

import pytest

from airflow_kafka_spark import agent
from devstack import agent_build

pytestmark = [pytest.mark.userjobs]

STREAMING = b"org/apache/spark/streaming/"
ALLOWED = {"aks/agent/DStreamStopper.class", "aks/agent/DStreamBatches.class", "aks/agent/DStreamBatches$1.class"}


@pytest.fixture(scope="module", autouse=True)
def _agent_jars() -> None:
    agent_build.build_all()   # the jars of this tree (bin/setup builds them too; a stale one would mislead)


@pytest.mark.parametrize("version", ["3.5.1", "4.2.0"])
def test_only_the_dstream_classes_name_spark_streaming(version):
    with zipfile.ZipFile(agent.jar_for(version)) as jar:
        classes = {n: jar.read(n) for n in jar.namelist() if n.endswith(".class")}
    naming = {n for n, body in classes.items() if STREAMING in body}
    assert naming == ALLOWED, naming
    # who may reach them: only the bridge (after its availability check) and the two among themselves
    reaching = {n for n, body in classes.items() if b"aks/agent/DStreamStopper" in body or
                b"aks/agent/DStreamBatches" in body}
    assert reaching == {*ALLOWED, "aks/agent/DStreams.class", "aks/agent/DStreamEvents.class"}, reaching
    # the Spark-bus listener and the plugin's entry points name no streaming class themselves
    for name in ("AgentPlugin", "Stopper", "Report", "DStreams", "DStreamEvents", "DStreamState", "AgentListener"):
        assert STREAMING not in classes[f"aks/agent/{name}.class"], name
