"""``sources/<n>/0`` (Kafka's resolved starting offsets) and whether the query keeps state.

A mixin of the reader's one pass over a checkpoint.
"""

from __future__ import annotations

from airflow_kafka_spark.checkpoint.formats import (
    MAX_LOG_FILE_BYTES,
    UnsupportedLogVersionError,
    error_detail,
    parse_initial_offsets_file,
)
from airflow_kafka_spark.checkpoint.model import CHECKPOINT_CORRUPT, INITIAL_OFFSETS_UNREADABLE
from airflow_kafka_spark.errors import CheckpointFormatError
from airflow_kafka_spark.kafka.offsets import PartitionOffsets


class SourcesAndState:
    """Initial offsets per source and state detection; needs the reader's listing and reading helpers."""

    # ---- sources and state

    def _initial_offsets(self, root_entries: dict[str, dict]) -> dict[str, PartitionOffsets]:
        """Kafka's resolved starting offsets per source; other sources' logs there are skipped."""
        info = root_entries.get("sources")
        if info is None or not self._is_dir("sources", info):
            return {}
        kafka_ids = {sid for batch in self.offsets.values() for sid, offs in batch.sources.items()
                     if offs is not None}
        out: dict[str, PartitionOffsets] = {}
        for source_id, entry in sorted(self._ls("sources").items()):
            rel_dir = f"sources/{source_id}"
            if source_id.startswith(".") or self._type(rel_dir, entry) != "directory":
                continue
            files = self._ls(rel_dir)
            self._note_strays(rel_dir, files)
            if "0" not in files:
                continue
            rel = f"{rel_dir}/0"
            why = self._not_a_file(rel, files["0"])
            size = files["0"].get("size")
            if why is None and isinstance(size, int) and size > MAX_LOG_FILE_BYTES:
                self._bad_initial_offsets(rel_dir, f"is {size:,} bytes, larger than any offsets file Spark "
                                                   f"writes (limit {MAX_LOG_FILE_BYTES:,})")
                continue
            try:
                data = b"" if why else self._read_file(rel)
            except IsADirectoryError:
                data, why = b"", "is a directory, not a file"
            if data is None:
                continue
            try:
                if not data:
                    raise CheckpointFormatError(f"{rel} {why or 'is empty'}")
                offsets = parse_initial_offsets_file(data, what=rel, kafka=source_id in kafka_ids)
            except UnsupportedLogVersionError as exc:
                self._unsupported(rel, exc)
                continue
            except CheckpointFormatError as exc:
                self._bad_initial_offsets(rel_dir, error_detail(exc, rel))
                continue
            if offsets is not None:
                out[source_id] = offsets
        return out

    def _bad_initial_offsets(self, rel_dir: str, detail: str) -> None:
        rel = f"{rel_dir}/0"
        if self.committed is None:
            self._problem(CHECKPOINT_CORRUPT, rel,
                          f"{rel} (the Kafka starting offsets) {detail}, and Spark reads it until the "
                          f"first commit: remove {rel_dir}/ and set startingOffsets explicitly, or restore "
                          f"it from a backup")
        else:
            self._problem(INITIAL_OFFSETS_UNREADABLE, rel,
                          f"{rel} (the Kafka starting offsets) {detail}; Spark reads it again only if "
                          f"offsets/ is wiped: restore it from a backup before any such reset")

    def _has_state(self, root_entries: dict[str, dict]) -> bool:
        """True at the first file found under state/ (state can be huge: never walk all of it)."""
        info = root_entries.get("state")
        if info is None:
            return False
        if not self._is_dir("state", info):
            return True
        pending = ["state"]
        while pending:
            rel = pending.pop()
            for name, entry in self._ls(rel).items():
                child = f"{rel}/{name}"
                if self._type(child, entry) != "directory":
                    return True
                pending.append(child)
        return False
