"""One ``clearance up`` per state directory, and the CLI's way to tell a live one.

``clearance up`` holds an exclusive ``flock`` on ``<state>/up.lock`` for its whole life.
The kernel releases it when the process ends, however it ends (Ctrl-C, SIGTERM,
SIGKILL), so:

* a second ``clearance up`` on the same directory finds it held and refuses to start,
  naming the running one, instead of stopping that one's servers under it;
* a command run beside it trusts ``<state>/endpoints.json`` only while the lock is held:
  the file a killed ``up`` left behind is ignored, not followed to a dead server.

A pid file alone could not say this: pids are reused, and a killed process removes
nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

from clearance_api.errors import ClearanceError

LOCK = "up.lock"


class StateInUse(ClearanceError):
    """Another live ``clearance up`` holds the state directory."""


def hold(state: Path) -> IO[str]:
    """Take the state directory for this process (keep the returned file open for as long
    as it runs); :class:`StateInUse` naming the holder if another process has it."""
    handle = (state / LOCK).open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise StateInUse(
            f"another clearance up (pid {holder}) is running on {state}: stop it first, "
            f"or start this one with --state on another directory") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def held(state: Path) -> bool:
    """Whether a live process holds the state directory (so its endpoints are current)."""
    path = state / LOCK
    if not path.exists():
        return False
    with path.open("a") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(OSError):
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        return False
