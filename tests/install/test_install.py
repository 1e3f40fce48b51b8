"""The wheel, installed as a user installs it: into a fresh venv with the OLDEST supported Airflow 3.

The venv holds exactly constraints/install-test-airflow-<version>.txt: Airflow 3.2.0 with every
direct dependency at the lower bound pyproject declares (the test checks that they are equal, so each
lower bound is installed and run here), the two providers, and no PySpark or matplotlib (extras).
In it: ``airflow providers list`` shows the provider, the repository's two DAGs parse, ``aks --help``
works, the provider hooks' private members work (tests/support/provider_contract.py), an audit
report is written without the chart, and a ``ValidateCheckpointOperator`` task run with
``dag.test()`` judges a checkpoint against the real broker.

Cost: the venv (~700 MB) is cached per hash of the constraints file + Python version in
``$AKS_INSTALL_TEST_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/airflow-kafka-spark/install-test``:
outside the clone, so CI's fresh clone on the same machine reuses it, like pip's own cache. It is
rebuilt only when the constraints change (measured cold, from a warm pip cache: venv 40 s and the
test 64 s on an idle machine; 11 min when byte-compiling under a load of 15, hence ``--no-compile``).
Each run then reinstalls only the freshly built wheel, and ``pip check`` holds the wheel's ranges
against the installed oldest versions (cached: 29 s idle, ~90 s under load). Timings are printed (``-s``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml

from devstack import topics
from devstack.produce import produce
from tests.support.checkpoint_factory import write_checkpoint

pytestmark = [pytest.mark.install, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = sorted((REPO / "constraints").glob("install-test-airflow-*.txt"))[-1]
CACHE = Path(os.environ.get("AKS_INSTALL_TEST_CACHE") or Path(
    os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "airflow-kafka-spark" / "install-test")
CONTRACT = REPO / "tests" / "support" / "provider_contract.py"
IN_VENV = Path(__file__).with_name("in_venv.py")
# The direct dependencies whose lower bound the venv must hold (pyproject name -> metadata name).
BOUNDED = ("apache-airflow", "apache-airflow-providers-apache-spark", "apache-airflow-providers-apache-kafka",
           "confluent-kafka", "fsspec", "pyyaml")


def _run(argv: list[str | Path], *, timeout: float, env: dict[str, str] | None = None,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} -> {proc.returncode}\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-3000:]}"
    return proc


def lower_bounds() -> dict[str, str]:
    """pyproject's ``>=`` bound of each dependency in :data:`BOUNDED`."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    bounds = {}
    for dep in deps:
        match = re.match(r"^([A-Za-z0-9_.-]+)\s*[^;]*?>=\s*([0-9][^,;\s]*)", dep)
        if match:
            bounds[match.group(1).lower()] = match.group(2)
    return {name: bounds[name] for name in BOUNDED}


def build_wheel(tmp: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the sources (the build must not write into the shared tree)."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "airflow_kafka_spark", src / "airflow_kafka_spark",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", src, "-w", tmp / "dist"], timeout=300)
    (wheel,) = (tmp / "dist").glob("airflow_kafka_spark-*.whl")
    return wheel


def install_venv(wheel: Path) -> tuple[Path, str]:
    """The cached venv for the constraints, with ``wheel`` (re)installed; and "cold" or "cached"."""
    digest = hashlib.sha256(CONSTRAINTS.read_bytes() + sys.version.encode()).hexdigest()[:16]
    home = CACHE / digest
    venv, ready = home / "venv", home / "ready"
    pip = [venv / "bin" / "python", "-m", "pip"]
    if ready.is_file():
        how = "cached"
        # Only the wheel is replaced; `pip check` below then holds its ranges against the oldest versions.
        _run([*pip, "install", "-q", "--no-index", "--no-deps", "--force-reinstall", wheel], timeout=300)
    else:
        how = "cold"
        for old in CACHE.glob("*/venv"):   # venvs of older constraints (~700 MB each): only our own
            if re.fullmatch(r"[0-9a-f]{16}", old.parent.name):
                shutil.rmtree(old.parent)
        _run([sys.executable, "-m", "venv", venv], timeout=300)
        # --no-compile: byte-compiling ~150 packages is most of the CPU; imports compile what they use.
        _run([*pip, "install", "-q", "--no-compile", "-c", CONSTRAINTS, wheel], timeout=1800)
        ready.write_text(CONSTRAINTS.name + "\n")
    _run([*pip, "check"], timeout=120)   # every requirement of every installed package holds, ours included
    return venv, how


def venv_env(venv: Path, tmp: Path, **extra: str) -> dict[str, str]:
    """A clean environment for the venv's commands: nothing of the dev venv, a throwaway AIRFLOW_HOME."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")}
    home = tmp / "airflow-home"
    home.mkdir(exist_ok=True)
    return {**keep, "PATH": f"{venv / 'bin'}{os.pathsep}{os.defpath}", "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"), **extra}


def write_registry(path: Path, data: Path, topic: str) -> Path:
    doc = {"version": 1, "allowed_roots": [str(data), "${AKS_PACKAGE_DIR}/jobs"],
           "defaults": {"application": "${AKS_PACKAGE_DIR}/jobs/reference_job.py", "integration": "reference",
                        "checkpoint": f"{data}/checkpoints/{{name}}", "output": f"{data}/sinks/{{name}}",
                        "backup_root": f"{data}/backups"},
           "jobs": [{"name": "orders", "topics": [topic]}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_the_wheel_runs_in_the_oldest_supported_airflow_without_pyspark(broker, tmp_path):
    timings: dict[str, float] = {}
    started = time.perf_counter()
    wheel = build_wheel(tmp_path)
    timings["wheel"] = time.perf_counter() - started

    mark = time.perf_counter()
    venv, how = install_venv(wheel)
    timings[f"venv ({how})"] = time.perf_counter() - mark

    # A checkpoint 3 batches x 5 records into a 2-partition topic holding 200 records per partition.
    data = tmp_path / "data"
    topic = f"install-{os.getpid()}"
    topics.create_topic(broker.bootstrap_servers, topic, 2)
    produce(broker.bootstrap_servers, topic, 400, partitions=2)
    write_checkpoint(data / "checkpoints" / "orders", batches=3, sources=({topic: 2},), records_per_batch=5,
                     start_timestamp_ms=int(time.time() * 1000) - 3000)
    registry = write_registry(tmp_path / "streaming_jobs.yaml", data, topic)
    env = venv_env(venv, tmp_path, AKS_DATA_DIR=str(data), AIRFLOW_CONN_KAFKA_DEFAULT=json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": broker.bootstrap_servers}}))
    bin_ = venv / "bin"

    mark = time.perf_counter()
    aks = _run([bin_ / "aks", "--help"], timeout=120, env=env, cwd=tmp_path)
    assert aks.stdout.startswith("usage: aks"), aks.stdout[:500]
    providers = _run([bin_ / "airflow", "providers", "list", "-o", "json"], timeout=300, env=env, cwd=tmp_path)
    _run([bin_ / "airflow", "db", "migrate"], timeout=600, env=env, cwd=tmp_path)
    proc = _run([bin_ / "python", IN_VENV, json.dumps({
        "dags_folder": str(REPO / "dags"), "contract": str(CONTRACT), "registry": str(registry), "job": "orders"})],
        timeout=600, env=env, cwd=tmp_path)
    timings["checks in the venv"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - started
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line.removeprefix("RESULT "))
    versions = result["environment"]["versions"]
    airflow = versions["apache-airflow"]
    print(f"\n[install] Airflow {airflow} (oldest supported; dev venv has the newest) in {venv}: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
          + f"; wheel {wheel.name} {wheel.stat().st_size / 1024:.0f} KiB")
    where = f"(install venv with Airflow {airflow}, {CONSTRAINTS.name})"

    # Every lower bound of pyproject is what runs here.
    assert {name: versions[name] for name in BOUNDED} == lower_bounds(), where
    assert result["environment"]["package_file"].startswith(str(venv)), where
    listed = {p["package_name"]: p["version"] for line in providers.stdout.splitlines() if line.startswith("[")
              for p in json.loads(line)}
    assert listed.get("airflow-kafka-spark") == "0.1.0", f"{where} airflow providers list: {providers.stdout[-2000:]}"
    # No PySpark (the pyspark distribution: jars + spark-submit) and no matplotlib: both are extras.
    # pyspark-client (Python files only, no JVM) is the Spark provider's own dependency.
    environment = result["environment"]
    assert (versions["pyspark"], environment["pyspark_jars"], environment["spark_submit"]) == (None, False, False), \
        f"{where} {environment}"
    assert (versions["matplotlib"], environment["matplotlib_importable"]) == (None, False), where
    assert result["dags"] == {"dag_ids": ["streaming_audit", "streaming_safe_restart"], "import_errors": {}}, \
        f"{where} {result['dags']}"
    assert result["contract"] == "ok", where
    assert "latest.md" in result["audit_files"] and not [f for f in result["audit_files"] if f.endswith(".png")], \
        f"{where} {result['audit_files']}"
    validate = result["validate"]
    assert validate["states"] == {"validate": "success"} and validate["verdict"] == "PASS", \
        f"{where} {validate}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert json.loads(validate["position"]["offsets"]) == {topic: {"0": 15, "1": 15}}, f"{where} {validate}"
