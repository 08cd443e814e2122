"""Configs (ConfigRecord) of topics, of brokers and the cluster default, and how a topic's settings resolve:
its own config, else the cluster default (a broker resource with an empty name), else elrwatch's default."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elrwatch.state.outcome import Outcome, is_duplicate
from elrwatch.state.record_types import MIN_ISR, RESOURCE_BROKER, RESOURCE_TOPIC, UNCLEAN_ENABLE
from elrwatch.state.records import Record

if TYPE_CHECKING:
    from elrwatch.state.image.effects import Effects
    from elrwatch.state.image.topics import Topics

#: The configs that change how a topic's partitions derive (a change re-derives them).
DERIVING: frozenset[str] = frozenset({MIN_ISR, UNCLEAN_ENABLE})


class Configs:
    """Topic name → configs, the cluster default configs, broker name → configs; each key's last offset."""

    def __init__(self, effects: Effects, default_min_isr: int = 1) -> None:
        if default_min_isr < 1:
            raise ValueError("default_min_isr must be >= 1")
        #: min.insync.replicas when neither the topic nor the cluster default sets it.
        self.default_min_isr = default_min_isr
        self.of_topic: dict[str, dict[str, str]] = {}
        self.cluster: dict[str, str] = {}
        self.of_broker: dict[str, dict[str, str]] = {}
        self.offsets: dict[tuple[int, str, str], int] = {}
        self._effects = effects
        self.topics: Topics | None = None  # set by the image (the topics a change re-derives)

    def value(self, topic_name: str, name: str) -> str | None:
        """A config resolved for a topic: the topic's own, then the cluster default (monitor-spec §3)."""
        value = self.of_topic.get(topic_name, {}).get(name)
        return self.cluster.get(name) if value is None else value

    def configured_min_isr(self, topic_name: str) -> int:
        """min.insync.replicas as configured for the topic (not capped by its replica count)."""
        value = self.value(topic_name, MIN_ISR)
        return int(value) if value is not None else self.default_min_isr

    def effective_min_isr(self, topic_name: str, replication_factor: int) -> int:
        """min(configured min ISR, the replica count of partition 0) (elr-semantics §4); 0 replicas: unknown."""
        configured = self.configured_min_isr(topic_name)
        return min(configured, replication_factor) if replication_factor else configured

    def unclean_enabled(self, topic_name: str) -> bool:
        """unclean.leader.election.enable resolved for the topic (default false)."""
        value = self.value(topic_name, UNCLEAN_ENABLE)
        return value is not None and value.strip().lower() == "true"

    # --- handler (record_types names it) --------------------------------------------------------------------

    def apply_config(self, record: Record) -> Outcome:
        """ConfigRecord: set (or remove, a null value) a topic's, a broker's or the cluster default's config; a
        change of min ISR or unclean election re-derives the topic's partitions, or every partition."""
        data = record.data
        resource_type, resource_name, name, value = (
            data["resourceType"],
            data["resourceName"],
            data["name"],
            data["value"],
        )
        key = (resource_type, resource_name, name)
        if is_duplicate(self.offsets.get(key), record):
            return Outcome.DUPLICATE
        if record.offset is not None:
            self.offsets[key] = record.offset
        if resource_type == RESOURCE_TOPIC:
            target = self.of_topic.setdefault(resource_name, {})
        elif resource_type == RESOURCE_BROKER:
            target = self.cluster if resource_name == "" else self.of_broker.setdefault(resource_name, {})
        else:
            return Outcome.APPLIED  # other resource types do not matter to elrwatch
        if value is None:
            target.pop(name, None)
        else:
            target[name] = value
        topics = self.topics
        if name in DERIVING and topics is not None:
            if resource_type == RESOURCE_TOPIC:
                topic = topics.by_name(resource_name)
                if topic is not None:
                    topics.changed.add(topic.topic_id)
                    self._effects.topics.append(topic.topic_id)
            elif resource_name == "":
                topics.changed.update(topics.by_id)
                self._effects.everything = True
        return Outcome.APPLIED
