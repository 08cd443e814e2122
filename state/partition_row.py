"""A changed partition as the buckets emit it: the domain row the status store maps to its SQL row
(``store/rows.py``). Plain JSON values, so it travels through the job's payloads as it is."""

from __future__ import annotations

from typing import Any

from elrwatch.state.model import PartitionState

#: The values of a partition row, in order.
PARTITION_ROW_FIELDS = (
    "topicId",
    "partitionId",
    "topic",
    "status",
    "leader",
    "isrSize",
    "effectiveMinIsr",
    "statusSinceMs",
    "state",  # the compact stored form, ``report.stored_partition``
    "replicaBrokers",  # sorted ids of the replicas and the replicas being added
)


def partition_row(topic_name: str, partition: PartitionState, effective_min_isr: int, stored: bytes | str) -> list[Any]:
    """The partition's row (``PARTITION_ROW_FIELDS``); ``stored`` is ``report.stored_partition``'s form."""
    brokers = set(partition.replicas)
    brokers.update(partition.adding_replicas)
    return [
        partition.topic_id,
        partition.partition_id,
        topic_name,
        partition.status or "HEALTHY",
        partition.leader,
        len(partition.isr),
        effective_min_isr,
        partition.status_since_ms,
        stored if isinstance(stored, str) else stored.decode(),
        sorted(brokers),
    ]
