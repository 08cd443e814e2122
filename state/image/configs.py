"""Configs of topics, of brokers, the cluster default and the nodes' static files, and how a topic's settings
resolve, in Kafka's order (`LogConfig` over `KafkaConfig`'s layers):

1. the topic's own config (ConfigRecord, resource TOPIC);
2. the dynamic cluster default (ConfigRecord, resource BROKER with an empty name);
3. ``--default-min-isr`` when an operator gives it (an override of the static layer; min ISR only);
4. the static layer: ``server.properties`` of the nodes (STATIC_BROKER_CONFIG_RECORD, elrwatch's own record: the
   metadata log never carries it; with ELR on, KRaft writes the static min ISR into the log as the cluster
   default, so layer 2 already holds it);
5. Kafka's built-in default (min ISR 1, unclean election off)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from elrwatch.state.outcome import Outcome, is_duplicate
from elrwatch.state.record_types import CONFIG_NAMES, MIN_ISR, RESOURCE_BROKER, RESOURCE_TOPIC, UNCLEAN_ENABLE
from elrwatch.state.records import Record

if TYPE_CHECKING:
    from elrwatch.state.image.effects import Effects
    from elrwatch.state.image.topics import Topics

#: The configs that change how a topic's partitions derive (a change re-derives them).
DERIVING: frozenset[str] = frozenset({MIN_ISR, UNCLEAN_ENABLE})
#: Kafka's built-in min.insync.replicas (no layer sets it).
BUILTIN_MIN_ISR = 1

#: Where a topic's min ISR comes from (`Configs.min_isr_source`).
SOURCE_TOPIC = "topic config"
SOURCE_DYNAMIC_DEFAULT = "dynamic cluster default"
SOURCE_OVERRIDE = "--default-min-isr"
SOURCE_STATIC = "static config (server.properties)"
SOURCE_BUILTIN = "Kafka's default"


class Configs:
    """Topic name → configs, the cluster default configs, broker name → configs, node id → static configs; each
    key's last offset."""

    def __init__(self, effects: Effects, default_min_isr: int | None = None) -> None:
        if default_min_isr is not None and default_min_isr < 1:
            raise ValueError("default_min_isr must be >= 1")
        #: ``--default-min-isr``: min.insync.replicas when neither the topic nor the dynamic cluster default sets
        #: it, in place of the nodes' static configs (None: not given).
        self.default_min_isr = default_min_isr
        self.of_topic: dict[str, dict[str, str]] = {}
        self.cluster: dict[str, str] = {}
        self.of_broker: dict[str, dict[str, str]] = {}
        #: Node id → its static configs (server.properties), as STATIC_BROKER_CONFIG_RECORD reports them.
        self.static: dict[int, dict[str, str]] = {}
        self.offsets: dict[tuple[int, str, str], int] = {}
        self._effects = effects
        self.topics: Topics | None = None  # set by the image (the topics a change re-derives)

    def __setstate__(self, state: dict[str, object]) -> None:
        """Unpickle (a columnar snapshot's image), an older one without the static layer included."""
        self.__dict__.update(state)
        self.__dict__.setdefault("static", {})

    def static_value(self, name: str) -> str | None:
        """The static layer's value of ``name``: the lowest node id's that sets it (nodes normally agree; each
        applies its own file), None when no node sets it."""
        for node in sorted(self.static):
            value = self.static[node].get(name)
            if value is not None:
                return value
        return None

    def value(self, topic_name: str, name: str) -> str | None:
        """A config resolved for a topic: the topic's own, the dynamic cluster default, then the static layer
        (monitor-spec §3; for min ISR `configured_min_isr` puts ``--default-min-isr`` before the static layer)."""
        value = self.of_topic.get(topic_name, {}).get(name)
        if value is None:
            value = self.cluster.get(name)
        return self.static_value(name) if value is None else value

    def fallback_min_isr(self) -> int:
        """min.insync.replicas of a topic neither its config nor the dynamic cluster default sets:
        ``--default-min-isr``, else the static layer, else Kafka's built-in 1."""
        if self.default_min_isr is not None:
            return self.default_min_isr
        static = _int_or_none(self.static_value(MIN_ISR))
        return BUILTIN_MIN_ISR if static is None else static

    def min_isr_source(self, topic_name: str | None = None) -> str:
        """Which layer sets the topic's min ISR (None: a topic without a config of its own)."""
        if topic_name is not None and _int_or_none(self.of_topic.get(topic_name, {}).get(MIN_ISR)) is not None:
            return SOURCE_TOPIC
        if _int_or_none(self.cluster.get(MIN_ISR)) is not None:
            return SOURCE_DYNAMIC_DEFAULT
        if self.default_min_isr is not None:
            return SOURCE_OVERRIDE
        return SOURCE_STATIC if _int_or_none(self.static_value(MIN_ISR)) is not None else SOURCE_BUILTIN

    def configured_min_isr(self, topic_name: str) -> int:
        """min.insync.replicas as configured for the topic (not capped by its replica count)."""
        for value in (self.of_topic.get(topic_name, {}).get(MIN_ISR), self.cluster.get(MIN_ISR)):
            number = _int_or_none(value)
            if number is not None:
                return number
        return self.fallback_min_isr()

    def effective_min_isr(self, topic_name: str, replication_factor: int) -> int:
        """min(configured min ISR, the replica count of partition 0) (elr-semantics §4); 0 replicas: unknown."""
        configured = self.configured_min_isr(topic_name)
        return min(configured, replication_factor) if replication_factor else configured

    def unclean_enabled(self, topic_name: str) -> bool:
        """unclean.leader.election.enable resolved for the topic (default false)."""
        value = self.value(topic_name, UNCLEAN_ENABLE)
        return value is not None and value.strip().lower() == "true"

    # --- handlers (record_types names them) ------------------------------------------------------------------

    def apply_static(self, record: Record) -> Outcome:
        """STATIC_BROKER_CONFIG_RECORD: a node's static config (a null value: its file does not set it). A change
        of what the static layer resolves to re-derives every partition (the topics it is the fallback of)."""
        data = record.data
        node, name, value = data["nodeId"], data["name"], data["value"]
        if name not in CONFIG_NAMES:
            return Outcome.APPLIED  # other static configs do not matter to elrwatch
        before = self.static_value(name)
        configs = self.static.setdefault(node, {})
        if value is None:
            configs.pop(name, None)
        else:
            configs[name] = value
        if self.static_value(name) != before and self.topics is not None:
            self.topics.changed.update(self.topics.by_id)
            self._effects.everything = True
        return Outcome.APPLIED

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


def _int_or_none(value: str | None) -> int | None:
    """A config's integer value; None when unset (a value Kafka would refuse never reaches a record: value_checks)."""
    return None if value is None else int(value)
