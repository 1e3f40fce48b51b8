"""When this provider's triggers take their first look.

Both sensors look once on the worker before they defer, so a trigger's first look comes one poll
interval later, not at once. That also keeps the event out of a window Airflow does not survive
reliably: an event that lands before the scheduler has processed the deferring worker's exit can make
it fail the resumed task before any of the task's code runs (apache/airflow#72716, open in 3.3). Load
stretches that window (docs/reliability.md measures it), so this narrows the risk and the health
gate's retry is what closes it.
"""

from __future__ import annotations

import asyncio
import time


async def first_look(poll_interval_s: float, deadline_epoch_s: float | None = None) -> None:
    """Wait one poll interval (never past ``deadline_epoch_s``) before a trigger's first look."""
    wait = poll_interval_s if deadline_epoch_s is None else min(poll_interval_s, deadline_epoch_s - time.time())
    await asyncio.sleep(max(0.0, wait))
