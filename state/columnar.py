"""A columnar apply engine: one bucket's partitions as numpy columns, partition records applied as vectors.

`ColumnarState.apply_batch(records)` applies parsed records (`records.Record`) in log order with the object
core's rules (`cluster.ClusterState`, the reference) and gives each record's outcome and quarantine error:

* PartitionRecord and PartitionChangeRecord of partitions other than 0 are classified in log order (source
  position, snapshot cover, the recent-offsets ring, topic, ownership, per-partition offset: `_classify` for a
  Record, `columnar_admission` as vectors for a block of lines parsed as columns, `columnar_lines`) and the
  accepted ones gathered into a *segment*. A segment is applied as vectors: per field, the last value present
  for a partition in log order wins (a forward fill in a stable sort by row), epochs count with cumulative
  sums, the derived status and flags (`status.derive`) are computed for the state after every record, so a
  partition changed twice in a segment yields both of its transitions, each with its record's offset.
* Every other record is a *segment barrier*: the segment before it is applied, then the record, one at a time.
  Broker, topic, config and feature records go through an embedded `ClusterState` that holds no partitions
  (its brokers, topics, configs, features, source positions, ring and partition 0 shadows are the engine's);
  afterwards only the rows the record can change are derived again (a broker's rows, a topic's rows, all rows
  for a cluster config or the ELR feature). ClearElrRecord, RemoveTopicRecord and ReplicaLogInfoRecord change
  the table here. A record of partition 0 that changes its replica count is a barrier too (that count caps the
  effective min ISR of its topic: the topic's rows are derived again); other partition 0 records join the
  segment, or update the core's shadow when another bucket owns partition 0.

Election counters and the last leader change kind are counted per segment (`columnar_elections`). What a
bucket emits after a batch (changed rows, removals, gauges, insight counters) is built by `columnar_output` from
the columns, the changed-rows mask and the lists kept here. Not covered: the invariant audit, snapshots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from elrwatch.state import columnar_admission, columnar_elections, records
from elrwatch.state.cluster import (
    ELR_FEATURE,
    MIN_ISR,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    UNCLEAN_ENABLE,
    ClusterState,
    Outcome,
    Transition,
    keep_log_info,
)
from elrwatch.state.model import EMPTY, NO_LEADER, NO_LEADER_CHANGE, PartitionState
from elrwatch.state.records import Record, RecordError
from elrwatch.state.routing import bucket_of
from elrwatch.state.status import (
    ELECTABLE_SHIFT,
    F_AT_MIN_ISR,
    F_LAST_REPLICA_STANDING,
    F_LEADERLESS,
    F_MANUAL,
    F_RECOVERING,
    F_UNCLEAN_RECOVERY,
    F_UNDER_MIN_ISR,
    F_UNDER_REPLICATED,
    STATUSES,
)

#: The int64 columns' None.
NONE: Final = np.iinfo(np.int64).min
#: Partition ids below this are looked up in a dense array per topic; larger ones in a dict.
DENSE_PARTITION_IDS: Final = 1 << 20

S_MANUAL, S_RECOVERING, S_WAITING, S_ELECTING, S_UNDER, S_AT, S_UR, S_HEALTHY = range(len(STATUSES))
NO_STATUS: Final = -1

_PR = records.PARTITION_RECORD
_PCR = records.PARTITION_CHANGE_RECORD
_RLI = records.REPLICA_LOG_INFO_RECORD
_BROKER_TYPES = frozenset(
    {
        records.REGISTER_BROKER_RECORD,
        records.BROKER_REGISTRATION_CHANGE_RECORD,
        records.UNREGISTER_BROKER_RECORD,
        records.FENCE_BROKER_RECORD,
        records.UNFENCE_BROKER_RECORD,
    }
)
_TUPLE_FIELDS: Final = ("replicas", "isr", "elr", "lke", "adding", "removing")
_TUPLE_KEYS: Final = (
    "replicas",
    "isr",
    "eligibleLeaderReplicas",
    "lastKnownElr",
    "addingReplicas",
    "removingReplicas",
)


def _opt(value: int) -> int | None:
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
class _Derived:
    status: np.ndarray
    flags: np.ndarray


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
    for name, key in zip(_TUPLE_FIELDS, _TUPLE_KEYS, strict=True):
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
        {name: np.concatenate([p.tuples[name] for p in parts]) for name in _TUPLE_FIELDS},
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


class ColumnarState:
    """The columnar engine for one bucket (``bucket=(i, n)``) or a whole cluster (``bucket=None``)."""

    def __init__(self, default_min_isr: int = 1, bucket: tuple[int, int] | None = None) -> None:
        self.core = ClusterState(default_min_isr=default_min_isr, bucket=bucket, track_changes=False)
        self.bucket = bucket
        self.table = PartitionTable()
        self.tuples = TupleTable()
        # topics of the table: index → id, name, effective min ISR, unclean; id → index (live topics)
        self.topic_index: dict[str, int] = {}
        self.topic_ids: list[str] = []
        self.topic_names: list[str] = []
        self.topic_min_isr: list[int] = []
        self.topic_unclean: list[bool] = []
        self._dense: list[np.ndarray] = []
        self._sparse: list[dict[int, int]] = []
        self._topic_size: list[int] = []
        self.log_info: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        self.quarantined: list[RecordError] = []
        #: Records applied by the vector path (segments), and records applied as barriers.
        self.fast_records = 0
        self.barrier_records = 0
        #: Partition-record lines admitted as vectors (`columnar_admission`), not one by one.
        self.vector_admitted = 0
        self._transitions: list[tuple[np.ndarray, ...]] = []
        self._positions: list[list[str]] = []
        self._active: np.ndarray | None = None
        #: The error of the last record quarantined.
        self.last_error: RecordError | None = None
        # output bookkeeping (columnar_output): election counters (`ClusterState.counters`'s keys), and what
        # changed since the last drain besides the rows' mask: removed partitions and topics, dirty topics, brokers
        self.counters: Counter[str] = Counter()
        self.removed_out: list[tuple[str, int, str]] = []
        self.removed_topics_out: list[tuple[str, str]] = []
        self.dirty_topics: set[str] = set()
        self.dirty_brokers: set[int] = set()
        self._owned = False  # `apply_batch`'s ``owned``
        self._segment_reset()

    # --- lookups --------------------------------------------------------------------------------------------

    def row_of(self, topic_id: str, partition_id: int) -> int | None:
        """The live row of a partition, or None."""
        t = self.topic_index.get(topic_id)
        return None if t is None else self._row(t, partition_id)

    def _row(self, t: int, pid: int) -> int | None:
        dense = self._dense[t]
        if pid < len(dense):
            row = int(dense[pid])
            return row if row >= 0 else None
        return self._sparse[t].get(pid)

    def _new_row(self, t: int, pid: int) -> int:
        row = self.table.add()
        self._seg_new_topic.append(t)
        self._seg_new_pid.append(pid)
        self._topic_size[t] += 1
        if pid < DENSE_PARTITION_IDS:
            dense = self._dense[t]
            if pid >= len(dense):
                grown = np.full(max(pid + 1, 2 * len(dense), 16), -1, dtype=np.int32)
                grown[: len(dense)] = dense
                self._dense[t] = dense = grown
            dense[pid] = row
        else:
            self._sparse[t][pid] = row
        return row

    def _topic(self, topic_id: str) -> int:
        t = self.topic_index.get(topic_id)
        if t is None:
            t = self.topic_index[topic_id] = len(self.topic_ids)
            self.topic_ids.append(topic_id)
            self.topic_names.append(self.core.topics[topic_id].name)
            self.topic_min_isr.append(1)
            self.topic_unclean.append(False)
            self._dense.append(np.full(0, -1, dtype=np.int32))
            self._sparse.append({})
            self._topic_size.append(0)
            self._topic_params(t)
        return t

    def owns(self, topic_id: str, partition_id: int) -> bool:
        """Whether this bucket owns the partition."""
        return self.bucket is None or bucket_of(topic_id, partition_id, self.bucket[1]) == self.bucket[0]

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        """A partition's state as the object core holds it (derived fields included), or None."""
        row = self.row_of(topic_id, partition_id)
        return None if row is None else self._partition_at(row)

    def _partition_at(self, row: int) -> PartitionState:
        c = self.table.cols
        tup = self.tuples.tuples
        p = PartitionState(
            self.topic_ids[c["topic"][row]],
            int(c["pid"][row]),
            tup[c["replicas"][row]],
            tup[c["isr"][row]],
            tup[c["elr"][row]],
            tup[c["lke"][row]],
            int(c["leader"][row]),
            int(c["le"][row]),
            int(c["pe"][row]),
            int(c["lrs"][row]),
            tup[c["adding"][row]],
            tup[c["removing"][row]],
        )
        status = int(c["status"][row])
        p.status = STATUSES[status] if status >= 0 else ""
        p.flags = int(c["flags"][row])
        p.status_since_ms = _opt(c["since_ms"][row])
        p.status_since_offset = _opt(c["since_offset"][row])
        p.last_offset = _opt(c["last_offset"][row])
        p.last_timestamp_ms = _opt(c["last_ts"][row])
        p.last_position = c["position"][row]
        p.last_leader_change = columnar_elections.LEADER_CHANGES[c["llc"][row]]
        return p

    def iter_partitions(self) -> Iterator[PartitionState]:
        """Every live partition, in row order."""
        for row in np.flatnonzero(self.table.alive[: self.table.size]):
            yield self._partition_at(int(row))

    def status_counts(self) -> dict[str, int]:
        """Live partitions per status."""
        size = self.table.size
        status = self.table.status[:size][self.table.alive[:size] & (self.table.status[:size] >= 0)]
        counts = np.bincount(status, minlength=len(STATUSES))
        return {STATUSES[i]: int(n) for i, n in enumerate(counts) if n}

    def flag_histogram(self) -> dict[int, int]:
        """Live partitions per flags value."""
        size = self.table.size
        live = self.table.alive[:size] & (self.table.status[:size] >= 0)
        values, counts = np.unique(self.table.flags[:size][live], return_counts=True)
        return {int(v): int(n) for v, n in zip(values, counts, strict=True)}

    def transition_columns(self) -> tuple[np.ndarray, ...] | None:
        """Every status transition since the previous call, in order, as columns (topic index, partition id, old
        status code (-1: none), new status code, at ms, offset (`NONE`: none)) and their positions; None if none.
        Forgets them."""
        if not self._transitions:
            return None
        rows, old, new, at_ms, offsets = (np.concatenate(parts) for parts in zip(*self._transitions, strict=True))
        positions = np.array([p for part in self._positions for p in part], dtype=object)
        self._transitions = []
        self._positions = []
        cols = self.table.cols
        return cols["topic"][rows], cols["pid"][rows], old, new, at_ms, offsets, positions

    def drain_transitions(self) -> list[Transition]:
        """Every status transition since the previous call, in order (`transition_columns` as objects)."""
        columns = self.transition_columns()
        if columns is None:
            return []
        ids, names = self.topic_ids, self.topic_names
        return [
            Transition(
                ids[t],
                pid,
                names[t],
                STATUSES[was] if was >= 0 else None,
                STATUSES[to],
                None if at == NONE else at,
                None if offset == NONE else offset,
                position,
            )
            for t, pid, was, to, at, offset, position in zip(*(c.tolist() for c in columns), strict=True)
        ]

    def forget_changes(self) -> None:
        """Forget what changed since the previous drain (`columnar_output.drain`) without building it: a delta
        replayed on load was emitted when first applied, and building its rows and transitions only to drop
        them was most of a load's time."""
        self.table.cols["changed"][: self.table.size] = False
        self._transitions = []
        self._positions = []
        self.removed_out = []
        self.removed_topics_out = []
        self.dirty_brokers = set()
        self.dirty_topics = set()

    # --- apply ----------------------------------------------------------------------------------------------

    def apply_batch(self, batch: Iterable[Any], owned: bool = False) -> tuple[list[Outcome], list[RecordError | None]]:
        """Apply records in log order; each one's outcome, and its error when quarantined. ``batch``: Records, and
        `columnar_lines.LineBlock`s of certain partition-record lines (an outcome and error per line). ``owned``:
        the caller routed them (every partition record is of this bucket or of partition 0), so ownership is not
        computed again."""
        self._owned = owned
        outcomes: list[Outcome] = []
        errors: list[RecordError | None] = []

        def note(record: Record, outcome: Outcome) -> None:
            outcomes.append(outcome)
            if outcome is Outcome.QUARANTINED:
                error = self.last_error
                errors.append(error)
                if self._reports(record):
                    self.quarantined.append(error)
            else:
                errors.append(None)

        classify = self._classify
        for record in batch:
            if record.__class__ is not Record:  # a columnar_lines.LineBlock: certain lines, admitted as vectors
                columnar_admission.admit_block(self, record, outcomes, errors, note)
                continue
            kind = record.type
            if kind in (_PR, _PCR):
                note(record, classify(record) if record.data["partitionId"] != 0 else self._partition_zero(record))
            else:
                self._flush()
                note(record, self._barrier(record))
        self._flush()
        drained = self.core.drain_changes()
        self.removed_topics_out += drained.removed_topics
        self.dirty_topics.update(t.topic_id for t in drained.topics)
        self.dirty_brokers.update(b.broker_id for b in drained.brokers)
        return outcomes, errors

    def _reports(self, record: Record) -> bool:
        if self.bucket is None:
            return True
        if record.type in (_PR, _PCR, _RLI):
            return self.owns(record.data["topicId"], record.data["partitionId"])
        return self.bucket[0] == 0

    def _error(self, record: Record, reason: str, field: str | None, message: str) -> Outcome:
        self.last_error = RecordError(record.position, reason, field, message, "", record.type, record.offset)
        return Outcome.QUARANTINED

    def _admit(self, record: Record) -> int | Outcome:
        """The core's checks before a record's handler: source position, snapshot cover, the ring. The ring
        slot to fill if the record is applied (-1: none), or the outcome."""
        core = self.core
        source = record.source
        last = core.source_seq.get(source)
        if last is not None and record.seq <= last:
            return Outcome.DUPLICATE
        core.source_seq[source] = record.seq
        if record.origin is not None and record.origin != core.derived_from:
            core.derived_from = record.origin
        offset = record.offset
        if record.snapshot_end is not None:
            if core.snapshot_end_offset is None or record.snapshot_end > core.snapshot_end_offset:
                core.snapshot_end_offset = record.snapshot_end
            return -1
        if offset is None:
            return -1
        covered = core.snapshot_end_offset
        if covered is not None and offset < covered:
            return Outcome.COVERED
        verdict = core.ring_check(record, offset)
        if isinstance(verdict, RecordError):
            self.last_error = verdict
            return Outcome.QUARANTINED
        return verdict

    def _unknown_topic(self, record: Record) -> Outcome:
        topic_id = record.data["topicId"]
        removed = self.core.removed_topics
        if topic_id in removed:
            at = removed[topic_id]
            if record.offset is not None and at is not None and record.offset <= at:
                return Outcome.DUPLICATE
        return self._error(record, "unknown_topic", "topicId", f"no TOPIC_RECORD for topic id {topic_id}")

    def _classify(self, record: Record) -> Outcome:
        """A partition record of a partition other than 0: checked in log order, added to the segment."""
        slot = self._admit(record)
        if slot.__class__ is not int:
            return slot  # type: ignore[return-value]
        data = record.data
        topic_id = data["topicId"]
        topic = self.core.topics.get(topic_id)
        if topic is None:
            return self._unknown_topic(record)
        pid = data["partitionId"]
        bucket = self.bucket
        if (
            not self._owned
            and bucket is not None
            and bucket[1] > 1
            and bucket_of(topic_id, pid, bucket[1]) != bucket[0]
        ):
            return Outcome.NOT_OWNED
        t = self.topic_index.get(topic_id)
        if t is None:
            t = self._topic(topic_id)
        row = self._row(t, pid)
        offset = record.offset
        is_pr = record.type == _PR
        pending = self._pending
        if row is None:
            if not is_pr:
                return self._error(
                    record, "unknown_partition", "partitionId", f"no PARTITION_RECORD for {topic.name}-{pid}"
                )
            row = self._new_row(t, pid)
        elif offset is not None:
            last = pending.get(row)
            if last is None:
                last = int(self.table.cols["last_offset"][row])
            if last != NONE and offset <= last:
                return Outcome.DUPLICATE
        self._seg_rows.append(row)
        self._seg_records.append(record)
        if is_pr:
            self.dirty_topics.add(topic_id)
            pending[row] = NONE if offset is None else offset
        elif offset is not None:
            pending[row] = offset
        if slot >= 0:
            core = self.core
            core.recent_offsets[slot] = offset
            core.recent_records[slot] = record
        return Outcome.APPLIED

    # --- segments -------------------------------------------------------------------------------------------

    def _segment_reset(self) -> None:
        self._pending: dict[int, int] = {}
        self._seg_rows: list[int] = []
        self._seg_records: list[Record] = []  # the records piece being filled (`_classify`)
        #: The segment's records in log order, in pieces: ("records", [Record...]) or ("lines", LineBlock, indices).
        self._seg_pieces: list[tuple[Any, ...]] = [("records", self._seg_records)]
        self._seg_new_topic: list[int] = []
        self._seg_new_pid: list[int] = []
        #: Rows from here on were created by the segment (not written to the table yet).
        self._segment_start = self.table.size

    def _flush(self) -> None:
        """Apply the segment gathered so far as vectors."""
        m = len(self._seg_rows)
        if m == 0:
            return
        rows_in = np.array(self._seg_rows, dtype=np.int64)
        order = np.argsort(rows_in, kind="stable")
        rows = rows_in[order]
        pieces = self._seg_pieces
        table = self.table
        cols = table.cols
        new = slice(self._segment_start, table.size)
        created_from = new.start
        cols["topic"][new] = self._seg_new_topic
        cols["pid"][new] = self._seg_new_pid
        cols["alive"][new] = True
        self._segment_reset()
        self.fast_records += m
        inputs = segment_inputs(pieces, self.tuples)
        kind = np.where(inputs.is_pr, 0, 1).astype(np.int8)[order]
        fields = {name: ids[order] for name, ids in inputs.tuples.items()}
        leader = inputs.leader[order]
        le = inputs.le[order]
        pe = inputs.pe[order]
        lrs = inputs.lrs[order]
        offsets = inputs.offsets[order]
        ts = inputs.ts[order]
        positions = inputs.positions

        index = np.arange(m)
        starts = np.ones(m, dtype=bool)
        starts[1:] = rows[1:] != rows[:-1]
        ends = np.ones(m, dtype=bool)
        ends[:-1] = starts[1:]
        start = np.maximum.accumulate(np.where(starts, index, 0))

        def fill(present: np.ndarray, values: np.ndarray, column: str) -> np.ndarray:
            last = np.maximum.accumulate(np.where(present, index, -1))
            has = last >= start
            return np.where(has, values[np.maximum(last, 0)], cols[column][rows])

        is_pr = kind == 0
        post = {name: fill(fields[name] >= 0, fields[name], name) for name in _TUPLE_FIELDS}
        post_leader = fill(is_pr | (leader != NO_LEADER_CHANGE), leader, "leader")
        post_lrs = fill(is_pr | (lrs != -1), lrs, "lrs")
        post_offset = fill(is_pr | (offsets != NONE), offsets, "last_offset")
        post_ts = fill(is_pr | (ts != NONE), ts, "last_ts")
        # epochs: the last PartitionRecord's, or the table's, plus the changes since
        last_pr = np.maximum.accumulate(np.where(is_pr, index, -1))
        has_pr = last_pr >= start
        anchor = np.maximum(last_pr, 0)
        changes = np.cumsum(kind == 1)
        before_start = changes[start] - (kind[start] == 1)
        pe_post = np.where(
            has_pr, pe[anchor] + (changes - changes[anchor]), cols["pe"][rows] + (changes - before_start)
        )
        bumps = np.cumsum((kind == 1) & (leader != NO_LEADER_CHANGE))
        bumps_before = bumps[start] - ((kind[start] == 1) & (leader[start] != NO_LEADER_CHANGE))
        le_post = np.where(has_pr, le[anchor] + (bumps - bumps[anchor]), cols["le"][rows] + (bumps - bumps_before))

        topics = cols["topic"][rows]
        derived = self._derive(post["replicas"], post["isr"], post["elr"], post["lke"], post_leader, post_lrs, topics)
        llc = self._elections(rows, kind, starts, start, index, created_from, leader, lrs, post, post_leader, post_lrs)
        previous = np.empty(m, dtype=np.int8)
        previous[1:] = derived.status[:-1]
        previous[starts] = cols["status"][rows[starts]]
        changed = derived.status != previous
        if changed.any():
            where = np.flatnonzero(changed)
            log_order = np.argsort(order[where], kind="stable")
            picked = where[log_order]
            self._transitions.append(
                (rows[picked], previous[picked], derived.status[picked], ts[picked], offsets[picked])
            )
            original = order[picked]
            self._positions.append([positions[i] for i in original.tolist()])
            last_change = np.maximum.accumulate(np.where(changed, index, -1))
            stamped = ends & (last_change >= start)
            at = last_change[stamped]
            cols["since_ms"][rows[stamped]] = ts[at]
            cols["since_offset"][rows[stamped]] = offsets[at]
        final = rows[ends]
        for name in _TUPLE_FIELDS:
            cols[name][final] = post[name][ends]
        cols["leader"][final] = post_leader[ends]
        cols["lrs"][final] = post_lrs[ends]
        cols["le"][final] = le_post[ends]
        cols["pe"][final] = pe_post[ends]
        cols["last_offset"][final] = post_offset[ends]
        cols["last_ts"][final] = post_ts[ends]
        cols["status"][final] = derived.status[ends]
        cols["flags"][final] = derived.flags[ends]
        cols["changed"][final] = True
        cols["llc"][final] = llc[ends]
        position_of = order[ends]
        cols["position"][final] = np.array([positions[i] for i in position_of.tolist()], dtype=object)

    def _elections(
        self,
        rows: np.ndarray,
        kind: np.ndarray,
        starts: np.ndarray,
        start: np.ndarray,
        index: np.ndarray,
        created_from: int,
        leader: np.ndarray,
        lrs: np.ndarray,
        post: dict[str, np.ndarray],
        post_leader: np.ndarray,
        post_lrs: np.ndarray,
    ) -> np.ndarray:
        """Count the segment's elections; each record's last leader change kind code (rows sorted, as in _flush)."""
        cols = self.table.cols

        def before(after: np.ndarray, column: str) -> np.ndarray:
            out = np.empty_like(after)
            out[1:] = after[:-1]
            out[starts] = cols[column][rows[starts]]
            return out

        created = starts & (rows >= created_from)
        seg = columnar_elections.Segment(
            is_pr=kind == 0,
            created=created,
            leader_field=leader,
            lrs_field=lrs,
            pre_leader=before(post_leader, "leader"),
            pre_lrs=before(post_lrs, "lrs"),
            pre_isr=before(post["isr"], "isr"),
            pre_elr=before(post["elr"], "elr"),
            pre_lke=before(post["lke"], "lke"),
            post_leader=post_leader,
            post_lrs=post_lrs,
            post_isr=post["isr"],
        )
        _, members = self.tuples.arrays()
        kinds = columnar_elections.count(seg, members, self.tuples.broker_index, self.counters)
        last = np.maximum.accumulate(np.where(kinds >= 0, index, -1))
        return np.where(last >= start, kinds[np.maximum(last, 0)], cols["llc"][rows])

    # --- derived status -------------------------------------------------------------------------------------

    def _active_dense(self) -> np.ndarray:
        """Whether each dense broker index is active, with a False appended (the padding's -1 reads it)."""
        ids = self.tuples.broker_ids
        if self._active is None or len(self._active) != len(ids) + 1:
            is_active = self.core.is_active
            self._active = np.fromiter((is_active(b) for b in ids), dtype=bool, count=len(ids))
            self._active = np.append(self._active, False)
        return self._active

    def _derive(
        self,
        replicas: np.ndarray,
        isr: np.ndarray,
        elr: np.ndarray,
        lke: np.ndarray,
        leader: np.ndarray,
        lrs: np.ndarray,
        topics: np.ndarray,
    ) -> _Derived:
        """`status.derive` as vectors: status codes (indices into STATUSES) and flags."""
        lengths, members = self.tuples.arrays()
        active = self._active_dense()
        live_count = active[members].sum(axis=1)
        min_isr = np.array(self.topic_min_isr, dtype=np.int64)[topics]
        unclean = np.array(self.topic_unclean, dtype=bool)[topics]
        elr_on = self.core.elr_enabled
        n_isr = lengths[isr]
        n_rep = lengths[replicas]
        n_elr = lengths[elr]
        flags = np.where(n_isr < min_isr, F_UNDER_MIN_ISR, np.where(n_isr == min_isr, F_AT_MIN_ISR, 0))
        flags |= np.where(n_isr < n_rep, F_UNDER_REPLICATED, 0)
        if not elr_on:
            flags |= np.where((n_isr == 1) & (min_isr >= 2), F_LAST_REPLICA_STANDING, 0)
        live = live_count[isr] + live_count[elr]
        both = np.flatnonzero((n_elr > 0) & (n_isr > 0))
        if len(both):  # ELR members also in the ISR count once
            em = members[elr[both]]
            im = members[isr[both]]
            in_isr = (em[:, :, None] == im[:, None, :]).any(axis=2) & (em >= 0)
            live[both] -= (in_isr & active[em]).sum(axis=1)
        flags |= np.minimum(live, 3) << ELECTABLE_SHIFT
        recovering = lrs == 1
        flags |= np.where(recovering, F_RECOVERING | F_UNCLEAN_RECOVERY, 0)
        status = np.full(len(isr), S_HEALTHY, dtype=np.int8)
        status[(flags & F_UNDER_REPLICATED) != 0] = S_UR
        status[(flags & F_AT_MIN_ISR) != 0] = S_AT
        status[(flags & F_UNDER_MIN_ISR) != 0] = S_UNDER
        status[recovering] = S_RECOVERING
        leaderless = np.flatnonzero(leader == NO_LEADER)
        if len(leaderless):
            li = isr[leaderless]
            clean = np.where(lengths[li] > 0, li, elr[leaderless])
            has_clean = lengths[clean] > 0
            live_path = has_clean & (live_count[clean] > 0)
            lke_l = lke[leaderless]
            via_lke = ~has_clean & elr_on & (lengths[lke_l] == 1)
            live_path |= via_lke & active[members[lke_l, 0]]
            un = unclean[leaderless]
            via_unclean = ~has_clean & ~via_lke & un & (n_rep[leaderless] > 0)
            has_path = has_clean | via_lke | via_unclean
            extra = np.where(via_lke | via_unclean, F_UNCLEAN_RECOVERY, 0)
            periodic = ~live_path & un & (live_count[replicas[leaderless]] > 0)
            live_path |= periodic
            extra |= np.where(periodic, F_UNCLEAN_RECOVERY, 0)
            extra |= F_LEADERLESS
            extra |= np.where(~has_path, F_MANUAL, 0)
            flags[leaderless] |= extra
            sub = np.where(live_path, S_ELECTING, S_WAITING).astype(np.int8)
            sub[recovering[leaderless]] = S_RECOVERING
            sub[~has_path] = S_MANUAL
            status[leaderless] = sub
        return _Derived(status, flags.astype(np.int16))

    def _rederive(self, rows: np.ndarray, record: Record) -> None:
        """Derive ``rows`` again after a barrier record; transitions stamped with it."""
        if len(rows) == 0:
            return
        c = self.table.cols
        c["changed"][rows] = True
        derived = self._derive(
            c["replicas"][rows],
            c["isr"][rows],
            c["elr"][rows],
            c["lke"][rows],
            c["leader"][rows],
            c["lrs"][rows],
            c["topic"][rows],
        )
        c["flags"][rows] = derived.flags
        old = c["status"][rows]
        changed = derived.status != old
        if not changed.any():
            return
        moved = rows[changed]
        at_ms = NONE if record.timestamp_ms is None else record.timestamp_ms
        offset = NONE if record.offset is None else record.offset
        count = len(moved)
        self._transitions.append(
            (moved, old[changed], derived.status[changed], np.full(count, at_ms), np.full(count, offset))
        )
        self._positions.append([record.position] * count)
        c["status"][moved] = derived.status[changed]
        c["since_ms"][moved] = at_ms
        c["since_offset"][moved] = offset

    def _live_rows(self, mask: np.ndarray | None = None) -> np.ndarray:
        size = self.table.size
        alive = self.table.alive[:size]
        return np.flatnonzero(alive if mask is None else alive & mask)

    def _topic_rows(self, t: int) -> np.ndarray:
        return self._live_rows(self.table.topic[: self.table.size] == t)

    # --- barriers -------------------------------------------------------------------------------------------

    def _replication_factor(self, t: int) -> int:
        row = self._row(t, 0)
        if row is not None:
            return len(self.tuples.tuples[self.table.cols["replicas"][row]])
        shadow = self.core.shadow_p0.get(self.topic_ids[t])
        return len(shadow.replicas) if shadow is not None else 0

    def _topic_params(self, t: int, rf: int | None = None) -> bool:
        """Compute a topic's effective min ISR and unclean setting; whether they changed."""
        topic = self.core.topics.get(self.topic_ids[t])
        if topic is None:
            return False
        configured = self.core.configured_min_isr(topic)
        if rf is None:
            rf = self._replication_factor(t)
        min_isr = min(configured, rf) if rf else configured
        value = self.core.topic_config(topic, UNCLEAN_ENABLE)
        unclean = value is not None and value.strip().lower() == "true"
        changed = (min_isr, unclean) != (self.topic_min_isr[t], self.topic_unclean[t])
        self.topic_min_isr[t] = min_isr
        self.topic_unclean[t] = unclean
        return changed

    def _barrier(self, record: Record) -> Outcome:
        self.barrier_records += 1
        kind = record.type
        if kind == _RLI:
            return self._replica_log_info(record)
        core = self.core
        outcome = core.apply(record)
        if outcome is Outcome.QUARANTINED:
            self.last_error = core.last_error
            return outcome
        if outcome is not Outcome.APPLIED:
            return outcome
        if kind in _BROKER_TYPES:
            self._active = None
            broker = record.data.get("brokerId", record.data.get("id"))
            dense = self.tuples.broker_index.get(broker)
            if dense is not None:
                _, members = self.tuples.arrays()
                holds = (members == dense).any(axis=1)
                c = self.table.cols
                size = self.table.size
                mask = holds[c["replicas"][:size]] | holds[c["isr"][:size]] | holds[c["elr"][:size]]
                mask |= holds[c["lke"][:size]]
                self._rederive(self._live_rows(mask), record)
        elif kind == records.REMOVE_TOPIC_RECORD:
            t = self.topic_index.pop(record.data["topicId"], None)
            if t is not None:
                rows = self._topic_rows(t)
                name = self.topic_names[t]
                self.removed_out += [(record.data["topicId"], pid, name) for pid in self.table.pid[rows].tolist()]
                self.table.alive[rows] = False
                self._dense[t] = np.full(0, -1, dtype=np.int32)
                self._sparse[t] = {}
                for key in [k for k in self.log_info if k[0] == record.data["topicId"]]:
                    del self.log_info[key]
        elif kind == records.CLEAR_ELR_RECORD:
            self._clear_elr(record)
        elif kind == records.CONFIG_RECORD:
            data = record.data
            if data["name"] in (MIN_ISR, UNCLEAN_ENABLE):
                if data["resourceType"] == RESOURCE_TOPIC:
                    t = self.topic_index.get(core.topic_ids_by_name.get(data["resourceName"], ""))
                    if t is not None:
                        self._topic_params(t)
                        self._rederive(self._topic_rows(t), record)
                elif data["resourceType"] == RESOURCE_BROKER and data["resourceName"] == "":
                    for t in self.topic_index.values():
                        self._topic_params(t)
                    self._rederive(self._live_rows(), record)
        elif kind == records.FEATURE_LEVEL_RECORD and record.data["name"] == ELR_FEATURE:
            self._rederive(self._live_rows(), record)
        return outcome

    def _clear_elr(self, record: Record) -> None:
        name = record.data["topicName"]
        if name:
            topic_id = self.core.topic_ids_by_name.get(name)
            t = self.topic_index.get(topic_id) if topic_id is not None else None
            rows = self._topic_rows(t) if t is not None else np.zeros(0, dtype=np.int64)
        else:
            rows = self._live_rows()
        c = self.table.cols
        keep = (c["elr"][rows] != 0) | (c["lke"][rows] != 0)
        if record.offset is not None:
            last = c["last_offset"][rows]
            keep &= ~((last != NONE) & (record.offset <= last))
        rows = rows[keep]
        if len(rows) == 0:
            return
        c["elr"][rows] = 0
        c["lke"][rows] = 0
        c["pe"][rows] += 1
        if record.offset is not None:
            c["last_offset"][rows] = record.offset
        if record.timestamp_ms is not None:
            c["last_ts"][rows] = record.timestamp_ms
        c["position"][rows] = record.position
        self._rederive(rows, record)

    def _partition_zero(self, record: Record) -> Outcome:
        """A record of partition 0, whose replica count caps the effective min ISR of its topic. One that keeps
        that count joins the segment (or, for another bucket's partition 0, updates the core's shadow in place);
        one that changes it is a barrier: the segment before it is applied with the old count, then the record,
        then its topic's rows are derived again."""
        data = record.data
        topic_id = data["topicId"]
        core = self.core
        replicas = data.get("replicas")
        if not self.owns(topic_id, 0):
            topic = core.topics.get(topic_id)
            shadow = core.shadow_p0.get(topic_id)
            before = len(shadow.replicas) if shadow is not None else None
            outcome = core.apply(record)
            if outcome is Outcome.QUARANTINED:
                self.last_error = core.last_error
            elif outcome is Outcome.APPLIED and topic is not None and before != len(core.shadow_p0[topic_id].replicas):
                self.barrier_records += 1
                self._flush()
                t = self._topic(topic_id)
                self._topic_params(t)
                self._rederive(self._topic_rows(t), record)
            return outcome
        t = self.topic_index.get(topic_id)
        row = self._row(t, 0) if t is not None else None
        if row is None and (t is None or self._topic_size[t] == 0):
            # the topic's first row: its replica count caps only the rows that come after it
            outcome = self._classify(record)
            if outcome is Outcome.APPLIED:
                self._topic_params(self.topic_index[topic_id], len(replicas or ()))
            return outcome
        if row is not None:
            if row >= self._segment_start:  # created in this segment: its replicas are not in the table yet
                self._flush()
            before_rf = len(self.tuples.tuples[self.table.cols["replicas"][row]])
            if (replicas is None and record.type == _PCR) or len(replicas or ()) == before_rf:
                return self._classify(record)
        else:
            before_rf = self._replication_factor(t) if t is not None else None
        self._flush()
        self.barrier_records += 1
        outcome = self._classify(record)
        if outcome is not Outcome.APPLIED:
            return outcome
        t = self.topic_index[topic_id]
        rf = len(replicas or ())
        self._topic_params(t, rf)
        self._flush()
        if row is None or rf != before_rf:
            self._rederive(self._topic_rows(t), record)
        return outcome

    def _replica_log_info(self, record: Record) -> Outcome:
        slot = self._admit(record)
        if slot.__class__ is not int:
            return slot  # type: ignore[return-value]
        data = record.data
        topic_id = data["topicId"]
        if topic_id not in self.core.topics:
            return self._unknown_topic(record)
        if not self.owns(topic_id, data["partitionId"]):
            return Outcome.NOT_OWNED
        if self.row_of(topic_id, data["partitionId"]) is None:
            return self._error(record, "unknown_partition", "partitionId", "no PARTITION_RECORD for this partition")
        if not keep_log_info(self.log_info, topic_id, record):
            return Outcome.DUPLICATE
        if slot >= 0:
            self.core.recent_offsets[slot] = record.offset  # type: ignore[assignment]
            self.core.recent_records[slot] = record
        self.table.changed[self.row_of(topic_id, data["partitionId"])] = True
        return Outcome.APPLIED
