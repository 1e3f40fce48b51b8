"""read_checkpoint on healthy checkpoints, on each self-consistency scenario (S07–S10), and on
checkpoints written by real Spark 4.0 (copied under tests/unit/data, plus one written live)."""

from __future__ import annotations

import dataclasses
import random
import shutil
import time
from pathlib import Path

import pytest

from airflow_kafka_spark.checkpoint.formats import (
    UnsupportedLogVersionError,
    batch_id_from_name,
    log_lines,
    parse_log_version,
    parse_offsets_file,
    split_log_names,
)
from airflow_kafka_spark.checkpoint.model import (
    CHECKPOINT_CORRUPT,
    INITIAL_OFFSETS_UNREADABLE,
    LOG_GAP,
    MISSING_QUERY_ID,
    STRAY_TEMP_FILE,
    UNSUPPORTED_LOG_VERSION,
    CheckpointState,
)
from airflow_kafka_spark.checkpoint.reader import read_checkpoint
from airflow_kafka_spark.errors import CheckpointFormatError, UserError
from airflow_kafka_spark.kafka.offsets import TopicPartition
from tests.support.checkpoint_factory import (
    QUERY_ID,
    RATE,
    SPARK_40_CONF,
    START_TIMESTAMP_MS,
    commit_file,
    kafka_initial_offsets_file,
    offsets_file,
    write_checkpoint,
)

DATA = Path(__file__).parent / "data"
TWO_SOURCES = ({"orders": 2, "refunds": 1}, {"payments": 3})


def codes(state: CheckpointState) -> list[str]:
    return [p.code for p in state.problems]


def problem(state: CheckpointState, code: str):
    found = [p for p in state.problems if p.code == code]
    assert found, f"no {code} in {state.problems}"
    return found[0]


# --------------------------------------------------------------------------- healthy checkpoints


def test_healthy_checkpoint_reads_latest_planned_and_committed(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=4, sources=TWO_SOURCES, records_per_batch=10)
    st = read_checkpoint(ck.location)

    assert st.exists and st.problems == [] and st.stray_files == []
    assert st.query_id == QUERY_ID
    assert st.offset_batch_ids == [0, 1, 2, 3] and st.commit_batch_ids == [0, 1, 2, 3]
    assert st.latest_planned.batch_id == 3 and st.latest_committed is st.latest_planned
    assert st.pending_batch is None
    assert st.latest_planned.kafka_offsets == ck.kafka_offsets(3)
    assert st.latest_planned.sources["0"][TopicPartition("orders", 1)] == 40
    assert st.latest_planned.sources["1"][TopicPartition("payments", 2)] == 40
    assert st.latest_planned.batch_timestamp_ms == START_TIMESTAMP_MS + 3_000
    assert st.latest_planned.batch_watermark_ms == 0
    assert st.latest_planned.conf == SPARK_40_CONF and st.latest_planned.version == 1
    assert st.latest_commit.batch_id == 3 and st.latest_commit.version == 1
    assert st.latest_commit.next_batch_watermark_ms == 0
    assert st.initial_offsets == {"0": ck.initial[0], "1": ck.initial[1]}
    assert st.has_state is False
    assert st.history == []


def test_pending_batch_is_the_uncommitted_latest_offsets(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=3, pending=True)
    st = read_checkpoint(ck.location)

    assert st.problems == []
    assert st.offset_batch_ids == [0, 1, 2, 3] and st.commit_batch_ids == [0, 1, 2]
    assert st.pending_batch.batch_id == 3
    assert st.latest_committed.batch_id == 2
    assert st.latest_committed.kafka_offsets == ck.kafka_offsets(2)  # where the replay starts
    assert st.pending_batch.kafka_offsets == ck.kafka_offsets(3)     # where it ends


def test_history_is_every_retained_batch_in_order(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=150, first_retained=50, pending=True)
    st = read_checkpoint(ck.location, read_history=True)

    assert st.problems == []
    assert [b.batch_id for b in st.history] == list(range(50, 151))
    assert [b.batch_timestamp_ms for b in st.history] == [ck.timestamps[i] for i in range(50, 151)]
    assert st.history[-1] is st.latest_planned


def test_history_of_a_long_run_with_many_partitions_is_the_retained_100_batches(tmp_path):
    # Speed is measured in bench/bench_core.py (docs/benchmarks.md), not asserted here.
    many_partitions = ({"orders": 48, "refunds": 12}, {"payments": 24})
    ck = write_checkpoint(tmp_path / "cp", batches=200, first_retained=100, sources=many_partitions)
    st = read_checkpoint(ck.location, read_history=True)
    assert len(st.history) == 100 and st.problems == []
    assert [b.batch_id for b in st.history] == list(range(100, 200))
    assert all(len(b.kafka_offsets) == 84 for b in st.history)


def test_default_read_touches_only_the_files_restart_needs(tmp_path, monkeypatch):
    import fsspec.implementations.local as local

    from airflow_kafka_spark._util.localfs import LocalFS

    ck = write_checkpoint(tmp_path / "cp", batches=40, pending=True)
    opened: list[str] = []
    real_open = local.LocalFileSystem._open

    def spy(self, path, mode="rb", **kw):
        assert mode == "rb", f"opened {path} with mode {mode}"
        opened.append(str(Path(path).relative_to(ck.root)))
        return real_open(self, path, mode=mode, **kw)

    monkeypatch.setattr(local.LocalFileSystem, "_open", spy)
    real_cat = LocalFS.cat_file   # plain local paths are read without fsspec

    def cat_spy(self, path, *a, **kw):
        opened.append(str(Path(path).relative_to(ck.root)))
        return real_cat(self, path, *a, **kw)

    monkeypatch.setattr(LocalFS, "cat_file", cat_spy)
    read_checkpoint(ck.location)
    assert sorted(opened) == sorted(["metadata", "offsets/40", "offsets/39", "commits/39", "sources/0/0"])


def test_file_url_and_pathlike_give_the_same_state(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2)
    by_path = read_checkpoint(ck.location)
    by_url = read_checkpoint(f"file://{ck.root}")
    assert by_url.location == f"file://{ck.root}"
    assert dataclasses.replace(by_url, location=ck.location) == by_path
    assert read_checkpoint(ck.root) == by_path  # os.PathLike
    assert dataclasses.replace(read_checkpoint(ck.location + "/"), location=ck.location) == by_path


def test_missing_location_is_not_an_error(tmp_path):
    st = read_checkpoint(str(tmp_path / "nope"))
    assert st.exists is False and st.problems == [] and st.latest_planned is None


def test_empty_directory_and_metadata_only_are_new_queries(tmp_path):
    (tmp_path / "empty").mkdir()
    st = read_checkpoint(str(tmp_path / "empty"))
    assert st.exists and st.problems == [] and st.query_id is None and st.offset_batch_ids == []

    ck = write_checkpoint(tmp_path / "started", batches=0)  # metadata + empty logs, nothing planned
    st = read_checkpoint(ck.location)
    assert st.problems == [] and st.query_id == QUERY_ID and st.latest_planned is None


def test_location_that_is_a_file_raises_one_line_user_error(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=1)
    with pytest.raises(UserError) as err:
        read_checkpoint(str(ck.path("metadata")))
    assert "not a directory" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("bad", ["", "   ", None, 42, "nosuchprotocol://bucket/cp"])
def test_wrong_kind_of_location_raises_user_error(bad):
    with pytest.raises(UserError):
        read_checkpoint(bad)


def test_state_directory_with_files_means_state(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=3, state=True)
    assert read_checkpoint(ck.location).has_state is True
    shutil.rmtree(ck.path("state"))
    ck.path("state/0/0").mkdir(parents=True)  # directories alone are no state
    assert read_checkpoint(ck.location).has_state is False


def test_non_kafka_sources_are_kept_raw_and_left_out_of_kafka_offsets(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=3, sources=({"orders": 2}, RATE))
    st = read_checkpoint(ck.location)
    assert st.problems == []
    latest = st.latest_planned
    assert latest.raw_sources["1"] == "30" and "1" not in latest.sources and latest.source_count == 2
    assert latest.kafka_offsets == ck.kafka_offsets(2)
    assert set(st.initial_offsets) == {"0"}  # the rate source's sources/1/0 is not Kafka's


def test_void_source_line_reads_as_none(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2)
    ck.write("offsets/1", offsets_file([None], batch_timestamp_ms=START_TIMESTAMP_MS))
    ck.write("offsets/0", offsets_file([None], batch_timestamp_ms=START_TIMESTAMP_MS))
    st = read_checkpoint(ck.location)
    assert st.problems == [] and st.latest_planned.sources == {"0": None}
    assert st.latest_planned.kafka_offsets == {}


def test_empty_metadata_line_means_no_metadata(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=1)
    ck.write("offsets/0", offsets_file(['{"orders":{"0":5}}'], batch_timestamp_ms=None))  # Spark 2.1 form
    st = read_checkpoint(ck.location)
    assert st.problems == []
    assert st.latest_planned.batch_timestamp_ms is None and st.latest_planned.conf == {}


def test_offsets_v2_named_sources_and_commits_v2(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2, offsets_version=2, commits_version=2)
    ck.write("offsets/1", offsets_file(['{"orders":{"0":7,"1":8}}', None], version=2,
                                       batch_timestamp_ms=START_TIMESTAMP_MS, source_ids=["orders_src", "x"]))
    ck.write("commits/1", commit_file(version=2, state_unique_ids={"0": [["a-b", "c-d"]]}))
    st = read_checkpoint(ck.location)
    assert codes(st) == []
    assert st.latest_planned.version == 2
    assert st.latest_planned.sources == {"orders_src": {TopicPartition("orders", 0): 7,
                                                        TopicPartition("orders", 1): 8}, "x": None}
    assert st.latest_commit.version == 2 and st.latest_commit.has_state_unique_ids


def test_v2_line_splits_at_the_first_colon_only():
    data = b'v2\n\n0:{"a.b":{"0":1,"1":2}}'     # the JSON after the first colon has colons of its own
    parsed = parse_offsets_file(0, data)
    assert parsed.sources == {"0": {TopicPartition("a.b", 0): 1, TopicPartition("a.b", 1): 2}}


def test_a_topic_name_kafka_would_refuse_is_a_format_error_not_a_librdkafka_crash():
    # a NUL in a topic reached librdkafka and raised "embedded null character" (issue 17 corpus)
    for topic in ("a:b", "t\\u0000x", "", "x" * 250):
        with pytest.raises(CheckpointFormatError, match="not a Kafka topic name"):
            parse_offsets_file(0, b'v1\n{}\n{"' + topic.encode() + b'":{"0":1}}')


def test_spark_21_initial_offsets_without_version_line(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=1)
    ck.write("sources/0/0", kafka_initial_offsets_file({TopicPartition("orders", 0): 3}, spark_21=True))
    st = read_checkpoint(ck.location)
    assert st.problems == [] and st.initial_offsets == {"0": {TopicPartition("orders", 0): 3}}


def test_crlf_and_trailing_newline_are_accepted_like_java_readline(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2)
    good = ck.path("offsets/1").read_bytes()
    ck.write("offsets/1", good.replace(b"\n", b"\r\n") + b"\r\n")
    ck.write("commits/1", commit_file() + b"\n")
    st = read_checkpoint(ck.location)
    assert st.problems == [] and st.latest_planned.kafka_offsets == ck.kafka_offsets(1)


def test_only_canonical_numeric_names_are_batches(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2)
    for name in ["007", "+3", "-1", "1.5", "٣", "99999999999999999999", "2.compact", ".1.crc", "abc"]:
        ck.write(f"offsets/{name}", b"garbage")
    ck.path("offsets/sub").mkdir()
    st = read_checkpoint(ck.location)
    assert st.offset_batch_ids == [0, 1] and st.problems == []


def test_bulk_name_split_follows_the_one_name_rule():
    """split_log_names scans the names joined by newlines; it must sort every name exactly as
    batch_id_from_name and the .N.crc / .tmp rules do, hostile names included."""
    rng = random.Random(1515)
    alphabet = ["0", "1", "9", ".", "crc", "tmp", "\n", "\r", "٣", "-", "+", " ", "a", "99999999999999999999"]
    fixed = ["0", "00", "007", "9223372036854775807", "9223372036854775808", ".0.crc", ".007.crc", "..1.crc",
             ".1.crc.tmp", "1\n2", "3\r", "\n", "", ".٣.crc", "x.tmp", ".5.3f2a.tmp", "5.tmp\n6"]
    for trial in range(300):
        names = fixed + ["".join(rng.choices(alphabet, k=rng.randint(1, 5))) for _ in range(rng.randint(0, 40))]
        if trial % 3 == 0:
            names = [n for n in names if "\n" not in n and "\r" not in n]   # the scanned path, not the fallback
        rng.shuffle(names)
        got = split_log_names(names)
        want = {batch_id_from_name(n): n for n in names if batch_id_from_name(n) is not None}
        crc = {int(n[1:-4]) for n in names
               if n.startswith(".") and n.endswith(".crc") and n[1:-4].isascii() and n[1:-4].isdigit()}
        assert got.batches == want and got.checksums == crc, names
        assert sorted(got.temps) == sorted(n for n in names if n.endswith(".tmp")), names


def test_empty_batch_files_are_looked_for_in_the_newest_100_batches(tmp_path):
    """Beyond the files a restart reads, zero-byte batch files are damage inside Spark's default
    retention window (EMPTY_CHECK_BATCHES); older ones are listed by name, never sized, so a long
    history costs a listing, not a stat per file. Same answer on local disk and through fsspec."""
    import fsspec

    ck = write_checkpoint(tmp_path / "cp", batches=130)
    for rel in ("offsets/10", "commits/12", "offsets/40", "commits/75"):
        ck.write(rel, b"")
    mem = fsspec.filesystem("memory")
    mem.put(str(ck.root), "/aks-test-window", recursive=True)
    try:
        for location in (ck.location, "memory://aks-test-window"):
            st = read_checkpoint(location)
            assert sorted(p.path for p in st.problems) == ["commits/75", "offsets/40"], location
            assert st.offset_batch_ids == list(range(130))   # the old names are still listed
    finally:
        mem.rm("/aks-test-window", recursive=True)


def test_stray_tmp_files_are_listed_and_warned(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=2)
    ck.write("offsets/.2.3f2a9c1e-7b44-4e0b-9d8a-1c2b3d4e5f60.tmp", b"")
    ck.write(".metadata.0e1f.tmp", b"{")
    st = read_checkpoint(ck.location)
    assert st.stray_files == [".metadata.0e1f.tmp", "offsets/.2.3f2a9c1e-7b44-4e0b-9d8a-1c2b3d4e5f60.tmp"]
    assert set(codes(st)) == {STRAY_TEMP_FILE}
    assert all(p.severity == "WARN" for p in st.problems)
    assert st.latest_planned.batch_id == 1


# --------------------------------------------------------------------------- scenarios S07–S10


def test_s08_offsets_gap_blocks_with_a_repair(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.remove("offsets/4")
    st = read_checkpoint(ck.location)
    p = problem(st, CHECKPOINT_CORRUPT)
    assert p.path == "offsets/4" and p.severity == "BLOCK"
    assert "offsets gap at 4 (have offsets 0-3,5; commits 0-5)" in p.message
    assert "restore offsets/4 from a backup" in p.message and "above 3 (4-5)" in p.message


def test_s09_empty_uncommitted_last_offsets_proposes_dropping_it(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=5, pending=True)
    ck.write("offsets/5", b"")
    st = read_checkpoint(ck.location)
    p = problem(st, CHECKPOINT_CORRUPT)
    assert p.path == "offsets/5"
    assert "drop the uncommitted last file offsets/5 only (it has no commits/5); Spark will re-plan batch 5" \
        in p.message
    assert st.latest_planned is None and st.latest_committed.batch_id == 4


def test_s09_empty_committed_history_proposes_a_restore(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.write("commits/3", b"")
    p = problem(read_checkpoint(ck.location), CHECKPOINT_CORRUPT)
    assert p.path == "commits/3" and "restore commits/3 from a backup" in p.message


def test_s09_garbage_latest_commit_proposes_a_replay(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.write("commits/5", b"\x00\xffgarbage")
    st = read_checkpoint(ck.location)
    p = problem(st, CHECKPOINT_CORRUPT)
    assert p.path == "commits/5" and "not UTF-8" in p.message
    assert "remove commits/5 only; Spark will re-run batch 5 with the same offsets" in p.message
    assert st.latest_commit is None


def test_s09_newer_log_version_is_reported_not_guessed(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.write("offsets/5", ck.path("offsets/5").read_bytes().replace(b"v1", b"v9", 1))
    st = read_checkpoint(ck.location)
    p = problem(st, UNSUPPORTED_LOG_VERSION)
    assert p.path == "offsets/5" and "v9" in p.message and p.severity == "BLOCK"
    assert st.latest_planned is None


def test_s10_missing_metadata_with_batches_is_missing_query_id(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=3)
    ck.remove("metadata")
    st = read_checkpoint(ck.location)
    p = problem(st, MISSING_QUERY_ID)
    assert st.query_id is None and "restore metadata from a backup" in p.message


def test_commits_ahead_of_offsets(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=4)
    ck.write("commits/4", commit_file())
    ck.write("commits/5", commit_file())
    p = problem(read_checkpoint(ck.location), CHECKPOINT_CORRUPT)
    assert p.path == "commits/4" and "newer than the newest offsets/3" in p.message
    assert "remove commits/4-5 so Spark resumes after batch 3" in p.message


def test_commits_far_behind_offsets(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    for i in (3, 4, 5):
        ck.remove(f"commits/{i}")
    p = problem(read_checkpoint(ck.location), CHECKPOINT_CORRUPT)
    assert "commits end at batch 2 but offsets/ at 5" in p.message
    assert "remove offsets/4-5 so Spark re-runs batch 3" in p.message


@pytest.mark.parametrize("rel", ["commits/5", "offsets/6"])
def test_hand_deleted_batch_file_leaving_its_crc_blocks(tmp_path, rel):
    """Spark 4.0 fails with FileAlreadyExistsException when it writes N again over a leftover .N.crc
    (seen in tests/integration/test_scenarios.py::test_s07_hand_deleted_commit_keeps_its_crc)."""
    ck = write_checkpoint(tmp_path / "cp", batches=7 if rel.startswith("offsets") else 6)
    ck.remove(rel, keep_crc=True)
    log, n = rel.split("/")
    p = problem(read_checkpoint(ck.location), CHECKPOINT_CORRUPT)
    assert p.path == f"{log}/.{n}.crc" and "FileAlreadyExistsException" in p.message


def test_commit_without_its_offsets_inside_the_window(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.remove("offsets/2")
    st = read_checkpoint(ck.location)
    p = problem(st, CHECKPOINT_CORRUPT)
    assert p.path == "commits/2" and "without offsets/2" in p.message


def test_leftover_commits_below_the_offsets_window_are_only_a_gap(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.remove("offsets/0")  # an interrupted purge: offsets go first
    st = read_checkpoint(ck.location)
    assert codes(st) == [LOG_GAP] and st.problems[0].severity == "WARN"


def test_changed_number_of_sources_between_batches(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=4, pending=True, sources=TWO_SOURCES)
    ck.write("offsets/4", offsets_file(['{"orders":{"0":1}}'], batch_timestamp_ms=START_TIMESTAMP_MS))
    p = problem(read_checkpoint(ck.location), CHECKPOINT_CORRUPT)
    assert "offsets/4 has 1 source(s) but offsets/3 has 2" in p.message
    assert "drop the uncommitted last file offsets/4 only" in p.message


def test_broken_initial_offsets_after_a_commit_is_only_a_warning(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=3)
    ck.write("sources/0/0", b"\x00v1\n{broken")
    st = read_checkpoint(ck.location)
    assert codes(st) == [INITIAL_OFFSETS_UNREADABLE] and st.problems[0].severity == "WARN"
    assert st.initial_offsets == {}


def test_broken_initial_offsets_before_any_commit_blocks(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=0, pending=True)
    ck.write("sources/0/0", b"\x00v1\n{broken")
    assert codes(read_checkpoint(ck.location)) == [CHECKPOINT_CORRUPT]


def test_problem_messages_are_single_lines(tmp_path):
    ck = write_checkpoint(tmp_path / "cp", batches=6)
    ck.write("offsets/5", "v1\n{\n\n\r\x0b\x0c\x1c\u2028".encode())
    ck.remove("metadata")
    st = read_checkpoint(ck.location)
    assert st.problems and all("\n" not in p.message and "\r" not in p.message for p in st.problems)


# --------------------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(("name", "expected"), [
    ("0", 0), ("17", 17), ("9223372036854775807", 2**63 - 1), ("9223372036854775808", None), ("007", None),
    ("", None), ("-1", None), ("+1", None), ("1.crc", None), (".1.crc", None), ("١", None), ("1 ", None),
])
def test_batch_id_from_name(name, expected):
    assert batch_id_from_name(name) == expected


def test_log_lines_follow_java_readline():
    assert log_lines(b"", "x") == []
    assert log_lines(b"v1", "x") == ["v1"]
    assert log_lines(b"v1\n", "x") == ["v1"]
    assert log_lines(b"v1\n\n", "x") == ["v1", ""]
    assert log_lines(b"a\r\nb\rc\nd", "x") == ["a", "b", "c", "d"]
    assert log_lines("a\u2028b\x85c".encode(), "x") == ["a\u2028b\x85c"]  # not Java line breaks


@pytest.mark.parametrize("line", ["v", "v0", "v-1", "x1", "V1", "v1 ", " v1", "v1.0", "v99999999999", "v１"])
def test_malformed_version_lines(line):
    with pytest.raises(CheckpointFormatError) as err:
        parse_log_version(line, 2, "offsets/0")
    assert not isinstance(err.value, UnsupportedLogVersionError)


def test_version_above_the_max_is_unsupported():
    assert parse_log_version("v2", 2, "f") == 2
    assert parse_log_version("v+1", 2, "f") == 1  # Java's Integer.parseInt accepts a plus sign
    with pytest.raises(UnsupportedLogVersionError):
        parse_log_version("v3", 2, "f")


# --------------------------------------------------------------------------- real Spark checkpoints


def test_real_spark_400_kafka_checkpoint():
    st = read_checkpoint(str(DATA / "spark400_kafka_two_sources"), read_history=True)
    assert st.problems == [] and st.stray_files == []
    assert st.query_id == "00474e08-98d6-4404-8c27-445cf9460f7f"
    assert st.offset_batch_ids == st.commit_batch_ids == [0, 1, 2, 3]
    assert st.latest_planned.sources == {
        "0": {TopicPartition("ta", 0): 50, TopicPartition("ta", 1): 50, TopicPartition("tb", 0): 30},
        "1": {TopicPartition("tc", 0): 20},
    }
    assert st.initial_offsets == {
        "0": {TopicPartition("ta", 0): 0, TopicPartition("ta", 1): 0, TopicPartition("tb", 0): 0},
        "1": {TopicPartition("tc", 0): 0},
    }
    assert st.latest_planned.conf["spark.sql.shuffle.partitions"] == "2"
    assert len(st.latest_planned.conf) == 11
    # maxOffsetsPerTrigger=40 over three partitions of one source: 15+15+9 (+ tc's 20) in batch 0
    assert st.history[0].sources["0"] == {TopicPartition("ta", 0): 15, TopicPartition("ta", 1): 15,
                                          TopicPartition("tb", 0): 9}


def test_real_spark_400_checkpoint_stopped_mid_batch():
    st = read_checkpoint(str(DATA / "spark400_rate_stopped_mid_batch"))
    assert st.problems == []
    assert st.pending_batch.batch_id == 8 and st.latest_committed.batch_id == 7
    assert st.pending_batch.raw_sources == {"0": "9"} and st.pending_batch.kafka_offsets == {}


@pytest.mark.integration
def test_live_spark_rate_checkpoint_reads_clean(tmp_path):
    """Spark writes a checkpoint now (rate source, foreachBatch no-op); the reader must agree with it."""
    from tests.support import spark_session

    spark = spark_session.session()
    cp = tmp_path / "cp"
    df = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    query = (df.writeStream.foreachBatch(lambda _df, _batch_id: None).option("checkpointLocation", str(cp))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while (query.lastProgress or {}).get("batchId", -1) < 3:
            assert time.monotonic() < deadline, "rate query made no progress"
            time.sleep(0.2)
    finally:
        query.stop()
    st = read_checkpoint(str(cp), read_history=True)
    assert [p for p in st.problems if p.severity == "BLOCK"] == []
    assert st.query_id == query.id
    latest = st.latest_planned.batch_id
    assert latest >= 3 and st.offset_batch_ids == list(range(latest + 1))
    assert st.latest_planned.raw_sources["0"].isdigit() and st.latest_planned.kafka_offsets == {}
    stamps = [b.batch_timestamp_ms for b in st.history]
    assert stamps == sorted(stamps)


# --------------------------------------------------------------------------- other filesystems


def test_reads_through_another_fsspec_filesystem(tmp_path):
    """Object stores reach the reader through fsspec; the in-memory filesystem stands in for them."""
    import fsspec

    ck = write_checkpoint(tmp_path / "cp", batches=5, pending=True, sources=TWO_SOURCES)
    mem = fsspec.filesystem("memory")
    mem.put(str(ck.root), "/aks-test-cp", recursive=True)
    try:
        st = read_checkpoint("memory://aks-test-cp", read_history=True)
        local = read_checkpoint(ck.location, read_history=True)
        assert st.problems == [] and dataclasses.replace(st, location=ck.location) == local
        assert read_checkpoint("memory://aks-test-missing").exists is False
    finally:
        mem.rm("/aks-test-cp", recursive=True)


def test_history_on_an_async_filesystem_is_read_in_one_batch(tmp_path, monkeypatch):
    import fsspec.implementations.local as fs_local

    ck = write_checkpoint(tmp_path / "cp", batches=12)
    calls: list[int] = []
    real_cat = fs_local.LocalFileSystem.cat

    def cat(self, paths, **kw):
        calls.append(len(paths))
        return real_cat(self, paths, **kw)

    monkeypatch.setattr(fs_local.LocalFileSystem, "async_impl", True, raising=False)
    monkeypatch.setattr(fs_local.LocalFileSystem, "cat", cat)
    st = read_checkpoint(f"file://{ck.root}", read_history=True)   # a URL: through fsspec, not LocalFS
    assert calls == [10]  # offsets/11 and offsets/10 were already read for the restart check
    assert [b.batch_id for b in st.history] == list(range(12)) and st.problems == []
