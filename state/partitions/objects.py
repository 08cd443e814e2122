"""The object store: every partition a `PartitionState`, each record applied as Kafka replays it (merge.py), its
derived status (status.py), audit, insight and gauge contributions kept up to date incrementally.

This is the executable specification of what elrwatch computes per partition: the rules are written here one
partition at a time, and the columnar store (the runtime) is held equal to it by the differential tests
(tests/test_columnar.py). It needs nothing but the standard library, so the light commands (the agent beside a
broker, `restart-check`) run it.

Incremental bookkeeping: a partition is re-derived (`_refresh`) whenever a record changes it, and when a broker,
config or feature it depends on changes (`react`, through the broker → partitions index, built on the first broker
change or by `index_brokers`). The status counts, the flag histogram, the violations and the insight counters are
updated by difference; nothing iterates every partition per batch. ``track_changes`` keeps what changed for
`drain` (the partitions, removals, status transitions).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Final

from elrwatch.state import insight
from elrwatch.state.gauges import (
    Gauges,
    candidate_known_partitions,
    counted_partition_gauges,
    loses_last_electable,
    restart_doomed,
    unregistered_brokers,
)
from elrwatch.state.image import Effects, MetadataImage
from elrwatch.state.image.topics import stamp
from elrwatch.state.merge import clear_elr, merge_partition_change, partition_from_record
from elrwatch.state.model import (
    LEADER_CHANGE_CLEAN,
    LEADER_CHANGE_ELR,
    LEADER_CHANGE_LAST_KNOWN_LEADER,
    LEADER_CHANGE_LOST,
    LEADER_CHANGE_UNCLEAN,
    LRS_RECOVERED,
    LRS_RECOVERING,
    NO_LEADER,
    NO_LEADER_CHANGE,
    PartitionState,
    TopicState,
)
from elrwatch.state.outcome import Outcome, is_duplicate, record_error
from elrwatch.state.partitions import PartitionChanges, PartitionStore, Transition
from elrwatch.state.record_types import STORE_OBJECTS
from elrwatch.state.records import Record, RecordError
from elrwatch.state.status import ELECTABLE_SHIFT, FLAG_BITS, derive

#: What `ObjectPartitions` pickles (the rest is rebuilt on load).
PERSISTED: Final = (
    "bucket",
    "track_changes",
    "by_topic",
    "log_info",
    "operator_steps",
    "violations",
    "counters",
    "partitions_held",
    "status_counts_",
    "flag_histogram",
    "insight",
    "insight_counts",
)


class ObjectPartitions(PartitionStore):
    """Partitions as `PartitionState` objects, by topic ID then partition ID."""

    KIND = STORE_OBJECTS

    def __init__(self, image: MetadataImage, bucket: tuple[int, int] | None = None, track_changes: bool = True) -> None:
        """``track_changes=False`` skips the bookkeeping behind `drain` (changed partitions, status transitions):
        a replay that only reads the final state does not need it."""
        super().__init__(image, bucket)
        self.track_changes = track_changes
        self.by_topic: dict[str, dict[int, PartitionState]] = {}
        self.partitions_held = 0
        self.status_counts_: Counter[str] = Counter()
        self.flag_histogram: Counter[int] = Counter()  # flags value -> partitions (at most 1024 distinct values)
        #: Each partition's non-empty insight contribution (state/insight.py), and their sums.
        self.insight: dict[tuple[str, int], insight.Contribution] = {}
        self.insight_counts: Counter[Any] = Counter()
        self._reset_transient()

    def _reset_transient(self) -> None:
        self._dirty: dict[int, PartitionState] = {}
        self._removed: list[tuple[str, int, str]] = []
        self._transitions: list[Transition] = []
        self._by_broker: dict[int, set[PartitionState]] | None = None
        self._min_isr_cache: dict[str, int] = {}
        self._unclean_cache: dict[str, bool] = {}
        self._handlers = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"image": self.image, **{name: getattr(self, name) for name in PERSISTED}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.image = state["image"]
        for name in PERSISTED:
            setattr(self, name, state[name])
        self._reset_transient()

    # --- reads --------------------------------------------------------------------------------------------------

    @property
    def partition_count(self) -> int:
        return self.partitions_held

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        partitions = self.by_topic.get(topic_id)
        return partitions.get(partition_id) if partitions is not None else None

    def iter_partitions(self) -> Iterator[PartitionState]:
        for partitions in self.by_topic.values():
            yield from partitions.values()

    def of_broker(self, broker_id: int) -> list[PartitionState]:
        return list(self.index_brokers().get(broker_id, ()))

    def replica_count(self, topic_id: str, partition_id: int) -> int | None:
        partition = self.partition(topic_id, partition_id)
        return len(partition.replicas) if partition is not None else None

    def count_of(self, topic_id: str) -> int:
        return len(self.by_topic.get(topic_id, ()))

    def status_counts(self) -> Counter[str]:
        return self.status_counts_

    @property
    def flag_counts(self) -> Counter[int]:
        """Partitions per flag bit (status.F_*)."""
        counts: Counter[int] = Counter()
        for flags, count in self.flag_histogram.items():
            for bit in FLAG_BITS:
                if flags & bit:
                    counts[bit] += count
        return counts

    @property
    def electable_counts(self) -> list[int]:
        """Partitions with 0, 1, 2 and 3+ live electable replicas."""
        counts = [0, 0, 0, 0]
        for flags, count in self.flag_histogram.items():
            counts[(flags >> ELECTABLE_SHIFT) & 3] += count
        return counts

    def gauges(self) -> Gauges:
        return counted_partition_gauges(
            self.image,
            flags=self.flag_counts,
            electable=self.electable_counts,
            statuses=self.status_counts_,
            partitions=self.partitions_held,
            violations=self.violations.counts,
            insight_counts=self.insight_counts,
            counters=self.counters,
            candidate_known=candidate_known_partitions(self.image, self.log_info, self.partition),
            unregistered_replicas=self.unregistered_replica_counts(),
            unclean_restart_pending=self.unclean_restart_pending(),
        )

    def unregistered_replica_counts(self) -> dict[int, int]:
        """Broker id → the partitions here whose replicas name it, for each broker without a registration."""
        index = self.index_brokers()
        return {b: sum(1 for p in index[b] if b in p.replicas) for b in unregistered_brokers(self.image, index)}

    def unclean_restart_pending(self) -> int:
        """Partitions that lose their last electable member when the stopped brokers return
        (`gauges.loses_last_electable`): only the partitions of brokers predicted to restart uncleanly are read."""
        doomed = restart_doomed(self.image)
        if not doomed:
            return 0
        seen: set[tuple[str, int]] = set()
        for broker in doomed:
            for p in self.of_broker(broker):
                if loses_last_electable(p, doomed):
                    seen.add((p.topic_id, p.partition_id))
        return len(seen)

    def _min_isr(self, topic: TopicState) -> int:
        cached = self._min_isr_cache.get(topic.topic_id)
        if cached is None:
            cached = self._min_isr_cache[topic.topic_id] = self.effective_min_isr(topic)
        return cached

    def _unclean(self, topic: TopicState) -> bool:
        cached = self._unclean_cache.get(topic.topic_id)
        if cached is None:
            cached = self._unclean_cache[topic.topic_id] = self.image.configs.unclean_enabled(topic.name)
        return cached

    # --- changes --------------------------------------------------------------------------------------------

    def drain(self) -> PartitionChanges:
        """Return and forget what changed since the previous call."""
        live = self.by_topic
        changes = PartitionChanges(
            partitions=[
                p for p in self._dirty.values() if p.topic_id in live and live[p.topic_id].get(p.partition_id) is p
            ],
            removed=self._removed,
            transitions=self._transitions,
        )
        self._dirty = {}
        self._removed = []
        self._transitions = []
        return changes

    # --- handlers (record_types names them) -----------------------------------------------------------------

    def apply_partition_record(self, record: Record) -> Outcome | RecordError:
        """PartitionRecord: the registration is replaced (its derived bookkeeping carries over)."""
        data = record.data
        topic = self.image.topics.by_id[data["topicId"]]
        partition_id = data["partitionId"]
        partitions = self.by_topic.setdefault(topic.topic_id, {})
        old = partitions.get(partition_id)
        if old is not None and is_duplicate(old.last_offset, record):
            return Outcome.DUPLICATE
        new = partition_from_record(data)
        new.topic_id = topic.topic_id  # share the interned id string
        new.last_offset = record.offset
        new.last_timestamp_ms = record.timestamp_ms
        new.last_position = record.position
        epoch_note = None
        if old is not None:
            new.status = old.status
            new.status_since_ms = old.status_since_ms
            new.status_since_offset = old.status_since_offset
            new.flags = old.flags
            new.last_leader_change = old.last_leader_change
            if new.leader_epoch < old.leader_epoch or new.partition_epoch < old.partition_epoch:
                epoch_note = (
                    f"PartitionRecord replaced leaderEpoch {old.leader_epoch} -> {new.leader_epoch}, "
                    f"partitionEpoch {old.partition_epoch} -> {new.partition_epoch}"
                )
            self._count_election(
                old.leader,
                old.isr,
                old.elr,
                old.last_known_elr,
                old.leader_recovery_state,
                new,
                record_lrs=new.leader_recovery_state,
                leader_set=new.leader,
            )
            self._unindex(_members(old), old)
            self._dirty.pop(id(old), None)
        else:
            self.partitions_held += 1
        partitions[partition_id] = new
        self.image.topics.changed.add(topic.topic_id)
        self._index(new)
        if partition_id == 0:
            self._min_isr_cache.pop(topic.topic_id, None)  # its replica count caps the topic's min ISR
        self._refresh(topic, new, record, epoch_note)
        if partition_id == 0 and (old is None or len(old.replicas) != len(new.replicas)):
            self._refresh_topic(topic, record)
        return Outcome.APPLIED

    def apply_partition_change(self, record: Record) -> Outcome | RecordError:
        """PartitionChangeRecord: merged into the registration (`merge.merge_partition_change`)."""
        return self.apply_change(record, record.data)

    def apply_change(self, record: Record, data: Mapping[str, Any]) -> Outcome | RecordError:
        """``record`` changes its partition as a PartitionChangeRecord with ``data`` would (topicId, partitionId
        and the fields it sets): the handler of a partition type whose effect is such a change."""
        topic = self.image.topics.by_id[data["topicId"]]
        partition_id = data["partitionId"]
        partition = self.partition(topic.topic_id, partition_id)
        if partition is None:
            return record_error(
                record, "unknown_partition", "partitionId", f"no PARTITION_RECORD for {topic.name}-{partition_id}"
            )
        if is_duplicate(partition.last_offset, record):
            return Outcome.DUPLICATE
        old_rf = len(partition.replicas)
        b_leader, b_isr, b_elr = partition.leader, partition.isr, partition.elr
        b_lke, b_lrs, b_replicas = partition.last_known_elr, partition.leader_recovery_state, partition.replicas
        merge_partition_change(partition, data)
        stamp(partition, record)
        leader_set = data.get("leader", NO_LEADER_CHANGE)
        record_lrs = data.get("leaderRecoveryState", -1)
        if leader_set != NO_LEADER_CHANGE or record_lrs != -1:
            self._count_election(b_leader, b_isr, b_elr, b_lke, b_lrs, partition, record_lrs, leader_set)
        if self._by_broker is not None and (
            partition.replicas is not b_replicas
            or partition.isr is not b_isr
            or partition.elr is not b_elr
            or partition.last_known_elr is not b_lke
        ):
            self._unindex(set(b_replicas) | set(b_isr) | set(b_elr) | set(b_lke), partition)
            self._index(partition)
        if partition_id == 0 and len(partition.replicas) != old_rf:
            self._min_isr_cache.pop(topic.topic_id, None)  # before deriving: the cap of the topic's min ISR changed
            self._refresh(topic, partition, record)
            self._refresh_topic(topic, record)
        else:
            self._refresh(topic, partition, record)
        return Outcome.APPLIED

    def mark_changed(self, topic_id: str, partition_id: int) -> None:
        partition = self.partition(topic_id, partition_id)
        if self.track_changes and partition is not None:
            self._dirty[id(partition)] = partition

    # --- reactions to the image's records -------------------------------------------------------------------

    def react(self, effects: Effects, record: Record) -> None:
        topics = self.image.topics.by_id
        for topic_id, name in effects.removed_topics:
            self._remove_topic(topic_id, name)
        if effects.clear_elr is not None:
            for topic_id in effects.clear_elr:
                self._clear_elr(topics[topic_id], record)
        if self.partitions_held:
            for broker_id in effects.brokers:
                # even when liveness is unchanged, fencing changes the KIP-903 audit: refresh every partition of it
                for partition in list(self.index_brokers().get(broker_id, ())):
                    topic = topics.get(partition.topic_id)
                    if topic is not None and self.partition(topic.topic_id, partition.partition_id) is partition:
                        self._refresh(topic, partition, record)
        if effects.everything:
            self._min_isr_cache.clear()
            self._unclean_cache.clear()
            for topic in topics.values():
                self._refresh_topic(topic, record)
        else:
            for topic_id in effects.topics:
                topic = topics.get(topic_id)
                if topic is not None:
                    self._refresh_topic(topic, record)

    def _remove_topic(self, topic_id: str, name: str) -> None:
        for partition in list(self.by_topic.pop(topic_id, {}).values()):
            if partition.status:
                self.status_counts_[partition.status] -= 1
                self.flag_histogram[partition.flags] -= 1
            self.partitions_held -= 1
            key = (topic_id, partition.partition_id)
            part = self.insight.pop(key, None)
            if part is not None:
                insight.apply_delta(self.insight_counts, topic_id, part, -1)
            self.violations.drop(key)
            self.log_info.pop(key, None)
            self.operator_steps.pop(key, None)
            self._unindex(_members(partition), partition)
            self._dirty.pop(id(partition), None)
            self._removed.append((topic_id, partition.partition_id, name))
        self._min_isr_cache.pop(topic_id, None)
        self._unclean_cache.pop(topic_id, None)

    def _clear_elr(self, topic: TopicState, record: Record) -> None:
        for partition in self.by_topic.get(topic.topic_id, {}).values():
            if is_duplicate(partition.last_offset, record):
                continue
            if partition.elr or partition.last_known_elr:
                members = _members(partition)
                clear_elr(partition)
                stamp(partition, record)
                self._unindex(members, partition)
                self._index(partition)
                self._refresh(topic, partition, record)

    # --- elections ------------------------------------------------------------------------------------------

    def _count_election(
        self,
        b_leader: int,
        b_isr: tuple[int, ...],
        b_elr: tuple[int, ...],
        b_lke: tuple[int, ...],
        b_lrs: int,
        after: PartitionState,
        record_lrs: int,
        leader_set: int,
    ) -> None:
        """Election counters with Kafka's meter semantics (metrics.md §1) and the last leader change kind."""
        if record_lrs == LRS_RECOVERING:
            self.counters["unclean_elections"] += 1
        if b_lrs == LRS_RECOVERING and after.leader_recovery_state == LRS_RECOVERED:
            self.counters["unclean_recovery_finished"] += 1
        if leader_set == NO_LEADER_CHANGE:
            return
        winner = after.leader
        if winner in b_elr:
            self.counters["elr_elections"] += 1
        if winner == b_leader:
            return
        if winner == NO_LEADER:
            kind = LEADER_CHANGE_LOST
        elif winner in b_isr:
            kind = LEADER_CHANGE_CLEAN
        elif winner in b_elr:
            kind = LEADER_CHANGE_ELR
        elif not b_isr and not b_elr and winner in b_lke:
            kind = LEADER_CHANGE_LAST_KNOWN_LEADER
            self.counters["last_known_leader_elections"] += 1
        elif record_lrs == LRS_RECOVERING or winner not in after.isr:
            kind = LEADER_CHANGE_UNCLEAN
        else:
            kind = LEADER_CHANGE_CLEAN  # e.g. a reassignment target that joined the ISR
        after.last_leader_change = kind

    # --- derived status, audit, insight ---------------------------------------------------------------------

    def _refresh(
        self, topic: TopicState, partition: PartitionState, record: Record | None, epoch_note: str | None = None
    ) -> None:
        """Recompute a partition's status, flags and violations; count transitions; mark it changed."""
        topic_id = topic.topic_id
        min_isr = self._min_isr(topic)
        image = self.image
        brokers = image.brokers
        status, flags = derive(partition, min_isr, brokers.is_active, image.features.elr_enabled, self._unclean(topic))
        old_status = partition.status
        old_flags = partition.flags if old_status else None
        if flags != old_flags:
            histogram = self.flag_histogram
            if old_flags is not None:
                histogram[old_flags] -= 1
            histogram[flags] += 1
            partition.flags = flags
        if status != old_status:
            offset = record.offset if record is not None else None
            at_ms = record.timestamp_ms if record is not None else None
            if old_status:
                self.status_counts_[old_status] -= 1
            self.status_counts_[status] += 1
            if self.track_changes:
                self._transitions.append(
                    Transition(
                        topic_id,
                        partition.partition_id,
                        topic.name,
                        old_status or None,
                        status,
                        at_ms,
                        offset,
                        record.position if record is not None else None,
                    )
                )
            partition.status = status
            partition.status_since_ms = at_ms
            partition.status_since_offset = offset
        self.violations.check(image, partition, min_isr, record, epoch_note)
        self._update_insight(topic_id, partition, min_isr)
        if self.track_changes:
            self._dirty[id(partition)] = partition

    def _update_insight(self, topic_id: str, partition: PartitionState, min_isr: int) -> None:
        """Recompute the partition's insight contribution and update the counters by difference."""
        brokers = self.image.brokers
        part = insight.contribution(
            partition.replicas, partition.isr, partition.elr, partition.leader, min_isr, brokers.causes, brokers.active
        )
        key = (topic_id, partition.partition_id)
        old = self.insight.get(key)
        if old == part:
            return
        if old is not None:
            insight.apply_delta(self.insight_counts, topic_id, old, -1)
        if part is None:
            del self.insight[key]
        else:
            self.insight[key] = part
            insight.apply_delta(self.insight_counts, topic_id, part, 1)

    def _refresh_topic(self, topic: TopicState, record: Record | None) -> None:
        self._min_isr_cache.pop(topic.topic_id, None)
        self._unclean_cache.pop(topic.topic_id, None)
        for partition in self.by_topic.get(topic.topic_id, {}).values():
            self._refresh(topic, partition, record)

    # --- the broker → partitions index (built lazily on the first broker change; not pickled) ---------------------

    def _index(self, partition: PartitionState) -> None:
        if self._by_broker is None:
            return
        for broker in _members(partition):
            self._by_broker.setdefault(broker, set()).add(partition)

    def _unindex(self, members: set[int], target: PartitionState) -> None:
        if self._by_broker is None:
            return
        for broker in members:
            of_broker = self._by_broker.get(broker)
            if of_broker is not None:
                of_broker.discard(target)

    def index_brokers(self) -> dict[int, set[PartitionState]]:
        """The broker → partitions index, built now if not built yet (idempotent, cheap once built).

        Otherwise the first broker change builds it: a scan of every partition, ≈ 2 µs each, so at a million
        partitions the first fence record of a storm would cost seconds on its own. A long-lived state calls this
        once it has loaded, outside the records' path."""
        if self._by_broker is None:
            index: dict[int, set[PartitionState]] = {}
            get = index.get
            for partitions in self.by_topic.values():
                for partition in partitions.values():
                    for broker in partition.replicas:
                        members = get(broker)
                        if members is None:
                            members = index[broker] = set()
                        members.add(partition)
                    # ISR, ELR and last known ELR are subsets of the replicas, except in corrupt or reassigning
                    # registrations: only their other members need a lookup (the common case does no set work)
                    replicas = partition.replicas
                    for broker in (*partition.isr, *partition.elr, *partition.last_known_elr):
                        if broker not in replicas:
                            index.setdefault(broker, set()).add(partition)
            self._by_broker = index
        return self._by_broker


def _members(partition: PartitionState) -> set[int]:
    return set(partition.replicas) | set(partition.isr) | set(partition.elr) | set(partition.last_known_elr)
