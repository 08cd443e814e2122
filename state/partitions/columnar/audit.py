"""The invariant audit (monitor-spec §6, `audit.check`) in the columnar store, equal to the object store's.

The object store audits a partition each time it derives it again and skips the audit in its common case (no
ELR, a full enough ISR holding the leader, only eligible brokers and only replicas, no decreased epoch, no
violation to clear). Here:

* A segment (partition records applied as vectors) finds with vectors the rows that can need the audit: a row
  that had violations before the segment, a row whose final state `audit.check` can find a violation in, and a
  row a PartitionRecord replaced. Only those rows are audited, record by record in log order, from their state
  before the segment (`merge.partition_from_record`, `merge.merge_partition_change`): a violation keeps the
  record that first caused it, as in the object store. Any other row ends without violations whatever its states
  in between, as there.
* A reaction that derives rows again (a broker, a topic's or the cluster's min ISR or unclean setting, the ELR
  feature, ClearElr, partition 0's replica count) audits those of its rows that have violations or can have some
  (the same vectors) in their current state, with that record.

The bookkeeping is the shared `partitions.Violations` (the store's ``violations``).
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from elrwatch.state.merge import merge_partition_change, partition_from_record
from elrwatch.state.model import NO_LEADER, PartitionState
from elrwatch.state.partitions.columnar.table import NONE, segment_kinds, segment_records
from elrwatch.state.records import PARTITION_RECORD, Record

if TYPE_CHECKING:
    from elrwatch.state.partitions.columnar.view import ColumnarView

#: Columns of a row's state before a segment (what the replay of its records starts from).
STATE_COLUMNS = ("replicas", "isr", "elr", "lke", "adding", "removing", "leader", "le", "pe", "lrs")


def _distinct_counts(store: ColumnarView) -> np.ndarray:
    """Distinct members per tuple id (kept by the store, extended as tuples are interned)."""
    tuples = store.tuples.tuples
    if len(store._distinct) != len(tuples):
        more = [len(set(t)) for t in tuples[len(store._distinct) :]]
        store._distinct = np.concatenate([store._distinct, np.array(more, dtype=np.int32)])
    return store._distinct


def violating(store: ColumnarView, rows: np.ndarray) -> np.ndarray:
    """Whether each row's partition has violations now."""
    found = store.violations.by_partition
    if not found:
        return np.zeros(len(rows), dtype=bool)
    c = store.table.cols
    ids = store.topic_ids
    topics, pids = c["topic"][rows].tolist(), c["pid"][rows].tolist()
    return np.fromiter(((ids[t], p) in found for t, p in zip(topics, pids, strict=True)), bool, len(rows))


def may_violate(store: ColumnarView, rows: np.ndarray) -> np.ndarray:
    """Rows for which `audit.check` (without a decreased epoch) can find a violation in their current state, as
    vectors: every row it finds one for is marked. A row not marked that has no violations now keeps none."""
    c = store.table.cols
    replicas, isr, elr, leader = c["replicas"][rows], c["isr"][rows], c["elr"][rows], c["leader"][rows]
    min_isr = np.array(store.topic_min_isr, dtype=np.int64)[c["topic"][rows]]
    lengths, members = store.tuples.arrays()
    isr_members = members[isr]
    elr_members = members[elr]
    has_elr = lengths[elr] > 0
    # ISR_ELR_OVERLAP, ELR_NOT_IN_REPLICAS, ELR_NOT_UNDER_MIN_ISR (with the ELR feature on)
    replica_members = members[replicas]
    need = ((elr_members[:, :, None] == isr_members[:, None, :]).any(axis=2) & (elr_members >= 0)).any(axis=1)
    in_replicas = (elr_members[:, :, None] == replica_members[:, None, :]).any(axis=2) | (elr_members < 0)
    need |= ~in_replicas.all(axis=1)
    image = store.image
    if image.features.elr_enabled:
        need |= has_elr & (lengths[isr] >= min_isr)
    # ISR_NOT_IN_REPLICAS
    in_replicas = (isr_members[:, :, None] == replica_members[:, None, :]).any(axis=2) | (isr_members < 0)
    need |= ~in_replicas.all(axis=1)
    # LEADER_NOT_IN_ISR
    broker_ids = np.append(np.array(store.tuples.broker_ids, dtype=np.int64), NONE)  # -1 padding reads NONE
    holds_leader = (broker_ids[isr_members] == leader[:, None].astype(np.int64)).any(axis=1)
    need |= (leader != NO_LEADER) & ~holds_leader
    # INELIGIBLE_BROKER_IN_ISR
    brokers = image.brokers
    if brokers.by_id:
        eligible = brokers.eligible
        ids = store.tuples.broker_ids
        dense = np.fromiter((b in eligible for b in ids), bool, len(ids))
        need |= ~np.append(dense, True)[isr_members].all(axis=1)
    # DURABILITY_MARGIN_LOST: |ISR ∪ ELR| < min ISR, the union counted exactly
    union = _distinct_counts(store)[isr].astype(np.int64)
    for j in range(elr_members.shape[1]):
        member = elr_members[:, j : j + 1]
        new = (member[:, 0] >= 0) & ~(member == isr_members).any(axis=1) & ~(member == elr_members[:, :j]).any(axis=1)
        union += new
    need |= union < min_isr
    return need


@dataclass
class Before:
    """What a segment's audit needs of the state before the segment is applied."""

    seg_rows: list[int]
    pieces: list[Any]
    start: int
    rows: np.ndarray
    old: np.ndarray
    columns: dict[str, np.ndarray]
    had: np.ndarray


def before_segment(store: ColumnarView) -> Before:
    """Take what `after_segment` needs before the store applies its segment."""
    seg_rows = store._seg_rows
    c = store.table.cols
    rows = np.unique(np.array(seg_rows, dtype=np.int64))
    old = rows[rows < store._segment_start]
    columns = {name: c[name][old].copy() for name in STATE_COLUMNS}
    return Before(seg_rows, store._seg_pieces, store._segment_start, rows, old, columns, violating(store, old))


def after_segment(store: ColumnarView, before: Before) -> None:
    """Audit the segment's rows that can need it, record by record from their state before the segment."""
    seg_rows, rows, old = before.seg_rows, before.rows, before.old
    candidates = set(old[before.had].tolist())
    candidates.update(rows[may_violate(store, rows)].tolist())
    kinds = segment_kinds(before.pieces)
    replaced = set(np.array(seg_rows, dtype=np.int64)[kinds].tolist())
    if replaced:  # a PartitionRecord may have decreased an epoch: its row's replay says
        counts = Counter(seg_rows)
        candidates.update(row for row in replaced if row < before.start or counts[row] > 1)
    if not candidates:
        return
    wanted = np.flatnonzero(np.isin(np.array(seg_rows, dtype=np.int64), list(candidates)))
    picked_rows = [seg_rows[i] for i in wanted.tolist()]
    _replay(store, candidates, picked_rows, segment_records(before.pieces, wanted), old, before.columns)


def _replay(
    store: ColumnarView,
    candidates: set[int],
    seg_rows: list[int],
    seg_records: list[Record],
    old: np.ndarray,
    before: dict[str, np.ndarray],
) -> None:
    """Audit ``candidates`` after each of their records, from their state before the segment."""
    c = store.table.cols
    at = {row: i for i, row in enumerate(old.tolist()) if row in candidates}
    states: dict[int, PartitionState | None] = {
        row: None if at.get(row) is None else store.registration(before, at[row], row) for row in candidates
    }
    min_isr = store.topic_min_isr
    for row, record in zip(seg_rows, seg_records, strict=True):
        if row not in candidates:
            continue
        state = states[row]
        epoch_note = None
        if record.type == PARTITION_RECORD:
            new = partition_from_record(record.data)
            if state is not None and (
                new.leader_epoch < state.leader_epoch or new.partition_epoch < state.partition_epoch
            ):
                epoch_note = (
                    f"PartitionRecord replaced leaderEpoch {state.leader_epoch} -> {new.leader_epoch}, "
                    f"partitionEpoch {state.partition_epoch} -> {new.partition_epoch}"
                )
            state = states[row] = new
        else:
            assert state is not None, "a PartitionChangeRecord joins a segment only for a known partition"
            state = states[row] = copy.copy(state)
            merge_partition_change(state, record.data)
        store.audited_rows += 1
        store.violations.check(store.image, state, min_isr[c["topic"][row]], record, epoch_note)


def audit_rows(store: ColumnarView, rows: np.ndarray, record: Record) -> None:
    """Before ``rows`` derive again after ``record``: audit those that have or can have violations, as they are."""
    if not len(rows):
        return
    need = may_violate(store, rows) | violating(store, rows)
    min_isr = store.topic_min_isr
    topic_of = store.table.cols["topic"]
    for row in rows[need].tolist():
        store.audited_rows += 1
        store.violations.check(store.image, store.partition_at(row), min_isr[topic_of[row]], record)
