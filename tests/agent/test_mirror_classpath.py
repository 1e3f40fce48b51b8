"""The agent with and without Kafka's Java client on the driver's classpath (no Spark start, a plain JVM).

kafka-clients is ``provided``: it comes with Spark's Kafka connector. Spark's own jars (pyspark's
``jars/``) do not hold it, so a JVM on them alone is a driver without the connector. There, the
agent's listener must build as before, with or without ``spark.aks.agent.mirror.group``; a mirror
that tries to commit says once that kafka-clients is missing and counts an error, and nothing throws.
The same JVM shows that the admin client's settings may come from a properties file (secrets stay off
spark-submit's command line).
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
    if (args.length == 2 && args[0].equals("props")) {   // the settings from a properties file only
      org.apache.spark.SparkConf conf = new org.apache.spark.SparkConf(false)
          .set("spark.aks.agent.mirror.group", "aks-mirror-x")
          .set("spark.aks.agent.mirror.kafka.client.dns.lookup", "use_all_dns_ips")
          .set("spark.aks.agent.mirror.propertiesFile", args[1]);
      Class<?> mirror = Class.forName("aks.agent.ShadowGroupMirror", true, cl);
      Method forConf = mirror.getDeclaredMethod("forConf", org.apache.spark.SparkConf.class);
      forConf.setAccessible(true);
      Object m = forConf.invoke(null, conf);
      java.lang.reflect.Field f = mirror.getDeclaredField("clientConf");
      f.setAccessible(true);
      System.out.println("client keys " + new java.util.TreeSet<>(((Map<?, ?>) f.get(m)).keySet()));
      return;
    }
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


def spark_jars() -> Path:
    """Spark 4.2's own jars (the pyspark wheel's), without the Kafka connector."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def test_without_kafka_clients_the_listener_builds_and_the_mirror_only_logs(tmp_path):
    agent_build.build_all()
    rt = runtime("default")
    jars = spark_jars()
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


def test_the_admin_settings_can_come_from_a_properties_file(tmp_path):
    """Secrets stay off the command line: the job names a file (its own, e.g. shipped with ``files``), the agent
    adds its keys to the ones from ``--conf``; the agent's log names the bootstrap servers, never the file's values."""
    agent_build.build_all()
    rt = runtime("default")
    jars = spark_jars()
    src = tmp_path / "MirrorClasspath.java"
    src.write_text(PROGRAM)
    props = tmp_path / "kafka.properties"
    props.write_text("bootstrap.servers=b1:9093\nsecurity.protocol=SASL_SSL\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'username="u" password="s3cret-in-file";\n')
    props.chmod(0o600)
    cp = f"{jars}/*:{agent.jar_for(rt.version)}"
    proc = subprocess.run(["java", "-cp", cp, str(src), "props", str(props)], capture_output=True, text=True,
                          timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "client keys [bootstrap.servers, client.dns.lookup, sasl.jaas.config, security.protocol]" in out, out
    assert "(b1:9093, every query)" in out and "s3cret-in-file" not in out

