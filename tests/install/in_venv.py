"""Run by the install venv's interpreter (tests/install/test_install.py): what a user's Airflow sees.

Reads one JSON argument (paths, the broker, the topic) and prints one JSON line prefixed ``RESULT``:
where the package was imported from, the Airflow/provider versions, whether PySpark and matplotlib
are installed, the DAGs parsed from the repository's dags/ folder and their import errors, the
provider contract (tests/support/provider_contract.py, run on these, the oldest supported,
providers), the audit report written without matplotlib, and the outcome of a
``ValidateCheckpointOperator`` task run with ``dag.test()`` against the real broker. Imports nothing
from the repository but that contract script; the test asserts on the JSON.
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import sys
import tempfile
from importlib import metadata
from pathlib import Path


def _dist(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _environment() -> dict:
    import airflow_kafka_spark

    pyspark = importlib.util.find_spec("pyspark")
    pyspark_dir = Path(pyspark.origin).parent if pyspark and pyspark.origin else None
    return {
        "package_file": airflow_kafka_spark.__file__,
        "versions": {d: _dist(d) for d in ("apache-airflow", "apache-airflow-task-sdk",
                                           "apache-airflow-providers-apache-spark",
                                           "apache-airflow-providers-apache-kafka", "confluent-kafka", "fsspec",
                                           "pyyaml", "pyspark", "pyspark-client", "matplotlib", "s3fs")},
        # pyspark-client (the Spark provider's Spark Connect client) installs Python files under `pyspark`
        # too; PySpark proper is the `pyspark` distribution with the JVM jars and bin/spark-submit.
        "pyspark_jars": bool(pyspark_dir and (pyspark_dir / "jars").is_dir()),
        "spark_submit": (Path(sys.executable).parent / "spark-submit").exists(),
        "matplotlib_importable": importlib.util.find_spec("matplotlib") is not None,
    }


def _dags(dags_folder: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=dags_folder)
    return {"dag_ids": sorted(bag.dag_ids), "import_errors": {k: str(v)[-500:] for k, v in bag.import_errors.items()}}


def _audit_without_chart(out_dir: str) -> list[str]:
    from airflow_kafka_spark.watch.audit.report import write_report

    write_report([], out_dir)
    return sorted(os.listdir(out_dir))


def _validate(job: str) -> dict:
    """dag.test() of a one-task DAG; the DAG is registered in the dags-folder bundle first (dag.test()
    refuses DAGs that are not serialized)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG
    from airflow.utils.session import create_session

    from airflow_kafka_spark.operators.checkpoint import ValidateCheckpointOperator

    with DAG("aks_install_validate", schedule=None) as dag:
        ValidateCheckpointOperator(task_id="validate", job=job)
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder="/nonexistent", collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    run = dag.test()
    with create_session() as s:
        states = {t.task_id: str(t.state) for t in s.query(TaskInstance).filter_by(dag_id=dag.dag_id,
                                                                                   run_id=run.run_id)}
        xcoms = {x.key: XComModel.deserialize_value(x)
                 for x in s.query(XComModel).filter_by(dag_id=dag.dag_id, run_id=run.run_id, task_id="validate")}
    verdict = xcoms.get("return_value") or xcoms.get("verdict") or {}
    return {"run_state": str(run.state), "states": states, "verdict": verdict.get("verdict"),
            "job": verdict.get("job"), "position": verdict.get("position")}


def main() -> None:
    args = json.loads(sys.argv[1])
    result = {"environment": _environment(), "dags": _dags(args["dags_folder"])}
    runpy.run_path(args["contract"], run_name="__main__")   # raises on a broken private member
    result["contract"] = "ok"
    result["audit_files"] = _audit_without_chart(tempfile.mkdtemp(prefix="aks-install-audit-"))
    os.environ["AKS_JOB_REGISTRY"] = args["registry"]
    result["validate"] = _validate(args["job"])
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
