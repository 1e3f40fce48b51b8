"""Issue 17 corpus follow-ups: containment is linear, lock files never hang, values from files are ranged."""

from __future__ import annotations

import os
import time

import pytest

from airflow_kafka_spark._util import paths
from airflow_kafka_spark._util.fs import open_location
from airflow_kafka_spark._util.lock import LockFile
from airflow_kafka_spark._util.paths import Contained, check_relative, safe_child
from airflow_kafka_spark._util.text import iso_millis, iso_seconds, utc_display
from airflow_kafka_spark.errors import UserError


def test_contained_checks_each_folder_once(tmp_path, monkeypatch):
    # 40,000-file state stores: every path used to re-check every component (quadratic in practice)
    (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    root = open_location(str(tmp_path))
    calls = []
    real = os.lstat
    monkeypatch.setattr(paths.os, "lstat", lambda p: (calls.append(p), real(p))[1])
    below = Contained(root)
    for i in range(2000):
        below.child(f"state/0/0/{i}.delta")
    assert len(calls) <= 2000 + 3     # one per file (absent: cheap) + each folder once


def test_a_link_below_the_root_is_refused_even_after_other_paths_were_proven(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "backups")
    below = Contained(open_location(str(tmp_path)))
    below.child("ok/a")
    with pytest.raises(UserError, match="symbolic link"):
        below.child("backups/x.json")
    with pytest.raises(UserError, match="symbolic link"):
        safe_child(open_location(str(tmp_path)), "backups")


@pytest.mark.parametrize("rel", ["offsets/*", "a?", "job[12]/x", "state/]"])
def test_glob_characters_are_refused_in_relative_paths(rel):
    with pytest.raises(UserError, match="glob character"):
        check_relative(rel)


def test_a_fifo_as_lock_file_is_one_line_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / ".lock")
    t = time.monotonic()
    with pytest.raises(UserError, match="FIFO") as exc, LockFile(open_location(str(tmp_path / ".lock")),
                                                                 what="backups of job x", timeout=2):
        pass
    assert time.monotonic() - t < 2 and "\n" not in str(exc.value)


def test_a_fifo_as_the_lock_folder_is_one_line(tmp_path):
    os.mkfifo(tmp_path / "job")
    with pytest.raises(UserError, match=r"lock file .* cannot be used"), \
            LockFile(open_location(str(tmp_path / "job" / ".lock")), what="backups of job x", timeout=1):
        pass


def test_times_out_of_range_format_without_raising():
    for ms in (10**20, -10**30):
        assert "epoch-ms" in iso_millis(ms) and "epoch-ms" in iso_seconds(ms) and "epoch-ms" in utc_display(ms)
    assert iso_millis(0) == "1970-01-01T00:00:00.000Z"
