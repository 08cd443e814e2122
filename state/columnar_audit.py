"""The invariant audit (monitor-spec §6, `audit.py`) for the columnar engine, equal to the object core's.

`AuditedColumnarState` is a `ColumnarState` that also keeps every partition's violations, as
`ClusterState.partition_violations` and ``violation_counts`` give them. The object core audits a partition each time
it derives it again (`ClusterState._refresh`), and skips the audit in its common case (no ELR, a full enough ISR
holding the leader, only eligible brokers and only replicas, no decreased epoch, no violation to clear). Here:

* A segment (partition records applied as vectors) finds with vectors the rows that can need the audit: a row
  that had violations before the segment, a row whose final state `audit.check` can find a violation in, and a
  row a PartitionRecord replaced. Only those rows are audited, record by record in log order, from their state
  before the segment (`merge.partition_from_record`, `merge.merge_partition_change`): a violation keeps the
  record that first caused it, as in the core. Any other row ends without violations whatever its states in
  between, as in the core.
* A barrier that derives rows again (a broker, a topic's or the cluster's min ISR or unclean setting, the ELR
  feature, ClearElr, partition 0's replica count) audits those of its rows that have violations or can have some
  (the same vectors) in their current state, with that record.
* RemoveTopicRecord drops its partitions' violations.

The audit itself is the core's: `ClusterState._audit` of the embedded core, whose ``violations`` and
``violation_counts`` (keyed by topic id and partition id, empty otherwise: it holds no partitions) are the
engine's. They are part of the core's persisted state, so a snapshot keeps them.
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np

from elrwatch.state import records
from elrwatch.state.audit import Violation
from elrwatch.state.cluster import Outcome
from elrwatch.state.columnar import NONE, ColumnarState, segment_kinds, segment_records
from elrwatch.state.merge import merge_partition_change, partition_from_record
from elrwatch.state.model import NO_LEADER, PartitionState
from elrwatch.state.records import Record

_PR = records.PARTITION_RECORD
#: Columns of a row's state before a segment (what the replay of its records starts from).
_STATE_COLUMNS = ("replicas", "isr", "elr", "lke", "adding", "removing", "leader", "le", "pe", "lrs")


class AuditedColumnarState(ColumnarState):
    """The columnar engine with the invariant audit."""

    def __init__(self, default_min_isr: int = 1, bucket: tuple[int, int] | None = None) -> None:
        super().__init__(default_min_isr=default_min_isr, bucket=bucket)
        #: Rows audited record by record (in segments) or in their current state (barriers).
        self.audited_rows = 0
        self._distinct = np.zeros(0, dtype=np.int32)

    # --- what the core reports ------------------------------------------------------------------------------

    def partition_violations(self, topic_id: str, partition_id: int) -> tuple[Violation, ...]:
        """The invariants a partition currently breaks (`ClusterState.partition_violations`)."""
        return self.core.partition_violations(topic_id, partition_id)

    @property
    def violations(self) -> dict[tuple[str, int], tuple[Violation, ...]]:
        """(topic id, partition id) → the violations of every partition that has some."""
        return self.core.violations

    @property
    def violation_counts(self) -> Counter[str]:
        """Violations per kind (zero counts may remain, as in the core)."""
        return self.core.violation_counts

    # --- vectors: the rows that can need the audit ----------------------------------------------------------

    def _distinct_counts(self) -> np.ndarray:
        """Distinct members per tuple id."""
        tuples = self.tuples.tuples
        if len(self._distinct) != len(tuples):
            more = [len(set(t)) for t in tuples[len(self._distinct) :]]
            self._distinct = np.concatenate([self._distinct, np.array(more, dtype=np.int32)])
        return self._distinct

    def _violating(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row's partition has violations now."""
        found = self.core.violations
        if not found:
            return np.zeros(len(rows), dtype=bool)
        c = self.table.cols
        ids = self.topic_ids
        topics, pids = c["topic"][rows].tolist(), c["pid"][rows].tolist()
        return np.fromiter(((ids[t], p) in found for t, p in zip(topics, pids, strict=True)), bool, len(rows))

    def _may_violate(
        self, replicas: np.ndarray, isr: np.ndarray, elr: np.ndarray, leader: np.ndarray, min_isr: np.ndarray
    ) -> np.ndarray:
        """Rows for which `audit.check` (without a decreased epoch) can find a violation, as vectors: every row
        it finds one for is marked. A row not marked that has no violations now keeps none: the core's audit
        of it would change nothing."""
        lengths, members = self.tuples.arrays()
        isr_members = members[isr]
        elr_members = members[elr]
        has_elr = lengths[elr] > 0
        # ISR_ELR_OVERLAP, ELR_NOT_IN_REPLICAS, ELR_NOT_UNDER_MIN_ISR (with the ELR feature on)
        replica_members = members[replicas]
        need = ((elr_members[:, :, None] == isr_members[:, None, :]).any(axis=2) & (elr_members >= 0)).any(axis=1)
        in_replicas = (elr_members[:, :, None] == replica_members[:, None, :]).any(axis=2) | (elr_members < 0)
        need |= ~in_replicas.all(axis=1)
        if self.core._elr_on:
            need |= has_elr & (lengths[isr] >= min_isr)
        # ISR_NOT_IN_REPLICAS
        in_replicas = (isr_members[:, :, None] == replica_members[:, None, :]).any(axis=2) | (isr_members < 0)
        need |= ~in_replicas.all(axis=1)
        # LEADER_NOT_IN_ISR
        broker_ids = np.append(np.array(self.tuples.broker_ids, dtype=np.int64), NONE)  # -1 padding reads NONE
        holds_leader = (broker_ids[isr_members] == leader[:, None].astype(np.int64)).any(axis=1)
        need |= (leader != NO_LEADER) & ~holds_leader
        # INELIGIBLE_BROKER_IN_ISR
        core = self.core
        if core.brokers:
            eligible = core._eligible
            dense = np.fromiter((b in eligible for b in self.tuples.broker_ids), bool, len(self.tuples.broker_ids))
            need |= ~np.append(dense, True)[isr_members].all(axis=1)
        # DURABILITY_MARGIN_LOST: |ISR ∪ ELR| < min ISR, the union counted exactly
        union = self._distinct_counts()[isr].astype(np.int64)
        for j in range(elr_members.shape[1]):
            member = elr_members[:, j : j + 1]
            new = (
                (member[:, 0] >= 0) & ~(member == isr_members).any(axis=1) & ~(member == elr_members[:, :j]).any(axis=1)
            )
            union += new
        need |= union < min_isr
        return need

    def _min_isr(self, topics: np.ndarray) -> np.ndarray:
        return np.array(self.topic_min_isr, dtype=np.int64)[topics]

    # --- the audit of one partition ------------------------------------------------------------------------

    def _audit(self, partition: PartitionState, min_isr: int, record: Record, epoch_note: str | None) -> None:
        """`ClusterState._refresh`'s audit step for one partition: skipped in the common case."""
        core = self.core
        isr = partition.isr
        key = (partition.topic_id, partition.partition_id)
        if (
            epoch_note is not None
            or partition.elr
            or len(isr) < min_isr
            or not (partition.leader == NO_LEADER or partition.leader in isr)
            or (core.brokers and not core._eligible.issuperset(isr))
            or any(b not in partition.replicas for b in isr)
            or key in core.violations
        ):
            core._audit(core.topics[partition.topic_id], partition, min_isr, record, epoch_note)

    # --- hooks into the engine ------------------------------------------------------------------------------

    def _flush(self) -> None:
        if not self._seg_rows:
            return
        seg_rows = self._seg_rows
        pieces = self._seg_pieces
        start = self._segment_start
        c = self.table.cols
        rows = np.unique(np.array(seg_rows, dtype=np.int64))
        old = rows[rows < start]
        before = {name: c[name][old].copy() for name in _STATE_COLUMNS}
        had = self._violating(old)
        super()._flush()
        candidates = set(old[had].tolist())
        need = self._may_violate(
            c["replicas"][rows], c["isr"][rows], c["elr"][rows], c["leader"][rows], self._min_isr(c["topic"][rows])
        )
        candidates.update(rows[need].tolist())
        kinds = segment_kinds(pieces)
        replaced = set(np.array(seg_rows, dtype=np.int64)[kinds].tolist())
        if replaced:  # a PartitionRecord may have decreased an epoch: its row's replay says
            counts = Counter(seg_rows)
            candidates.update(row for row in replaced if row < start or counts[row] > 1)
        if not candidates:
            return
        wanted = np.flatnonzero(np.isin(np.array(seg_rows, dtype=np.int64), list(candidates)))
        picked_rows = [seg_rows[i] for i in wanted.tolist()]
        self._replay(candidates, picked_rows, segment_records(pieces, wanted), old, before)

    def _replay(
        self,
        candidates: set[int],
        seg_rows: list[int],
        seg_records: list[Record],
        old: np.ndarray,
        before: dict[str, np.ndarray],
    ) -> None:
        """Audit ``candidates`` after each of their records, from their state before the segment."""
        tuples = self.tuples.tuples
        c = self.table.cols
        states: dict[int, PartitionState | None] = {}
        at = {row: i for i, row in enumerate(old.tolist()) if row in candidates}
        for row in candidates:
            i = at.get(row)
            if i is None:
                states[row] = None
                continue
            states[row] = PartitionState(
                self.topic_ids[c["topic"][row]],
                int(c["pid"][row]),
                *(tuples[before[name][i]] for name in ("replicas", "isr", "elr", "lke")),
                int(before["leader"][i]),
                int(before["le"][i]),
                int(before["pe"][i]),
                int(before["lrs"][i]),
                tuples[before["adding"][i]],
                tuples[before["removing"][i]],
            )
        min_isr = self.topic_min_isr
        for row, record in zip(seg_rows, seg_records, strict=True):
            if row not in candidates:
                continue
            state = states[row]
            epoch_note = None
            if record.type == _PR:
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
            self.audited_rows += 1
            self._audit(state, min_isr[c["topic"][row]], record, epoch_note)

    def _rederive(self, rows: np.ndarray, record: Record) -> None:
        if len(rows):
            c = self.table.cols
            need = self._may_violate(
                c["replicas"][rows], c["isr"][rows], c["elr"][rows], c["leader"][rows], self._min_isr(c["topic"][rows])
            )
            need |= self._violating(rows)
            min_isr = self.topic_min_isr
            for row in rows[need].tolist():
                self.audited_rows += 1
                self._audit(self._partition_at(row), min_isr[c["topic"][row]], record, None)
        super()._rederive(rows, record)

    def _barrier(self, record: Record) -> Outcome:
        outcome = super()._barrier(record)
        if record.type == records.REMOVE_TOPIC_RECORD and outcome is Outcome.APPLIED:
            topic_id = record.data["topicId"]
            core = self.core
            for key in [k for k in core.violations if k[0] == topic_id]:
                for violation in core.violations.pop(key):
                    core.violation_counts[violation.kind] -= 1
        return outcome
