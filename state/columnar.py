"""A batch apply engine beside the object core: the records that make storms and loads go through a fast path,
everything else through `ClusterState.apply`, one record at a time, in log order.

`BatchEngine(cluster).apply_batch(records)` gives the same outcomes, quarantine, state, changes (`drain_changes`),
transitions, election counters and gauge contributions as ``[cluster.apply(r) for r in records]``; the
differential harness (tests/test_columnar_differential.py) compares the two field by field. The engine holds no
state of its own between batches: the `ClusterState` stays the state (its ``to_bytes`` / ``from_bytes``, its
reports and gauges), so a bucket can switch engines at any batch.

The fast path takes a PartitionChangeRecord of an owned partition, or a PartitionRecord creating an owned
partition other than partition 0, when nothing about it needs the object core's rare branches:

* its source position is past the source's last one, it carries a metadata offset past the snapshot's end, and
  the ring of recent offsets holds nothing at that offset (else: duplicate or conflict, decided by the core);
* its topic and (for a change) partition exist, the partition is owned, and its offset is past the partition's;
* a change of partition 0 keeps its replica count (else the topic's effective min ISR changes);
* ``leader`` and ``leaderRecoveryState`` are not null.

A liveness change of a registered broker (BrokerRegistrationChangeRecord, Fence/UnfenceBrokerRecord with its
current epoch) takes the fast path too: it re-derives the broker's partitions with the same memo, afresh.

Every other record (registrations, configs, topics, features, ClearElr, RemoveTopic, ReplicaLogInfo, snapshot
records, shadows of partition 0 in other buckets, duplicates, conflicts, malformed references) is a barrier: the
core applies it, and the memo of derived statuses starts afresh after it.

Status and flags are derived once per distinct (ISR, ELR, last known ELR, replicas, leader, recovery state,
min ISR, unclean) combination within a segment between barriers (broker liveness, configs and features cannot
change inside one), with the same `status.derive`; a storm of 100k changes has a few dozen distinct ones. The
audit (`audit.check`) runs, through the core's own `_audit`, exactly where the core runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from elrwatch.state import records
from elrwatch.state.cluster import RECENT_OFFSETS, ClusterState, Outcome, Transition
from elrwatch.state.merge import merge_partition_change, partition_from_record
from elrwatch.state.model import NO_LEADER, NO_LEADER_CHANGE, PartitionState, TopicState
from elrwatch.state.records import Record, RecordError
from elrwatch.state.status import derive

_PCR = records.PARTITION_CHANGE_RECORD
_PR = records.PARTITION_RECORD
_BROKER_CHANGE = records.BROKER_REGISTRATION_CHANGE_RECORD
_BROKER_LIVENESS = frozenset({_BROKER_CHANGE, records.FENCE_BROKER_RECORD, records.UNFENCE_BROKER_RECORD})

#: A derived result: (status, flags, whether the core's audit condition holds before looking at the
#: partition's current violations).
Derived = tuple[str, int, bool]


class BatchEngine:
    """Applies micro-batches of records to a `ClusterState` with the fast path above (see the module doc)."""

    def __init__(self, cluster: ClusterState) -> None:
        self.cluster = cluster
        #: Records applied by the fast path / handed to the core, since this engine was made.
        self.fast_records = 0
        self.core_records = 0
        self._memo: dict[tuple[Any, ...], Derived] = {}

    def apply_batch(self, batch: Sequence[Record]) -> tuple[list[Outcome], list[RecordError | None]]:
        """Apply the records in order: (outcome of each, the `RecordError` of each quarantined one, else None).

        Equal to ``cluster.apply(record)`` for each record in turn, with ``cluster.last_error`` read after each
        quarantined one."""
        cluster = self.cluster
        outcomes: list[Outcome] = []
        errors: list[RecordError | None] = []
        self._memo = {}
        fast = self._fast
        for record in batch:
            outcome = fast(record)
            if outcome is None:
                outcome = cluster.apply(record)
                self.core_records += 1
                if outcome is Outcome.APPLIED:  # a barrier: liveness, configs, features or min ISR may have changed
                    self._memo = {}  # (a record not applied changed nothing)
                errors.append(cluster.last_error if outcome is Outcome.QUARANTINED else None)
            else:
                self.fast_records += 1
                errors.append(None)
            outcomes.append(outcome)
        return outcomes, errors

    # --- the fast path -----------------------------------------------------------------------------------------

    def _fast(self, record: Record) -> Outcome | None:
        """Apply ``record`` if the fast path covers it (APPLIED), else None with nothing changed."""
        kind = record.type
        if kind in (_PCR, _PR):
            partition_kind = True
        elif kind in _BROKER_LIVENESS:
            partition_kind = False
        else:
            return None
        cluster = self.cluster
        offset = record.offset
        if offset is None or record.snapshot_end is not None:
            return None
        last = cluster.source_seq.get(record.source)
        if last is not None and record.seq <= last:
            return None
        covered = cluster.snapshot_end_offset
        if covered is not None and offset < covered:
            return None
        ring = cluster.recent_offsets
        slot = offset % RECENT_OFFSETS
        if ring and ring[slot] == offset:
            return None
        done = self._partition_record(record, offset) if partition_kind else self._broker_liveness(record, offset)
        if done is not True:
            return done or None  # NOT_OWNED, or not covered
        if not ring:
            cluster.recent_offsets = ring = [-1] * RECENT_OFFSETS
            cluster.recent_records = [None] * RECENT_OFFSETS
        ring[slot] = offset
        cluster.recent_records[slot] = record
        return Outcome.APPLIED

    def _accept(self, record: Record) -> None:
        """The bookkeeping `ClusterState.apply` does before a record's effect."""
        cluster = self.cluster
        cluster.source_seq[record.source] = record.seq
        if record.origin is not None and record.origin != cluster.derived_from:
            cluster.derived_from = record.origin

    def _partition_record(self, record: Record, offset: int) -> bool | Outcome:
        """Apply a PartitionChangeRecord / PartitionRecord the fast path covers (True: applied; NOT_OWNED: another
        bucket's partition, passed over as the core does); False (nothing done) if not covered."""
        cluster = self.cluster
        data = record.data
        topic = cluster.topics.get(data["topicId"])
        if topic is None:
            return False
        partition_id = data["partitionId"]
        if cluster.bucket is not None and not cluster.owns(topic.topic_id, partition_id):
            if partition_id == 0:
                return False  # partition 0's shadow
            self._accept(record)
            return Outcome.NOT_OWNED
        partition = topic.partitions.get(partition_id)
        if record.type == _PCR:
            if partition is None:
                return False
            last_offset = partition.last_offset
            if last_offset is not None and offset <= last_offset:
                return False
            if ("leader" in data and data["leader"] is None) or (
                "leaderRecoveryState" in data and data["leaderRecoveryState"] is None
            ):
                return False
            if partition_id == 0:
                replicas = data.get("replicas")
                if replicas is not None and len(replicas) != len(partition.replicas):
                    return False
            self._accept(record)
            self._change(topic, partition, record)
            return True
        if partition is not None or partition_id == 0:
            return False
        self._accept(record)
        self._create(topic, partition_id, record)
        return True

    def _broker_liveness(self, record: Record, offset: int) -> bool:
        """`ClusterState._apply_broker_change` / `_apply_fence` and `_broker_changed` for a registered broker whose
        epoch matches, re-deriving its partitions with a fresh memo; False (nothing done) for anything else."""
        cluster = self.cluster
        data = record.data
        kind = record.type
        if kind == _BROKER_CHANGE:
            broker_id, epoch = data["brokerId"], data["brokerEpoch"]
        else:
            broker_id, epoch = data["id"], data["epoch"]
        broker = cluster.brokers.get(broker_id)
        if broker is None or not broker.registered or broker.epoch != epoch:
            return False
        if broker.last_offset is not None and offset <= broker.last_offset:
            return False
        self._accept(record)
        if kind == _BROKER_CHANGE:
            fenced = data.get("fenced", 0)
            if fenced == 1:
                broker.fenced = True
            elif fenced == -1:
                broker.fenced = False
            if data.get("inControlledShutdown", 0) == 1:
                broker.in_controlled_shutdown = True
        else:
            broker.fenced = kind == records.FENCE_BROKER_RECORD
        broker.last_offset = offset
        if broker.active:
            cluster._active.add(broker_id)
        else:
            cluster._active.discard(broker_id)
        if broker.registered and not broker.fenced:
            cluster._eligible.add(broker_id)
        else:
            cluster._eligible.discard(broker_id)
        cluster._dirty_brokers.add(broker_id)
        self._memo = {}  # liveness changed
        if cluster.partition_count == 0:
            return True
        topics = cluster.topics
        refresh = self._refresh
        for partition in cluster._partitions_of_broker(broker_id):
            topic = topics.get(partition.topic_id)
            if topic is not None and topic.partitions.get(partition.partition_id) is partition:
                refresh(topic, partition, record)
        return True

    def _change(self, topic: TopicState, partition: PartitionState, record: Record) -> None:
        """`ClusterState._apply_partition_change` for an owned partition whose replica count stays (p0)."""
        cluster = self.cluster
        data = record.data
        b_leader, b_isr, b_elr = partition.leader, partition.isr, partition.elr
        b_lke, b_lrs, b_replicas = partition.last_known_elr, partition.leader_recovery_state, partition.replicas
        merge_partition_change(partition, data)
        partition.last_offset = record.offset
        if record.timestamp_ms is not None:
            partition.last_timestamp_ms = record.timestamp_ms
        partition.last_position = record.position
        leader_set = data.get("leader", NO_LEADER_CHANGE)
        record_lrs = data.get("leaderRecoveryState", -1)
        if leader_set != NO_LEADER_CHANGE or record_lrs != -1:
            cluster._count_election(b_leader, b_isr, b_elr, b_lke, b_lrs, partition, record_lrs, leader_set)
        index = cluster._by_broker
        if index is not None and (
            partition.replicas is not b_replicas
            or partition.isr is not b_isr
            or partition.elr is not b_elr
            or partition.last_known_elr is not b_lke
        ):
            # the core removes the partition from every old member's set and adds it to every new member's: the
            # same sets result from moving it between the members that left and joined (none, in an ISR change)
            # (the members of a field that did not change are the same before and after)
            replicas = partition.replicas
            if not (
                replicas is b_replicas
                and (partition.isr is b_isr or (_within(partition.isr, replicas) and _within(b_isr, replicas)))
                and (partition.elr is b_elr or (_within(partition.elr, replicas) and _within(b_elr, replicas)))
                and (
                    partition.last_known_elr is b_lke
                    or (_within(partition.last_known_elr, replicas) and _within(b_lke, replicas))
                )
            ):
                cluster._unindex(set(b_replicas) | set(b_isr) | set(b_elr) | set(b_lke), partition)
                cluster._index(partition)
        self._refresh(topic, partition, record)

    def _create(self, topic: TopicState, partition_id: int, record: Record) -> None:
        """`ClusterState._apply_partition_record` for a new owned partition other than partition 0."""
        cluster = self.cluster
        new = partition_from_record(record.data)
        new.topic_id = topic.topic_id
        new.last_offset = record.offset
        new.last_timestamp_ms = record.timestamp_ms
        new.last_position = record.position
        cluster.partition_count += 1
        topic.partitions[partition_id] = new
        cluster._dirty_topics.add(topic.topic_id)
        cluster._index(new)
        self._refresh(topic, new, record)

    def _refresh(self, topic: TopicState, partition: PartitionState, record: Record) -> None:
        """`ClusterState._refresh` with the derived status memoised per distinct registration in the segment."""
        cluster = self.cluster
        topic_id = topic.topic_id
        min_isr = cluster._min_isr_cache.get(topic_id) or cluster.effective_min_isr(topic)
        unclean = cluster._unclean_cache.get(topic_id)
        if unclean is None:
            unclean = cluster.unclean_enabled(topic)
        isr = partition.isr
        key = (
            isr,
            partition.elr,
            partition.last_known_elr,
            partition.replicas,
            partition.leader,
            partition.leader_recovery_state,
            min_isr,
            unclean,
        )
        derived = self._memo.get(key)
        if derived is None:
            status, flags = derive(partition, min_isr, cluster._is_active, cluster._elr_on, unclean)
            leader = partition.leader
            audit = bool(
                partition.elr
                or len(isr) < min_isr
                or not (leader == NO_LEADER or leader in isr)
                or (cluster.brokers and not cluster._eligible.issuperset(isr))
                or not _within(isr, partition.replicas)
            )
            derived = self._memo[key] = (status, flags, audit)
        status, flags, audit = derived
        old_status = partition.status
        old_flags = partition.flags if old_status else None
        if flags != old_flags:
            histogram = cluster.flag_histogram
            if old_flags is not None:
                histogram[old_flags] -= 1
            histogram[flags] += 1
            partition.flags = flags
        if status != old_status:
            status_counts = cluster.status_counts
            if old_status:
                status_counts[old_status] -= 1
            status_counts[status] += 1
            if cluster.track_changes:
                cluster._transitions.append(
                    Transition(
                        topic_id,
                        partition.partition_id,
                        topic.name,
                        old_status or None,
                        status,
                        record.timestamp_ms,
                        record.offset,
                        record.position,
                    )
                )
            partition.status = status
            partition.status_since_ms = record.timestamp_ms
            partition.status_since_offset = record.offset
        if audit or (topic_id, partition.partition_id) in cluster.violations:
            cluster._audit(topic, partition, min_isr, record, None)
        if cluster.track_changes:
            cluster._dirty[id(partition)] = partition


def _within(members: tuple[int, ...], container: tuple[int, ...]) -> bool:
    """Whether every member is in ``container``."""
    for member in members:  # noqa: SIM110 - a plain loop is faster than all() with a generator here
        if member not in container:
            return False
    return True
