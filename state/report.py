"""The report document: what `elrwatch replay` prints and `elrwatch status` reads back (DESIGN.md §5).

This shape is the oracle the streaming job is checked against, so it is stable: keys are camelCase, partitions are
sorted by (topic, partitionId), brokers by id, violations by (topic, partition, kind). Only `lastPosition` (and
the `position` of violations and quarantined records) depends on the transport.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from elrwatch.state import insight, next_start
from elrwatch.state import metadata_version as mv
from elrwatch.state.advice import advice_of, partition_advice
from elrwatch.state.audit import Violation
from elrwatch.state.cluster import ClusterState
from elrwatch.state.controller import TopicContext
from elrwatch.state.gauges import PipelineCounts, all_gauges
from elrwatch.state.image.positions import polled_unknown
from elrwatch.state.insight import missing_replicas
from elrwatch.state.model import (
    LEADER_CHANGE_NONE,
    LRS_RECOVERED,
    NO_LEADER,
    PARTITION_FIELDS,
    UNKNOWN_INCARNATION_ID,
    BrokerState,
    PartitionState,
    TopicState,
)
from elrwatch.state.records import RecordError
from elrwatch.state.recovery import operator_recovery_doc
from elrwatch.state.status import view

#: Keys of a partition document that depend on how the events were transported (excluded from comparisons).
TRANSPORT_KEYS = frozenset({"lastPosition"})

AdviceFn = Callable[[ClusterState, TopicState, PartitionState], tuple[dict[str, Any], dict[str, Any]]]


def load_advice() -> AdviceFn:
    """The election-advice function (``advice.partition_advice``) that ``build_document`` takes."""
    return partition_advice


def partition_doc(
    cluster: ClusterState, topic: TopicState, partition: PartitionState, advice: AdviceFn | None = None
) -> dict[str, Any]:
    """One partition's registration, derived status, audit and (optionally) advice."""
    violations = [v.kind for v in cluster.partition_violations(topic.topic_id, partition.partition_id)]
    doc = _document(
        topic.name, partition, cluster.effective_min_isr(topic), cluster.is_active, violations, cluster.brokers
    )
    steps = cluster.operator_steps.get((topic.topic_id, partition.partition_id))
    if steps:
        doc["operatorRecovery"] = operator_recovery_doc(steps)
    if advice is not None:
        outlook, recommendation = advice(cluster, topic, partition)
        doc["outlook"] = outlook
        doc["recommendation"] = recommendation
    return doc


def _document(
    topic_name: str,
    partition: PartitionState,
    min_isr: int,
    is_active: Callable[[int], bool],
    violations: list[str],
    brokers: Mapping[int, BrokerState],
) -> dict[str, Any]:
    """The partition document without advice (replay's documents and the store's rebuilt ones alike);
    ``brokers`` give the causes of the missing replicas."""
    derived = view(partition, min_isr, is_active)
    return {
        "topic": topic_name,
        "topicId": partition.topic_id,
        "partitionId": partition.partition_id,
        "replicas": list(partition.replicas),
        "isr": list(partition.isr),
        "elr": list(partition.elr),
        "lastKnownElr": list(partition.last_known_elr),
        "leader": partition.leader,
        "leaderEpoch": partition.leader_epoch,
        "partitionEpoch": partition.partition_epoch,
        "leaderRecoveryState": partition.leader_recovery_state,
        "addingReplicas": list(partition.adding_replicas),
        "removingReplicas": list(partition.removing_replicas),
        "effectiveMinIsr": derived.effective_min_isr,
        "underMinIsr": derived.under_min_isr,
        "atMinIsr": derived.at_min_isr,
        "leaderless": derived.leaderless,
        "electable": derived.electable,
        "liveElectable": derived.live_electable,
        "missingReplicas": missing_replicas(partition.replicas, partition.isr, brokers),
        "status": partition.status,
        "statusSinceMs": partition.status_since_ms,
        "statusSinceOffset": partition.status_since_offset,
        "lastLeaderChange": partition.last_leader_change,
        "lastOffset": partition.last_offset,
        "lastTimestampMs": partition.last_timestamp_ms,
        "lastPosition": partition.last_position,
        "violations": violations,
    }


# -----------------------------------------------------------------------------------------------------------
# the status store's form of a partition (DESIGN §7)

#: What the status store keeps of a partition besides its key and status columns, as one JSON array in this
#: order: these PartitionState attributes, then the kinds of the invariants it breaks, then its replicas' log
#: info (ReplicaLogInfo records; usually null), then, only for a partition an operator recovered, its recovery
#: steps (OperatorRecovery records, `recovery.step_entry`). About 100 bytes instead of the ~1 KB document: the store
#: rebuilds the document, the electable sets and the advice when the partition is read (StoreView), so the
#: streaming job writes a storm's 100k partitions without building their documents.
STORED_FIELDS: tuple[str, ...] = PARTITION_FIELDS[PARTITION_FIELDS.index("replicas") : PARTITION_FIELDS.index("flags")]
#: The document keys of STORED_FIELDS, in the same order (stored_from_doc).
_STORED_DOC_KEYS: tuple[tuple[str, Any], ...] = (
    ("replicas", []),
    ("isr", []),
    ("elr", []),
    ("lastKnownElr", []),
    ("leader", NO_LEADER),
    ("leaderEpoch", 0),
    ("partitionEpoch", 0),
    ("leaderRecoveryState", LRS_RECOVERED),
    ("addingReplicas", []),
    ("removingReplicas", []),
    ("status", ""),
    ("statusSinceMs", None),
    ("statusSinceOffset", None),
    ("lastLeaderChange", LEADER_CHANGE_NONE),
    ("lastPosition", None),
    ("lastOffset", None),
    ("lastTimestampMs", None),
)
_stored_values = operator.attrgetter(*STORED_FIELDS)
_N_STORED = len(STORED_FIELDS)


def stored_partition(cluster: ClusterState, topic: TopicState, partition: PartitionState) -> bytes:
    """A partition as the status store keeps it: the JSON array described at STORED_FIELDS."""
    key = (topic.topic_id, partition.partition_id)
    kinds = [v.kind for v in cluster.violations.get(key, ())]
    stored = (*_stored_values(partition), kinds, cluster.log_info.get(key) or None)
    steps = cluster.operator_steps.get(key)
    if steps:  # the operator's recovery steps: a last value only for the partitions that have some
        stored = (*stored, steps)
    return orjson.dumps(stored, option=orjson.OPT_NON_STR_KEYS)


def stored_from_doc(doc: Mapping[str, Any]) -> bytes:
    """The stored form of a partition document (a report document loaded into a store: tests, benchmarks).
    A document does not carry the replicas' log info: the rebuilt recommendation then has none."""
    values = [doc.get(key, default) for key, default in _STORED_DOC_KEYS]
    stored = (*values, list(doc.get("violations") or ()), None)
    recovered = doc.get("operatorRecovery")
    if recovered:  # the operator's recovery steps, as stored_partition keeps them
        stored = (*stored, recovered["steps"])
    return orjson.dumps(stored)


def partition_from_stored(topic_id: str, partition_id: int, values: list[Any]) -> PartitionState:
    """The PartitionState of a decoded stored array (its first len(STORED_FIELDS) values)."""
    p = PartitionState(
        topic_id,
        partition_id,
        tuple(values[0]),
        tuple(values[1]),
        tuple(values[2]),
        tuple(values[3]),
        values[4],
        values[5],
        values[6],
        values[7],
        tuple(values[8]),
        tuple(values[9]),
    )
    (
        p.status,
        p.status_since_ms,
        p.status_since_offset,
        p.last_leader_change,
        p.last_position,
        p.last_offset,
        p.last_timestamp_ms,
    ) = values[10:_N_STORED]
    return p


def stored_registration_key(values: list[Any]) -> tuple[Any, ...]:
    """`elrwatch.state.whatif.registration_key` of a decoded stored array, without building its PartitionState."""
    return (
        tuple(values[0]),
        tuple(values[1]),
        tuple(values[2]),
        tuple(values[3]),
        values[4],
        values[7],
        tuple(values[8]),
        tuple(values[9]),
    )


@dataclass
class StoreView:
    """What a store reader needs, besides a partition's own row, to rebuild its document and advice: the
    brokers, the cluster's ELR and metadata version, each topic's resolved unclean.leader.election.enable
    (from the store's brokers, cluster and topics, all written by the same batch as the partitions)."""

    brokers: dict[int, BrokerState] = field(default_factory=dict)
    elr_enabled: bool = False
    metadata_version: int | None = None
    unclean_by_topic: dict[str, bool] = field(default_factory=dict)
    cluster_unclean: bool = False
    #: Whether the brokers' registration epochs are Kafka's (not when derived by the admin bridge).
    epochs_known: bool = True

    def __post_init__(self) -> None:
        self._active = {b.broker_id for b in self.brokers.values() if b.active}

    @classmethod
    def from_docs(
        cls, brokers: list[Mapping[str, Any]], cluster: Mapping[str, Any] | None, topics: list[Mapping[str, Any]]
    ) -> StoreView:
        """From the report document's ``brokers``, ``cluster`` and ``topics`` (as the store holds them)."""
        cluster = cluster or {}
        unclean = str((cluster.get("configs") or {}).get("unclean.leader.election.enable", "")).strip().lower()
        store_view = cls(
            brokers={int(b["brokerId"]): broker_from_doc(b) for b in brokers},
            elr_enabled=bool(cluster.get("elrEnabled", False)),
            metadata_version=cluster.get("metadataVersion"),
            cluster_unclean=unclean == "true",
            epochs_known=next_start.epochs_known(cluster.get("unknown") or ()),
        )
        store_view.learn_topics(topics)
        return store_view

    def learn_topics(self, topics: list[Mapping[str, Any]]) -> None:
        """Take the resolved unclean.leader.election.enable of these topic documents (a reader may load the
        topics it needs one at a time)."""
        for t in topics:
            if t.get("uncleanLeaderElectionEnable") is not None:
                self.unclean_by_topic[t["topic"]] = bool(t["uncleanLeaderElectionEnable"])

    def is_active(self, broker_id: int) -> bool:
        """Registered, not fenced, not in controlled shutdown."""
        return broker_id in self._active

    def topic_context(self, topic_name: str, effective_min_isr: int) -> TopicContext:
        """The controller's view of a stored partition's topic (as the state that wrote it saw it)."""
        return self.context(effective_min_isr, self.unclean_of(topic_name))

    def unclean_of(self, topic_name: str) -> bool:
        """The topic's resolved unclean.leader.election.enable."""
        return self.unclean_by_topic.get(topic_name, self.cluster_unclean)

    def context(self, effective_min_isr: int, unclean: bool) -> TopicContext:
        """The controller's view of a topic with this min ISR and unclean setting, in this cluster."""
        return TopicContext(
            min_isr=effective_min_isr,
            elr_enabled=self.elr_enabled,
            unclean_enabled=unclean,
            metadata_version=mv.DEFAULT_LEVEL if self.metadata_version is None else self.metadata_version,
        )

    def partition(self, topic_id: str, partition_id: int, stored: str | bytes) -> PartitionState:
        """A stored partition's registration (no document, no advice)."""
        return partition_from_stored(topic_id, partition_id, orjson.loads(stored))

    def document(
        self,
        topic_name: str,
        topic_id: str,
        partition_id: int,
        effective_min_isr: int,
        stored: str | bytes,
        advice: bool = True,
    ) -> dict[str, Any]:
        """A stored partition's document (the same as ``partition_doc`` of the state that wrote it)."""
        values = orjson.loads(stored)
        partition = partition_from_stored(topic_id, partition_id, values)
        doc = _document(topic_name, partition, effective_min_isr, self.is_active, values[_N_STORED], self.brokers)
        if len(values) > _N_STORED + 2:
            doc["operatorRecovery"] = operator_recovery_doc(values[_N_STORED + 2])
        if advice:
            ctx = self.topic_context(topic_name, effective_min_isr)
            raw_info = values[_N_STORED + 1]
            log_info = {int(b): info for b, info in raw_info.items()} if raw_info else None
            doc["outlook"], doc["recommendation"] = advice_of(
                topic_name, partition, self.brokers, ctx, self.is_active, log_info, epochs_known=self.epochs_known
            )
        return doc


def broker_doc(broker: BrokerState, epochs_known: bool = True) -> dict[str, Any]:
    """One broker registration, its agent's last clean-shutdown report and whether its next start will be clean;
    ``epoch`` and ``incarnationId`` null where the source does not know them (`BrokerState.epoch_known`; and
    ``epochs_known``: False when the source shows no real registration epochs, `ClusterState.epochs_known`)."""
    known = broker.epoch_known and epochs_known
    return {
        "brokerId": broker.broker_id,
        "epoch": broker.epoch if known else None,
        "incarnationId": broker.incarnation_id if known else None,
        "fenced": broker.fenced,
        "inControlledShutdown": broker.in_controlled_shutdown,
        "registered": broker.registered,
        "rack": broker.rack,
        "state": broker.state_name,
        "cleanShutdown": broker.clean_shutdown,
        "nextStart": next_start.next_start(broker, known).doc(),
    }


def broker_from_doc(doc: Mapping[str, Any]) -> BrokerState:
    """The BrokerState of a broker document (``broker_doc``'s inverse; a null epoch reads as unknown)."""
    epoch = doc.get("epoch", -1)
    return BrokerState(
        broker_id=int(doc["brokerId"]),
        epoch=-1 if epoch is None else epoch,
        incarnation_id=UNKNOWN_INCARNATION_ID if epoch is None else doc.get("incarnationId"),
        fenced=bool(doc.get("fenced", True)),
        in_controlled_shutdown=bool(doc.get("inControlledShutdown", False)),
        registered=bool(doc.get("registered", True)),
        rack=doc.get("rack"),
        clean_shutdown=doc.get("cleanShutdown"),
    )


def topic_doc(cluster: ClusterState, topic: TopicState) -> dict[str, Any]:
    """One topic with its resolved settings."""
    return {
        "topic": topic.name,
        "topicId": topic.topic_id,
        "partitionCount": cluster.partition_count_of(topic),
        "replicationFactor": cluster.replication_factor(topic),
        "configs": dict(sorted(cluster.topic_configs.get(topic.name, {}).items())),
        "effectiveMinIsr": cluster.effective_min_isr(topic),
        "uncleanLeaderElectionEnable": cluster.unclean_enabled(topic),
    }


def cluster_doc(cluster: ClusterState) -> dict[str, Any]:
    """Cluster-level settings: features and default configs."""
    return {
        "elrEnabled": cluster.elr_enabled,
        "metadataVersion": cluster.metadata_version_level,
        "features": dict(sorted(cluster.features.items())),
        "configs": dict(sorted(cluster.cluster_configs.items())),
        # min ISR of a topic that neither its config nor the dynamic cluster default sets, and where it comes from
        "defaultMinIsr": cluster.fallback_min_isr,
        "defaultMinIsrSource": cluster.image.configs.min_isr_source(),
        "staticConfigs": {str(node): dict(sorted(c.items())) for node, c in sorted(cluster.static_configs.items())},
        # "admin-poll": derived from the admin API by `elrwatch bridge --source admin`; "unknown" lists what that
        # mode cannot know (epochs, transitions between polls), so nothing downstream presents it as Kafka's.
        "derivedFrom": (polled_unknown(cluster.derived_from) or (None, []))[0],
        "unknown": (polled_unknown(cluster.derived_from) or (None, []))[1],
    }


def violation_doc(topic: str, topic_id: str, partition_id: int, violation: Violation) -> dict[str, Any]:
    """A violation with its partition (topic name, topic ID, partition ID)."""
    return {"topic": topic, "topicId": topic_id, "partitionId": partition_id, **violation.to_dict()}


def violation_docs(cluster: ClusterState) -> list[dict[str, Any]]:
    """Every current violation with its partition, sorted by (topic, partition, kind)."""
    out = []
    for (topic_id, partition_id), violations in cluster.violations.items():
        topic = cluster.topics.get(topic_id)
        name = topic.name if topic is not None else topic_id
        for violation in violations:
            out.append(violation_doc(name, topic_id, partition_id, violation))
    out.sort(key=lambda v: (v["topic"], v["partitionId"], v["kind"]))
    return out


def quarantine_doc(errors: list[RecordError], limit: int = 1000) -> dict[str, Any]:
    """Count, per-reason counts and (up to ``limit``) the quarantined records with their reasons."""
    by_reason: dict[str, int] = {}
    for error in errors:
        by_reason[error.reason] = by_reason.get(error.reason, 0) + 1
    return {
        "count": len(errors),
        "byReason": dict(sorted(by_reason.items())),
        "records": [e.to_dict() for e in errors[:limit]],
    }


def build_document(
    cluster: ClusterState,
    counts: PipelineCounts,
    quarantined: list[RecordError],
    advice: AdviceFn | None = None,
) -> dict[str, Any]:
    """The whole report document for a cluster state."""
    return {
        "partitions": [partition_doc(cluster, t, p, advice) for t, p in cluster.iter_partitions()],
        "brokers": [broker_doc(cluster.brokers[b], cluster.epochs_known) for b in sorted(cluster.brokers)],
        "topics": [topic_doc(cluster, t) for t in sorted(cluster.topics.values(), key=lambda t: t.name)],
        "cluster": cluster_doc(cluster),
        "gauges": all_gauges(cluster, counts),
        "violations": violation_docs(cluster),
        "quarantined": quarantine_doc(quarantined),
        "counts": counts_doc(counts),
    }


def counts_doc(counts: PipelineCounts) -> dict[str, Any]:
    """The report's ``counts``: events read, applied, duplicates, skipped by type, ignored lines."""
    return {
        "events": sum(counts.events_by_type.values()),
        "applied": counts.applied,
        "duplicates": counts.duplicates,
        "skippedByType": dict(sorted(counts.skipped_by_type.items())),
        "ignoredLines": counts.ignored_lines,
    }


def dumps_document(document: dict[str, Any], pretty: bool = True) -> str:
    """Serialize a document as JSON text (stable key order as built)."""
    option = orjson.OPT_INDENT_2 if pretty else 0
    return orjson.dumps(document, option=option).decode()


def restart_check(cluster: ClusterState, broker_id: int, limit: int = 100) -> dict[str, Any]:
    """Is it safe to stop this broker now, on a ClusterState (``elrwatch restart-check BROKER FILE``): the same shape
    as the API's (first page of each list; the counts are complete). Raises KeyError for an unknown broker."""
    broker = cluster.brokers.get(broker_id)
    if broker is None:
        raise KeyError(f"unknown broker {broker_id}")
    parts, counts = insight.recount(cluster)
    n_blocking = counts.get((insight.BLOCKING, broker_id), 0)
    n_offline = counts.get((insight.OFFLINE, broker_id), 0)
    blocking: list[tuple[str, int]] = []
    offline: list[tuple[str, int]] = []
    for key, part in parts.items():
        if insight.blocks(part, broker_id):
            blocking.append(key)
        if insight.takes_offline(part, broker_id):
            offline.append(key)

    def page(keys: list[tuple[str, int]]) -> dict[str, Any]:
        named = sorted((cluster.topics[t].name, p, t) for t, p in keys)
        items = []
        for _name, pid, topic_id in named[:limit]:
            partition = cluster.partition(topic_id, pid)
            assert partition is not None  # counted from the cluster's own partitions
            items.append(partition_doc(cluster, cluster.topics[topic_id], partition))
        nxt = [named[limit][0], named[limit][1]] if len(named) > limit else None
        return {"items": items, "nextCursor": nxt, "limit": limit}

    safe, reason = insight.restart_verdict(broker_id, broker.state_name, n_blocking, n_offline)
    return {
        "brokerId": broker_id,
        "state": broker.state_name,
        "safe": safe,
        "reason": reason,
        "blockingCount": n_blocking,
        "offlineCount": n_offline,
        "blocking": page(blocking),
        "offline": page(offline),
    }
