"""A real HDFS + YARN for the dev stack: Apache Hadoop's minicluster, started like the broker.

Two JVMs, as on a real cluster:

* ``MiniCluster`` (``devstack/jvm/hadoop/MiniCluster.java``): a MiniDFSCluster (one NameNode with
  WebHDFS, one DataNode) and a MiniYARNCluster ResourceManager (CapacityScheduler, one queue). It
  writes the effective ``core-site.xml``/``hdfs-site.xml``/``yarn-site.xml`` into ``conf/``.
* ``NodeManager``: Hadoop's own daemon main class, in its own JVM (an RM and an NM in one JVM
  share Guice's static filter and the RM's REST API then answers 404).

Jars: ``org.apache.hadoop:hadoop-minicluster:3.4.1`` (the Hadoop version inside the pyspark 4.0.0
wheel; why not the shaded ``hadoop-client-minicluster`` is in ``jvm/hadoop/pom.xml``). Every
port is free on the loopback interface; data, logs and configuration live in ``data_dir``.
Ready means: NameNode out of safe mode, RM REST ``STARTED`` and one active NM.

Faults (for the soak, ``recovery=True``): :meth:`HadoopCluster.restart_namenode` and
:meth:`~HadoopCluster.restart_resourcemanager` restart the real NameNode / ResourceManager service
inside the minicluster JVM (through ``conf/control``, see ``MiniCluster.java``; the RM recovers its
applications from a file state store, work-preserving); :meth:`~HadoopCluster.lose_nodemanager`
SIGKILLs the NodeManager JVM and every container it launched (a node gone), and
:meth:`~HadoopCluster.start_nodemanager` starts a replacement on the same address.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

from airflow_kafka_spark.errors import UserError
from devstack import maven, process
from devstack.broker import free_port

# What Spark's launcher opens for Java 17; Hadoop's Guice/cglib needs java.lang.
JAVA_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "sun.nio.ch")]

LOG4J = """\
log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File={log}
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=%d{{ISO8601}} %p %c{{2}}: %m%n
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
"""


def java_home() -> str:
    """``$JAVA_HOME``, else the JDK that the ``java`` on PATH belongs to (containers need it)."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        raise UserError("java not found on PATH: install a Java 17 runtime (e.g. apt-get install openjdk-17-jdk)")
    return str(Path(java).resolve().parents[1])


def _http_json(url: str, timeout: float = 2.0) -> dict:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def _site_xml(properties: dict[str, str]) -> str:
    root = ElementTree.Element("configuration")
    for k, v in properties.items():
        p = ElementTree.SubElement(root, "property")
        ElementTree.SubElement(p, "name").text = k
        ElementTree.SubElement(p, "value").text = v
    return ElementTree.tostring(root, encoding="unicode")


def read_site(path: Path) -> dict[str, str]:
    """The name -> value pairs of a Hadoop ``*-site.xml``."""
    root = ElementTree.parse(path).getroot()
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


@dataclass
class HadoopCluster:
    """Lifecycle of one HDFS + YARN minicluster: ``start()`` returns once all of it answers."""

    data_dir: Path
    nm_memory_mb: int = 4096
    min_allocation_mb: int = 256
    cluster_heap: str = "1g"
    nm_heap: str = "512m"
    recovery: bool = False  # RM restart recovery (file state store) and fast lost-node detection
    process: subprocess.Popen | None = None
    nm_process: subprocess.Popen | None = None
    ready: dict[str, str] = field(default_factory=dict)
    start_seconds: float = 0.0
    _ports: dict[str, int] = field(default_factory=dict)
    _jars: list[Path] = field(default_factory=list)

    @property
    def conf_dir(self) -> Path:
        """The HADOOP_CONF_DIR / YARN_CONF_DIR clients use (written by the cluster once it is up)."""
        return self.data_dir / "conf"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "minicluster.log"

    @property
    def nm_log_file(self) -> Path:
        return self.data_dir / "nodemanager.log"

    @property
    def default_fs(self) -> str:
        """``hdfs://localhost:<port>`` (fs.defaultFS)."""
        return self.ready["fs.defaultFS"]

    @property
    def webhdfs_address(self) -> str:
        """``host:port`` of the NameNode's HTTP server (WebHDFS at ``/webhdfs/v1``)."""
        return self.ready["dfs.namenode.http-address"]

    @property
    def rm_url(self) -> str:
        return f"http://127.0.0.1:{self._ports['rm_web']}"

    @property
    def nm_url(self) -> str:
        return f"http://127.0.0.1:{self._ports['nm_web']}"

    def env(self) -> dict[str, str]:
        """What a Hadoop/Spark client process needs to find this cluster."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}

    def fsspec_options(self) -> dict[str, object]:
        """``fsspec.filesystem("webhdfs", **options)`` for this cluster (no JNI/libhdfs needed)."""
        host, port = self.webhdfs_address.rsplit(":", 1)
        return {"host": host, "port": int(port), "user": os.environ.get("USER", "root")}

    def _cluster_properties(self) -> dict[str, str]:
        p = self._ports
        rm = {"address": p["rm"], "scheduler.address": p["rm_sched"], "resource-tracker.address": p["rm_track"],
              "admin.address": p["rm_admin"], "webapp.address": p["rm_web"]}
        props = {f"yarn.resourcemanager.{k}": f"127.0.0.1:{v}" for k, v in rm.items()}
        props.update({
            "yarn.minicluster.fixed.ports": "true",
            "yarn.resourcemanager.hostname": "127.0.0.1",
            "dfs.permissions.enabled": "false",
            "dfs.replication": "1",
            "dfs.webhdfs.enabled": "true",
            "dfs.namenode.http-address": f"127.0.0.1:{p['nn_http']}",
            "yarn.scheduler.minimum-allocation-mb": str(self.min_allocation_mb),
            "yarn.scheduler.maximum-allocation-mb": str(self.nm_memory_mb),
            "yarn.scheduler.capacity.root.queues": "default",
            "yarn.scheduler.capacity.root.default.capacity": "100",
            "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
            # The default 10 % would let no Spark driver (AM) in: one AM fits in 409 MB of 4 GB.
            "yarn.scheduler.capacity.maximum-am-resource-percent": "0.8",
        })
        if self.recovery:
            props.update({
                "yarn.resourcemanager.recovery.enabled": "true",
                "yarn.resourcemanager.work-preserving-recovery.enabled": "true",
                "yarn.resourcemanager.store.class":
                    "org.apache.hadoop.yarn.server.resourcemanager.recovery.FileSystemRMStateStore",
                "yarn.resourcemanager.fs.state-store.uri": (self.data_dir / "rm-state").resolve().as_uri(),
                # NMs and AMs (which read this yarn-site) ask a restarted RM again every second, not every 30 s
                "yarn.resourcemanager.connect.retry-interval.ms": "1000",
                "yarn.nm.liveness-monitor.expiry-interval-ms": "20000",
            })
        return props

    def _nm_properties(self) -> dict[str, str]:
        p = self._ports
        return {
            "yarn.nodemanager.hostname": "127.0.0.1",
            # fixed: a replacement NM is the same node again, whose lost containers the RM then ends at once
            "yarn.nodemanager.address": f"127.0.0.1:{p['nm']}",
            "yarn.nodemanager.webapp.address": f"127.0.0.1:{p['nm_web']}",
            "yarn.nodemanager.localizer.address": f"127.0.0.1:{p['nm_local']}",
            "yarn.nodemanager.local-dirs": str(self.data_dir / "nm-local"),
            "yarn.nodemanager.log-dirs": str(self.data_dir / "nm-logs"),
            "yarn.nodemanager.resource.memory-mb": str(self.nm_memory_mb),
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            # A nearly full dev disk must not mark the only node unhealthy.
            "yarn.nodemanager.disk-health-checker.enable": "false",
            "yarn.nodemanager.delete.debug-delay-sec": "600",
            "yarn.nodemanager.log.retain-seconds": "3600",
            "yarn.log-aggregation-enable": "false",
        }

    def _java(self, classpath: list[Path | str], main: str, *args: str, heap: str, log: Path,
              stdout: Path, pid_file: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        (self.data_dir / f"{log.stem}.log4j.properties").write_text(LOG4J.format(log=log))
        cmd = ["java", f"-Xmx{heap}", "-Djava.net.preferIPv4Stack=true", *JAVA_OPENS,
               f"-Dlog4j.configuration=file:{self.data_dir / f'{log.stem}.log4j.properties'}",
               "-cp", os.pathsep.join(str(c) for c in classpath), main, *args]
        return process.spawn(cmd, stdout=stdout, pid_file=pid_file, cwd=self.data_dir, env=env)

    def start(self, timeout: float = 180.0) -> HadoopCluster:
        if self.process is not None:
            return self
        t0 = time.monotonic()
        jar_list = maven.fetch("hadoop")
        classes = maven.compile_launcher("hadoop", "MiniCluster.java", jar_list)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "ready").unlink(missing_ok=True)
        names = ("nn", "nn_http", "rm", "rm_sched", "rm_track", "rm_admin", "rm_web", "nm", "nm_web", "nm_local")
        self._ports = {n: free_port() for n in names}
        args = [f"{k}={v}" for k, v in self._cluster_properties().items()]
        self.process = self._java([classes, *jar_list], "MiniCluster", str(self.conf_dir),
                                  str(self._ports["nn"]), str(self._ports["nn_http"]), *args,
                                  heap=self.cluster_heap, log=self.log_file,
                                  stdout=self.data_dir / "minicluster.out",
                                  pid_file=self.data_dir / "minicluster.pid")
        deadline = t0 + timeout
        self._jars = jar_list
        try:
            self._wait_cluster(deadline)
            self._start_nodemanager(jar_list)
            self._wait_yarn(deadline)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def _wait_cluster(self, deadline: float) -> None:
        ready = self.conf_dir / "ready"
        late = process.wait_ready(
            lambda: None if ready.exists() else "no ready file yet", deadline=deadline, interval=0.2,
            exited=[(self.process, lambda rc: (f"the Hadoop minicluster exited with {rc} at start; "
                                               f"see {self.data_dir / 'minicluster.out'} and {self.log_file}"))])
        if late is not None:
            raise UserError(f"the Hadoop minicluster did not come up in time; see {self.log_file}")
        self.ready = dict(line.split("=", 1) for line in ready.read_text().splitlines() if "=" in line)
        jmx = f"http://{self.webhdfs_address}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
        info = _http_json(jmx, timeout=30)  # a loaded machine may take more than a few seconds to answer
        if info["beans"][0].get("Safemode"):
            raise UserError(f"the NameNode is still in safe mode: {info['beans'][0]['Safemode']}")

    def _start_nodemanager(self, jar_list: list[Path]) -> None:
        nm_conf = self.data_dir / "nm-conf"
        nm_conf.mkdir(exist_ok=True)
        for site in ("core-site.xml", "hdfs-site.xml"):
            shutil.copy(self.conf_dir / site, nm_conf / site)
        yarn_site = read_site(self.conf_dir / "yarn-site.xml") | self._nm_properties()
        (nm_conf / "yarn-site.xml").write_text(_site_xml(yarn_site))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "YARN_", "SPARK_", "PYSPARK_"))}
        env["JAVA_HOME"] = java_home()  # containers start "$JAVA_HOME/bin/java"
        self.nm_process = self._java([nm_conf, *jar_list], "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
                                     heap=self.nm_heap, log=self.nm_log_file,
                                     stdout=self.data_dir / "nodemanager.out",
                                     pid_file=self.data_dir / "nodemanager.pid", env=env)

    def _wait_yarn(self, deadline: float) -> None:
        def probe() -> str | None:
            try:
                state = _http_json(f"{self.rm_url}/ws/v1/cluster/info")["clusterInfo"]["state"]
                active = _http_json(f"{self.rm_url}/ws/v1/cluster/metrics")["clusterMetrics"]["activeNodes"]
                if state == "STARTED" and active >= 1:
                    return None
                return f"state {state}, {active} active NodeManagers"
            except (OSError, ValueError, KeyError) as exc:
                return str(exc)

        def exited(what: str):
            return lambda rc: f"the {what} JVM exited with {rc} at start; see {self.data_dir / (what + '.out')}"

        last = process.wait_ready(probe, deadline=deadline, interval=0.3,
                                  exited=[(self.process, exited("minicluster")),
                                          (self.nm_process, exited("nodemanager"))])
        if last is not None:
            raise UserError(f"YARN did not report a started RM with one active NodeManager in time ({last}); "
                            f"see {self.log_file} and {self.nm_log_file}")

    # -- faults ------------------------------------------------------------------------------------
    def _control(self, command: str, down_s: float, timeout: float) -> float:
        """Have the minicluster JVM run ``command`` (see MiniCluster.java); the seconds it took."""
        control = self.conf_dir / "control"
        done = control / f"{command}.done"
        done.unlink(missing_ok=True)
        partial = control / f"{command}.partial"
        partial.write_text(str(int(down_s * 1000)))
        partial.rename(control / f"{command}.cmd")
        t0 = time.monotonic()
        late = process.wait_ready(lambda: None if done.exists() else "running", deadline=t0 + timeout, interval=0.2,
                                  exited=[(self.process, lambda rc: f"the minicluster exited with {rc}")])
        if late is not None:
            raise UserError(f"{command} did not finish in {timeout:.0f}s; see {self.data_dir / 'minicluster.out'}")
        result = done.read_text().strip()
        if result != "ok":
            raise UserError(f"{command} failed: {result[:300]}")
        return time.monotonic() - t0

    def restart_namenode(self, down_s: float = 3.0, timeout: float = 180.0) -> float:
        """Stop the NameNode, leave HDFS unreachable ``down_s`` seconds, start it again (out of safe mode)."""
        return self._control("restart-nn", down_s, timeout)

    def restart_resourcemanager(self, down_s: float = 3.0, timeout: float = 180.0) -> float:
        """Stop the ResourceManager, wait ``down_s`` seconds, start a new one; returns once it has an NM again."""
        took = self._control("restart-rm", down_s, timeout)
        self._wait_yarn(time.monotonic() + timeout)
        return took

    def container_groups(self) -> set[int]:
        """Process groups of the containers this cluster's NodeManager launched (each runs in its own session)."""
        marker = str(self.data_dir / "nm-")
        groups = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if marker in cmd and "nodemanager.NodeManager" not in cmd:
                    groups.add(os.getpgid(int(entry.name)))
            except (OSError, ProcessLookupError):
                continue
        nm = self.nm_process.pid if self.nm_process is not None else None
        return groups - {nm, os.getpgrp()}

    def lose_nodemanager(self) -> int:
        """SIGKILL the NodeManager and all its containers, as when its host dies; the number of containers."""
        groups = self.container_groups()
        if self.nm_process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.nm_process.pid, signal.SIGKILL)
            self.nm_process.wait(30)
            self.nm_process = None
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        return len(groups)

    def start_nodemanager(self, timeout: float = 180.0) -> None:
        """Start a (replacement) NodeManager on the same address; returns once the RM counts it active."""
        self._start_nodemanager(self._jars)
        deadline = time.monotonic() + timeout

        def registered() -> str | None:  # the RM may still count the lost NM (same address) as active
            try:
                return None if _http_json(f"{self.nm_url}/ws/v1/node/info")["nodeInfo"]["nodeHealthy"] else "unhealthy"
            except (OSError, ValueError, KeyError) as exc:
                return str(exc)

        late = process.wait_ready(registered, deadline=deadline, interval=0.3,
                                  exited=[(self.nm_process, lambda rc: f"the new NodeManager exited with {rc}")])
        if late is not None:
            raise UserError(f"the new NodeManager did not answer in {timeout:.0f}s ({late}); see {self.nm_log_file}")
        self._wait_yarn(deadline)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the launcher's shutdown hook stops YARN, then HDFS); SIGKILL the group after ``timeout``."""
        for attr in ("nm_process", "process"):
            process.stop_group(getattr(self, attr), timeout)
            setattr(self, attr, None)

    def __enter__(self) -> HadoopCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    """``python -m devstack.hadoop [DATA_DIR]``: run HDFS + YARN until Ctrl-C."""
    data = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="devstack-hadoop-"))
    cluster = HadoopCluster(data_dir=data)

    def banner() -> str:
        return "\n".join([
            f"HDFS + YARN ready in {cluster.start_seconds:.1f}s (data and logs in {data})",
            f"  fs.defaultFS      {cluster.default_fs}",
            f"  WebHDFS           http://{cluster.webhdfs_address}/webhdfs/v1/",
            f"  ResourceManager   {cluster.rm_url}/cluster",
            f"  NodeManager       {cluster.nm_url}/node",
            f"  export HADOOP_CONF_DIR={cluster.conf_dir} YARN_CONF_DIR={cluster.conf_dir}"])

    return process.serve(cluster, banner, lambda: all(
        p is not None and p.poll() is None for p in (cluster.process, cluster.nm_process)))


if __name__ == "__main__":
    raise SystemExit(main())
