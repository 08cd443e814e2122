"""CPU priority of background work in the job's processes: Linux keeps a niceness per thread, and raising one's
own needs no privilege, so a background thread can yield the cores to the work a micro-batch waits for."""

from __future__ import annotations

import contextlib
import os
import threading


def lower_current_thread_priority(niceness: int) -> None:
    """Raise the calling thread's niceness by ``niceness`` (at most 19); a no-op where the OS has no such thing."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the usual priority
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
