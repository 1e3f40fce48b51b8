"""The CLI and the watch layer decide nothing by the job's kind themselves: each decision sits behind one class
per kind (watch/kinds.py for where the position is, runtime/kinds.py for the submit and the stop, cli/backup.py's
``_backups_of`` for what ``aks backup`` takes), so a third kind is one new class in each, not a hunt for ``if``s."""

from __future__ import annotations

import pathlib
import re

import airflow_kafka_spark
from airflow_kafka_spark.cli import backup as cli_backup
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime.kinds import runtime_kind
from airflow_kafka_spark.watch.kinds import position_kind

ROOT = pathlib.Path(airflow_kafka_spark.__file__).parent
BRANCH = re.compile(r"is_dstream|\.kind is (not )?JobKind|\.kind == ")


def _spec(kind: JobKind) -> JobSpec:
    return JobSpec(name="j", application="a.py", topics=("t",), checkpoint="/c", backup_root="/b", stop_marker="/m",
                   kind=kind, group="g")


def test_every_kind_has_its_own_class_in_each_layer():
    for pick in (position_kind, runtime_kind, cli_backup._backups_of):
        assert len({type(pick(_spec(k))) for k in JobKind}) == len(JobKind), pick.__name__


def test_no_kind_branch_in_the_cli_or_the_watch_layer():
    paths = [path for layer in ("cli", "watch") for path in sorted((ROOT / layer).rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in paths
             for n, line in enumerate(path.read_text().splitlines(), 1) if BRANCH.search(line)]
    assert not found, found
