"""Topics (TopicRecord, RemoveTopicRecord), ClearElrRecord's admission, and the replica count of each topic's
partition 0 when another bucket owns it (its *shadow*: that count caps the topic's effective min ISR)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elrwatch.state.merge import clear_elr, merge_partition_change, partition_from_record
from elrwatch.state.model import PartitionState, TopicState
from elrwatch.state.outcome import Outcome, is_duplicate, record_error
from elrwatch.state.record_types import PARTITION_RECORD
from elrwatch.state.records import Record, RecordError

if TYPE_CHECKING:
    from elrwatch.state.image.effects import Effects


class Topics:
    """Topic id → topic, name → id, the topics removed (with the offset that removed them), and their delta
    (``changed``: topics whose settings or partitions changed; ``removed_out``: topics removed since the drain)."""

    def __init__(self, effects: Effects, topic_configs: dict[str, dict[str, str]]) -> None:
        self.by_id: dict[str, TopicState] = {}
        self.ids_by_name: dict[str, str] = {}
        self.removed: dict[str, int | None] = {}
        self.removed_names: dict[str, int | None] = {}
        self.clear_elr_offsets: dict[str, int] = {}
        #: Partition 0 of the topics whose partition 0 another bucket owns (only its replica count is read).
        self.shadow_p0: dict[str, PartitionState] = {}
        self.changed: set[str] = set()
        self.removed_out: list[tuple[str, str]] = []
        self._effects = effects
        #: The configs' per-topic settings (Configs.of_topic): a removed topic's settings go with it.
        self._topic_configs = topic_configs

    def by_name(self, name: str) -> TopicState | None:
        """A topic by name."""
        topic_id = self.ids_by_name.get(name)
        return self.by_id.get(topic_id) if topic_id is not None else None

    def of(self, record: Record) -> TopicState | RecordError | Outcome:
        """The topic a record names by ``topicId``, or why not (DUPLICATE when the topic was removed after it)."""
        topic_id = record.data["topicId"]
        topic = self.by_id.get(topic_id)
        if topic is None:
            if topic_id in self.removed and is_duplicate(self.removed[topic_id], record):
                return Outcome.DUPLICATE
            return record_error(record, "unknown_topic", "topicId", f"no TOPIC_RECORD for topic id {topic_id}")
        return topic

    def drain(self) -> tuple[list[TopicState], list[tuple[str, str]]]:
        """(the live topics changed since the previous call, by id; the topics removed since, as (id, name))."""
        changed = [self.by_id[t] for t in sorted(self.changed) if t in self.by_id]
        removed = self.removed_out
        self.changed = set()
        self.removed_out = []
        return changed, removed

    # --- handlers (record_types names them) -----------------------------------------------------------------

    def apply_topic(self, record: Record) -> Outcome | RecordError:
        """TopicRecord: a new topic (its id must not name another topic, nor its name another live id)."""
        name, topic_id = record.data["name"], record.data["topicId"]
        existing = self.by_id.get(topic_id)
        if existing is not None:
            if is_duplicate(existing.last_offset, record):
                return Outcome.DUPLICATE
            if existing.name != name:
                return record_error(
                    record, "conflict", "name", f"topic id {topic_id} already names topic {existing.name!r}"
                )
            return Outcome.DUPLICATE
        if topic_id in self.removed and is_duplicate(self.removed[topic_id], record):
            return Outcome.DUPLICATE
        other = self.ids_by_name.get(name)
        if other is not None and other in self.by_id:
            return record_error(record, "conflict", "name", f"topic {name!r} already exists with id {other}")
        self.by_id[topic_id] = TopicState(topic_id=topic_id, name=name, last_offset=record.offset)
        self.ids_by_name[name] = topic_id
        self.changed.add(topic_id)
        return Outcome.APPLIED

    def apply_remove_topic(self, record: Record) -> Outcome | RecordError:
        """RemoveTopicRecord: the topic, its partitions and its configs go (Kafka deletes its configs with it)."""
        topic = self.of(record)
        if not isinstance(topic, TopicState):
            return topic
        if is_duplicate(topic.last_offset, record):
            return Outcome.DUPLICATE
        topic_id, name = topic.topic_id, topic.name
        self._effects.removed_topics.append((topic_id, name))
        self.shadow_p0.pop(topic_id, None)
        del self.by_id[topic_id]
        if self.ids_by_name.get(name) == topic_id:
            del self.ids_by_name[name]
        self._topic_configs.pop(name, None)
        self.removed[topic_id] = record.offset
        self.removed_names[name] = record.offset
        self.changed.discard(topic_id)
        self.removed_out.append((topic_id, name))
        return Outcome.APPLIED

    def apply_clear_elr(self, record: Record) -> Outcome | RecordError:
        """ClearElrRecord (of one topic by name, or of every topic): which topics' partitions clear their ELR and
        last known ELR (the partition stores do it, `Effects.clear_elr`); the shadows clear here."""
        name = record.data["topicName"]
        if is_duplicate(self.clear_elr_offsets.get(name), record):
            return Outcome.DUPLICATE
        if name:
            topic = self.by_name(name)
            if topic is None:
                if name in self.removed_names and is_duplicate(self.removed_names[name], record):
                    return Outcome.DUPLICATE  # re-delivered after the topic was removed
                return record_error(record, "unknown_topic", "topicName", f"no topic named {name!r}")
            topic_ids = [topic.topic_id]
        else:
            topic_ids = list(self.by_id)
        if record.offset is not None:
            self.clear_elr_offsets[name] = record.offset
        for topic_id in topic_ids:
            shadow = self.shadow_p0.get(topic_id)
            if shadow is not None and not is_duplicate(shadow.last_offset, record) and clear_elr(shadow):
                stamp(shadow, record)
        self._effects.clear_elr = topic_ids
        return Outcome.APPLIED

    def apply_shadow(self, topic: TopicState, record: Record) -> Outcome | RecordError:
        """A record of partition 0 that another bucket owns: keep its replica count (a PartitionRecord replaces the
        registration, any other type merges as a PartitionChangeRecord); a changed count re-derives the topic."""
        topic_id = topic.topic_id
        shadow = self.shadow_p0.get(topic_id)
        if record.type == PARTITION_RECORD:
            if shadow is not None and is_duplicate(shadow.last_offset, record):
                return Outcome.DUPLICATE
            new = partition_from_record(record.data)
            new.topic_id = topic_id
            stamp(new, record)
            self.shadow_p0[topic_id] = new
            if shadow is None or len(shadow.replicas) != len(new.replicas):
                self._effects.topics.append(topic_id)
            return Outcome.APPLIED
        if shadow is None:
            return record_error(record, "unknown_partition", "partitionId", f"no PARTITION_RECORD for {topic.name}-0")
        if is_duplicate(shadow.last_offset, record):
            return Outcome.DUPLICATE
        before = len(shadow.replicas)
        merge_partition_change(shadow, record.data)
        stamp(shadow, record)
        if len(shadow.replicas) != before:
            self._effects.topics.append(topic_id)
        return Outcome.APPLIED


def stamp(partition: PartitionState, record: Record) -> None:
    """``record`` was applied to ``partition``: its offset, timestamp and position are the partition's last."""
    if record.offset is not None:
        partition.last_offset = record.offset
    if record.timestamp_ms is not None:
        partition.last_timestamp_ms = record.timestamp_ms
    partition.last_position = record.position
