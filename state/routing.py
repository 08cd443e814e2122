"""Which bucket of the streaming job owns which partition (DESIGN.md §4), and where each record goes.

A bucket is one `applyInPandasWithState` group holding many partitions. Each record type's route comes from the
registry (record_types.py): a partition's records go to its bucket, partition 0's to every bucket for the types
routed `ROUTE_OWNER_P0_EVERY` (each bucket keeps a shadow of partition 0 because the effective min ISR uses its
replica count), and every other type's to every bucket. The bucket that *reports* a record (counts it, quarantines
it) is its partition's bucket, or bucket 0 for the rest (`reporter`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from elrwatch.state.record_types import PARTITION_ID, PARTITION_ROUTED, TOPIC_ID

#: `targets()` result meaning "every bucket".
ALL_BUCKETS = -1


def bucket_of(topic_id: str, partition_id: int, buckets: int) -> int:
    """Stable bucket of a partition: crc32 of ``"<topicId>:<partitionId>"`` modulo ``buckets``."""
    return zlib.crc32(f"{topic_id}:{partition_id}".encode()) % buckets


def targets(record_type: str, data: Mapping[str, object], buckets: int) -> int:
    """The bucket a record goes to, or `ALL_BUCKETS`."""
    p0_everywhere = PARTITION_ROUTED.get(record_type)
    if p0_everywhere is not None:
        partition_id = data[PARTITION_ID]
        if partition_id == 0 and p0_everywhere:
            return ALL_BUCKETS
        return bucket_of(data[TOPIC_ID], partition_id, buckets)  # type: ignore[arg-type]
    return ALL_BUCKETS


def reporter(record_type: str, data: Mapping[str, object], buckets: int) -> int:
    """The bucket that reports a record (counts it, quarantines it): its partition's bucket for the types routed
    to their partition, bucket 0 for every other."""
    if record_type in PARTITION_ROUTED:
        return bucket_of(data[TOPIC_ID], data[PARTITION_ID], buckets)  # type: ignore[arg-type]
    return 0
