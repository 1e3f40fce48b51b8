"""An interrupted reset/restore is a BLOCK finding: the verdict reads the journal file, never runs it.

Why here: validate, the audit, ``aks lag`` and the UI all judge a checkpoint through the verdict, so
a killed reset/restore is never reported as PASS. Finishing or refusing the operation is
``ops.recover``'s job; this module only reports it.
"""

from __future__ import annotations

from airflow_kafka_spark._util.fs import Location, exists, open_location
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.lifecycle.journal import INTERRUPTED_OPERATION, Journal, journal_location
from airflow_kafka_spark.verdict.findings import BLOCK, Finding


def interrupted_finding(checkpoint_location: str | Location, storage_options: dict | None = None) -> Finding | None:
    """The BLOCK finding for a journal beside ``checkpoint_location`` (None without one).

    An unreadable journal is a BLOCK too: it still records an interruption.
    """
    ck = checkpoint_location if isinstance(checkpoint_location, Location) else open_location(
        checkpoint_location, storage_options, what="checkpoint location")
    loc = journal_location(ck)
    if not exists(loc):
        return None
    try:
        journal = Journal.load(ck)
    except UserError as exc:
        return Finding(INTERRUPTED_OPERATION, BLOCK, message=str(exc),
                       fix=f"inspect {loc.url}; move it away only once you know the checkpoint and the lifecycle "
                           "record are as they should be")
    if journal is None:
        return None
    done = ", ".join(str(s) for s in journal.doc.get("done", [])) or "none"
    aside = journal.payload.get("aside")
    return Finding(
        INTERRUPTED_OPERATION, BLOCK,
        message=(f"an interrupted {journal.op} ({journal.operation_id}) of this checkpoint is recorded in "
                 f"{loc.url} (steps done: {done}); finishing it moves the checkpoint "
                 f"{'to ' + str(aside) if aside else 'away'} — starting the job now would run on a checkpoint "
                 "that is about to be replaced"),
        fix=(f"finish it by re-running aks {journal.op} --checkpoint {ck.url} (it resumes the interrupted one "
             f"first), or abandon it by moving {loc.url} away while no job runs"))
