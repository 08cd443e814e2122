"""A columnar segment's inputs straight from parsed lines (`parse`), without a Record per line: the same
`table.SegmentInputs` that `table.inputs_of_records` builds from the lines' Records.

The six broker-id lists become the engine's tuple ids from Arrow's offsets and values: a hash per list, the lists
grouped by hash, each group checked member by member against its first list (a collision would fail the check and
the group is split by value), and one Python tuple per distinct list, interned once.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Final

import numpy as np
import pyarrow as pa

from elrwatch.state.model import NO_LEADER, NO_LEADER_CHANGE
from elrwatch.state.partitions.columnar.parse import PartitionLines, RawLine, line_record
from elrwatch.state.partitions.columnar.table import NONE, TUPLE_FIELDS, TUPLE_KEYS, SegmentInputs, TupleTable
from elrwatch.state.records import PARTITION_RECORD, Record

_MIX_VALUE: Final = np.uint64(0x9E3779B97F4A7C15)
_MIX_PLACE: Final = np.uint64(0xC2B2AE3D27D4EB4F)


def intern_lists(tuples: TupleTable, column: pa.ListArray) -> np.ndarray:
    """The tuple id of each row's list (-1: null), interning each distinct list once."""
    n = len(column)
    ids = np.full(n, -1, dtype=np.int32)
    if n == 0:
        return ids
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    lengths = np.diff(column.offsets.to_numpy()).astype(np.int64)
    values = column.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    place = np.arange(len(values), dtype=np.int64) - np.repeat(starts, lengths)
    with np.errstate(over="ignore"):
        mixed = (values.astype(np.uint64) + np.uint64(1)) * _MIX_VALUE ^ (place.astype(np.uint64) + 1) * _MIX_PLACE
        hashes = np.zeros(n, dtype=np.uint64)
        nonempty = lengths > 0
        if len(values):
            hashes[nonempty] = np.add.reduceat(mixed, starts[nonempty])
        hashes ^= lengths.astype(np.uint64) * _MIX_PLACE
    rows = np.flatnonzero(valid)
    if not len(rows):
        return ids
    _, first, group = np.unique(hashes[rows], return_index=True, return_inverse=True)
    representative = rows[first][group]
    # each list against its group's first, member by member (a hash collision fails here)
    same = lengths[rows] == lengths[representative]
    if len(values):
        mine = _flat_index(starts[rows], lengths[rows])
        theirs = np.minimum(_flat_index(starts[representative], lengths[rows]), len(values) - 1)
        owner = np.repeat(np.arange(len(rows)), lengths[rows])
        differs = np.zeros(len(rows), dtype=bool)
        differs[owner[values[mine] != values[theirs]]] = True
        same &= ~differs
    intern = tuples.intern
    by_list: dict[int, int] = {}
    for row in rows[first].tolist():  # one tuple per distinct hash
        start = int(starts[row])
        by_list[row] = intern(tuple(values[start : start + int(lengths[row])].tolist()))
    ids[rows] = np.array([by_list[r] for r in rows[first].tolist()], dtype=np.int32)[group]
    for row in rows[~same].tolist():  # a collision (never seen): this list on its own
        start = int(starts[row])
        ids[row] = intern(tuple(values[start : start + int(lengths[row])].tolist()))
    return ids


def _flat_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The flattened values' indices of the lists starting at ``starts`` with ``lengths``, list after list."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def inputs_of_lines(
    parsed: PartitionLines, picked: np.ndarray, sources: list[str], seqs: np.ndarray, tuples: TupleTable
) -> SegmentInputs:
    """`SegmentInputs` of the certain lines ``picked`` of ``parsed`` (read from ``sources`` at ``seqs``, one per
    picked line), as `columnar.inputs_of_records` gives them from the lines' Records."""
    index = pa.array(picked)
    types = parsed.column("type").take(index)
    is_pr = (types.to_numpy(zero_copy_only=False) == PARTITION_RECORD).astype(bool)

    def ints(name: str, absent: int) -> np.ndarray:
        return parsed.column(name).take(index).fill_null(absent).to_numpy(zero_copy_only=False).astype(np.int64)

    fields = {}
    for name, key in zip(TUPLE_FIELDS, TUPLE_KEYS, strict=True):
        ids = intern_lists(tuples, parsed.column(key).take(index))
        ids[is_pr & (ids == -1)] = 0  # PartitionRecord: absent is empty
        fields[name] = ids
    leader = ints("leader", NO_LEADER_CHANGE)
    leader[is_pr & (leader == NO_LEADER_CHANGE)] = NO_LEADER
    lrs = ints("leaderRecoveryState", -1)
    lrs[is_pr & (lrs == -1)] = 0
    return SegmentInputs(
        is_pr,
        fields,
        leader.astype(np.int32),
        ints("leaderEpoch", 0),
        ints("partitionEpoch", 0),
        lrs.astype(np.int8),
        ints("offset", NONE),
        ints("timestamp", NONE),
        [f"{source}@{seq}" for source, seq in zip(sources, seqs.tolist(), strict=True)],
    )


class LineBlock:
    """Certain partition-record lines (partitions other than 0) in log order, as columns, each with its source and
    sequence: what `admission.admit_block` admits and a segment's flush reads (`inputs`)."""

    __slots__ = (
        "is_pr",
        "lines",
        "offsets",
        "parsed",
        "picked",
        "pids",
        "seqs",
        "source_codes",
        "source_names",
        "topic_codes",
        "topics",
    )

    def __init__(
        self, parsed: PartitionLines, picked: np.ndarray, lines: list[bytes], sources: list[str], seqs: np.ndarray
    ) -> None:
        """``picked``: the rows of ``parsed`` (certain); ``lines``, ``sources`` and ``seqs``: one per picked row."""
        self.parsed = parsed
        self.picked = picked
        self.lines = lines
        self.seqs = seqs
        names: dict[str, int] = {}
        self.source_codes = np.fromiter((names.setdefault(s, len(names)) for s in sources), np.int64, len(sources))
        self.source_names = list(names)
        index = pa.array(picked)
        self.is_pr = (parsed.column("type").take(index).to_numpy(zero_copy_only=False) == PARTITION_RECORD).astype(bool)
        self.offsets = parsed.column("offset").take(index).fill_null(NONE).to_numpy(zero_copy_only=False)
        self.pids = parsed.column("partitionId").take(index).to_numpy(zero_copy_only=False).astype(np.int64)
        topics = parsed.column("topicId").take(index).dictionary_encode()
        self.topic_codes = topics.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        self.topics: list[str] = topics.dictionary.to_pylist()

    def __len__(self) -> int:
        return len(self.picked)

    def source(self, j: int) -> str:
        """Line ``j``'s source."""
        return self.source_names[int(self.source_codes[j])]

    def record(self, j: int) -> Record:
        """The Record of line ``j``."""
        return line_record(self.lines[j], self.source(j), int(self.seqs[j]))

    def raws(self, idx: np.ndarray) -> list[RawLine]:
        """Lines ``idx`` kept raw, as the recent-offsets ring keeps them (parsed again only on a hit)."""
        lines, names = self.lines, self.source_names
        where = idx.tolist()
        sources = [names[c] for c in self.source_codes[idx].tolist()]
        return [
            RawLine(line_source_seq)
            for line_source_seq in zip([lines[j] for j in where], sources, self.seqs[idx].tolist(), strict=True)
        ]

    def inputs(self, idx: np.ndarray, tuples: TupleTable) -> SegmentInputs:
        """`SegmentInputs` of lines ``idx``."""
        names = self.source_names
        sources = [names[c] for c in self.source_codes[idx].tolist()]
        return inputs_of_lines(self.parsed, self.picked[idx], sources, self.seqs[idx], tuples)


def stretches(flags: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of the runs of equal values of ``flags``."""
    edges = np.flatnonzero(np.diff(flags.astype(np.int8))) + 1
    return list(pairwise([0, *edges.tolist(), len(flags)]))
