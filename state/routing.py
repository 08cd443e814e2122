"""Which bucket of the streaming job owns which partition (DESIGN.md §4).

A bucket is one `applyInPandasWithState` group holding many partitions. Partition records go to their
partition's bucket, and partition 0's records to every bucket (each bucket keeps a shadow of partition 0 because
the effective min ISR uses its replica count). Every other record type goes to every bucket.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from elrwatch.state import records

#: `targets()` result meaning "every bucket".
ALL_BUCKETS = -1

_PARTITION_TYPES = frozenset(
    {records.PARTITION_RECORD, records.PARTITION_CHANGE_RECORD, records.REPLICA_LOG_INFO_RECORD}
)


def bucket_of(topic_id: str, partition_id: int, buckets: int) -> int:
    """Stable bucket of a partition: crc32 of ``"<topicId>:<partitionId>"`` modulo ``buckets``."""
    return zlib.crc32(f"{topic_id}:{partition_id}".encode()) % buckets


def targets(record_type: str, data: Mapping[str, object], buckets: int) -> int:
    """The bucket a record goes to, or `ALL_BUCKETS`."""
    if record_type in _PARTITION_TYPES:
        partition_id = data["partitionId"]
        if partition_id == 0 and record_type != records.REPLICA_LOG_INFO_RECORD:
            return ALL_BUCKETS
        return bucket_of(data["topicId"], partition_id, buckets)  # type: ignore[arg-type]
    return ALL_BUCKETS
