"""Self-consistency of a checkpoint's logs: gaps, orphans, leftovers and changed sources.

Spark reads two batches on restart; these checks look at the listings (cheap) and the batches already
parsed, and report what no single file shows — as :class:`~airflow_kafka_spark.checkpoint.model.CheckpointProblem`
values with a one-line repair. A mixin of the reader's one pass over a checkpoint.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from airflow_kafka_spark.checkpoint.model import (
    CHECKPOINT_CORRUPT,
    LOG_GAP,
    STRAY_TEMP_FILE,
    BatchOffsets,
)

#: Batches per log checked for zero-byte files: Spark's default ``spark.sql.streaming.minBatchesToRetain``.
EMPTY_CHECK_BATCHES = 100


class ConsistencyChecks:
    """Checks over listings and parsed batches; needs the reader's ``_problem`` and listings."""

    def _note_strays(self, rel_dir: str, entries: Iterable[str]) -> None:
        for name in entries:
            if name.endswith(".tmp"):
                rel = f"{rel_dir}/{name}" if rel_dir else name
                self.stray.append(rel)
                self._problem(STRAY_TEMP_FILE, rel,
                              f"{rel} is a leftover temp file from an interrupted write; Spark ignores it: "
                              f"delete it once the query is stopped (backups must skip it)")

    def _note_orphan_checksums(self, offset_ids: list[int], root_entries: dict[str, dict]) -> None:
        """A Hadoop ``.N.crc`` left behind when ``N`` was deleted by hand blocks Spark's next write of
        ``N``: the checksummed local/HDFS file system renames the checksum with the file and fails
        with ``FileAlreadyExistsException`` (seen with Spark 4.0 after deleting ``commits/N`` alone)."""
        latest = offset_ids[-1] if offset_ids else -1
        if ".metadata.crc" in root_entries and "metadata" not in root_entries:
            self._problem(CHECKPOINT_CORRUPT, ".metadata.crc",
                          ".metadata.crc is the checksum of a deleted metadata file: Spark's start fails with "
                          "'Multiple streaming queries are concurrently using metadata'; restore metadata from a "
                          "backup (it holds the query id), or delete .metadata.crc to accept a new query id")
        for log_name, files in (("offsets", self.offset_files), ("commits", self.commit_files)):
            for n in sorted(self.crc_ids.get(log_name, set()) - set(files)):
                will_write = n > latest if log_name == "offsets" else n >= latest
                if not will_write:
                    continue
                rel = f"{log_name}/.{n}.crc"
                self._problem(CHECKPOINT_CORRUPT, rel,
                              f"{rel} is the checksum of a deleted {log_name}/{n}: Spark's next write of batch {n} "
                              f"fails with FileAlreadyExistsException; delete {rel} too (remove batch files "
                              f"together with their .crc)")

    # ---- structure (listings only: cheap, and catches what no single file shows)

    def _check_structure(self, offset_ids: list[int], commit_ids: list[int]) -> None:
        latest = self.latest
        offsets, commits = set(offset_ids), set(commit_ids)
        if latest is None:
            if commit_ids:
                span = _fmt(_runs(commit_ids))
                self._problem(CHECKPOINT_CORRUPT, "commits",
                              f"commits/{span} exist but offsets/ is empty: restore offsets/ from a backup "
                              f"(removing commits/ instead restarts at batch 0 from sources/: a full replay)")
            return

        if latest > 0 and latest - 1 not in offsets:
            below = [i for i in offset_ids if i < latest - 1]
            if below:
                keep = below[-1]
                above = sorted({i for i in offset_ids + commit_ids if i > keep})
                repair = (f"restore offsets/{latest - 1} from a backup, or remove the offsets/ and "
                          f"commits/ files above {keep} ({_fmt(_runs(above))}) so Spark resumes after "
                          f"batch {keep}")
            else:
                repair = f"restore offsets/{latest - 1} from a backup"
            have_commits = f"commits {_fmt(_runs(commit_ids))}" if commit_ids else "no commits"
            self._problem(CHECKPOINT_CORRUPT, f"offsets/{latest - 1}",
                          f"offsets gap at {latest - 1} (have offsets {_fmt(_runs(offset_ids))}; "
                          f"{have_commits}): Spark needs offsets/{latest - 1} to restart batch {latest} "
                          f"(only a query run with asyncProgressTrackingEnabled, which logs some batches "
                          f"only, restarts without it): {repair}")

        upto_latest = bisect.bisect_right(commit_ids, latest)
        ahead = commit_ids[upto_latest:]
        if ahead:
            span = _fmt(_runs(ahead))
            self._problem(CHECKPOINT_CORRUPT, f"commits/{ahead[0]}",
                          f"commits/{span} newer than the newest offsets/{latest} (commits ahead of "
                          f"offsets; Spark would fail with CONCURRENT_STREAM_LOG_UPDATE): restore "
                          f"offsets/{span} from a backup, or remove commits/{span} so Spark resumes after "
                          f"batch {latest}")

        oldest = offset_ids[0]
        offsets_whole = offset_ids[-1] - oldest + 1 == len(offset_ids)  # no gap: the usual case, O(1)
        orphans = [] if offsets_whole else [i for i in commit_ids if oldest < i < latest - 1 and i not in offsets]
        if orphans:
            span = _fmt(_runs(orphans))
            self._problem(CHECKPOINT_CORRUPT, f"commits/{orphans[0]}",
                          f"commits/{span} without offsets/{span}: restore offsets/{span} from a backup "
                          f"(Spark does not read them to restart, but lag history and backups do)")
        purged = commit_ids[:bisect.bisect_left(commit_ids, oldest)]
        if purged:
            self._problem(LOG_GAP, f"commits/{purged[0]}",
                          f"commits/{_fmt(_runs(purged))} are older than the oldest offsets/{oldest} (an "
                          f"interrupted purge); Spark ignores them: nothing to repair, backups may skip them")
        holes = [r for r in _gaps(offset_ids, oldest, latest - 1) if not _covers(commits, r)]
        if holes:
            self._problem(LOG_GAP, f"offsets/{holes[0][0]}",
                          f"offsets/ has no files for batches {_fmt(holes)} inside the retained range "
                          f"{oldest}-{latest}: Spark does not need them to restart, but the lag history "
                          f"has a hole (expected only with asyncProgressTrackingEnabled)")

        self._check_uncommitted(offset_ids, commit_ids, offsets, commit_ids[upto_latest - 1] if upto_latest else None)

    def _check_uncommitted(self, offset_ids: list[int], commit_ids: list[int], offsets: set[int],
                           done: int | None) -> None:
        """Batches planned but never committed below the newest, and holes in commits/ (``done``: newest commit
        at or below the newest offsets)."""
        latest = self.latest
        if latest is None:    # no offsets at all: _check_structure said so already
            return
        # No commits/ folder at all is Spark 2.1's layout (it wrote none): Spark restarts it by re-running
        # batch L from offsets/L-1 (MicroBatchExecution: "no commit log present"), a pending batch.
        # An empty commits/ is not: Spark 2.2+ commits every batch, so its files were removed.
        legacy = getattr(self, "commit_log_absent", False)
        if (done is None and latest > 0 and not legacy) or (done is not None and done < latest - 1):
            first = 0 if done is None else done + 1
            # Only batches with an offsets/ file were planned; a hole is reported as a gap above.
            uncommitted = [i for i in offset_ids[bisect.bisect_left(offset_ids, first):] if i < latest]
            if uncommitted:
                first = uncommitted[0]
                drop = [i for i in offset_ids if i > first]
                repair = (f"remove offsets/{_fmt(_runs(drop))} so Spark re-runs batch {first} with its "
                          f"recorded range and re-plans the rest")
                state = "no batch is committed" if done is None else f"commits end at batch {done}"
                self._problem(CHECKPOINT_CORRUPT, f"commits/{first}",
                              f"{state} but offsets/ at {latest}: batches {_fmt(_runs(uncommitted))} were "
                              f"planned without being committed and Spark would re-run only batch {latest}: "
                              f"{repair}")
        if done is not None:
            missing = [r for r in _gaps(commit_ids, commit_ids[0], done) if _covers(offsets, r)]
            if missing:
                self._problem(LOG_GAP, f"commits/{missing[0][0]}",
                              f"commits/ has no files for batches {_fmt(missing)} below the newest commit "
                              f"{done}: Spark does not read them to restart, but audits and backups see a "
                              f"hole")

    def _check_empty_history(self, offset_ids: list[int], commit_ids: list[int]) -> None:
        """Zero-byte batch files among the newest :data:`EMPTY_CHECK_BATCHES` of each log are damage too
        (S09), beyond the files read anyway (which are checked by being parsed).

        Why a window and not the whole history: Spark reads only offsets/L, L-1 and C and commits/C to
        restart, and a size costs a ``stat`` per file on local disk (20,000 in a 10,000-batch history,
        most of validate's time there). The window is what Spark keeps by default; older files are
        still listed (gaps, orphans) but not sized, and the lag history checks every file it reads.
        """
        latest, committed = self.latest, self.committed
        read_anyway = {latest, committed, latest - 1 if latest else None}
        for kind, ids, skip in (("offsets", offset_ids, read_anyway), ("commits", commit_ids, {committed})):
            for batch_id in ids[-EMPTY_CHECK_BATCHES:]:
                if batch_id in skip:
                    continue
                info = self._batch_info(kind, batch_id)
                if info.get("type") == "file" and info.get("size") == 0:
                    if kind == "offsets":
                        self.bad_offsets.add(batch_id)
                    self._damaged(kind, batch_id, "is empty (a truncated write)")

    # ---- cross-file checks

    def _check_source_consistency(self) -> None:
        """Spark matches v1 source lines by position: a changed count or kind breaks the restart."""
        latest = self.latest
        if latest is None or latest not in self.offsets:
            return
        newest = self.offsets[latest]
        for other_id in sorted({i for i in (latest - 1, self.committed) if i is not None and i < latest}):
            other = self.offsets.get(other_id)
            if other is None or newest.version != 1 or other.version != 1:
                continue  # v2 names its sources, and sources may legally come and go there
            if other.source_count != newest.source_count:
                detail = (f"offsets/{latest} has {newest.source_count} source(s) but offsets/{other_id} has "
                          f"{other.source_count}")
            else:
                changed = [sid for sid in newest.raw_sources
                           if "void" not in (_source_kind(newest, sid), _source_kind(other, sid))
                           and _source_kind(newest, sid) != _source_kind(other, sid)]
                if not changed:
                    continue
                sid = changed[0]
                detail = (f"source {sid} is {_source_kind(newest, sid)} in offsets/{latest} but "
                          f"{_source_kind(other, sid)} in offsets/{other_id}")
            if latest not in self.commit_files:
                repair = (f"drop the uncommitted last file offsets/{latest} only (it has no "
                          f"commits/{latest}); Spark will re-plan batch {latest} with the current query")
            else:
                repair = "restore the checkpoint from a backup, or reset it"
            self._problem(CHECKPOINT_CORRUPT, f"offsets/{latest}",
                          f"{detail}: the query's sources changed mid-checkpoint: {repair}")
            return


def _source_kind(batch: BatchOffsets, source_id: str) -> str:
    raw = batch.raw_sources.get(source_id)
    if raw is None:
        return "void"
    return "Kafka" if batch.sources.get(source_id) is not None else "not Kafka"


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted ids as inclusive runs: [0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _gaps(present: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Inclusive runs of ids in ``[lo, hi)`` missing from sorted ``present``; O(len(present)), so
    absurd ids (a file named 9223372036854775807) cannot make it enumerate a huge range."""
    if present and present[0] <= lo and present[-1] >= hi - 1 and present[-1] - present[0] + 1 == len(present):
        return []  # sorted unique ids without a hole that span the range: O(1) for a whole log
    gaps: list[tuple[int, int]] = []
    expected = lo
    for i in present:
        if i >= hi:
            break
        if i > expected:
            gaps.append((expected, i - 1))
        expected = max(expected, i + 1)
    if expected < hi:
        gaps.append((expected, hi - 1))
    return gaps


def _covers(ids: set[int], run: tuple[int, int]) -> bool:
    """Whether any id of the run is in ``ids`` (runs can be huge: check whichever side is smaller)."""
    lo, hi = run
    if hi - lo < len(ids):
        return any(i in ids for i in range(lo, hi + 1))
    return any(lo <= i <= hi for i in ids)


def _fmt(runs: list[tuple[int, int]]) -> str:
    """Runs for messages: ``3``, ``3-5``, ``0-4,7,9-12`` (long lists are elided in the middle)."""
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(parts) > 6:
        parts = [*parts[:3], "…", *parts[-2:]]
    return ",".join(parts)
