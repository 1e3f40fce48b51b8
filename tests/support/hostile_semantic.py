"""The hand-named hostile variants of the corpus (the payload × target matrix is in :mod:`hostile`).

Why separate: these are the attacks that need to know a format — a re-sealed manifest whose paths
climb out of the checkpoint, a journal that points a roll-forward at another folder, a lifecycle
record naming another cluster, a catalog holding a FIFO — rather than bytes thrown at a file.
Each function returns a group of :class:`~tests.support.hostile.Variant`; names are ``group__what``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.support.hostile import (
    DEPTH,
    Sandbox,
    Variant,
    clear,
    deep_dict,
    deep_list,
    fifo,
    link,
    put,
    sparse,
    write_json,
)

NEWER = "20991231T235959000Z-"        # sorts after every real backup id: becomes "latest"
READERS = frozenset({"restore-dry", "restore", "verify"})
CK_COMMANDS = frozenset({"validate", "restore-dry", "reset-dry", "backup", "restore"})
STORE_COMMANDS = frozenset({"backups", "verify", "restore-dry", "reset-dry", "backup", "restore"})


def _v(name: str, build: Callable[[Sandbox], None], **kw) -> Variant:
    return Variant(name, build, **kw)


# --------------------------------------------------------------------------------------------------
# the checkpoint
# --------------------------------------------------------------------------------------------------

def _source_line(line: Callable[[Sandbox], str], meta: str | None = None, header: str = "v1") -> Callable:
    def build(sb: Sandbox) -> None:
        path = sb.ck / "offsets" / "2"
        lines = path.read_text().split("\n")
        lines[0] = header
        if meta is not None:
            lines[1] = meta
        lines[2] = line(sb)
        put(path, "\n".join(lines))
    return build


def _copy_dir_out(sb: Sandbox, rel: str, *, empty: bool = False) -> None:
    target = sb.outside / f"copy-of-{rel.replace('/', '-')}"
    if empty:
        target.mkdir(parents=True)
    else:
        shutil.copytree(sb.ck / rel, target)
    link(sb.ck / rel, target)


def _replace_ck(kind: str) -> Callable[[Sandbox], None]:
    def build(sb: Sandbox) -> None:
        clear(sb.ck)
        {"fifo": lambda: fifo(sb.ck), "file": lambda: put(sb.ck, b'{"id":"x"}'),
         "dev_zero": lambda: link(sb.ck, "/dev/zero"), "broken": lambda: link(sb.ck, sb.outside / "gone"),
         "empty": lambda: sb.ck.mkdir()}[kind]()
    return build


def checkpoint_variants() -> list[Variant]:
    bad_lines = {
        "empty_object": lambda sb: "{}",
        "topic_without_partitions": lambda sb: json.dumps({sb.topic: {}}),
        "string_offset": lambda sb: json.dumps({sb.topic: {"0": "x", "1": 30}}),
        "negative_offset": lambda sb: json.dumps({sb.topic: {"0": -5, "1": 30}}),
        "float_offset": lambda sb: json.dumps({sb.topic: {"0": 1e300, "1": 30}}),
        "huge_offset": lambda sb: json.dumps({sb.topic: {"0": 2**70, "1": 30}}),
        "traversal_topic": lambda sb: json.dumps({"../../outside/x": {"0": 30}}),
        "nul_in_topic": lambda sb: json.dumps({sb.topic + "\x00x": {"0": 30, "1": 30}}),
        "partition_not_number": lambda sb: json.dumps({sb.topic: {"zero": 30, "1": 30}}),
        "deep_source": lambda sb: deep_dict().decode(),
        "list_source": lambda sb: "[1,2]",
    }
    out = [_v(f"ck__offsets_latest_{k}", _source_line(f), must_not_pass=True) for k, f in bad_lines.items()]
    out += [
        _v("ck__offsets_latest_version_999", _source_line(lambda sb: json.dumps({sb.topic: {"0": 30, "1": 30}}),
                                                         header="v999"), must_not_pass=True),
        _v("ck__offsets_latest_meta_deep", _source_line(lambda sb: json.dumps({sb.topic: {"0": 30, "1": 30}}),
                                                       meta=deep_list().decode()), must_not_pass=True),
        _v("ck__offsets_latest_meta_wrong_types",
           _source_line(lambda sb: json.dumps({sb.topic: {"0": 30, "1": 30}}),
                        meta='{"batchWatermarkMs":"x","batchTimestampMs":[],"conf":5}'), must_not_pass=True),
        _v("ck__offsets_many_sources", lambda sb: put(sb.ck / "offsets" / "2",
                                                       "v1\n{}\n" + "\n".join(["-"] * 10_000))),
        _v("ck__offsets_newer_fifo", lambda sb: fifo(sb.ck / "offsets" / "3"), must_not_pass=True),
        _v("ck__commits_newer_fifo", lambda sb: fifo(sb.ck / "commits" / "3"), must_not_pass=True),
        _v("ck__commits_newer_dev_zero", lambda sb: link(sb.ck / "commits" / "3", "/dev/zero"), must_not_pass=True),
        _v("ck__offsets_newer_dev_urandom", lambda sb: link(sb.ck / "offsets" / "3", "/dev/urandom"),
           must_not_pass=True),
        _v("ck__offsets_newer_broken_link", lambda sb: link(sb.ck / "offsets" / "3", sb.outside / "gone")),
        _v("ck__offsets_newer_link_in_checkpoint", lambda sb: link(sb.ck / "offsets" / "3", "2")),
        _v("ck__offsets_huge_batch_id", lambda sb: shutil.copy(sb.ck / "offsets" / "2",
                                                                sb.ck / "offsets" / ("9" * 30))),
        _v("ck__offsets_negative_batch_id", lambda sb: shutil.copy(sb.ck / "offsets" / "2", sb.ck / "offsets" / "-1")),
        _v("ck__offsets_name_newline", lambda sb: shutil.copy(sb.ck / "offsets" / "2", sb.ck / "offsets" / "3\n")),
        _v("ck__offsets_name_glob", lambda sb: shutil.copy(sb.ck / "offsets" / "2", sb.ck / "offsets" / "[0-9]")),
        _v("ck__offsets_tmp_fifo", lambda sb: fifo(sb.ck / "offsets" / ".3.tmp")),
        _v("ck__offsets_crc_fifo", lambda sb: fifo(sb.ck / "offsets" / ".2.crc")),
        _v("ck__fifo_unknown_name", lambda sb: fifo(sb.ck / "not-spark")),
        _v("ck__fifo_state_file", lambda sb: fifo(sb.ck / "state" / "0" / "0" / "1.delta")),
        _v("ck__fifo_sources_other", lambda sb: fifo(sb.ck / "sources" / "0" / "1")),
        _v("ck__link_unknown_to_secret", lambda sb: link(sb.ck / "notes", sb.outside / "secret.txt")),
        _v("ck__link_state_to_dev_zero", lambda sb: link(sb.ck / "state" / "0" / "0" / "1.delta", "/dev/zero")),
        _v("ck__link_state_dir_out", lambda sb: (sb.ck.joinpath("state").mkdir(),
                                                 link(sb.ck / "state" / "0", sb.outside))),
        _v("ck__link_offsets_dir_out", lambda sb: _copy_dir_out(sb, "offsets")),   # Spark reads through it too
        _v("ck__link_commits_dir_out_empty", lambda sb: _copy_dir_out(sb, "commits", empty=True), must_not_pass=True),
        _v("ck__link_sources_dir_out", lambda sb: _copy_dir_out(sb, "sources")),
        _v("ck__link_offsets_dir_loop", lambda sb: link(sb.ck / "offsets" / "loop", "..")),
        _v("ck__metadata_id_number", lambda sb: put(sb.ck / "metadata", '{"id":5}'), must_not_pass=True),
        _v("ck__metadata_id_traversal", lambda sb: put(sb.ck / "metadata", '{"id":"../../outside/x"}')),
        _v("ck__huge_offsets_newer", lambda sb: sparse(sb.ck / "offsets" / "3", (sb.ck / "offsets" / "2").read_bytes()),
           must_not_pass=True),
        _v("ck__is_fifo", _replace_ck("fifo"), must_not_pass=True, must_refuse=CK_COMMANDS),
        _v("ck__is_file", _replace_ck("file"), must_not_pass=True, must_refuse=CK_COMMANDS),
        _v("ck__is_link_dev_zero", _replace_ck("dev_zero"), must_not_pass=True, must_refuse=CK_COMMANDS),
        _v("ck__is_broken_link", _replace_ck("broken")),
        _v("ck__is_empty_dir", _replace_ck("empty")),
    ]
    return out


# --------------------------------------------------------------------------------------------------
# the lifecycle record and the operation journal
# --------------------------------------------------------------------------------------------------

def _record(edit: Callable[[Sandbox, dict], None], raw: Callable[[Sandbox, str], str] | None = None) -> Callable:
    def build(sb: Sandbox) -> None:
        doc = json.loads(sb.record.read_bytes())
        edit(sb, doc)
        text = json.dumps(doc, indent=2)
        put(sb.record, raw(sb, text) if raw else text)
    return build


def _set(**fields) -> Callable[[Sandbox, dict], None]:
    return lambda sb, doc: doc.update({k: (v(sb) if callable(v) else v) for k, v in fields.items()})


def _deep_in(key: str) -> Callable:
    return _record(_set(**{key: "__DEEP__"}), lambda sb, text: text.replace('"__DEEP__"', deep_list().decode()))


def _topic_id(sb: Sandbox, doc: dict) -> None:
    for t in doc.get("topics", {}).values():
        t["topic_id"] = "AAAAAAAAAAAAAAAAAAAAAA"


def record_variants() -> list[Variant]:
    live_lease = {"holder": "someone-else", "run_id": "run-1", "expires_at_ms": 4_102_444_800_000}
    return [
        _v("record__next_starting_offsets_deep_json", _deep_in("next_starting_offsets")),
        _v("record__next_starting_offsets_deep_string",
           _record(_set(next_starting_offsets=lambda sb: deep_list().decode()))),
        _v("record__next_starting_offsets_empty", _record(_set(next_starting_offsets="{}"))),
        _v("record__next_starting_offsets_garbage", _record(_set(next_starting_offsets="not json"))),
        _v("record__history_deep", _deep_in("history")),
        _v("record__extra_key_deep", _deep_in("x_extra")),
        _v("record__checkpoint_location_traversal", _record(_set(checkpoint_location="../../outside"))),
        _v("record__checkpoint_location_other", _record(_set(checkpoint_location=lambda sb: str(sb.other)))),
        _v("record__job_name_traversal", _record(_set(job_name="../../etc"))),
        _v("record__job_name_newline", _record(_set(job_name="orders\n"))),
        _v("record__lease_held_by_other", _record(_set(lease=live_lease)), must_not_pass=True,
           must_refuse=frozenset({"backup", "restore"})),
        _v("record__other_cluster", _record(_set(kafka_cluster_id="another-cluster-id")), must_not_pass=True),
        _v("record__topic_recreated", _record(_topic_id), must_not_pass=True),
        _v("record__format_future", _record(_set(format=999)), must_not_pass=True),
        _v("record__revision_string", _record(_set(revision="x"))),
        _v("record__history_large", _record(_set(history=[{"event": "x", "at_ms": i} for i in range(100_000)]))),
        _v("record__lock_fifo", lambda sb: fifo(Path(f"{sb.record}.lock"))),
    ]


def _journal(op: str, payload: Callable[[Sandbox], dict], **top) -> Callable[[Sandbox], None]:
    def build(sb: Sandbox) -> None:
        doc = {"format": 1, "op": op, "operation_id": "20260101T000000Z-abcdef", "checkpoint": str(sb.ck),
               "created_at_ms": 1_767_225_600_000, "done": [], "payload": payload(sb)}
        doc.update({k: (v(sb) if callable(v) else v) for k, v in top.items()})
        shutil.copytree(sb.ck, sb.outside / "stage")         # a plausible checkpoint to be moved in
        write_json(sb.journal, doc)
    return build


def _reset_payload(sb: Sandbox, **over) -> dict:
    pl = {"job": "orders", "actor": "x", "request": {"mode": "preserve"}, "backup_root": str(sb.root),
          "backup_id": sb.backup_id, "aside": f"{sb.ck}.reset-20260101T000000Z-abcdef", "sink_output": None,
          "sink_aside": None, "starting_offsets": json.dumps({sb.topic: {"0": 30, "1": 30}}),
          "old_query_id": None, "skipped": 0, "replayed": 0, "pending_replay": 0, "plan": {}}
    pl.update({k: sb.subst(v) if isinstance(v, str) else v for k, v in over.items()})
    return pl


def _restore_payload(staging: str, aside: str) -> Callable[[Sandbox], dict]:
    return lambda sb: {"staging": sb.subst(staging), "aside": sb.subst(aside), "backup_id": sb.backup_id,
                       "actor": "x"}


def _guard(sb: Sandbox) -> dict:
    """What the journal's commit point records about the checkpoint (journal.checkpoint_marks)."""
    import hashlib

    return {"exists": True, "offsets": 2, "commits": 2,
            "metadata_sha256": hashlib.sha256((sb.ck / "metadata").read_bytes()).hexdigest()}


def _moved_on(sb: Sandbox) -> None:
    """The issue's trap: a journaled reset, then the job ran on (batch 3 planned and committed)."""
    _journal("reset", _reset_payload, guard=_guard)(sb)
    for d in ("offsets", "commits"):
        shutil.copy(sb.ck / d / "2", sb.ck / d / "3")


def _leased_after(sb: Sandbox) -> None:
    """A journaled reset, then a run was deployed and holds the lease."""
    _journal("reset", _reset_payload, guard=_guard)(sb)
    doc = json.loads(sb.record.read_bytes())
    doc["lease"] = {"holder": "deployer", "run_id": "run-2", "expires_at_ms": 4_102_444_800_000}
    write_json(sb.record, doc)


def journal_variants() -> list[Variant]:
    rows = {
        "restore_staging_outside": _journal("restore", _restore_payload("{outside}/stage", "{outside}/aside")),
        "restore_staging_traversal": _journal("restore", _restore_payload("{ck}/../../outside/stage",
                                                                          "{ck}/../../outside/aside")),
        "restore_staging_double_colon": _journal("restore", _restore_payload("{ck}::{outside}/stage",
                                                                             "{ck}.restore-x")),
        "restore_staging_relative": _journal("restore", _restore_payload("../outside/stage", "aside")),
        "reset_aside_outside": _journal("reset", lambda sb: _reset_payload(sb, aside="{outside}/aside")),
        "reset_backup_root_outside": _journal("reset", lambda sb: _reset_payload(sb, backup_root="{outside}")),
        "reset_sink_outside": _journal("reset", lambda sb: _reset_payload(
            sb, sink_output="{outside}", sink_aside="{outside}/moved")),
        "reset_starting_offsets_deep": _journal("reset", lambda sb: _reset_payload(
            sb, starting_offsets=deep_list().decode())),
        "other_checkpoint": _journal("restore", _restore_payload("{ck}.staging-x", "{ck}.restore-x"),
                                     checkpoint=lambda sb: str(sb.other)),
        "done_is_string": _journal("restore", _restore_payload("{outside}/stage", "{ck}.restore-x"),
                                   done="record in_place aside"),
        "format_future": _journal("reset", _reset_payload, format=999),
        "op_unknown": _journal("rm -rf", _reset_payload),
        "payload_not_object": _journal("reset", lambda sb: ["x"]),
    }
    out = [_v(f"journal__{k}", f, must_not_pass=True) for k, f in rows.items()]
    # finishing the interrupted reset (the real restore does that first) must refuse: it would move
    # a live checkpoint aside and restart from the older offsets
    out += [_v("journal__moved_on_after_journal", _moved_on, must_not_pass=True,
               must_refuse=frozenset({"restore", "restore-dry"})),
            _v("journal__lease_taken_after_journal", _leased_after, must_not_pass=True,
               must_refuse=frozenset({"restore"}))]
    out.append(_v("journal__operation_lock_fifo", lambda sb: fifo(Path(f"{sb.ck}.operation.lock"))))
    out.append(_v("journal__deep_payload", lambda sb: put(sb.journal, b'{"format":1,"op":"reset","payload":'
                                                          + deep_dict() + b"}"), must_not_pass=True))
    return out


# the manifest and backup-root variants are in hostile_store (this module stays small)
def manifest_variants() -> list[Variant]:
    from tests.support.hostile_store import manifest_variants as mv

    return mv()


def store_variants() -> list[Variant]:
    from tests.support.hostile_store import store_variants as sv

    return sv()


def argument_variants() -> list[Variant]:
    from tests.support.hostile_store import argument_variants as av

    return av()


def keyed_variants() -> list[Variant]:
    from tests.support.hostile_store import keyed_variants as kv

    return kv()


__all__ = [
    "CK_COMMANDS",
    "DEPTH",
    "NEWER",
    "READERS",
    "STORE_COMMANDS",
    "argument_variants",
    "checkpoint_variants",
    "journal_variants",
    "keyed_variants",
    "manifest_variants",
    "record_variants",
    "store_variants",
]
