"""The soak's stage: its constants, the DAG copy with retries, and the Airflow components' environment.

Shared by the local soak (``test_soak.py``) and the YARN + HDFS one (``test_soak_yarn.py``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from devstack.airflow_services import AirflowServices
from tests.support.airflow_env import SPARK_LOCAL_CONN, kafka_conn

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "streaming_safe_restart_soak"
JOB = "soak"
PARTITIONS = 2
RATE = 20  # records a second, for the whole soak
BASE_OPS = ["plan", "validate_before", "approve", "stop", "submit", "health_gate", "finish"]
MODE_OPS = {"keep": BASE_OPS, "auto": BASE_OPS, "restore": BASE_OPS}   # the reset or restore runs in submit


def soak_dag(folder: Path) -> Path:
    """The product DAG under another id, with retries: SIGKILLed task runners must be retried by Airflow."""
    text = (REPO / "dags" / "streaming_safe_restart.py").read_text()
    for old, new in [
        ('DAG_ID = "streaming_safe_restart"', f'DAG_ID = "{DAG_ID}"'),
        (
            'default_args={"retries": 0}',
            'default_args={"retries": 3, "retry_delay": __import__("datetime").timedelta(seconds=2)}',
        ),
        ("GATE_RETRIES = 1", "GATE_RETRIES = 3"),
    ]:
        assert old in text, f"the safe-restart DAG changed; the soak copy cannot set {old!r}"
        text = text.replace(old, new)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{DAG_ID}.py"
    path.write_text(text)
    return path


def sync_dag(folder: Path) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
    assert DAG_ID in bag.dags, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)


def knobs(default_events: int) -> tuple[int, int, float]:
    """(seed, events, max seconds) from ``AKS_SOAK_SEED``, ``AKS_SOAK_EVENTS``, ``AKS_SOAK_MAX_S``."""
    seed = int(os.environ.get("AKS_SOAK_SEED") or random.SystemRandom().randrange(1, 10**6))
    target = int(os.environ.get("AKS_SOAK_EVENTS") or default_events)
    # A long run on a busy machine: stop starting events after this many seconds, check everything, report.
    max_s = float(os.environ.get("AKS_SOAK_MAX_S") or "inf")
    return seed, target, max_s


def airflow_env(base: Path, dags: Path, registry: Path, bootstrap: str, data: str) -> dict[str, str]:
    """The environment of the soak's Airflow components (a cluster soak adds its Spark connection)."""
    return {
        "AKS_DATA_DIR": data,
        "AKS_JOB_REGISTRY": str(registry),
        "AKS_HEALTH_GATE_POLL_S": "2",
        "AIRFLOW_CONN_KAFKA_DEFAULT": kafka_conn(bootstrap),
        "AIRFLOW_CONN_SPARK_DEFAULT": SPARK_LOCAL_CONN,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__MIN_SERIALIZED_DAG_UPDATE_INTERVAL": "0",
        # a killed triggerer's triggers go to a live one once its heartbeat is this old
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        # a killed scheduler's running tasks are reset by the next one's orphan check (default every 300 s:
        # the first scheduler-kill run waited 5 min for it); its job counts as dead 30 s after its heartbeat
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
    }


def start_airflow(soak_dags: Path, services: AirflowServices) -> None:
    sync_dag(soak_dags)
    services.start_api_server()
    services.start("scheduler")
    services.start("triggerer")
