"""A cluster's state (a whole cluster's, or one bucket's): the shared metadata image plus one partition store.

`ClusterState.apply(record)` applies one validated `Record` (records.py) exactly once, as Kafka's
``MetadataDelta.replay`` sends each record to its area: the registry (record_types.py) names each type's handler.

* A partition's record is admitted (`image.positions`: source position, snapshot cover, the recent-offsets ring),
  its topic must be known (`image.topics`), and a bucketed state passes over the partitions of other buckets but
  keeps partition 0's replica count of every topic (`Topics.apply_shadow`: it caps the topic's effective min
  ISR). Then the store's handler for the type applies it (state/partitions/).
* Any other record is admitted the same way and applied by its image area (state/image/); what it changed for
  the partitions (`Effects`: a broker's, a topic's or every partition to derive again, a topic's partitions to
  drop, ELRs to clear) goes to the store (`PartitionStore.react`).

Duplicates and quarantined records never change state. `apply_batch` applies many records (and the columnar
store's blocks of lines, `columnar.lines.LineBlock`) and gives each one's outcome.

Two stores (`STORES`): ``columnar``, the runtime (the streaming job's buckets, `elrwatch replay`, the what-if),
and ``objects``, the executable specification the differential tests hold the runtime to; the light commands
(the agent beside a broker, `restart-check`) run it too, as it needs nothing but the standard library.
"""

from __future__ import annotations

import gc
import pickle
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from elrwatch.state import next_start, record_types
from elrwatch.state.audit import Violation
from elrwatch.state.image import MetadataImage
from elrwatch.state.image.positions import polled_unknown
from elrwatch.state.model import BrokerState, PartitionState, TopicState
from elrwatch.state.outcome import Outcome
from elrwatch.state.partitions import PartitionStore, Transition
from elrwatch.state.partitions.objects import ObjectPartitions
from elrwatch.state.record_types import PARTITION_ID, ROUTE_OWNER_P0_EVERY, SCOPE_PARTITION, TOPIC_ID
from elrwatch.state.records import Record, RecordError
from elrwatch.state.routing import bucket_of, reporter

#: The partition stores by name; ``columnar`` is the runtime's.
STORES: Final = record_types.STORES
RUNTIME_STORE: Final = record_types.STORE_COLUMNAR
REFERENCE_STORE: Final = record_types.STORE_OBJECTS


@dataclass(slots=True)
class Changes:
    """Everything that changed since the previous `ClusterState.drain_changes()`."""

    partitions: list[tuple[TopicState, PartitionState]] = field(default_factory=list)
    removed: list[tuple[str, int, str]] = field(default_factory=list)  # (topic_id, partition_id, topic name)
    transitions: list[Transition] = field(default_factory=list)
    brokers: list[BrokerState] = field(default_factory=list)
    topics: list[TopicState] = field(default_factory=list)
    removed_topics: list[tuple[str, str]] = field(default_factory=list)  # (topic_id, name)
    quarantined: list[RecordError] = field(default_factory=list)


def new_store(
    kind: str, image: MetadataImage, bucket: tuple[int, int] | None, track_changes: bool = True
) -> PartitionStore:
    """A partition store of ``kind`` (`STORES`) over ``image``; the columnar one is imported only when asked for."""
    if kind == REFERENCE_STORE:
        return ObjectPartitions(image, bucket, track_changes)
    if kind == RUNTIME_STORE:
        from elrwatch.state.partitions.columnar import ColumnarPartitions

        return ColumnarPartitions(image, bucket)
    raise ValueError(f"unknown partition store {kind!r} (one of {', '.join(STORES)})")


class ClusterState:
    """The monitor's view of a KRaft cluster's metadata, built by applying records in order."""

    def __init__(
        self,
        default_min_isr: int | None = None,
        bucket: tuple[int, int] | None = None,
        track_changes: bool = True,
        store: str = RUNTIME_STORE,
    ) -> None:
        """``default_min_isr``: ``--default-min-isr`` (None: the nodes' static configs, else Kafka's 1; see
        image/configs.py for the order). ``bucket=(i, n)``: the state of bucket ``i`` of ``n`` (it holds the
        partitions that hash there). The object store's ``track_changes=False`` skips the bookkeeping behind
        `drain_changes` (a replay that only reads the final state does not need it)."""
        if bucket is not None and not (bucket[1] >= 1 and 0 <= bucket[0] < bucket[1]):
            raise ValueError(f"invalid bucket {bucket}")
        self.image = MetadataImage(default_min_isr)
        self.bucket = bucket
        self.partitions = new_store(store, self.image, bucket, track_changes)
        self._reset_transient()

    def _reset_transient(self) -> None:
        self._quarantined: list[RecordError] = []
        #: Type name → `_resolve`'s answer (the registry's entries, resolved once per state).
        self._dispatch: dict[str, tuple[bool, bool, Any]] = {}
        #: The error of the last record quarantined.
        self.last_error: RecordError | None = None

    @property
    def store(self) -> str:
        """The partition store's name (`STORES`)."""
        return self.partitions.KIND

    # --- apply ----------------------------------------------------------------------------------------------

    def apply(self, record: Record, snapshot_end: int | None = None, owned: bool = False) -> Outcome:
        """Apply one validated record exactly once. Never raises on bad data: quarantines it instead.

        ``snapshot_end``: the record is one of a snapshot with that end offset (a later log record below it is
        COVERED). ``owned``: the caller routed it here (a partition record other than partition 0's is this
        bucket's: ownership is not computed again).
        """
        dispatch = self._dispatch.get(record.type)
        if dispatch is None:
            dispatch = self._resolve(record.type)
        of_partition, shadowed, handler = dispatch
        image = self.image
        if not of_partition:
            return self._apply_to_image(handler, record, snapshot_end)
        verdict = image.positions.admit(record, snapshot_end)
        if verdict.__class__ is not int:
            return self._verdict(record, verdict)  # type: ignore[arg-type]
        data = record.data
        topic = image.topics.by_id.get(data[TOPIC_ID])
        if topic is None:
            return self._verdict(record, image.topics.of(record))  # type: ignore[arg-type]
        bucket = self.bucket
        partition_id = data[PARTITION_ID]
        if (
            bucket is not None
            and bucket[1] > 1
            and not (owned and partition_id != 0)
            and bucket_of(topic.topic_id, partition_id, bucket[1]) != bucket[0]
        ):
            if partition_id != 0 or not shadowed:
                return Outcome.NOT_OWNED
            image.effects.reset()
            result = image.topics.apply_shadow(topic, record)
            if result is Outcome.APPLIED and image.effects:
                self.partitions.react(image.effects, record)
        else:
            result = handler(record)
        if result.__class__ is not Outcome:
            return self._quarantine(record, result)  # type: ignore[arg-type]
        if result is Outcome.APPLIED:
            image.positions.remember(verdict, record)  # type: ignore[arg-type]
        return result  # type: ignore[return-value]

    def _apply_to_image(self, handler: Any, record: Record, snapshot_end: int | None) -> Outcome:
        """A record of the image's: the store's pending records first, then the area's handler and its effects."""
        partitions = self.partitions
        partitions.flush()
        image = self.image
        verdict = image.positions.admit(record, snapshot_end)
        if verdict.__class__ is not int:
            return self._verdict(record, verdict)  # type: ignore[arg-type]
        image.effects.reset()
        result = handler(record)
        if result.__class__ is not Outcome:
            return self._quarantine(record, result)
        if result is Outcome.APPLIED:
            image.positions.remember(verdict, record)  # type: ignore[arg-type]
            if image.effects:
                partitions.react(image.effects, record)
        return result

    def _resolve(self, type_name: str) -> tuple[bool, bool, Any]:
        """(a partition's record?, partition 0 of another bucket kept as a shadow?, its handler bound to this
        state's store or image) of a type the registry names."""
        entry = record_types.get(type_name)
        if entry is None or not entry.applied:
            raise KeyError(f"record type {type_name} is not one the core applies")
        if entry.scope == SCOPE_PARTITION:
            found = (True, entry.route == ROUTE_OWNER_P0_EVERY, self.partitions.handler(type_name))
        else:
            found = (False, False, self.image.handler(entry))
        self._dispatch[type_name] = found
        return found

    def _verdict(self, record: Record, verdict: Outcome | RecordError | TopicState) -> Outcome:
        if verdict.__class__ is Outcome:
            return verdict  # type: ignore[return-value]
        return self._quarantine(record, verdict)  # type: ignore[arg-type]

    def _quarantine(self, record: Record, error: RecordError) -> Outcome:
        self.last_error = error
        if self.reports(record):
            self._quarantined.append(error)
        return Outcome.QUARANTINED

    def reports(self, record: Record) -> bool:
        """Whether this state reports the record (counts it, quarantines it): its partition's bucket, or bucket 0
        for the records every bucket gets (`routing.reporter`)."""
        if self.bucket is None:
            return True
        return reporter(record.type, record.data, self.bucket[1]) == self.bucket[0]

    def apply_batch(self, items: Iterable[Any], owned: bool = False) -> tuple[list[Outcome], list[RecordError | None]]:
        """Apply records in log order; each one's outcome, and its error when quarantined. ``items``: Records, and
        the columnar store's `LineBlock`s of partition-record lines (an outcome and error per line; the object store
        applies their lines as Records). ``owned``: as `apply`."""
        outcomes: list[Outcome] = []
        errors: list[RecordError | None] = []
        add_outcome, add_error = outcomes.append, errors.append
        quarantined = Outcome.QUARANTINED

        def note(record: Record, outcome: Outcome) -> None:
            add_outcome(outcome)
            add_error(self.last_error if outcome is quarantined else None)

        apply = self.apply
        for item in items:
            if item.__class__ is Record:
                outcome = apply(item, None, owned)
                add_outcome(outcome)
                add_error(self.last_error if outcome is quarantined else None)
            else:  # a block of partition-record lines (`columnar.lines.LineBlock`)
                self.partitions.apply_block(self, item, outcomes, errors, note, owned)
        self.partitions.flush()
        return outcomes, errors

    # --- changes --------------------------------------------------------------------------------------------

    def drain_quarantined(self) -> list[RecordError]:
        """The records this state reports quarantined since the previous call."""
        out, self._quarantined = self._quarantined, []
        return out

    def drain_changes(self) -> Changes:
        """Return and forget what changed since the previous call."""
        self.partitions.flush()
        changed = self.partitions.drain()  # type: ignore[attr-defined]
        topics = self.image.topics.by_id
        brokers = self.image.brokers.drain()
        changed_topics, removed_topics = self.image.topics.drain()
        return Changes(
            partitions=[(topics[p.topic_id], p) for p in changed.partitions if p.topic_id in topics],
            removed=changed.removed,
            transitions=changed.transitions,
            brokers=brokers,
            topics=changed_topics,
            removed_topics=removed_topics,
            quarantined=self.drain_quarantined(),
        )

    # --- persistence ----------------------------------------------------------------------------------------

    def to_bytes(self, compress: bool = True) -> bytes:
        """The state (not the pending changes) as bytes: the image and the store, pickled."""
        self.partitions.flush()
        blob = pickle.dumps({"bucket": self.bucket, "partitions": self.partitions}, protocol=pickle.HIGHEST_PROTOCOL)
        return b"Z" + zlib.compress(blob, 1) if compress else b"P" + blob

    @classmethod
    def from_bytes(cls, blob: bytes) -> ClusterState:
        """Inverse of `to_bytes` (load only what this process wrote itself: it is a pickle)."""
        kind, body = blob[:1], blob[1:]
        was_enabled = gc.isenabled()
        gc.disable()  # unpickling a million objects would trigger full collections that find nothing (3x slower)
        try:
            state = pickle.loads(zlib.decompress(body) if kind == b"Z" else body)
        finally:
            if was_enabled:
                gc.enable()
        self = cls.__new__(cls)
        self.bucket = state["bucket"]
        self.partitions = state["partitions"]
        self.image = self.partitions.image
        self._reset_transient()
        return self

    # --- reads: the image ---------------------------------------------------------------------------------------

    @property
    def brokers(self) -> dict[int, BrokerState]:
        """Broker id → registration."""
        return self.image.brokers.by_id

    @property
    def topics(self) -> dict[str, TopicState]:
        """Topic id → topic."""
        return self.image.topics.by_id

    @property
    def features(self) -> dict[str, int]:
        """Finalized feature levels by name."""
        return self.image.features.levels

    @property
    def elr_enabled(self) -> bool:
        """Whether the finalized eligible.leader.replicas.version is >= 1 (elr-semantics §3)."""
        return self.image.features.elr_enabled

    @property
    def metadata_version_level(self) -> int | None:
        """The finalized metadata.version feature level, if known."""
        return self.image.features.metadata_version

    @property
    def default_min_isr(self) -> int | None:
        """``--default-min-isr`` as given (None: not given)."""
        return self.image.configs.default_min_isr

    @property
    def fallback_min_isr(self) -> int:
        """min.insync.replicas of a topic neither its config nor the dynamic cluster default sets: the override,
        else the nodes' static configs, else Kafka's 1."""
        return self.image.configs.fallback_min_isr()

    @property
    def static_configs(self) -> dict[int, dict[str, str]]:
        """Node id → its static configs elrwatch reads (server.properties, STATIC_BROKER_CONFIG_RECORD)."""
        return self.image.configs.static

    @property
    def topic_configs(self) -> dict[str, dict[str, str]]:
        """Topic name → its own configs."""
        return self.image.configs.of_topic

    @property
    def cluster_configs(self) -> dict[str, str]:
        """The cluster default configs."""
        return self.image.configs.cluster

    @property
    def derived_from(self) -> str | None:
        """Where the records came from when not from Kafka's log itself (`positions.Positions.derived_from`)."""
        return self.image.positions.derived_from

    @property
    def epochs_known(self) -> bool:
        """Whether broker registration epochs are Kafka's (not when derived from polls: the admin bridge)."""
        polled = polled_unknown(self.derived_from)
        return polled is None or next_start.epochs_known(polled[1])

    @property
    def snapshot_end_offset(self) -> int | None:
        """The end offset of the snapshot the state was loaded from, if any."""
        return self.image.positions.snapshot_end_offset

    def is_active(self, broker_id: int) -> bool:
        """Registered, not fenced, not in controlled shutdown."""
        return broker_id in self.image.brokers.active

    def owns(self, topic_id: str, partition_id: int) -> bool:
        """Whether this state holds the partition (always, unless bucketed)."""
        return self.partitions.owns(topic_id, partition_id)

    def topic_by_name(self, name: str) -> TopicState | None:
        """A topic by name."""
        return self.image.topics.by_name(name)

    def topic_config(self, topic: TopicState | str, name: str) -> str | None:
        """A config resolved for a topic: its own, then the cluster default (monitor-spec §3)."""
        return self.image.configs.value(topic if isinstance(topic, str) else topic.name, name)

    def configured_min_isr(self, topic: TopicState) -> int:
        """min.insync.replicas as configured for the topic (not capped by the replica count)."""
        return self.image.configs.configured_min_isr(topic.name)

    def replication_factor(self, topic: TopicState) -> int:
        """Replica count of the topic's partition 0 (held here or its shadow), 0 if unknown."""
        self.partitions.flush()
        return self.partitions.replication_factor(topic.topic_id)

    def effective_min_isr(self, topic: TopicState) -> int:
        """min(resolved min.insync.replicas, replica count of partition 0) (elr-semantics §4)."""
        self.partitions.flush()
        return self.partitions.effective_min_isr(topic)

    def unclean_enabled(self, topic: TopicState) -> bool:
        """Resolved unclean.leader.election.enable for the topic (default false)."""
        return self.image.configs.unclean_enabled(topic.name)

    # --- reads: the partitions ----------------------------------------------------------------------------------

    def partition(self, topic_id: str, partition_id: int) -> PartitionState | None:
        """A partition this state holds, with its derived fields."""
        self.partitions.flush()
        return self.partitions.partition(topic_id, partition_id)

    def iter_partitions(self) -> Iterator[tuple[TopicState, PartitionState]]:
        """The partitions this state holds with their topics, sorted by (topic name, partition id)."""
        self.partitions.flush()
        topics = self.image.topics.by_id
        held = sorted(
            ((topics[p.topic_id].name, p.partition_id, p) for p in self.partitions.iter_partitions()),
            key=lambda item: (item[0], item[1]),
        )
        for _name, _pid, partition in held:
            yield topics[partition.topic_id], partition

    def partitions_with(self, broker_id: int) -> list[PartitionState]:
        """The partitions this state holds whose replicas, ISR, ELR or last known ELR name the broker."""
        self.partitions.flush()
        return self.partitions.of_broker(broker_id)

    def partition_count_of(self, topic: TopicState) -> int:
        """How many of the topic's partitions this state holds."""
        self.partitions.flush()
        return self.partitions.count_of(topic.topic_id)

    @property
    def partition_count(self) -> int:
        """Partitions this state holds."""
        self.partitions.flush()
        return self.partitions.partition_count

    def partition_violations(self, topic_id: str, partition_id: int) -> tuple[Violation, ...]:
        """The invariants a partition currently breaks."""
        self.partitions.flush()
        return self.partitions.violations.of(topic_id, partition_id)

    @property
    def violations(self) -> dict[tuple[str, int], tuple[Violation, ...]]:
        """(topic id, partition id) → the violations of every partition that has some."""
        self.partitions.flush()
        return self.partitions.violations.by_partition

    @property
    def counters(self) -> Any:
        """The election counters (`gauges.partition_gauges` names them)."""
        self.partitions.flush()
        return self.partitions.counters

    @property
    def log_info(self) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
        """(topic ID, partition ID) → broker ID → the replica's log info (REPLICA_LOG_INFO_RECORD)."""
        return self.partitions.log_info

    @property
    def operator_steps(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """(topic ID, partition ID) → the operator's recovery steps, oldest first (OPERATOR_RECOVERY_RECORD)."""
        return self.partitions.operator_steps

    @property
    def status_counts(self) -> Any:
        """Partitions per status."""
        self.partitions.flush()
        return self.partitions.status_counts()
