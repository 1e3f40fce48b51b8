"""Crash points: a test hook that kills the process at a named step of an operation.

Call sites use ``faults.crash_point(...)`` (module attribute), so a test can wrap it with
``monkeypatch.setattr(faults, "crash_point", ...)``.
"""

from __future__ import annotations

import os
import signal

CRASH_ENV = "AKS_CRASH_AT"
_crash_counts: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this very process when ``$AKS_CRASH_AT`` names this point (crash-safety tests).

    ``AKS_CRASH_AT=backup.blob#3`` kills at the third time the point is passed; without ``#n`` at
    the first. A SIGKILL is the harshest interruption (no ``finally``, no atexit), which is what the
    operations must survive. Without the variable this is a dictionary lookup and nothing else.
    """
    spec = os.environ.get(CRASH_ENV)
    if not spec:
        return
    count = _crash_counts[name] = _crash_counts.get(name, 0) + 1
    for item in spec.split(","):
        point, _, nth = item.strip().partition("#")
        if point == name and (not nth or (nth.isdigit() and int(nth) == count)):
            os.kill(os.getpid(), signal.SIGKILL)
