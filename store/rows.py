"""The store's mapping of domain rows to SQL rows: the buckets and the report documents hand the store what the
core knows (``state.partition_row`` rows, broker / topic / violation / quarantine / transition documents); only the
store knows its columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from elrwatch.state.model import NO_LEADER, PartitionState
from elrwatch.state.partition_row import partition_row
from elrwatch.state.report import stored_from_doc
from elrwatch.state.status import NEEDS_ATTENTION, SEVERITY, STATUSES


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str | bytes) -> Any:
    return orjson.loads(text)


PARTITION_COLUMNS = (
    "topic_id",
    "partition_id",
    "topic",
    "status",
    "severity",
    "needs_action",
    "under_min_isr",
    "leaderless",
    "leader",
    "effective_min_isr",
    "status_since_ms",
    "state",
    "replica_brokers",
)


def partition_sql_row(row: Sequence[Any]) -> list[Any]:
    """A bucket's ``state.partition_row`` as a ``partitions`` row: the PARTITION_COLUMNS values, then the sorted
    broker ids of its ``partition_replicas`` rows.

    ``needs_action`` is the status class: a partition needs an operator when its status is one of the first
    five. Every partition whose recommendation has commands has one of them (tests/test_stored_partition.py),
    so this equals the former rule (those five, or commands) without computing advice."""
    topic_id, partition_id, topic, status, leader, isr_size, min_isr, since_ms, stored, replica_brokers = row
    return [
        topic_id,
        partition_id,
        topic,
        status,
        SEVERITY.get(status, len(STATUSES)),
        status in NEEDS_ATTENTION,
        isr_size < min_isr,
        leader == NO_LEADER,
        leader,
        min_isr,
        since_ms,
        stored,
        dumps(replica_brokers),
        replica_brokers,
    ]


def partition_store_row(doc: Mapping[str, Any]) -> list[Any]:
    """``partition_sql_row`` of a partition document (DESIGN §5 shape: a report loaded into a store)."""
    partition = PartitionState(
        doc["topicId"],
        int(doc["partitionId"]),
        tuple(doc.get("replicas") or ()),
        tuple(doc.get("isr") or ()),
        leader=NO_LEADER if doc.get("leader") is None else int(doc["leader"]),
        adding_replicas=tuple(doc.get("addingReplicas") or ()),
    )
    partition.status = doc.get("status") or ""
    partition.status_since_ms = doc.get("statusSinceMs")
    min_isr = doc.get("effectiveMinIsr")
    row = partition_row(doc["topic"], partition, 1 if min_isr is None else int(min_isr), stored_from_doc(doc))
    return partition_sql_row(row)


def broker_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"broker_id": int(doc["brokerId"]), "state": str(doc.get("state", "")), "doc": dumps(doc)}


def topic_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"topic_id": doc["topicId"], "topic": doc["topic"], "doc": dumps(doc)}


def violation_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "topic_id": doc.get("topicId"),
        "topic": doc["topic"],
        "partition_id": int(doc["partitionId"]),
        "kind": str(doc["kind"]),
        "doc": dumps(doc),
    }


def quarantine_row(doc: Mapping[str, Any], batch_id: int | None) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "reason": str(doc.get("reason", "")),
        "position": doc.get("position"),
        "doc": dumps(doc),
    }


def transition_row(doc: Mapping[str, Any], batch_id: int | None) -> dict[str, Any]:
    return {
        "batch_id": batch_id,
        "topic_id": doc.get("topicId"),
        "topic": doc["topic"],
        "partition_id": int(doc["partitionId"]),
        "from_status": doc.get("from"),
        "to_status": doc.get("to"),
        "at_ms": doc.get("atMs"),
        "offset": doc.get("offset"),
        "position": doc.get("position"),
    }


def key_of(item: Any) -> tuple[str, int]:
    """(topicId, partitionId) from a tuple or from a dict with those keys."""
    if isinstance(item, Mapping):
        return str(item["topicId"]), int(item["partitionId"])
    topic_id, partition_id = item
    return str(topic_id), int(partition_id)


def gauge_value(value: float) -> int | float:
    """Integral gauge values come back as ints (so documents compare equal to replay's)."""
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


def last_event_ms(doc: Mapping[str, Any], newest_partition_ms: int | None) -> int | None:
    seconds = (doc.get("gauges") or {}).get("elrwatch_last_event_timestamp_seconds")
    if seconds:
        return int(float(seconds) * 1000)
    return newest_partition_ms
