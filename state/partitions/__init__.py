"""Partitions behind one interface, `PartitionStore`, with two implementations:

* the object store (`objects.ObjectPartitions`): a `PartitionState` per partition, one record at a time, every
  rule written the plain way. It is the executable specification: the differential tests hold the columnar
  store equal to it on every input they have.
* the columnar store (`columnar.ColumnarPartitions`): a bucket's partitions as numpy columns, partition records
  applied as vectors. It is what `elrwatch stream`, `elrwatch replay` and the what-if run.

What both share is written once, here or in the image (state/image/): admission (positions), brokers, topics,
configs and features are the image's; a store only holds partitions. `ClusterState` (state/cluster.py) admits a
partition record (positions, its topic, the bucket's ownership) and calls the store's handler for its type (the
registry names one per store, `record_types.STORES`); for any other record it lets the image apply it, then tells
the store what that changed (`react`: a broker's partitions, a topic's, every partition derive again; a topic's
partitions go; ELRs clear). Here too: the audit's bookkeeping (`Violations`: each violation kept with the record
that first caused it, counted by kind) and the replica log infos (`keep_log_info`).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

from elrwatch.state import audit, record_types, recovery
from elrwatch.state.audit import Violation
from elrwatch.state.gauges import Gauges
from elrwatch.state.image import Effects, MetadataImage
from elrwatch.state.model import NO_LEADER, PartitionState, TopicState
from elrwatch.state.outcome import Outcome, is_duplicate, record_error
from elrwatch.state.records import Record, RecordError
from elrwatch.state.routing import bucket_of

#: Transition's fields in order (its pickled form).
TRANSITION_FIELDS: Final = (
    "topic_id",
    "partition_id",
    "topic",
    "from_status",
    "to_status",
    "at_ms",
    "offset",
    "position",
)


@dataclass(slots=True)
class Transition:
    """A partition moved from one status to another (the store's history table)."""

    topic_id: str
    partition_id: int
    topic: str
    from_status: str | None
    to_status: str
    at_ms: int | None
    offset: int | None
    position: str | None

    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in TRANSITION_FIELDS]

    def __setstate__(self, state: list[object]) -> None:
        for name, value in zip(TRANSITION_FIELDS, state, strict=True):
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "topic": self.topic,
            "topicId": self.topic_id,
            "partitionId": self.partition_id,
            "from": self.from_status,
            "to": self.to_status,
            "atMs": self.at_ms,
            "offset": self.offset,
            "position": self.position,
        }


@dataclass(slots=True)
class PartitionChanges:
    """What changed among the partitions since the previous drain (`drain` of either store)."""

    partitions: list[PartitionState] = field(default_factory=list)
    removed: list[tuple[str, int, str]] = field(default_factory=list)  # (topic_id, partition_id, topic name)
    transitions: list[Transition] = field(default_factory=list)


#: A partition record's handler in a store, bound: ``(record) -> Outcome | RecordError``.
BoundHandler = Callable[[Record], "Outcome | RecordError"]


class Violations:
    """The invariants each partition currently breaks (monitor-spec §6, `audit.check`), each kept with the record
    that first caused it, and the partitions per violation kind."""

    def __init__(self) -> None:
        self.by_partition: dict[tuple[str, int], tuple[Violation, ...]] = {}
        self.counts: Counter[str] = Counter()

    def of(self, topic_id: str, partition_id: int) -> tuple[Violation, ...]:
        """What a partition breaks now."""
        return self.by_partition.get((topic_id, partition_id), ())

    def audit(
        self,
        image: MetadataImage,
        partition: PartitionState,
        min_isr: int,
        record: Record | None,
        epoch_note: str | None,
    ) -> None:
        """Check ``partition`` now (after ``record``); a violation that persists keeps the record that first
        caused it."""
        key = (partition.topic_id, partition.partition_id)
        found = audit.check(partition, min_isr, image.features.elr_enabled, image.brokers.is_ineligible, epoch_note)
        previous = self.by_partition.get(key, ())
        if len(found) == len(previous) and all(
            v.kind == kind and v.detail == detail for v, (kind, detail) in zip(previous, found, strict=True)
        ):
            return  # unchanged: keep the records that first caused them
        offset = record.offset if record is not None else None
        position = record.position if record is not None else None
        kept = {v.kind: v for v in previous}
        current = tuple(
            kept[kind] if kind in kept and kept[kind].detail == detail else Violation(kind, detail, offset, position)
            for kind, detail in found
        )
        counts = self.counts
        for violation in previous:
            counts[violation.kind] -= 1
        for violation in current:
            counts[violation.kind] += 1
        if current:
            self.by_partition[key] = current
        else:
            self.by_partition.pop(key, None)

    def check(
        self,
        image: MetadataImage,
        partition: PartitionState,
        min_isr: int,
        record: Record | None,
        epoch_note: str | None = None,
    ) -> None:
        """`audit` when it can find or clear something: its common case (no ELR, a full enough ISR holding the
        leader, only eligible brokers and only replicas in it, no decreased epoch, no violation kept) is skipped."""
        isr = partition.isr
        brokers = image.brokers
        if (
            epoch_note is not None
            or partition.elr
            or len(isr) < min_isr
            or not (partition.leader == NO_LEADER or partition.leader in isr)
            or (brokers.by_id and not brokers.eligible.issuperset(isr))
            or not _all_in(isr, partition.replicas)
            or (partition.topic_id, partition.partition_id) in self.by_partition
        ):
            self.audit(image, partition, min_isr, record, epoch_note)

    def drop(self, key: tuple[str, int]) -> None:
        """A partition went: its violations go."""
        for violation in self.by_partition.pop(key, ()):
            self.counts[violation.kind] -= 1

    def drop_topic(self, topic_id: str) -> None:
        """A topic went: its partitions' violations go."""
        for key in [k for k in self.by_partition if k[0] == topic_id]:
            self.drop(key)


def _all_in(members: tuple[int, ...], container: tuple[int, ...]) -> bool:
    for member in members:  # noqa: SIM110 - a plain loop is faster than all() with a generator here
        if member not in container:
            return False
    return True


def keep_log_info(log_info: dict[tuple[str, int], dict[int, dict[str, Any]]], topic_id: str, record: Record) -> bool:
    """Keep a REPLICA_LOG_INFO_RECORD in ``log_info`` ((topic ID, partition ID) → broker ID → entry): its fields with
    the record's offset and timestamp. False, nothing kept: a duplicate (not after the broker's kept entry)."""
    data = record.data
    infos = log_info.setdefault((topic_id, data["partitionId"]), {})
    previous = infos.get(data["brokerId"])
    if previous is not None and is_duplicate(previous.get("offset"), record):
        return False
    infos[data["brokerId"]] = {
        "brokerId": data["brokerId"],
        "brokerEpoch": data["brokerEpoch"],
        "logEndOffset": data["logEndOffset"],
        "lastWrittenLeaderEpoch": data["lastWrittenLeaderEpoch"],
        "currentLeaderEpoch": data["currentLeaderEpoch"],
        "offset": record.offset,
        "timestampMs": record.timestamp_ms,
    }
    return True


class RecordApplier(Protocol):
    """What applies one record exactly once (`ClusterState.apply`): a block's irregular lines go through it."""

    def apply(self, record: Record, snapshot_end: int | None = None, owned: bool = False) -> Outcome: ...


class PartitionStore(ABC):
    """A bucket's (or a whole cluster's) partitions: what `ClusterState` calls and what readers read.

    A subclass names itself (``KIND``, one of `record_types.STORES`) and defines the handler the registry names for
    it of every partition record type; `__init_subclass__` checks that for every type registered, now and later.
    """

    #: The store's name in the registry (`record_types.STORES`).
    KIND: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.KIND:
            record_types.add_check(functools.partial(_check_handler, cls))

    def __init__(self, image: MetadataImage, bucket: tuple[int, int] | None = None) -> None:
        if bucket is not None and not (bucket[1] >= 1 and 0 <= bucket[0] < bucket[1]):
            raise ValueError(f"invalid bucket {bucket}")
        self.image = image
        self.bucket = bucket
        self.violations = Violations()
        #: Election counters with Kafka's meter semantics (metrics.md §1): `gauges.partition_gauges` names them.
        self.counters: Counter[str] = Counter()
        #: (topic ID, partition ID) → broker ID → the replica's log info (REPLICA_LOG_INFO_RECORD).
        self.log_info: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        #: (topic ID, partition ID) → the operator's recovery steps, oldest first (OPERATOR_RECOVERY_RECORD).
        self.operator_steps: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._handlers: dict[str, BoundHandler] = {}

    def owns(self, topic_id: str, partition_id: int) -> bool:
        """Whether this store holds the partition (always, unless bucketed)."""
        bucket = self.bucket
        return bucket is None or bucket_of(topic_id, partition_id, bucket[1]) == bucket[0]

    def handler(self, type_name: str) -> BoundHandler:
        """The store's handler of a partition record type (the registry's, bound to this store)."""
        found = self._handlers.get(type_name)
        if found is None:
            entry = record_types.get(type_name)
            if entry is None:
                raise KeyError(f"record type {type_name} is not registered")
            named = entry.store_handler(self.KIND)
            found = getattr(self, named) if isinstance(named, str) else functools.partial(named, self)
            self._handlers[type_name] = found
        return found

    def effective_min_isr(self, topic: TopicState) -> int:
        """The topic's effective min ISR: its configured value capped by partition 0's replica count."""
        return self.image.configs.effective_min_isr(topic.name, self.replication_factor(topic.topic_id))

    def replication_factor(self, topic_id: str) -> int:
        """Replica count of the topic's partition 0 (held here, or the image's shadow), 0 if unknown."""
        count = self.replica_count(topic_id, 0)
        if count is None:
            shadow = self.image.topics.shadow_p0.get(topic_id)
            return len(shadow.replicas) if shadow is not None else 0
        return count

    # --- what each store defines --------------------------------------------------------------------------------

    def flush(self) -> None:  # noqa: B027 (a hook: only the columnar store stages, the object store has nothing to do)
        """Finish what is staged (the columnar store's segment): before any read, and before a record that is not
        a partition's is applied."""

    def apply_block(
        self,
        cluster: RecordApplier,
        block: Any,
        outcomes: list[Outcome],
        errors: list[Any],
        note: Any,
        owned: bool = False,
    ) -> None:
        """A block of partition-record lines (`columnar.lines.LineBlock`): each line applied as its Record through
        ``cluster.apply`` and given to ``note(record, outcome)`` (the columnar store admits them as vectors)."""
        for j in range(len(block)):
            record = block.record(j)
            note(record, cluster.apply(record, None, owned))

    def apply_replica_log_info(self, record: Record) -> Outcome | RecordError:
        """ReplicaLogInfoRecord (elrwatch's own): a replica's log end, kept for the unclean-recovery advice."""
        self.flush()
        data = record.data
        if self.partition(data["topicId"], data["partitionId"]) is None:
            return record_error(record, "unknown_partition", "partitionId", "no PARTITION_RECORD for this partition")
        if not keep_log_info(self.log_info, data["topicId"], record):
            return Outcome.DUPLICATE
        self.mark_changed(data["topicId"], data["partitionId"])
        return Outcome.APPLIED

    def apply_operator_recovery(self, record: Record) -> Outcome | RecordError:
        """OperatorRecoveryRecord (elrwatch's own): one step of `elrwatch recover`, kept (the newest
        `recovery.KEEP_STEPS`) for the partition's document."""
        self.flush()
        data = record.data
        key = (data["topicId"], data["partitionId"])
        if self.partition(*key) is None:
            return record_error(record, "unknown_partition", "partitionId", "no PARTITION_RECORD for this partition")
        steps = self.operator_steps.setdefault(key, [])
        steps.append(recovery.step_entry(data, record.timestamp_ms))
        del steps[: -recovery.KEEP_STEPS]
        self.mark_changed(*key)
        return Outcome.APPLIED

    @abstractmethod
    def drain(self) -> PartitionChanges:
        """Return and forget what changed since the previous drain: the partitions changed and removed, their
        status transitions in order (`PartitionChanges`)."""

    @abstractmethod
    def mark_changed(self, topic_id: str, partition_id: int) -> None:
        """The partition changed without a new registration (its replicas' log info): it is drained as changed."""

    @abstractmethod
    def apply_change(self, record: Record, data: Any) -> Outcome | RecordError:
        """``record`` changes its partition as a PartitionChangeRecord with ``data`` would (topicId, partitionId and
        the fields it sets), with everything that follows (elections, derived status, audit, transitions): what a
        partition type whose effect is such a change has its handlers call, in either store."""

    @abstractmethod
    def react(self, effects: Effects, record: Record) -> None:
        """A record the image applied changed what ``effects`` say: derive, drop or clear the partitions concerned."""

    @abstractmethod
    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        """A partition held here, with its derived fields, or None."""

    @abstractmethod
    def iter_partitions(self) -> Iterator[PartitionState]:
        """Every partition held here (in no particular order)."""

    @abstractmethod
    def of_broker(self, broker_id: int) -> list[PartitionState]:
        """The partitions held here whose replicas, ISR, ELR or last known ELR name the broker."""

    @abstractmethod
    def replica_count(self, topic_id: str, partition_id: int) -> int | None:
        """The replica count of a partition held here, None if it is not."""

    @abstractmethod
    def count_of(self, topic_id: str) -> int:
        """How many of the topic's partitions are held here."""

    @property
    @abstractmethod
    def partition_count(self) -> int:
        """Partitions held here."""

    @abstractmethod
    def gauges(self) -> Gauges:
        """`gauges.partition_gauges` of the partitions held here (summed over buckets: the cluster's)."""

    @abstractmethod
    def status_counts(self) -> Counter[str]:
        """Partitions per status."""


def _check_handler(store: type[PartitionStore], entry: record_types.RecordType) -> None:
    """A partition type's handler in ``store`` is a function or a method the store defines (else one line)."""
    if entry.scope != record_types.SCOPE_PARTITION or not entry.applied:
        return
    named = entry.store_handler(store.KIND)
    if isinstance(named, str) and not callable(getattr(store, named, None)):
        raise ValueError(f"record type {entry.name}: the {store.KIND} store has no handler {named!r}")
