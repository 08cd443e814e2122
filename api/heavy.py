"""Heavy queries (whose cost grows with the store: the what-if) run under two bounds, so that a page left open or a
script cannot pin the API's worker threads:

* **slots**: at most ``heavy_query_slots`` run at once; one more is answered at once with 503 problem+json and a
  ``Retry-After`` header, never queued;
* **a time limit**: the query checks its `Deadline` as it goes (every few thousand partitions, between its stages)
  and ends with a one-line 503 problem once ``heavy_query_timeout_seconds`` have passed, freeing its thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from elrwatch.api.errors import ApiError


class QueryTimeout(Exception):
    """A heavy query ran past its time limit (raised by `Deadline.check`)."""


class Deadline:
    """When a heavy query must stop; `check` raises QueryTimeout past it (cheap: call it in loops)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def check(self) -> None:
        """Raise QueryTimeout once the time limit has passed."""
        if self.at is not None and time.monotonic() > self.at:
            raise QueryTimeout(f"stopped after the {self.seconds:g} s limit")


#: No limit (the CLI and tests call the what-if without one).
NO_DEADLINE = Deadline(None)


class HeavyQueries:
    """The slots and time limit of heavy queries (one per app)."""

    def __init__(self, slots: int, timeout_seconds: float) -> None:
        self.slots = slots
        self.timeout_seconds = timeout_seconds
        self._free = threading.BoundedSemaphore(slots)
        self.rejected = 0  # answered 503 because every slot was taken
        self.timed_out = 0

    @contextmanager
    def slot(self, what: str) -> Iterator[Deadline]:
        """Hold a slot while the block runs (503 with Retry-After when none is free); a QueryTimeout raised in the
        block becomes a one-line 503 problem."""
        if not self._free.acquire(blocking=False):
            self.rejected += 1
            retry = max(1, min(30, round(self.timeout_seconds / 4)))
            raise ApiError(
                503,
                "Busy",
                f"{self.slots} {what} queries are running (--heavy-query-slots): retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )
        try:
            yield Deadline(self.timeout_seconds)
        except QueryTimeout as exc:
            self.timed_out += 1
            raise ApiError(
                503, "Time limit reached", f"the {what} {exc} (--heavy-query-timeout-seconds); ask for fewer brokers"
            ) from None
        finally:
            self._free.release()
