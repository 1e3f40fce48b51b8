"""Running the product's safe-restart DAG in a test and reading back what it did (real Airflow, ``dag.test()``).

Shared by every test that drives ``streaming_safe_restart`` end to end (the reference job's, the
users' jobs' locally, on Spark 3.5 and on YARN), so that "what a run left" and "the job has
committed everything produced" mean one thing everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from tests.support.kafka import end_offsets
from tests.support.waiting import wait_until

SAFE_RESTART = "streaming_safe_restart"


@dataclass
class RunResult:
    """What a ``dag.test()`` run left in the metadata DB."""

    state: str
    run_id: str
    states: dict[str, str]
    xcoms: dict[tuple[str, str], Any] = field(default_factory=dict)
    rendered: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    tries: dict[str, int] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)   # task id -> end_date, epoch seconds

    def xcom(self, task_id: str, key: str = "return_value") -> Any:
        return self.xcoms.get((task_id, key))


def collect(dag_id: str, run_id: str, state: str, seconds: float) -> RunResult:
    from airflow.models import TaskInstance
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as s:
        tis = s.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run_id).all()
        xcoms = s.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id).all()
        rendered = s.query(RenderedTaskInstanceFields).filter_by(dag_id=dag_id, run_id=run_id).all()
        return RunResult(
            state=str(state), run_id=run_id, states={t.task_id: str(t.state) for t in tis},
            xcoms={(x.task_id, x.key): XComModel.deserialize_value(x) for x in xcoms},
            rendered={r.task_id: r.rendered_fields for r in rendered}, seconds=seconds,
            tries={t.task_id: int(t.try_number) for t in tis},
            ended={t.task_id: t.end_date.timestamp() for t in tis if t.end_date is not None})


def safe_restart_dag() -> Any:
    """The repository's ``streaming_safe_restart``, parsed from the dags folder with the test's registry."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag()
    assert SAFE_RESTART in bag.dags, bag.import_errors
    return bag.get_dag(SAFE_RESTART)


def run_safe_restart(dag: Any, job: str, mode: str, reason: str, **conf: Any) -> RunResult:
    """One run as the trigger form sends it (every field, unset ones as null)."""
    started = time.perf_counter()
    dr = dag.test(run_conf={"job": job, "mode": mode, "backup_id": None, "datetime": None, "dry_run": False,
                            "accept_data_loss": False, "reason": reason, **conf})
    return collect(SAFE_RESTART, dr.run_id, dr.state, time.perf_counter() - started)


def committed_everything(checkpoint: str, bootstrap: str, topic: str, partitions: int) -> bool:
    """The checkpoint's last committed batch ends at the log end of every partition of ``topic``."""
    st = read_checkpoint(checkpoint)
    if st.latest_committed is None:
        return False
    have = {tp.partition: o for tp, o in st.latest_committed.kafka_offsets.items()}
    return have == end_offsets(bootstrap, topic, partitions)


def wait_committed_everything(checkpoint: str, bootstrap: str, topic: str, partitions: int, *,
                              timeout: float = 180, interval: float = 1.0) -> None:
    wait_until(lambda: committed_everything(checkpoint, bootstrap, topic, partitions), timeout=timeout,
               interval=interval, what="the job to commit every produced record")
