"""Is a process still there? Used to break a lock or a lease left by a killed process."""

from __future__ import annotations

import contextlib
import os


def pid_alive(pid: int) -> bool:
    """True if a process with ``pid`` exists on this host (zombies count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as fh:
        if fh.read().split(")")[-1].split()[0] == "Z":
            return False
    return True
