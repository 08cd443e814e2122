"""Memory hygiene of the streaming job's long-lived processes (Python workers, driver): the
cyclic GC paused while a batch allocates, long-lived state kept out of its scans, and freed heap given back to
the OS after big batches. No Spark import."""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("elrwatch.stream")


def release_memory() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    After a big batch (the initial load, a storm) the Python processes keep their freed heap: CPython returns
    empty arenas, but the malloc'd blocks of big lists and documents stay in glibc's heap, counted in RSS, and
    pyarrow's default pool (mimalloc) keeps the buffers of a 250k-row batch (~165 MB measured) until released.
    """
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - glibc only
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:  # Arrow's own pool (mimalloc by default) keeps freed buffers until asked
        arrow.default_memory_pool().release_unused()


_LIBC: Any = None
TRIM_AFTER_ROWS = 20_000  # batches at least this big release their memory afterwards
#: Python workers allocate Arrow buffers from the system allocator: Spark converts a state task's output to Arrow
#: after the task's own release_memory(), and glibc returns such big blocks to the OS when they are freed.
ARROW_POOL_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC for a block that allocates many young objects and makes no cycles worth collecting
    (unpickling a bucket's state, a batch's documents, the driver's decoding): the collections they would
    trigger cost 45% of the apply + documents time (measured)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def keep_out_of_gc(collect_first: bool = False) -> None:
    """Move what survived into the GC's permanent generation (a bucket's long-lived state: the cyclic GC would
    scan it at every full collection); ``collect_first``: collect this batch's garbage cycles before."""
    if collect_first:
        gc.collect()
    gc.freeze()


def trim_after_big_batch(rows: int, collect_first: bool = True) -> None:
    """After a batch of at least TRIM_AFTER_ROWS rows: collect its cycles and give the freed heap back to the
    OS (`release_memory`)."""
    if rows < TRIM_AFTER_ROWS:
        return
    if collect_first:
        gc.collect()
    release_memory()


#: How often the driver asks Spark's JVM to give back the heap it does not need (`JvmHeapTrim`).
JVM_HEAP_TRIM_S = 300.0


class JvmHeapTrim:
    """Every ``interval_s`` seconds, ``collect()``: Spark's driver JVM runs ``System.gc()``, which its options
    (``-XX:+ExplicitGCInvokesConcurrent``, accelerators.G1_RETURN_HEAP_OPTIONS) make a concurrent G1 cycle whose
    remark shrinks the committed heap to ``MaxHeapFreeRatio`` above what is live and returns the rest to the OS
    (a pause of milliseconds).

    Without it G1 only grows a busy JVM's heap: its periodic collection waits for a quiet interval that a
    job with a batch a second never has, and the heap shrinks only after a marking cycle, which a small live set
    never starts. In a 2-hour soak (bench/soak.py) the job JVM's committed heap stepped up with each burst of load
    (404 → 535 MB) and its RSS filled it in, ≈ 5 MB a minute, while everything else the JVM accounts for
    (Native Memory Tracking) stayed flat. A failure is logged once and never raised."""

    def __init__(
        self,
        collect: Callable[[], Any],
        interval_s: float = JVM_HEAP_TRIM_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.collect = collect
        self.interval_s = interval_s
        self.clock = clock
        self.last = clock()
        self.failed = False

    def tick(self) -> bool:
        """From the driver's wait loop: collect if ``interval_s`` passed since the last time. True if it did."""
        now = self.clock()
        if now - self.last < self.interval_s:
            return False
        self.last = now
        try:
            self.collect()
        except Exception as exc:  # the JVM going away is reported by the query's loop
            if not self.failed:
                log.warning("asking Spark's JVM to return unused heap failed (%s); its memory may stay high", exc)
            self.failed = True
            return False
        return True
