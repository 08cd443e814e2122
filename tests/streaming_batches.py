"""Event lines through the streaming job's stages in process, as the tests of those stages feed them: the Arrow
record batch a source gives, its rows routed to buckets (streaming/route.py), buckets' payloads as the sink gets
them, and buckets run in two micro-batches with their state reloaded in between."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pyarrow as pa

from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import payload as payload_module
from elrwatch.streaming import route, sink
from elrwatch.streaming.snapshots import BucketState


def source_batch(lines: list[str], topic: str = "ev", partition: int = 0, first_offset: int = 0) -> pa.RecordBatch:
    """``lines`` as one record batch of a source (value, topic, partition, offset, timestamp): one ``topic``
    partition, consecutive offsets from ``first_offset``, no timestamps."""
    n = len(lines)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(lines),
            pa.array([topic] * n),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(first_offset, first_offset + n), pa.int64()),
            pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["value", "topic", "partition", "offset", "timestamp"],
    )


def routed_frame(lines: list[str], buckets: int = 1, **source: Any) -> pd.DataFrame:
    """The rows `route.route_batches` makes of ``lines`` (a `source_batch` of them, ``source`` its options) for
    ``buckets`` buckets, as the pandas frame the state function gets."""
    batch = source_batch(lines, **source)
    return pa.Table.from_batches(list(route.route_batches(iter([batch]), buckets))).to_pandas()


def on_the_wire(payload: dict[str, Any]) -> dict[str, Any]:
    """A bucket's payload as the sink gets it: its output rows decoded (the head, with the partition rows of its
    chunks as the store writer reads them, as many as the head counts)."""
    (head,), chunks = payload_module.decode_payloads(payload_module.encode_payload(payload))
    head["partitions"] = list(payload_module.iter_partition_rows(chunks))
    assert len(head["partitions"]) == head.pop("partitionCount")
    return head


def two_batches_per_bucket(
    routed: pd.DataFrame, buckets: int, reload: Callable[[int, BucketState], BucketState]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each bucket's rows of ``routed`` (in the frame's order) as two micro-batches, its state replaced in between
    by ``reload(bucket, state)``; the sink's aggregates of the first and of the second batch."""
    payloads: list[list[dict[str, Any]]] = [[], []]
    for b in range(buckets):
        part = routed[routed.bucket == b]
        half = len(part) // 2
        state = BucketState.new(b, buckets, 1)
        for n, rows in enumerate((part.iloc[:half], part.iloc[half:])):
            if n == 1:
                state = reload(b, state)
            payloads[n].append(bucket_module.process_bucket(b, buckets, bucket_module.ordered_rows(rows), state))
    aggregator = sink.Aggregator(buckets)
    first, second = (aggregator.absorb([on_the_wire(p) for p in batch]) for batch in payloads)
    return first, second
