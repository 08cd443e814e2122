"""Exactly-once admission (DESIGN.md §2): which records reach a handler at all, for every store alike.

A record is admitted once per position: an event at or below the last applied sequence of its source is a
duplicate. A snapshot's records move the snapshot end offset; afterwards a log record below it is covered (the
snapshot holds its effect). A record with a metadata offset meets the recent-offsets ring: the state keeps what it
applied at each of the last `RECENT_OFFSETS` offsets, so a record at one of them is a duplicate when its content
(type, version, data) is the same and a ``conflict`` when it differs (the metadata log diverged there: records above
the high watermark are truncated when the quorum leader changes). Further back, each entity's own last offset
decides (the handlers' `outcome.is_duplicate`).

`admit` is the check for one record; `admit_lines` and `commit_lines` are the same checks as vectors over a block of
partition-record lines (the columnar store's `admission`), each line against the state the lines before it leave.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from elrwatch.state.outcome import Outcome, record_error
from elrwatch.state.records import Record, RecordError

#: What a state built from polled records (``derived_from == "admin-poll"``) cannot know: the admin API shows
#: neither epochs of partitions and brokers nor what happened between two polls.
POLLED_UNKNOWN: Final = (
    "partitionEpoch",
    "brokerEpoch",
    "transitionsBetweenPolls",
    "leaderRecoveryState",
    "addingRemovingReplicas",
)

#: How many of the most recent metadata offsets the state remembers the applied content of (conflict detection):
#: a ring of this many slots, each an offset and a reference to the applied `Record` (or a raw line that parses to
#: it on a hit). About 0.3-1 KB a slot, so <= ~8 MB a state, whatever the cluster size.
RECENT_OFFSETS: Final = 8192


class Positions:
    """Where the state stands in its inputs: each source's last sequence, the snapshot end offset, the ring."""

    def __init__(self) -> None:
        self.source_seq: dict[str, int] = {}
        #: The end offset of the snapshot the state was loaded from (None: none); log records below it are covered.
        self.snapshot_end_offset: int | None = None
        # The ring (allocated at the first record with an offset): offset, and what was applied at it; -1 / None
        # for an empty slot.
        self.recent_offsets: list[int] = []
        self.recent_records: list[Any] = []
        #: Where the records came from when not from Kafka's log itself: "admin-poll" once any record derived by
        #: `elrwatch bridge --source admin` was applied (then what polls cannot see is unknown), else None.
        self.derived_from: str | None = None

    def admit(self, record: Record, snapshot_end: int | None = None) -> int | Outcome | RecordError:
        """Admit ``record``: the ring slot it takes once applied (-1: none), or why not (DUPLICATE, COVERED, or
        the conflict error). ``snapshot_end``: it is a record of a snapshot with that end offset."""
        source = record.source
        last = self.source_seq.get(source)
        if last is not None and record.seq <= last:
            return Outcome.DUPLICATE
        self.source_seq[source] = record.seq
        if record.origin is not None and record.origin != self.derived_from:
            self.derived_from = record.origin
        if snapshot_end is None:
            snapshot_end = record.snapshot_end
        if snapshot_end is not None:
            if self.snapshot_end_offset is None or snapshot_end > self.snapshot_end_offset:
                self.snapshot_end_offset = snapshot_end
            return -1
        offset = record.offset
        if offset is None:
            return -1
        covered = self.snapshot_end_offset
        if covered is not None and offset < covered:
            return Outcome.COVERED
        return self.ring_check(record, offset)

    def remember(self, slot: int, record: Record) -> None:
        """``record`` was applied: it takes its ring slot (from `admit`; -1: none)."""
        if slot >= 0:
            self.recent_offsets[slot] = record.offset  # type: ignore[assignment]
            self.recent_records[slot] = record

    def _ring(self) -> None:
        if not self.recent_offsets:
            self.recent_offsets = [-1] * RECENT_OFFSETS
            self.recent_records = [None] * RECENT_OFFSETS

    def ring_check(self, record: Record, offset: int) -> int | Outcome | RecordError:
        """The ring's verdict on a record at metadata ``offset``: the slot it takes once applied, DUPLICATE (the
        same record was applied at that offset), or the conflict error (other content was)."""
        self._ring()
        slot = offset % RECENT_OFFSETS
        if self.recent_offsets[slot] == offset:
            applied = self.recent_records[slot]
            if applied is not None and not isinstance(applied, Record):  # a raw line kept by `commit_lines`
                applied = applied.record()
            if (
                applied is not None
                and applied.type == record.type
                and applied.version == record.version
                and applied.data == record.data
            ):
                return Outcome.DUPLICATE
            return offset_conflict(record, applied)
        return slot

    # --- the same checks as vectors, for a block of lines ---------------------------------------------------------

    def admit_lines(self, seqs: Any, source_codes: Any, source_names: list[str], offsets: Any) -> tuple[Any, Any, Any]:
        """`admit` for a block's lines at once: (duplicate by source position, irregular, covered) as boolean
        vectors. Irregular: what the vectors cannot settle (no metadata offset, or an offset applied before, in
        the ring or earlier in the block): such a line goes through `admit` itself. Changes nothing."""
        import numpy as np

        m = len(seqs)
        none = np.iinfo(np.int64).min
        source_dup = np.empty(m, dtype=bool)
        for code, name in enumerate(source_names):
            mine = np.flatnonzero(source_codes == code)
            if not len(mine):
                continue
            last = self.source_seq.get(name)
            sub = seqs[mine]
            before = np.empty(len(sub), dtype=np.int64)
            before[0] = none if last is None else last
            if len(sub) > 1:
                before[1:] = np.maximum(np.maximum.accumulate(sub[:-1]), before[0])
            source_dup[mine] = sub <= before
        live = ~source_dup
        irregular = live & (offsets == none)
        covered_at = self.snapshot_end_offset
        covered = live & ~irregular & (offsets < covered_at) if covered_at is not None else np.zeros(m, dtype=bool)
        at = np.flatnonzero(live & ~irregular & ~covered)
        if len(at):
            self._ring()
            ring = np.array(self.recent_offsets, dtype=np.int64)
            irregular[at[ring[offsets[at] % RECENT_OFFSETS] == offsets[at]]] = True
            order = np.argsort(offsets[at], kind="stable")
            sorted_offsets = offsets[at][order]
            irregular[at[order[1:][sorted_offsets[1:] == sorted_offsets[:-1]]]] = True
        return source_dup, irregular, covered

    def commit_lines(
        self, seqs: Any, source_codes: Any, source_names: list[str], live: Any, applied: Any, offsets: Any, raws: Any
    ) -> None:
        """What `admit` and `remember` do for a block's regular lines: each source's position moves to its last
        ``live`` line (sequences rise per source); each ``applied`` line (indices into the block, ``offsets`` theirs)
        takes its ring slot, the last one at a slot winning, kept as ``raws(indices)`` gives it (lines that parse on
        a hit)."""
        import numpy as np

        if len(live):
            codes_live = source_codes[live]
            for code in np.unique(codes_live).tolist():
                self.source_seq[source_names[code]] = int(seqs[live[codes_live == code][-1]])
        if not len(applied):
            return
        self._ring()
        slots = offsets % RECENT_OFFSETS
        taken, last_from_end = np.unique(slots[::-1], return_index=True)
        winners = len(slots) - 1 - last_from_end
        ring_offsets, ring_records = self.recent_offsets, self.recent_records
        for slot, offset, raw in zip(taken.tolist(), offsets[winners].tolist(), raws(applied[winners]), strict=True):
            ring_offsets[slot] = offset
            ring_records[slot] = raw


def offset_conflict(record: Record, applied: Record | None) -> RecordError:
    """A record whose offset was applied with other content: the log diverged (both versions reported)."""
    error = record_error(
        record,
        "conflict",
        "offset",
        f"metadata offset {record.offset} was already applied with other content: the metadata log diverged "
        "(records above the high watermark are truncated when the quorum leader changes); the state may "
        "hold records of the abandoned branch",
    )
    if applied is not None:
        error.applied = orjson.dumps(applied.envelope()).decode()
    return error


def polled_unknown(derived_from: str | None) -> tuple[str, list[str]] | None:
    """(mode, unknown facts) of a state derived by a bridge: ``"admin-poll"`` gives `POLLED_UNKNOWN`, and
    ``"admin-poll:a,b"`` (an older cluster, see bridge/admin.py) adds ``a`` and ``b``; None for Kafka's own log."""
    if derived_from is None:
        return None
    mode, _, extra = derived_from.partition(":")
    if mode != "admin-poll":
        return mode, []
    return mode, [*POLLED_UNKNOWN, *(fact for fact in extra.split(",") if fact)]
