"""The event topic's record headers (contract version 1): what routing needs, so that Spark places a line without
reading its JSON (streaming/route.py, `route_in_jvm`).

elrwatch's producers (`elrwatch produce`, both bridges, the agent: `kafkaio.produce.key_and_headers`) set them on
every valid event line, from the same parse as the line's key, as its first headers, in this order:

* `ROUTE_HEADER` (``elrwatch.route.v1``): ``<topicId>:<partitionId>`` (UTF-8) for a record of a type the registry
  routes to its partition's bucket (state/record_types.py) with a string topic id and a partition id > 0 (a JSON
  integer up to 2³¹ − 1): the job places it in ``crc32(value) % buckets``, its partition's bucket
  (``routing.bucket_of``). `EVERY_BUCKET` (``*``) for every other valid event (other types, partition 0): the job
  sends it to every bucket. This is exactly where the JSON route places the line (``route.jvm_placed_condition``).
* `OFFSET_HEADER` (``elrwatch.offset.v1``): the envelope's metadata offset (``"offset"``, a JSON integer) in
  decimal ASCII, when it has one: the job merges the event topic's partitions by it (``bucket.ordered_rows``).

A line that is not a valid event (not JSON, no string ``type``, ``data`` not an object) and a kafka-dump-log text
line get neither header, nor does a line from a foreign producer: the job reads the routing fields from its JSON.
A header is only a placement: the bucket parses every line it gets and applies only what it owns; a line placed in
a bucket that does not own it (a wrong or forged header) is quarantined there as a ``conflict``
(``bucket_input._records``). The job reads the route header at position 0 and the offset header at position 1 of
the record's headers (Spark SQL reads a position without a per-row lambda), checking their names: a line whose first
header is another one takes the JSON route. The version is in the names: a future contract uses new names, and a
job reads only the names it knows (a line with unknown ones takes the JSON route).
"""

from __future__ import annotations

from typing import Any, Final

from elrwatch.state.record_types import PARTITION_ID, PARTITION_ROUTED, TOPIC_ID

ROUTE_HEADER: Final = "elrwatch.route.v1"
OFFSET_HEADER: Final = "elrwatch.offset.v1"
#: `ROUTE_HEADER`'s value for a line that goes to every bucket.
EVERY_BUCKET: Final = b"*"

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1

#: Kafka record headers as kafka-python takes them.
Headers = list[tuple[str, bytes]]


def _is_int(value: Any, high: int) -> bool:
    """A JSON integer (not a bool) in [-high - 1, high], as Spark's JSON reader reads an INT / LONG field."""
    return value.__class__ is int and -high - 1 <= value <= high


def routing_headers(envelope: dict[str, Any], type_name: str, data: dict[str, Any]) -> Headers:
    """The headers of a valid event line (parsed: its envelope, ``type`` and ``data``)."""
    partition_id = data.get(PARTITION_ID)
    topic_id = data.get(TOPIC_ID)
    if (
        type_name in PARTITION_ROUTED
        and topic_id.__class__ is str
        and _is_int(partition_id, _INT32_MAX)
        and partition_id > 0
    ):
        route = f"{topic_id}:{partition_id}".encode()
    else:
        route = EVERY_BUCKET
    offset = envelope.get("offset")
    if _is_int(offset, _INT64_MAX):
        return [(ROUTE_HEADER, route), (OFFSET_HEADER, str(offset).encode())]
    return [(ROUTE_HEADER, route)]
