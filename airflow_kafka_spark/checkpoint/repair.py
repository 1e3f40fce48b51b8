"""The repair for a damaged batch file, chosen by where the file sits in the log (S09).

Which file is damaged decides what is safe: an uncommitted last ``offsets/L`` can be dropped (Spark
re-plans batch L), a committed one must be restored (re-planning would read other offsets), a
``commits/C`` at the head can be removed (Spark re-runs C with the same offsets: a replay for the
sink), and older files are history Spark does not read to restart.
"""

from __future__ import annotations


def damaged_batch_repair(
    kind: str, batch_id: int, *, latest: int | None, committed: int | None, has_commit: bool
) -> str:
    """The one repair for ``<kind>/<batch_id>`` (``offsets`` or ``commits``); ``latest`` = L,
    ``committed`` = C, ``has_commit``: whether ``commits/<batch_id>`` exists."""
    if kind == "offsets":
        if batch_id == latest and not has_commit:
            start = f"the end of batch {batch_id - 1}" if batch_id > 0 else "sources/ or startingOffsets"
            return (
                f"drop the uncommitted last file offsets/{batch_id} only (it has no "
                f"commits/{batch_id}); Spark will re-plan batch {batch_id} from {start}"
            )
        if batch_id == latest:
            return (
                f"batch {batch_id} is committed, so it must not be re-planned: restore offsets/{batch_id} from a backup"
            )
        if latest is not None and batch_id == latest - 1:
            return f"Spark reads offsets/{batch_id} to restart batch {latest}: restore it from a backup"
        return f"restore offsets/{batch_id} from a backup (Spark does not read it to restart; history and backups do)"
    if batch_id == committed and batch_id == latest:
        return (
            f"remove commits/{batch_id} only; Spark will re-run batch {batch_id} with the same "
            f"offsets (a replay for the sink)"
        )
    if batch_id == committed and latest is not None and batch_id == latest - 1:
        return (
            f"remove commits/{batch_id} and the uncommitted offsets/{latest}; Spark will re-run "
            f"batch {batch_id} with the same offsets and re-plan batch {latest}"
        )
    if batch_id == committed:
        return f"restore commits/{batch_id} from a backup"
    return f"committed history: restore commits/{batch_id} from a backup (Spark does not read it to restart)"
