"""Cluster state and replay: apply validated metadata records exactly once (monitor-spec §1–§2).

`ClusterState.apply(record)` applies one `Record` (records.py) with Kafka's replay rules (merge.py), keeps every
partition's derived status (status.py), audit (audit.py) and gauge contributions up to date incrementally, and
remembers what changed for `drain_changes()` (the streaming job writes those to the status store).

Exactly-once (DESIGN.md §2): an event at or below the last applied position of its source is a duplicate;
an event carrying a metadata-log offset at or below the last offset applied to its entity (partition, broker,
topic, config key, feature) is a duplicate too. Duplicates and quarantined records never change state.

Conflicts: the state keeps what it applied at each of the last `RECENT_OFFSETS` metadata offsets (a ring indexed
by offset, persisted with the state). A record at one of those offsets is a duplicate when its content (type,
version, data) is the same, a ``conflict`` (quarantined, with both versions) when it differs: the metadata log
diverged there (records above the high watermark are truncated when the quorum leader changes). Further back only
the per-entity offsets decide (a duplicate). Each bucket of a bucketed state sees only its own records.

Snapshots: records applied with ``snapshot_end=N`` (a snapshot's records, `records.DumpReader`) carry offset N-1;
afterwards a log record below N is `Outcome.COVERED` (the snapshot holds its effect) and is not applied.

Buckets (DESIGN.md §4): with ``bucket=(i, n)`` the state owns only the partitions that hash to bucket ``i``;
partition 0 of every topic is kept as a shadow (its replica count sets the effective min ISR).
"""

from __future__ import annotations

import enum
import gc
import pickle
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from elrwatch.state import audit, insight, record_types, records
from elrwatch.state.audit import Violation
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
    BrokerState,
    PartitionState,
    TopicState,
)
from elrwatch.state.record_types import (
    ELR_FEATURE,
    METADATA_VERSION,
    MIN_ISR,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    UNCLEAN_ENABLE,
)
from elrwatch.state.records import Record, RecordError
from elrwatch.state.routing import bucket_of, reporter
from elrwatch.state.status import ELECTABLE_SHIFT, FLAG_BITS, derive


class Outcome(enum.Enum):
    """What `ClusterState.apply` did with a record."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"
    QUARANTINED = "quarantined"
    NOT_OWNED = "not_owned"  # a partition record routed to a bucket that does not own it (ignored)
    COVERED = "covered"  # a log record below the end offset of the snapshot applied before it (not applied)


#: What a state built from polled records (``derived_from == "admin-poll"``) cannot know: the admin API shows
#: neither epochs of partitions and brokers nor what happened between two polls.
POLLED_UNKNOWN: Final = (
    "partitionEpoch",
    "brokerEpoch",
    "transitionsBetweenPolls",
    "leaderRecoveryState",
    "addingRemovingReplicas",
)


def polled_unknown(derived_from: str | None) -> tuple[str, list[str]] | None:
    """(mode, unknown facts) of a state derived by a bridge: ``"admin-poll"`` gives `POLLED_UNKNOWN`, and
    ``"admin-poll:a,b"`` (an older cluster, see bridge/admin.py) adds ``a`` and ``b``; None for Kafka's own log."""
    if derived_from is None:
        return None
    mode, _, extra = derived_from.partition(":")
    if mode != "admin-poll":
        return mode, []
    return mode, [*POLLED_UNKNOWN, *(fact for fact in extra.split(",") if fact)]


#: How many of the most recent metadata offsets the state remembers the applied content of (conflict detection):
#: a ring of this many slots, each an offset and a reference to the applied `Record` (its type, version and data
#: are compared). About 0.3-1 KB a slot (the record and its data), so <= ~8 MB a state, whatever the cluster size.
RECENT_OFFSETS = 8192


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

    # Pickled as the list of its field values, as dataclass(slots=True) does itself, but spelled out: the
    # pure-Python and the mypyc-compiled builds (setup.py) then read each other's pickles.
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


#: Changes's fields in order (its pickled form).
CHANGES_FIELDS: Final = (
    "partitions",
    "removed",
    "transitions",
    "brokers",
    "topics",
    "removed_topics",
    "quarantined",
)


@dataclass(slots=True)
class Changes:
    """Everything that changed since the previous `drain_changes()`."""

    partitions: list[tuple[TopicState, PartitionState]] = field(default_factory=list)
    removed: list[tuple[str, int, str]] = field(default_factory=list)  # (topic_id, partition_id, topic name)
    transitions: list[Transition] = field(default_factory=list)
    brokers: list[BrokerState] = field(default_factory=list)
    topics: list[TopicState] = field(default_factory=list)
    removed_topics: list[tuple[str, str]] = field(default_factory=list)  # (topic_id, name)
    quarantined: list[RecordError] = field(default_factory=list)

    # Pickled as the list of its field values, as dataclass(slots=True) does itself, but spelled out: the
    # pure-Python and the mypyc-compiled builds (setup.py) then read each other's pickles.
    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in CHANGES_FIELDS]

    def __setstate__(self, state: list[object]) -> None:
        for name, value in zip(CHANGES_FIELDS, state, strict=True):
            setattr(self, name, value)


#: What `ClusterState.to_bytes` keeps: the attributes set in ``__init__`` (everything else is transient).
PERSISTED_ATTRIBUTES: Final = frozenset(
    {
        "default_min_isr",
        "bucket",
        "track_changes",
        "topics",
        "topic_ids_by_name",
        "topic_configs",
        "cluster_configs",
        "broker_configs",
        "brokers",
        "features",
        "config_offsets",
        "feature_offsets",
        "source_seq",
        "removed_topics",
        "removed_topic_names",
        "clear_elr_offsets",
        "shadow_p0",
        "log_info",
        "violations",
        "counters",
        "partition_count",
        "status_counts",
        "flag_histogram",
        "violation_counts",
        "insight",
        "insight_counts",
        "snapshot_end_offset",
        "recent_offsets",
        "recent_records",
        "derived_from",
    }
)


class ClusterState:
    """The monitor's view of a KRaft cluster's metadata, built by applying records in order."""

    def __init__(
        self, default_min_isr: int = 1, bucket: tuple[int, int] | None = None, track_changes: bool = True
    ) -> None:
        """``track_changes=False`` skips the bookkeeping behind `drain_changes` (changed partitions, status
        transitions): a replay that only reads the final state (``elrwatch replay``) does not need it."""
        if default_min_isr < 1:
            raise ValueError("default_min_isr must be >= 1")
        if bucket is not None and not (bucket[1] >= 1 and 0 <= bucket[0] < bucket[1]):
            raise ValueError(f"invalid bucket {bucket}")
        self.default_min_isr = default_min_isr
        self.bucket = bucket
        self.track_changes = track_changes
        self.topics: dict[str, TopicState] = {}
        self.topic_ids_by_name: dict[str, str] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        self.cluster_configs: dict[str, str] = {}
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.brokers: dict[int, BrokerState] = {}
        self.features: dict[str, int] = {}
        self.config_offsets: dict[tuple[int, str, str], int] = {}
        self.feature_offsets: dict[str, int] = {}
        self.source_seq: dict[str, int] = {}
        self.removed_topics: dict[str, int | None] = {}
        self.removed_topic_names: dict[str, int | None] = {}
        self.clear_elr_offsets: dict[str, int] = {}
        self.shadow_p0: dict[str, PartitionState] = {}
        self.log_info: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
        self.violations: dict[tuple[str, int], tuple[Violation, ...]] = {}
        self.counters: Counter[str] = Counter()
        # incremental gauge contributions of owned partitions
        self.partition_count = 0
        self.status_counts: Counter[str] = Counter()
        self.flag_histogram: Counter[int] = Counter()  # flags value -> partitions (at most 512 distinct values)
        self.violation_counts: Counter[str] = Counter()
        # operator insight (state/insight.py): each owned partition's non-empty contribution, and their sums
        self.insight: dict[tuple[str, int], insight.Contribution] = {}
        self.insight_counts: Counter[Any] = Counter()
        #: The end offset of the snapshot the state was loaded from (None: none); log records below it are covered.
        self.snapshot_end_offset: int | None = None
        # The ring of RECENT_OFFSETS slots (allocated at the first record with an offset): offset, and the record
        # applied at that offset; -1 / None for an empty slot.
        self.recent_offsets: list[int] = []
        self.recent_records: list[Any] = []  # a Record, or a columnar_lines.RawLine (parsed on a hit), or None
        #: Where the records came from when not from Kafka's log itself: "admin-poll" once any record derived by
        #: `elrwatch bridge --source admin` was applied (then `POLLED_UNKNOWN` cannot be known), else None.
        self.derived_from: str | None = None
        self._reset_transient()

    # --- transient (not serialized) -------------------------------------------------------------------------

    def _reset_transient(self) -> None:
        self._dirty: dict[int, PartitionState] = {}
        self._removed: list[tuple[str, int, str]] = []
        self._transitions: list[Transition] = []
        self._dirty_brokers: set[int] = set()
        self._dirty_topics: set[str] = set()
        self._removed_topics_out: list[tuple[str, str]] = []
        self._quarantined: list[RecordError] = []
        self._by_broker: dict[int, set[PartitionState]] | None = None
        self._min_isr_cache: dict[str, int] = {}
        self._unclean_cache: dict[str, bool] = {}
        self._active: set[int] = {b.broker_id for b in self.brokers.values() if b.active}
        self._is_active = self._active.__contains__  # the set is only ever updated in place
        self._eligible: set[int] = {b.broker_id for b in self.brokers.values() if b.registered and not b.fenced}
        self._causes: dict[int, int] = insight.cause_codes(self.brokers.values())
        self._elr_on = self.elr_enabled
        self.last_error: RecordError | None = None

    def to_bytes(self, compress: bool = True) -> bytes:
        """Serialize the state (not the pending changes) compactly, e.g. for Spark's state store."""
        state = {name: getattr(self, name) for name in PERSISTED_ATTRIBUTES}
        blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        return b"Z" + zlib.compress(blob, 1) if compress else b"P" + blob

    @classmethod
    def from_bytes(cls, blob: bytes) -> ClusterState:
        """Inverse of `to_bytes`."""
        kind, body = blob[:1], blob[1:]
        was_enabled = gc.isenabled()
        gc.disable()  # unpickling a million objects would trigger full collections that find nothing (3x slower)
        try:
            state = pickle.loads(zlib.decompress(body) if kind == b"Z" else body)
        finally:
            if was_enabled:
                gc.enable()
        self = cls()
        for name, value in state.items():
            if name in PERSISTED_ATTRIBUTES:  # an attribute an older version kept is dropped
                setattr(self, name, value)
        self._reset_transient()
        if "insight" not in state:  # saved by a version without the insight counters: count them once
            self.insight, self.insight_counts = insight.recount(self)
        return self

    # --- queries --------------------------------------------------------------------------------------------

    @property
    def elr_enabled(self) -> bool:
        """Whether the finalized eligible.leader.replicas.version is >= 1 (elr-semantics §3)."""
        return self.features.get(ELR_FEATURE, 0) >= 1

    @property
    def metadata_version_level(self) -> int | None:
        """The finalized metadata.version feature level, if known."""
        return self.features.get(METADATA_VERSION)

    def owns(self, topic_id: str, partition_id: int) -> bool:
        """Whether this state owns the partition (always, unless bucketed)."""
        if self.bucket is None:
            return True
        return bucket_of(topic_id, partition_id, self.bucket[1]) == self.bucket[0]

    def is_active(self, broker_id: int) -> bool:
        """Registered, not fenced, not in controlled shutdown."""
        return broker_id in self._active

    def topic_config(self, topic: TopicState | str, name: str) -> str | None:
        """Resolve a config for a topic: topic config, then cluster default (monitor-spec §3)."""
        topic_name = topic if isinstance(topic, str) else topic.name
        value = self.topic_configs.get(topic_name, {}).get(name)
        if value is None:
            value = self.cluster_configs.get(name)
        return value

    def configured_min_isr(self, topic: TopicState) -> int:
        """min.insync.replicas as configured for the topic (not capped by the replica count)."""
        value = self.topic_config(topic, MIN_ISR)
        return int(value) if value is not None else self.default_min_isr

    def replication_factor(self, topic: TopicState) -> int:
        """Replica count of the topic's partition 0 (owned or shadow), 0 if unknown."""
        p0 = topic.partitions.get(0) or self.shadow_p0.get(topic.topic_id)
        return len(p0.replicas) if p0 is not None else 0

    def effective_min_isr(self, topic: TopicState) -> int:
        """min(resolved min.insync.replicas, replica count of partition 0) (elr-semantics §4)."""
        cached = self._min_isr_cache.get(topic.topic_id)
        if cached is not None:
            return cached
        configured = self.configured_min_isr(topic)
        rf = self.replication_factor(topic)
        value = min(configured, rf) if rf else configured
        self._min_isr_cache[topic.topic_id] = value
        return value

    def unclean_enabled(self, topic: TopicState) -> bool:
        """Resolved unclean.leader.election.enable for the topic (default false)."""
        cached = self._unclean_cache.get(topic.topic_id)
        if cached is None:
            value = self.topic_config(topic, UNCLEAN_ENABLE)
            cached = value is not None and value.strip().lower() == "true"
            self._unclean_cache[topic.topic_id] = cached
        return cached

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        """An owned partition by key."""
        topic = self.topics.get(topic_id)
        return topic.partitions.get(partition_id) if topic is not None else None

    def topic_by_name(self, name: str) -> TopicState | None:
        """A topic by name."""
        topic_id = self.topic_ids_by_name.get(name)
        return self.topics.get(topic_id) if topic_id is not None else None

    def iter_partitions(self) -> Iterator[tuple[TopicState, PartitionState]]:
        """Owned partitions, sorted by (topic name, partition id)."""
        for topic in sorted(self.topics.values(), key=lambda t: t.name):
            for partition_id in sorted(topic.partitions):
                yield topic, topic.partitions[partition_id]

    def partition_violations(self, topic_id: str, partition_id: int) -> tuple[Violation, ...]:
        """The invariants a partition currently breaks."""
        return self.violations.get((topic_id, partition_id), ())

    # --- apply ----------------------------------------------------------------------------------------------

    def apply(self, record: Record, snapshot_end: int | None = None) -> Outcome:
        """Apply one validated record exactly once. Never raises on bad data: quarantines it instead.

        ``snapshot_end``: the record is one of a snapshot with that end offset (see the module docstring).
        """
        source = record.source
        last = self.source_seq.get(source)
        if last is not None and record.seq <= last:
            return Outcome.DUPLICATE
        self.source_seq[source] = record.seq
        if record.origin is not None and record.origin != self.derived_from:
            self.derived_from = record.origin
        if snapshot_end is None:
            snapshot_end = record.snapshot_end
        offset = record.offset
        slot = -1
        applied_offset = -1
        if snapshot_end is not None:
            if self.snapshot_end_offset is None or snapshot_end > self.snapshot_end_offset:
                self.snapshot_end_offset = snapshot_end
        elif offset is not None:
            covered = self.snapshot_end_offset
            if covered is not None and offset < covered:
                return Outcome.COVERED
            verdict = self.ring_check(record, offset)
            if isinstance(verdict, RecordError):
                return self._quarantine(record, verdict)
            if not isinstance(verdict, int):
                return verdict
            slot = verdict
            applied_offset = offset
        handler = _HANDLERS.get(record.type)
        if handler is None:
            handler = _registered_handler(record.type)
        result = handler(self, record)
        if isinstance(result, RecordError):
            return self._quarantine(record, result)
        if slot >= 0 and result is Outcome.APPLIED:
            self.recent_offsets[slot] = applied_offset
            self.recent_records[slot] = record
        return result

    def ring_check(self, record: Record, offset: int) -> int | Outcome | RecordError:
        """The recent-offsets ring's verdict on a record at metadata ``offset``: the slot it takes once applied,
        DUPLICATE (the same record was applied at that offset), or the conflict error (other content was: the
        metadata log diverged)."""
        if not self.recent_offsets:
            self.recent_offsets = [-1] * RECENT_OFFSETS
            self.recent_records = [None] * RECENT_OFFSETS
        slot = offset % RECENT_OFFSETS
        if self.recent_offsets[slot] == offset:
            applied = self.recent_records[slot]
            if applied is not None and not isinstance(applied, Record):  # a raw line kept by the columnar engine
                applied = applied.record()
            if (
                applied is not None
                and applied.type == record.type
                and applied.version == record.version
                and applied.data == record.data
            ):
                return Outcome.DUPLICATE
            return self._offset_conflict(record, applied)
        return slot

    def _quarantine(self, record: Record, error: RecordError) -> Outcome:
        self.last_error = error
        if self._reports(record):
            self._quarantined.append(error)
        return Outcome.QUARANTINED

    def _offset_conflict(self, record: Record, applied: Record | None) -> RecordError:
        """A record whose offset was applied with other content: the log diverged (both versions reported)."""
        error = self._error(
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

    def _reports(self, record: Record) -> bool:
        """Whether this state reports (quarantine) for the record: owner bucket, or bucket 0 for broadcasts."""
        if self.bucket is None:
            return True
        return reporter(record.type, record.data, self.bucket[1]) == self.bucket[0]

    def _error(self, record: Record, reason: str, field: str | None, message: str) -> RecordError:
        return RecordError(record.position, reason, field, message, "", record.type, record.offset)

    @staticmethod
    def _is_dup(entity_offset: int | None, record: Record) -> bool:
        return record.offset is not None and entity_offset is not None and record.offset <= entity_offset

    # --- partitions -----------------------------------------------------------------------------------------

    def _topic_for(self, record: Record) -> TopicState | RecordError | Outcome:
        topic_id = record.data["topicId"]
        topic = self.topics.get(topic_id)
        if topic is None:
            if topic_id in self.removed_topics and self._is_dup(self.removed_topics[topic_id], record):
                return Outcome.DUPLICATE
            return self._error(record, "unknown_topic", "topicId", f"no TOPIC_RECORD for topic id {topic_id}")
        return topic

    def _locate(self, record: Record) -> tuple[TopicState, int, bool, PartitionState | None] | Outcome | RecordError:
        """(topic, partition id, owned, current registration or shadow) of a partition record, or why not."""
        data = record.data
        topic = self.topics.get(data["topicId"])
        if topic is not None and self.bucket is None:  # the common case, without the bucket hash
            partition_id = data["partitionId"]
            return topic, partition_id, True, topic.partitions.get(partition_id)
        found = self._topic_for(record)
        if not isinstance(found, TopicState):
            return found
        topic = found
        partition_id = record.data["partitionId"]
        owned = self.owns(topic.topic_id, partition_id)
        if not owned and partition_id != 0:
            return Outcome.NOT_OWNED
        current = topic.partitions.get(partition_id) if owned else self.shadow_p0.get(topic.topic_id)
        return topic, partition_id, owned, current

    def _apply_partition_record(self, record: Record) -> Outcome | RecordError:
        located = self._locate(record)
        if located.__class__ is not tuple:
            return located  # type: ignore[return-value]
        topic, partition_id, owned, old = located  # type: ignore[misc]
        data = record.data
        offset = record.offset
        if old is not None and offset is not None and old.last_offset is not None and offset <= old.last_offset:
            return Outcome.DUPLICATE
        new = partition_from_record(data)
        new.topic_id = topic.topic_id  # share the interned id string
        new.last_offset = offset
        new.last_timestamp_ms = record.timestamp_ms
        new.last_position = record.position
        if not owned:
            self.shadow_p0[topic.topic_id] = new
            self._replica_count_changed(topic, old, new, record)
            return Outcome.APPLIED
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
            self._unindex(self._members(old), old)
            self._dirty.pop(id(old), None)
        else:
            self.partition_count += 1
        topic.partitions[partition_id] = new
        self._dirty_topics.add(topic.topic_id)
        self._index(new)
        if partition_id == 0:
            self._min_isr_cache.pop(topic.topic_id, None)  # its replica count caps the topic's min ISR
        self._refresh(topic, new, record, epoch_note)
        if partition_id == 0:
            self._replica_count_changed(topic, old, new, record)
        return Outcome.APPLIED

    def _apply_partition_change(self, record: Record) -> Outcome | RecordError:
        located = self._locate(record)
        if located.__class__ is not tuple:
            return located  # type: ignore[return-value]
        topic, partition_id, owned, partition = located  # type: ignore[misc]
        data = record.data
        if partition is None:
            return self._error(
                record,
                "unknown_partition",
                "partitionId",
                f"no PARTITION_RECORD for {topic.name}-{partition_id}",
            )
        offset = record.offset
        if offset is not None and partition.last_offset is not None and offset <= partition.last_offset:
            return Outcome.DUPLICATE
        old_rf = len(partition.replicas)
        if not owned:
            merge_partition_change(partition, data)
            self._stamp(partition, record)
            if len(partition.replicas) != old_rf:
                self._replica_count_changed(topic, None, partition, record)
            return Outcome.APPLIED
        b_leader, b_isr, b_elr = partition.leader, partition.isr, partition.elr
        b_lke, b_lrs, b_replicas = partition.last_known_elr, partition.leader_recovery_state, partition.replicas
        merge_partition_change(partition, data)
        if offset is not None:
            partition.last_offset = offset
        if record.timestamp_ms is not None:
            partition.last_timestamp_ms = record.timestamp_ms
        partition.last_position = record.position
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
            self._min_isr_cache.pop(topic.topic_id, None)  # before refreshing: the cap changed
            self._refresh(topic, partition, record)
            self._replica_count_changed(topic, None, partition, record)
        else:
            self._refresh(topic, partition, record)
        return Outcome.APPLIED

    def _apply_replica_log_info(self, record: Record) -> Outcome | RecordError:
        topic = self._topic_for(record)
        if not isinstance(topic, TopicState):
            return topic
        data = record.data
        if not self.owns(topic.topic_id, data["partitionId"]):
            return Outcome.NOT_OWNED
        partition = topic.partitions.get(data["partitionId"])
        if partition is None:
            return self._error(record, "unknown_partition", "partitionId", "no PARTITION_RECORD for this partition")
        if not keep_log_info(self.log_info, topic.topic_id, record):
            return Outcome.DUPLICATE
        self._dirty[id(partition)] = partition
        return Outcome.APPLIED

    def _stamp(self, partition: PartitionState, record: Record) -> None:
        if record.offset is not None:
            partition.last_offset = record.offset
        if record.timestamp_ms is not None:
            partition.last_timestamp_ms = record.timestamp_ms
        partition.last_position = record.position

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

    def _replica_count_changed(
        self, topic: TopicState, old: PartitionState | None, new: PartitionState, record: Record
    ) -> None:
        """Partition 0's replica count caps the effective min ISR of the whole topic: re-derive its partitions."""
        if old is not None and len(old.replicas) == len(new.replicas):
            return
        self._min_isr_cache.pop(topic.topic_id, None)
        self._refresh_topic(topic, record)

    # --- derived status, audit, gauges -------------------------------------------------------------------------

    def _refresh(
        self,
        topic: TopicState,
        partition: PartitionState,
        record: Record | None,
        epoch_note: str | None = None,
    ) -> None:
        """Recompute a partition's status, flags and violations; count transitions; mark it changed."""
        topic_id = topic.topic_id
        min_isr = self._min_isr_cache.get(topic_id) or self.effective_min_isr(topic)
        unclean = self._unclean_cache.get(topic_id)
        if unclean is None:
            unclean = self.unclean_enabled(topic)
        status, flags = derive(partition, min_isr, self._is_active, self._elr_on, unclean)
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
            status_counts = self.status_counts
            if old_status:
                status_counts[old_status] -= 1
            status_counts[status] += 1
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
        # The audit, with its common case inline: nothing to report and nothing to clear.
        isr = partition.isr
        if (
            epoch_note is not None
            or partition.elr
            or len(isr) < min_isr
            or not (partition.leader == NO_LEADER or partition.leader in isr)
            or (self.brokers and not self._eligible.issuperset(isr))
            or not _all_in(isr, partition.replicas)
            or (topic_id, partition.partition_id) in self.violations
        ):
            self._audit(topic, partition, min_isr, record, epoch_note)
        self._update_insight(topic_id, partition, min_isr)
        if self.track_changes:
            self._dirty[id(partition)] = partition

    def _update_insight(self, topic_id: str, partition: PartitionState, min_isr: int) -> None:
        """Recompute the partition's insight contribution and update the counters by difference."""
        part = insight.contribution(
            partition.replicas, partition.isr, partition.elr, partition.leader, min_isr, self._causes, self._active
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

    def _count_flags(self, flags: int, delta: int) -> None:
        self.flag_histogram[flags] += delta

    @property
    def flag_counts(self) -> Counter[int]:
        """Owned partitions per flag bit (status.F_*)."""
        counts: Counter[int] = Counter()
        for flags, count in self.flag_histogram.items():
            for bit in FLAG_BITS:
                if flags & bit:
                    counts[bit] += count
        return counts

    @property
    def electable_counts(self) -> list[int]:
        """Owned partitions with 0, 1, 2 and 3+ live electable replicas."""
        counts = [0, 0, 0, 0]
        for flags, count in self.flag_histogram.items():
            counts[(flags >> ELECTABLE_SHIFT) & 3] += count
        return counts

    def _is_ineligible(self, broker_id: int) -> bool:
        """Known brokers that are fenced or unregistered (unknown ids count once any broker is known)."""
        return bool(self.brokers) and broker_id not in self._eligible

    def _audit(
        self,
        topic: TopicState,
        partition: PartitionState,
        min_isr: int,
        record: Record | None,
        epoch_note: str | None,
    ) -> None:
        key = (topic.topic_id, partition.partition_id)
        found = audit.check(partition, min_isr, self._elr_on, self._is_ineligible, epoch_note)
        previous = self.violations.get(key, ())
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
        counts = self.violation_counts
        for violation in previous:
            counts[violation.kind] -= 1
        for violation in current:
            counts[violation.kind] += 1
        if current:
            self.violations[key] = current
        else:
            self.violations.pop(key, None)

    def _refresh_topic(self, topic: TopicState, record: Record | None) -> None:
        self._min_isr_cache.pop(topic.topic_id, None)
        self._unclean_cache.pop(topic.topic_id, None)
        for partition in topic.partitions.values():
            self._refresh(topic, partition, record)

    def _refresh_all(self, record: Record | None) -> None:
        self._min_isr_cache.clear()
        self._unclean_cache.clear()
        self._elr_on = self.elr_enabled
        for topic in self.topics.values():
            self._refresh_topic(topic, record)

    # broker → partitions index (built lazily on the first broker change; not serialized)
    @staticmethod
    def _members(partition: PartitionState) -> set[int]:
        return set(partition.replicas) | set(partition.isr) | set(partition.elr) | set(partition.last_known_elr)

    def _index(self, partition: PartitionState) -> None:
        if self._by_broker is None:
            return
        for broker in self._members(partition):
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
        partitions the first fence record of a storm would cost seconds on its own. A long-lived state (the
        streaming job's buckets) calls this once it has loaded, outside the records' path."""
        if self._by_broker is None:
            index: dict[int, set[PartitionState]] = {}
            get = index.get
            for topic in self.topics.values():
                for partition in topic.partitions.values():
                    replicas = partition.replicas
                    for broker in replicas:
                        members = get(broker)
                        if members is None:
                            members = index[broker] = set()
                        members.add(partition)
                    # ISR, ELR and last known ELR are subsets of the replicas, except in corrupt or reassigning
                    # registrations: only their other members need a lookup (the common case does no set work)
                    for broker in (*partition.isr, *partition.elr, *partition.last_known_elr):
                        if broker not in replicas:
                            index.setdefault(broker, set()).add(partition)
            self._by_broker = index
        return self._by_broker

    def _partitions_of_broker(self, broker_id: int) -> list[PartitionState]:
        return list(self.index_brokers().get(broker_id, ()))

    def _broker_changed(self, broker: BrokerState, record: Record) -> None:
        """A broker record was applied: stamp its offset, update liveness sets, re-derive its partitions."""
        if record.offset is not None:
            broker.last_offset = record.offset
        if broker.active:
            self._active.add(broker.broker_id)
        else:
            self._active.discard(broker.broker_id)
        if broker.registered and not broker.fenced:
            self._eligible.add(broker.broker_id)
        else:
            self._eligible.discard(broker.broker_id)
        self._causes[broker.broker_id] = insight.broker_cause(broker)
        self._dirty_brokers.add(broker.broker_id)
        if self.partition_count == 0:
            return
        # Even when liveness is unchanged, fencing changes the KIP-903 audit: refresh every partition of the broker.
        for partition in self._partitions_of_broker(broker.broker_id):
            topic = self.topics.get(partition.topic_id)
            if topic is not None and topic.partitions.get(partition.partition_id) is partition:
                self._refresh(topic, partition, record)

    # --- topics ---------------------------------------------------------------------------------------------

    def _apply_topic(self, record: Record) -> Outcome | RecordError:
        name, topic_id = record.data["name"], record.data["topicId"]
        existing = self.topics.get(topic_id)
        if existing is not None:
            if self._is_dup(existing.last_offset, record):
                return Outcome.DUPLICATE
            if existing.name != name:
                return self._error(
                    record, "conflict", "name", f"topic id {topic_id} already names topic {existing.name!r}"
                )
            return Outcome.DUPLICATE
        if topic_id in self.removed_topics and self._is_dup(self.removed_topics[topic_id], record):
            return Outcome.DUPLICATE
        other = self.topic_ids_by_name.get(name)
        if other is not None and other in self.topics:
            return self._error(record, "conflict", "name", f"topic {name!r} already exists with id {other}")
        topic = TopicState(topic_id=topic_id, name=name, configs=self.topic_configs.setdefault(name, {}))
        topic.last_offset = record.offset
        self.topics[topic_id] = topic
        self.topic_ids_by_name[name] = topic_id
        self._dirty_topics.add(topic_id)
        return Outcome.APPLIED

    def _apply_remove_topic(self, record: Record) -> Outcome | RecordError:
        topic = self._topic_for(record)
        if not isinstance(topic, TopicState):
            return topic
        if self._is_dup(topic.last_offset, record):
            return Outcome.DUPLICATE
        for partition in list(topic.partitions.values()):
            self._forget_partition(topic, partition)
        self.shadow_p0.pop(topic.topic_id, None)
        del self.topics[topic.topic_id]
        if self.topic_ids_by_name.get(topic.name) == topic.topic_id:
            del self.topic_ids_by_name[topic.name]
        self.topic_configs.pop(topic.name, None)  # Kafka deletes the topic's configs with it
        self.removed_topics[topic.topic_id] = record.offset
        self.removed_topic_names[topic.name] = record.offset
        self._min_isr_cache.pop(topic.topic_id, None)
        self._dirty_topics.discard(topic.topic_id)
        self._removed_topics_out.append((topic.topic_id, topic.name))
        return Outcome.APPLIED

    def _forget_partition(self, topic: TopicState, partition: PartitionState) -> None:
        if partition.status:
            self.status_counts[partition.status] -= 1
            self._count_flags(partition.flags, -1)
        self.partition_count -= 1
        key = (topic.topic_id, partition.partition_id)
        part = self.insight.pop(key, None)
        if part is not None:
            insight.apply_delta(self.insight_counts, topic.topic_id, part, -1)
        for violation in self.violations.pop(key, ()):
            self.violation_counts[violation.kind] -= 1
        self.log_info.pop(key, None)
        self._unindex(self._members(partition), partition)
        self._dirty.pop(id(partition), None)
        self._removed.append((topic.topic_id, partition.partition_id, topic.name))

    def _apply_clear_elr(self, record: Record) -> Outcome | RecordError:
        name = record.data["topicName"]
        if self._is_dup(self.clear_elr_offsets.get(name), record):
            return Outcome.DUPLICATE
        if name:
            topic = self.topic_by_name(name)
            if topic is None:
                if name in self.removed_topic_names and self._is_dup(self.removed_topic_names[name], record):
                    return Outcome.DUPLICATE  # re-delivered after the topic was removed
                return self._error(record, "unknown_topic", "topicName", f"no topic named {name!r}")
            topics: Iterable[TopicState] = (topic,)
        else:
            topics = list(self.topics.values())
        if record.offset is not None:
            self.clear_elr_offsets[name] = record.offset
        for topic in topics:
            shadow = self.shadow_p0.get(topic.topic_id)
            if shadow is not None and not self._is_dup(shadow.last_offset, record) and clear_elr(shadow):
                self._stamp(shadow, record)
            for partition in topic.partitions.values():
                if self._is_dup(partition.last_offset, record):
                    continue
                if partition.elr or partition.last_known_elr:
                    members = self._members(partition)
                    clear_elr(partition)
                    self._stamp(partition, record)
                    self._unindex(members, partition)
                    self._index(partition)
                    self._refresh(topic, partition, record)
        return Outcome.APPLIED

    # --- brokers --------------------------------------------------------------------------------------------

    def _apply_register_broker(self, record: Record) -> Outcome | RecordError:
        data = record.data
        broker_id = data["brokerId"]
        existing = self.brokers.get(broker_id)
        if existing is not None and self._is_dup(existing.last_offset, record):
            return Outcome.DUPLICATE
        broker = BrokerState(
            broker_id=broker_id,
            epoch=data["brokerEpoch"],
            incarnation_id=data["incarnationId"],
            fenced=data.get("fenced", True),
            in_controlled_shutdown=data.get("inControlledShutdown", False),
            registered=True,
            rack=data.get("rack"),
            last_offset=record.offset,
        )
        self.brokers[broker_id] = broker
        self._broker_changed(broker, record)
        return Outcome.APPLIED

    def _registered_broker(
        self, record: Record, id_field: str, epoch_field: str
    ) -> BrokerState | RecordError | Outcome:
        broker_id = record.data[id_field]
        broker = self.brokers.get(broker_id)
        if broker is None or not broker.registered:
            if broker is not None and self._is_dup(broker.last_offset, record):
                return Outcome.DUPLICATE
            return self._error(record, "unknown_broker", id_field, f"broker {broker_id} is not registered")
        if self._is_dup(broker.last_offset, record):
            return Outcome.DUPLICATE
        if broker.epoch != record.data[epoch_field]:
            return self._error(
                record,
                "conflict",
                epoch_field,
                f"broker {broker_id} epoch is {broker.epoch}, record has {record.data[epoch_field]}",
            )
        return broker

    def _apply_broker_change(self, record: Record) -> Outcome | RecordError:
        broker = self._registered_broker(record, "brokerId", "brokerEpoch")
        if not isinstance(broker, BrokerState):
            return broker
        fenced = record.data.get("fenced", 0)
        if fenced == 1:
            broker.fenced = True
        elif fenced == -1:
            broker.fenced = False
        if record.data.get("inControlledShutdown", 0) == 1:
            broker.in_controlled_shutdown = True
        self._broker_changed(broker, record)
        return Outcome.APPLIED

    def _apply_fence(self, record: Record) -> Outcome | RecordError:
        broker = self._registered_broker(record, "id", "epoch")
        if not isinstance(broker, BrokerState):
            return broker
        broker.fenced = record.type == records.FENCE_BROKER_RECORD
        self._broker_changed(broker, record)
        return Outcome.APPLIED

    def _apply_unregister(self, record: Record) -> Outcome | RecordError:
        broker = self._registered_broker(record, "brokerId", "brokerEpoch")
        if not isinstance(broker, BrokerState):
            return broker
        broker.registered = False
        self._broker_changed(broker, record)
        return Outcome.APPLIED

    # --- configs and features -------------------------------------------------------------------------------

    def _apply_config(self, record: Record) -> Outcome | RecordError:
        data = record.data
        key = (data["resourceType"], data["resourceName"], data["name"])
        if self._is_dup(self.config_offsets.get(key), record):
            return Outcome.DUPLICATE
        if record.offset is not None:
            self.config_offsets[key] = record.offset
        resource_type, resource_name, name, value = (
            data["resourceType"],
            data["resourceName"],
            data["name"],
            data["value"],
        )
        if resource_type == RESOURCE_TOPIC:
            target = self.topic_configs.setdefault(resource_name, {})
        elif resource_type == RESOURCE_BROKER:
            target = self.cluster_configs if resource_name == "" else self.broker_configs.setdefault(resource_name, {})
        else:
            return Outcome.APPLIED  # other resource types do not matter to elrwatch
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
        if name in (MIN_ISR, UNCLEAN_ENABLE):
            if resource_type == RESOURCE_TOPIC:
                topic = self.topic_by_name(resource_name)
                if topic is not None:
                    self._dirty_topics.add(topic.topic_id)
                    self._refresh_topic(topic, record)
            elif resource_name == "":
                self._dirty_topics.update(self.topics)
                self._refresh_all(record)
        return Outcome.APPLIED

    def _apply_feature(self, record: Record) -> Outcome | RecordError:
        name, level = record.data["name"], record.data["featureLevel"]
        if self._is_dup(self.feature_offsets.get(name), record):
            return Outcome.DUPLICATE
        if record.offset is not None:
            self.feature_offsets[name] = record.offset
        if level == 0:
            self.features.pop(name, None)
        else:
            self.features[name] = level
        if name == ELR_FEATURE:
            self._elr_on = self.elr_enabled
            self._refresh_all(record)
        return Outcome.APPLIED

    # --- changes --------------------------------------------------------------------------------------------

    def drain_changes(self) -> Changes:
        """Return and forget what changed since the previous call."""
        topics = self.topics
        changes = Changes(
            partitions=[
                (topics[p.topic_id], p)
                for p in self._dirty.values()
                if p.topic_id in topics and topics[p.topic_id].partitions.get(p.partition_id) is p
            ],
            removed=self._removed,
            transitions=self._transitions,
            brokers=[self.brokers[b] for b in sorted(self._dirty_brokers) if b in self.brokers],
            topics=[self.topics[t] for t in sorted(self._dirty_topics) if t in self.topics],
            removed_topics=self._removed_topics_out,
            quarantined=self._quarantined,
        )
        self._dirty = {}
        self._removed = []
        self._transitions = []
        self._dirty_brokers = set()
        self._dirty_topics = set()
        self._removed_topics_out = []
        self._quarantined = []
        return changes


def keep_log_info(log_info: dict[tuple[str, int], dict[int, dict[str, Any]]], topic_id: str, record: Record) -> bool:
    """Keep a REPLICA_LOG_INFO_RECORD in ``log_info`` ((topic ID, partition ID) → broker ID → entry): its fields with
    the record's offset and timestamp. False, nothing kept: a duplicate (not after the broker's kept entry)."""
    data = record.data
    infos = log_info.setdefault((topic_id, data["partitionId"]), {})
    previous = infos.get(data["brokerId"])
    if previous is not None and ClusterState._is_dup(previous.get("offset"), record):
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


def _all_in(members: tuple[int, ...], container: tuple[int, ...]) -> bool:
    for member in members:  # noqa: SIM110 - a plain loop is faster than all() with a generator here
        if member not in container:
            return False
    return True


def _handler(entry: record_types.RecordType) -> Any:
    """The function that applies a type's records: its registry entry's `ClusterState` method or function."""
    handler = entry.handler
    if handler is None:
        raise KeyError(f"record type {entry.name} is skipped, not applied")
    if isinstance(handler, str):
        return getattr(ClusterState, handler)
    return handler


def _registered_handler(type_name: str) -> Any:
    """The handler of a type registered after this module was imported (looked up on each record)."""
    entry = record_types.get(type_name)
    if entry is None:
        raise KeyError(f"record type {type_name} is not registered")
    return _handler(entry)


#: Type name → handler of the built-in types (`apply`'s dispatch; the registry says which method applies which).
_HANDLERS: dict[str, Any] = {
    entry.name: _handler(entry) for entry in record_types.BUILTIN_TYPES if entry.handler is not None
}
