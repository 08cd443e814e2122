"""The columnar store's tables: a bucket's partitions as numpy columns (`PartitionTable`, a row per partition),
the broker-id lists interned as tuple ids (`TupleTable`), and what a segment of partition records gives the
columns (`SegmentInputs`, from Records or from lines parsed as columns)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from elrwatch.state import records
from elrwatch.state.model import EMPTY, NO_LEADER, NO_LEADER_CHANGE
from elrwatch.state.records import Record
from elrwatch.state.status import STATUSES

#: The int64 columns' None.
NONE: Final = np.iinfo(np.int64).min
#: Partition ids below this are looked up in a dense array per topic; larger ones in a dict.
DENSE_PARTITION_IDS: Final = 1 << 20

S_MANUAL, S_RECOVERING, S_WAITING, S_ELECTING, S_UNDER, S_AT, S_UR, S_HEALTHY = range(len(STATUSES))
NO_STATUS: Final = -1

_PR = records.PARTITION_RECORD
#: The six broker-id lists of a partition: the table's column names, and the records' keys.
TUPLE_FIELDS: Final = ("replicas", "isr", "elr", "lke", "adding", "removing")
TUPLE_KEYS: Final = (
    "replicas",
    "isr",
    "eligibleLeaderReplicas",
    "lastKnownElr",
    "addingReplicas",
    "removingReplicas",
)


def optional(value: int) -> int | None:
    """An int64 column's value, `NONE` as None."""
    return None if value == NONE else int(value)


class TupleTable:
    """Interned broker-id tuples: id → tuple, length, members (dense broker indices, padded with -1)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, ...], int] = {}
        self.tuples: list[tuple[int, ...]] = []
        self.broker_index: dict[int, int] = {}
        self.broker_ids: list[int] = []
        self._members: list[list[int]] = []
        self._arrays: tuple[int, np.ndarray, np.ndarray] | None = None
        self.intern(EMPTY)

    def intern(self, value: tuple[int, ...]) -> int:
        """The id of ``value`` (added if new)."""
        found = self.ids.get(value)
        if found is not None:
            return found
        tid = len(self.tuples)
        self.ids[value] = tid
        self.tuples.append(value)
        index = self.broker_index
        members = []
        for broker in value:
            dense = index.get(broker)
            if dense is None:
                dense = index[broker] = len(self.broker_ids)
                self.broker_ids.append(broker)
            members.append(dense)
        self._members.append(members)
        return tid

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, members): int32 vectors over the tuple ids; members padded with -1 (extended in place as
        tuples are added)."""
        count = len(self.tuples)
        if self._arrays is None or self._arrays[0] != count:
            built, lengths, members = self._arrays if self._arrays is not None else (0, None, None)
            width = max(1, max((len(m) for m in self._members[built:]), default=1))
            if members is None or count > len(members) or width > members.shape[1]:
                capacity = max(2 * count, 1024)
                width = max(width, members.shape[1] if members is not None else 1)
                grown = np.full((capacity, width), -1, dtype=np.int32)
                grown_lengths = np.zeros(capacity, dtype=np.int32)
                if members is not None and lengths is not None:
                    grown[:built, : members.shape[1]] = members[:built]
                    grown_lengths[:built] = lengths[:built]
                members, lengths = grown, grown_lengths
            for tid in range(built, count):
                row = self._members[tid]
                members[tid, : len(row)] = row
                lengths[tid] = len(row)
            self._arrays = (count, lengths, members)
        return self._arrays[1][:count], self._arrays[2][:count]


class PartitionTable:
    """One bucket's partitions as numpy columns, a row per partition (rows of removed topics are dead)."""

    INT32 = ("topic", "pid", "leader", "replicas", "isr", "elr", "lke", "adding", "removing")
    INT64 = ("le", "pe", "since_ms", "since_offset", "last_offset", "last_ts")

    def __init__(self, capacity: int = 1024) -> None:
        self.size = 0
        self.cols: dict[str, np.ndarray] = {name: self._column(name, capacity) for name in self.DEFAULTS}

    DEFAULTS: Final[dict[str, tuple[Any, Any]]] = {
        **{name: (np.int32, 0) for name in INT32},
        **{name: (np.int64, NONE) for name in INT64},
        "lrs": (np.int8, 0),
        "status": (np.int8, NO_STATUS),
        "flags": (np.int16, 0),
        "alive": (bool, False),
        "position": (object, None),
        # output bookkeeping (columnar_output): changed since the last drain; last leader change kind code
        "changed": (bool, False),
        "llc": (np.int8, 0),
    }

    def _column(self, name: str, capacity: int) -> np.ndarray:
        dtype, default = self.DEFAULTS[name]
        return np.full(capacity, default, dtype=dtype)

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.__dict__["cols"][name]
        except KeyError:
            raise AttributeError(name) from None

    def add(self) -> int:
        """A new row (its fields, topic and partition id included, are set by the segment that creates it)."""
        cols = self.cols
        if self.size == len(cols["topic"]):
            for name, column in cols.items():
                grown = self._column(name, 2 * len(column))
                grown[: len(column)] = column
                cols[name] = grown
        row = self.size
        self.size += 1
        return row

    def nbytes(self) -> int:
        """Bytes of the columns (the position strings counted at their size)."""
        total = sum(c[: self.size].nbytes for c in self.cols.values())
        positions = self.cols["position"][: self.size]
        return total + sum(len(p) + 49 for p in set(positions.tolist()) if isinstance(p, str))


@dataclass
class SegmentInputs:
    """What a segment's flush reads of its records, per record in log order: PartitionRecord or not, the tuple ids
    of the six broker-id lists (-1: not given; a PartitionRecord's absent list is the empty tuple, id 0), the
    leader (`NO_LEADER_CHANGE`: not given), epochs (0: not given), leader recovery state (-1: not given), metadata
    offset and timestamp (`NONE`: not given) and position."""

    is_pr: np.ndarray
    tuples: dict[str, np.ndarray]
    leader: np.ndarray
    le: np.ndarray
    pe: np.ndarray
    lrs: np.ndarray
    offsets: np.ndarray
    ts: np.ndarray
    positions: list[str]


def inputs_of_records(batch: list[Record], tuples: TupleTable) -> SegmentInputs:
    """`SegmentInputs` of parsed records (their lists interned into ``tuples``)."""
    pr_in = np.array([r.type == _PR for r in batch], dtype=bool)
    datas = [r.data for r in batch]
    intern = tuples.intern
    known = tuples.ids.get
    fields = {}
    for name, key in zip(TUPLE_FIELDS, TUPLE_KEYS, strict=True):
        found = [-1 if (v := d.get(key)) is None else known(v, -2) for d in datas]
        if -2 in found:  # tuples not seen before
            found = [intern(d[key]) if i == -2 else i for i, d in zip(found, datas, strict=True)]
        ids = np.array(found, dtype=np.int32)
        ids[pr_in & (ids == -1)] = 0  # PartitionRecord: absent is empty
        fields[name] = ids
    leader_in = np.array([NO_LEADER_CHANGE if v is None else v for v in [d.get("leader") for d in datas]])
    leader_in[pr_in & (leader_in == NO_LEADER_CHANGE)] = NO_LEADER
    lrs_in = np.array([-1 if v is None else v for v in [d.get("leaderRecoveryState") for d in datas]])
    lrs_in[pr_in & (lrs_in == -1)] = 0
    return SegmentInputs(
        pr_in,
        fields,
        leader_in.astype(np.int32),
        np.array([d.get("leaderEpoch", 0) for d in datas], dtype=np.int64),
        np.array([d.get("partitionEpoch", 0) for d in datas], dtype=np.int64),
        lrs_in.astype(np.int8),
        np.array([NONE if (o := r.offset) is None else o for r in batch], dtype=np.int64),
        np.array([NONE if (t := r.timestamp_ms) is None else t for r in batch], dtype=np.int64),
        [r.position for r in batch],
    )


def segment_inputs(pieces: list[tuple[Any, ...]], tuples: TupleTable) -> SegmentInputs:
    """`SegmentInputs` of a segment's pieces (records, or a line block's lines), in log order."""
    parts = []
    for piece in pieces:
        if piece[0] == "records":
            if piece[1]:
                parts.append(inputs_of_records(piece[1], tuples))
        else:
            parts.append(piece[1].inputs(piece[2], tuples))
    if len(parts) == 1:
        return parts[0]
    return SegmentInputs(
        np.concatenate([p.is_pr for p in parts]),
        {name: np.concatenate([p.tuples[name] for p in parts]) for name in TUPLE_FIELDS},
        *(np.concatenate([getattr(p, name) for p in parts]) for name in ("leader", "le", "pe", "lrs", "offsets", "ts")),
        [position for p in parts for position in p.positions],
    )


def segment_kinds(pieces: list[tuple[Any, ...]]) -> np.ndarray:
    """Per record of a segment, in log order: whether it is a PartitionRecord."""
    parts = [
        np.array([r.type == _PR for r in piece[1]], dtype=bool) if piece[0] == "records" else piece[1].is_pr[piece[2]]
        for piece in pieces
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def segment_records(pieces: list[tuple[Any, ...]], wanted: np.ndarray) -> list[Record]:
    """The records at positions ``wanted`` (ascending) of a segment: a line block's built from its lines."""
    out: list[Record] = []
    base = 0
    for piece in pieces:
        size = len(piece[1]) if piece[0] == "records" else len(piece[2])
        lo, hi = np.searchsorted(wanted, [base, base + size])
        for i in wanted[lo:hi].tolist():
            j = i - base
            out.append(piece[1][j] if piece[0] == "records" else piece[1].record(int(piece[2][j])))
        base += size
    return out
