"""The columnar store: a bucket's partitions as numpy columns (`table.PartitionTable`), partition records applied
as vectors. It is the runtime's store (the streaming job's buckets, `elrwatch replay`, the what-if) and equals the
object store (`objects.ObjectPartitions`, the specification) on every input the differential tests have.

* A PartitionRecord or PartitionChangeRecord (admitted by `ClusterState`) of a known partition, or a
  PartitionRecord that creates one, joins the *segment* in log order with its outcome settled at once (a later
  offset of the partition, or a duplicate). Lines parsed as columns join it without a Record each
  (`lines.LineBlock`, admitted as vectors: `admission`). `flush` applies the segment as vectors: per field, the
  last value present for a partition in log order wins (a forward fill in a stable sort by row), epochs count with
  cumulative sums, the derived status and flags (`derive`) are computed for the state after every record, so a
  partition changed twice in a segment yields both of its transitions, each with its record's offset; the
  elections are counted (`elections`) and the rows that can need the audit are audited (`audit`).
* Anything else the store must see applies the segment first: a record of partition 0 that changes its replica
  count (it caps the effective min ISR of its topic: the topic's rows derive again), a replica's log info, and
  every record the image applies (`react`: a broker's rows, a topic's rows or every row derive again, a topic's
  rows die, ELRs clear).

What a bucket emits after a batch (changed rows, removals, gauges, insight counters) is built by `output` from
the columns, the changed-rows mask and the lists kept here; `snapshot` saves and maps the columns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from elrwatch.state.gauges import Gauges
from elrwatch.state.image import Effects, MetadataImage
from elrwatch.state.model import PartitionState, TopicState
from elrwatch.state.outcome import Outcome, record_error
from elrwatch.state.partitions import PartitionChanges, PartitionStore, Transition
from elrwatch.state.partitions.columnar.admission import admit_block
from elrwatch.state.partitions.columnar.audit import after_segment, audit_rows, before_segment
from elrwatch.state.partitions.columnar.derive import derive
from elrwatch.state.partitions.columnar.elections import LEADER_CHANGES
from elrwatch.state.partitions.columnar.segment import apply_segment
from elrwatch.state.partitions.columnar.table import (
    DENSE_PARTITION_IDS,
    NONE,
    PartitionTable,
    TupleTable,
    optional,
)
from elrwatch.state.record_types import PARTITION_CHANGE_RECORD, PARTITION_RECORD, STORE_COLUMNAR
from elrwatch.state.records import Record, RecordError
from elrwatch.state.status import STATUSES

if TYPE_CHECKING:
    from elrwatch.state.partitions.columnar.lines import LineBlock

_PR: Final = PARTITION_RECORD


class ColumnarPartitions(PartitionStore):
    """The columnar store of one bucket (``bucket=(i, n)``) or of a whole cluster (``bucket=None``)."""

    KIND = STORE_COLUMNAR

    def __init__(self, image: MetadataImage, bucket: tuple[int, int] | None = None) -> None:
        super().__init__(image, bucket)
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
        #: Records applied by the vector path (segments), and records that applied the segment first.
        self.fast_records = 0
        self.barrier_records = 0
        #: Partition-record lines admitted as vectors (`admission`), not one by one.
        self.vector_admitted = 0
        #: Rows audited record by record (in segments) or in their current state (reactions).
        self.audited_rows = 0
        self._distinct = np.zeros(0, dtype=np.int32)
        self._transitions: list[tuple[np.ndarray, ...]] = []
        self._positions: list[list[str]] = []
        self._active: np.ndarray | None = None
        #: Partitions removed since the last drain: (topic id, partition id, topic name).
        self.removed_out: list[tuple[str, int, str]] = []
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

    def new_row(self, t: int, pid: int) -> int:
        """A row for a new partition of topic index ``t`` (written to the table by the segment's flush)."""
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

    def topic(self, topic_id: str) -> int:
        """The table's index of a topic (added, with its settings, if new)."""
        t = self.topic_index.get(topic_id)
        if t is None:
            t = self.topic_index[topic_id] = len(self.topic_ids)
            self.topic_ids.append(topic_id)
            self.topic_names.append(self.image.topics.by_id[topic_id].name)
            self.topic_min_isr.append(1)
            self.topic_unclean.append(False)
            self._dense.append(np.full(0, -1, dtype=np.int32))
            self._sparse.append({})
            self._topic_size.append(0)
            self._topic_params(t)
        return t

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        row = self.row_of(topic_id, partition_id)
        return None if row is None else self.partition_at(row)

    def registration(self, columns: dict[str, np.ndarray], i: int, row: int) -> PartitionState:
        """Row ``row``'s partition with the registration at index ``i`` of ``columns`` (the table's own, or a copy
        of some rows' columns taken before a segment), without derived fields."""
        tup = self.tuples.tuples
        c = self.table.cols
        return PartitionState(
            self.topic_ids[c["topic"][row]],
            int(c["pid"][row]),
            *(tup[columns[name][i]] for name in ("replicas", "isr", "elr", "lke")),
            int(columns["leader"][i]),
            int(columns["le"][i]),
            int(columns["pe"][i]),
            int(columns["lrs"][i]),
            tup[columns["adding"][i]],
            tup[columns["removing"][i]],
        )

    def partition_at(self, row: int) -> PartitionState:
        """A row as the object store holds a partition (derived fields included)."""
        c = self.table.cols
        p = self.registration(c, row, row)
        status = int(c["status"][row])
        p.status = STATUSES[status] if status >= 0 else ""
        p.flags = int(c["flags"][row])
        p.status_since_ms = optional(c["since_ms"][row])
        p.status_since_offset = optional(c["since_offset"][row])
        p.last_offset = optional(c["last_offset"][row])
        p.last_timestamp_ms = optional(c["last_ts"][row])
        p.last_position = c["position"][row]
        p.last_leader_change = LEADER_CHANGES[c["llc"][row]]
        return p

    def iter_partitions(self) -> Iterator[PartitionState]:
        for row in np.flatnonzero(self.table.alive[: self.table.size]):
            yield self.partition_at(int(row))

    def of_broker(self, broker_id: int) -> list[PartitionState]:
        return [self.partition_at(int(row)) for row in self._broker_rows(broker_id)]

    def _broker_rows(self, broker_id: int) -> np.ndarray:
        """The live rows whose replicas, ISR, ELR or last known ELR hold the broker."""
        dense = self.tuples.broker_index.get(broker_id)
        if dense is None:
            return np.zeros(0, dtype=np.int64)
        _, members = self.tuples.arrays()
        holds = (members == dense).any(axis=1)
        c = self.table.cols
        size = self.table.size
        mask = holds[c["replicas"][:size]] | holds[c["isr"][:size]] | holds[c["elr"][:size]] | holds[c["lke"][:size]]
        return self._live_rows(mask)

    def replica_count(self, topic_id: str, partition_id: int) -> int | None:
        row = self.row_of(topic_id, partition_id)
        return None if row is None else len(self.tuples.tuples[self.table.cols["replicas"][row]])

    def count_of(self, topic_id: str) -> int:
        t = self.topic_index.get(topic_id)
        return 0 if t is None else self._topic_size[t]

    @property
    def partition_count(self) -> int:
        return int(np.count_nonzero(self.table.alive[: self.table.size]))

    def status_counts(self) -> Counter[str]:
        size = self.table.size
        status = self.table.status[:size][self.table.alive[:size] & (self.table.status[:size] >= 0)]
        counts = np.bincount(status, minlength=len(STATUSES))
        return Counter({STATUSES[i]: int(n) for i, n in enumerate(counts) if n})

    def flag_histogram(self) -> dict[int, int]:
        """Live partitions per flags value."""
        size = self.table.size
        live = self.table.alive[:size] & (self.table.status[:size] >= 0)
        values, counts = np.unique(self.table.flags[:size][live], return_counts=True)
        return {int(v): int(n) for v, n in zip(values, counts, strict=True)}

    def gauges(self) -> Gauges:
        from elrwatch.state.partitions.columnar.output import partition_gauges

        return partition_gauges(self)

    # --- changes --------------------------------------------------------------------------------------------

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

    def drain(self) -> PartitionChanges:
        """What changed since the previous drain as the object store gives it (the buckets use `output.drain`)."""
        self.flush()
        size = self.table.size
        changed = np.flatnonzero(self.table.changed[:size] & self.table.alive[:size])
        out = PartitionChanges(
            partitions=[self.partition_at(int(row)) for row in changed],
            removed=self.removed_out,
            transitions=self.drain_transitions(),
        )
        self.table.cols["changed"][:size] = False
        self.removed_out = []
        return out

    def forget_changes(self) -> None:
        """Forget what changed since the previous drain without building it: a delta replayed on load was emitted
        when first applied, and building its rows and transitions only to drop them was most of a load's time."""
        self.flush()
        self.table.cols["changed"][: self.table.size] = False
        self._transitions = []
        self._positions = []
        self.removed_out = []

    # --- handlers (record_types names them) -----------------------------------------------------------------

    def apply_partition_record(self, record: Record) -> Outcome | RecordError:
        """PartitionRecord: joins the segment (partition 0 may apply the segment first, `_partition_zero`)."""
        if record.data["partitionId"] == 0:
            return self._partition_zero(record)
        return self.stage(record)

    apply_partition_change = apply_partition_record

    def apply_change(self, record: Record, data: Mapping[str, Any]) -> Outcome | RecordError:
        """``record`` changes its partition as a PartitionChangeRecord with ``data`` would (topicId, partitionId
        and the fields it sets): the handler of a partition type whose effect is such a change. It joins the
        segment as that PartitionChangeRecord (at ``record``'s position, offset and time)."""
        change = Record(
            PARTITION_CHANGE_RECORD,
            0,
            dict(data),
            record.source,
            record.seq,
            record.position,
            record.offset,
            record.timestamp_ms,
        )
        return self.apply_partition_record(change)

    def mark_changed(self, topic_id: str, partition_id: int) -> None:
        row = self.row_of(topic_id, partition_id)
        if row is not None:
            self.table.changed[row] = True

    #: A block of certain partition-record lines, admitted as vectors.
    apply_block = admit_block

    def stage(self, record: Record) -> Outcome | RecordError:
        """Add an admitted partition record to the segment: its outcome (a duplicate by the partition's offset, a
        change of a partition never created)."""
        data = record.data
        topic_id = data["topicId"]
        pid = data["partitionId"]
        t = self.topic_index.get(topic_id)
        if t is None:
            t = self.topic(topic_id)
        row = self._row(t, pid)
        offset = record.offset
        is_pr = record.type == _PR
        pending = self._pending
        if row is None:
            if not is_pr:
                name = self.image.topics.by_id[topic_id].name
                return record_error(record, "unknown_partition", "partitionId", f"no PARTITION_RECORD for {name}-{pid}")
            row = self.new_row(t, pid)
        elif offset is not None:
            last = pending.get(row)
            if last is None:
                last = int(self.table.cols["last_offset"][row])
            if last != NONE and offset <= last:
                return Outcome.DUPLICATE
        self._seg_rows.append(row)
        self._seg_records.append(record)
        if is_pr:
            self.image.topics.changed.add(topic_id)
            pending[row] = NONE if offset is None else offset
        elif offset is not None:
            pending[row] = offset
        return Outcome.APPLIED

    def _partition_zero(self, record: Record) -> Outcome | RecordError:
        """A record of partition 0, whose replica count caps the effective min ISR of its topic. One that keeps
        that count joins the segment; one that changes it applies the segment before it with the old count, then
        itself, then its topic's rows derive again."""
        data = record.data
        topic_id = data["topicId"]
        replicas = data.get("replicas")
        t = self.topic_index.get(topic_id)
        row = self._row(t, 0) if t is not None else None
        if row is None and (t is None or self._topic_size[t] == 0):
            # the topic's first row: its replica count caps only the rows that come after it
            outcome = self.stage(record)
            if outcome is Outcome.APPLIED:
                self._topic_params(self.topic_index[topic_id], len(replicas or ()))
            return outcome
        if row is not None:
            if row >= self._segment_start:  # created in this segment: its replicas are not in the table yet
                self.flush()
            before_rf = len(self.tuples.tuples[self.table.cols["replicas"][row]])
            if (replicas is None and record.type != _PR) or len(replicas or ()) == before_rf:
                return self.stage(record)
        else:
            before_rf = self._replication_factor(t) if t is not None else None
        self.flush()
        self.barrier_records += 1
        outcome = self.stage(record)
        if outcome is not Outcome.APPLIED:
            return outcome
        t = self.topic_index[topic_id]
        rf = len(replicas or ())
        self._topic_params(t, rf)
        self.flush()
        if row is None or rf != before_rf:
            self._rederive(self._topic_rows(t), record)
        return outcome

    # --- reactions to the image's records -------------------------------------------------------------------

    def react(self, effects: Effects, record: Record) -> None:
        self.flush()
        self.barrier_records += 1
        for topic_id, _name in effects.removed_topics:
            self._remove_topic(topic_id)
        if effects.clear_elr is not None:
            self._clear_elr(effects.clear_elr, record)
        if effects.brokers:
            self._active = None
            for broker in effects.brokers:
                self._rederive(self._broker_rows(broker), record)
        if effects.everything:
            for t in self.topic_index.values():
                self._topic_params(t)
            self._rederive(self._live_rows(), record)
        else:
            for topic_id in effects.topics:
                t = self.topic_index.get(topic_id)
                if t is not None:
                    self._topic_params(t)
                    self._rederive(self._topic_rows(t), record)

    def _remove_topic(self, topic_id: str) -> None:
        t = self.topic_index.pop(topic_id, None)
        if t is None:
            return
        rows = self._topic_rows(t)
        name = self.topic_names[t]
        self.removed_out += [(topic_id, pid, name) for pid in self.table.pid[rows].tolist()]
        self.table.alive[rows] = False
        self._dense[t] = np.full(0, -1, dtype=np.int32)
        self._sparse[t] = {}
        for key in [k for k in self.log_info if k[0] == topic_id]:
            del self.log_info[key]
        for key in [k for k in self.operator_steps if k[0] == topic_id]:
            del self.operator_steps[key]
        self.violations.drop_topic(topic_id)

    def _clear_elr(self, topic_ids: list[str], record: Record) -> None:
        found = [self._topic_rows(t) for t in (self.topic_index.get(tid) for tid in topic_ids) if t is not None]
        rows = np.sort(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
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

    def _live_rows(self, mask: np.ndarray | None = None) -> np.ndarray:
        size = self.table.size
        alive = self.table.alive[:size]
        return np.flatnonzero(alive if mask is None else alive & mask)

    def _topic_rows(self, t: int) -> np.ndarray:
        return self._live_rows(self.table.topic[: self.table.size] == t)

    def _replication_factor(self, t: int) -> int:
        row = self._row(t, 0)
        if row is not None:
            return len(self.tuples.tuples[self.table.cols["replicas"][row]])
        shadow = self.image.topics.shadow_p0.get(self.topic_ids[t])
        return len(shadow.replicas) if shadow is not None else 0

    def _topic_params(self, t: int, rf: int | None = None) -> None:
        """Compute a topic's effective min ISR and unclean setting (``rf``: partition 0's replica count, when the
        table does not hold it yet)."""
        topic: TopicState | None = self.image.topics.by_id.get(self.topic_ids[t])
        if topic is None:
            return
        configs = self.image.configs
        self.topic_min_isr[t] = configs.effective_min_isr(topic.name, self._replication_factor(t) if rf is None else rf)
        self.topic_unclean[t] = configs.unclean_enabled(topic.name)

    def _rederive(self, rows: np.ndarray, record: Record) -> None:
        """Audit and derive ``rows`` again after ``record``; transitions stamped with it."""
        if len(rows) == 0:
            return
        audit_rows(self, rows, record)
        c = self.table.cols
        c["changed"][rows] = True
        derived = derive(
            self,
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

    # --- segments -------------------------------------------------------------------------------------------

    def _segment_reset(self) -> None:
        self._pending: dict[int, int] = {}
        self._seg_rows: list[int] = []
        self._seg_records: list[Record] = []  # the records piece being filled (`stage`)
        #: The segment's records in log order, in pieces: ("records", [Record...]) or ("lines", LineBlock, indices).
        self._seg_pieces: list[tuple[Any, ...]] = [("records", self._seg_records)]
        self._seg_new_topic: list[int] = []
        self._seg_new_pid: list[int] = []
        #: Rows from here on were created by the segment (not written to the table yet).
        self._segment_start = self.table.size

    def stage_lines(self, block: LineBlock, picked: np.ndarray, rows: np.ndarray, offsets: np.ndarray) -> None:
        """Add a block's admitted lines (``picked``: their indices in the block) to the segment, with their rows
        and metadata offsets (`admission`)."""
        self._seg_rows.extend(rows.tolist())
        self._seg_pieces.append(("lines", block, picked))
        self._seg_records = []
        self._seg_pieces.append(("records", self._seg_records))
        self._pending.update(zip(rows.tolist(), offsets.tolist(), strict=True))

    def flush(self) -> None:
        """Apply the segment gathered so far as vectors, then audit the rows that can need it."""
        if not self._seg_rows:
            return
        before = before_segment(self)
        apply_segment(self)
        after_segment(self, before)
