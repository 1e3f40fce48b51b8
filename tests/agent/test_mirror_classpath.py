"""The agent with and without Kafka's Java client on the driver's classpath (no Spark start, a plain JVM).

kafka-clients is ``provided``: it comes with Spark's Kafka connector. Spark's own jars (pyspark's
``jars/``) do not hold it, so a JVM on them alone is a driver without the connector. There, the
agent's listener must build as before, with or without ``spark.aks.agent.mirror.group``; a mirror
that tries to commit says once that kafka-clients is missing and counts an error, and nothing throws.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_kafka_spark import agent
from devstack import agent_build
from devstack.spark_runtimes import runtime

pytestmark = [pytest.mark.integration, pytest.mark.userjobs]

PROGRAM = r"""
import java.lang.reflect.Method;
import java.util.Map;
import java.util.TreeMap;

public class MirrorClasspath {
  public static void main(String[] args) throws Exception {
    ClassLoader cl = MirrorClasspath.class.getClassLoader();
    try {
      Class.forName("org.apache.kafka.clients.admin.Admin", false, cl);
      System.out.println("kafka-clients present");
      System.exit(3);
    } catch (ClassNotFoundException expected) {
      System.out.println("kafka-clients absent");
    }
    Class<?> listener = Class.forName("aks.agent.AgentListener", true, cl);
    org.apache.spark.SparkConf plain = new org.apache.spark.SparkConf(false);
    listener.getConstructor(org.apache.spark.SparkConf.class).newInstance(plain);
    System.out.println("listener without mirror: built");
    org.apache.spark.SparkConf conf = new org.apache.spark.SparkConf(false)
        .set("spark.aks.agent.mirror.group", "aks-mirror-x")
        .set("spark.aks.agent.mirror.kafka.bootstrap.servers", "127.0.0.1:9");
    listener.getConstructor(org.apache.spark.SparkConf.class).newInstance(conf);
    System.out.println("listener with mirror: built");
    Class<?> mirror = Class.forName("aks.agent.ShadowGroupMirror", true, cl);
    Method forConf = mirror.getDeclaredMethod("forConf", org.apache.spark.SparkConf.class);
    forConf.setAccessible(true);
    Object m = forConf.invoke(null, conf);
    Method commit = mirror.getDeclaredMethod("commit", Map.class, long.class);
    commit.setAccessible(true);
    Map<String, Map<Integer, Long>> offsets = new TreeMap<>();
    offsets.put("t", new TreeMap<>(Map.of(0, 5L)));
    commit.invoke(m, offsets, 0L);   // the admin is loaded here, by name
    commit.invoke(m, offsets, 1L);
    Method section = mirror.getDeclaredMethod("section");
    section.setAccessible(true);
    System.out.println("section " + section.invoke(null));
  }
}
"""


def test_without_kafka_clients_the_listener_builds_and_the_mirror_only_logs(tmp_path):
    agent_build.build_all()
    rt = runtime("default")
    jars = Path(rt.spark_submit()).resolve().parents[1] / "jars"
    if not jars.is_dir():   # pyspark's wheel: <site-packages>/pyspark/jars
        import pyspark

        jars = Path(pyspark.__file__).parent / "jars"
    assert not list(jars.glob("kafka-clients*.jar")), "Spark's own jars hold kafka-clients: no contrast here"
    src = tmp_path / "MirrorClasspath.java"
    src.write_text(PROGRAM)
    cp = f"{jars}/*:{agent.jar_for(rt.version)}"
    proc = subprocess.run(["java", "-cp", cp, str(src)], capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "kafka-clients absent" in out
    assert "listener without mirror: built" in out and "listener with mirror: built" in out
    warned = [ln for ln in out.splitlines() if ln.startswith("[aks-agent] WARN mirror:")]
    assert len(warned) == 1 and "kafka-clients) is not on the driver's classpath" in warned[0], out[-3000:]
    # two commits handed over, one attempt: a missing client is not looked for again at every batch
    assert "commits=0, errors=1, refused=0" in out, out[-3000:]
