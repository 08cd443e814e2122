"""The report document: what `elrwatch replay` prints and `elrwatch status` reads back (DESIGN.md §5).

This shape is the oracle the streaming job is checked against, so it is stable: keys are camelCase, partitions are
sorted by (topic, partitionId), brokers by id, violations by (topic, partition, kind). Only `lastPosition` (and
the `position` of violations and quarantined records) depends on the transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from elrwatch.state.cluster import ClusterState
from elrwatch.state.gauges import PipelineCounts, all_gauges
from elrwatch.state.model import BrokerState, PartitionState, TopicState
from elrwatch.state.records import RecordError
from elrwatch.state.status import view

#: Keys of a partition document that depend on how the events were transported (excluded from comparisons).
TRANSPORT_KEYS = frozenset({"lastPosition"})

AdviceFn = Callable[[ClusterState, TopicState, PartitionState], tuple[dict[str, Any], dict[str, Any]]]


def load_advice() -> AdviceFn | None:
    """The election-advice function (state/advice.py), if available."""
    try:
        from elrwatch.state.advice import partition_advice
    except ImportError:
        return None
    return partition_advice


def partition_doc(
    cluster: ClusterState, topic: TopicState, partition: PartitionState, advice: AdviceFn | None = None
) -> dict[str, Any]:
    """One partition's registration, derived status, audit and (optionally) advice."""
    derived = view(partition, cluster.effective_min_isr(topic), cluster.is_active)
    doc: dict[str, Any] = {
        "topic": topic.name,
        "topicId": topic.topic_id,
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
        "status": partition.status,
        "statusSinceMs": partition.status_since_ms,
        "statusSinceOffset": partition.status_since_offset,
        "lastLeaderChange": partition.last_leader_change,
        "lastOffset": partition.last_offset,
        "lastTimestampMs": partition.last_timestamp_ms,
        "lastPosition": partition.last_position,
        "violations": [v.kind for v in cluster.partition_violations(topic.topic_id, partition.partition_id)],
    }
    if advice is not None:
        outlook, recommendation = advice(cluster, topic, partition)
        doc["outlook"] = outlook
        doc["recommendation"] = recommendation
    return doc


def broker_doc(broker: BrokerState) -> dict[str, Any]:
    """One broker registration."""
    return {
        "brokerId": broker.broker_id,
        "epoch": broker.epoch,
        "incarnationId": broker.incarnation_id,
        "fenced": broker.fenced,
        "inControlledShutdown": broker.in_controlled_shutdown,
        "registered": broker.registered,
        "rack": broker.rack,
        "state": broker.state_name,
    }


def topic_doc(cluster: ClusterState, topic: TopicState) -> dict[str, Any]:
    """One topic with its resolved settings."""
    return {
        "topic": topic.name,
        "topicId": topic.topic_id,
        "partitionCount": len(topic.partitions),
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
        "defaultMinIsr": cluster.default_min_isr,
    }


def violation_docs(cluster: ClusterState) -> list[dict[str, Any]]:
    """Every current violation with its partition, sorted by (topic, partition, kind)."""
    out = []
    for (topic_id, partition_id), violations in cluster.violations.items():
        topic = cluster.topics.get(topic_id)
        name = topic.name if topic is not None else topic_id
        for violation in violations:
            out.append({"topic": name, "topicId": topic_id, "partitionId": partition_id, **violation.to_dict()})
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
        "brokers": [broker_doc(cluster.brokers[b]) for b in sorted(cluster.brokers)],
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
