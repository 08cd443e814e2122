"""Stage 2 of the streaming job: parse + validate each event once and send it to its bucket(s).

A valid record is encoded (``encode_record``) and sent to ``state.routing.targets``: its partition's bucket, or
every bucket for partition 0 and non-partition records (DESIGN §4). Malformed lines, well-formed records of
unused types and non-event lines go to bucket 0 only, which counts and quarantines them once, with the reason.

The Python sources (``elrwatch-kafka``, ``elrwatch-files``) run `route_batches` in their own read task when the
job passes them ``routeBuckets``: one Python worker per read task instead of two, and one Arrow hop less.

Spark's JVM Kafka source (``kafka-native``) is routed in the JVM (`route_in_jvm`): Spark SQL reads only what
routing needs (record type, topic id, partition id, metadata offset) and computes the bucket, so the read stage
has no Python worker. A line from elrwatch's producers carries these in its headers (kafkaio/headers.py) and is
placed from them without its JSON being read. Its rows carry the raw line (kind `KIND_RAW`: placed in its
partition's bucket; `KIND_RAW_BROADCAST`: sent to every bucket because routing could not place it) and the bucket
parses it (``bucket.apply_rows``), checking that it owns what it applies. Spark is imported only inside `route_in_jvm`.
"""

from __future__ import annotations

import marshal
import pickle
from collections.abc import Iterator
from typing import Any

from elrwatch.kafkaio.headers import EVERY_BUCKET, OFFSET_HEADER, ROUTE_HEADER
from elrwatch.state.record_types import PARTITION_ID, TOPIC_ID, partition_routed_names
from elrwatch.state.records import Ignored, Record, RecordError, parse_line
from elrwatch.state.routing import ALL_BUCKETS, targets
from elrwatch.streaming.memory import trim_after_big_batch

#: A routed row. ``kind`` is a one-byte code (below): as a one-letter string it cost a storm batch of 100k records
#: ≈ 0.19 s of Spark's own time (1.40 → 1.21 s, Spark alone: the string's Arrow column through the shuffle and a
#: Python object per row in the state task's frame).
ROUTED_SCHEMA = "bucket int, src string, seq long, moff long, kind tinyint, rec binary"
#: Rows routed by the Python sources (`route_batches`): an encoded record, a quarantined line, a skipped type, an
#: ignored line.
KIND_RECORD, KIND_ERROR, KIND_SKIPPED, KIND_IGNORED = 1, 2, 3, 4
#: Raw lines routed in the JVM (`route_in_jvm`): placed in their partition's bucket only, or sent to every bucket.
KIND_RAW, KIND_RAW_BROADCAST = 5, 6

#: What the JVM reads of an envelope line to route it.
_ROUTING_SCHEMA = f"type STRING, offset LONG, data STRUCT<{TOPIC_ID}: STRING, {PARTITION_ID}: INT>"


def jvm_placed_condition(parsed: str = "h") -> str:
    """The Spark SQL condition under which the JVM places a line in its partition's bucket (`route_in_jvm`): a
    type the registry routes to its partition's bucket (record_types.py), with a topic id and a partition id > 0
    (partition 0's records, and anything else, go to every bucket, whose core applies only what it owns)."""
    names = ", ".join("'" + name.replace("'", "''") + "'" for name in partition_routed_names())
    data = f"{parsed}.data"
    return f"{parsed}.type IN ({names}) AND {data}.{TOPIC_ID} IS NOT NULL AND coalesce({data}.{PARTITION_ID}, 0) > 0"


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an int column (Murmur3_x86_32.hashInt), as a signed 32-bit int."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    k1 = (value & mask) * 0xCC9E2D51 & mask
    k1 = rotl(k1, 15) * 0x1B873593 & mask
    h1 = (seed & mask) ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def lane_of(key: int, lanes: int) -> int:
    """The state task (shuffle partition) Spark's hash partitioning gives a group key: ``pmod(hash(key), lanes)``."""
    return spark_hash_int(key) % lanes


def group_keys(buckets: int, partitions: int) -> list[int]:
    """The state stage's group key of each bucket, so that bucket ``b`` lands in state task ``b % partitions``.

    Grouping by the bucket number itself leaves the spread to Spark's hash: with 2 tasks, buckets 0, 1 and 3 of
    4 hash to the same task (and both of 2 buckets), which then applies them one after the other while the other
    task idles. Key ``k`` is the smallest unused int whose hash lands in the wanted task.
    """
    keys: list[int] = []
    used: set[int] = set()
    for bucket in range(buckets):
        key = 0
        while key in used or lane_of(key, partitions) != bucket % partitions:
            key += 1
        keys.append(key)
        used.add(key)
    return keys


def encode_record(record: Any) -> bytes:
    """A validated Record as bytes for the shuffle (marshal: ~3x faster than pickle for dicts of tuples)."""
    return marshal.dumps(
        (
            record.type,
            record.version,
            record.data,
            record.source,
            record.seq,
            record.position,
            record.offset,
            record.timestamp_ms,
            record.origin,
            record.snapshot_end,  # a snapshot's records share one offset: without it they would be conflicts
        )
    )


def decode_record(blob: bytes) -> Any:
    fields = marshal.loads(blob)  # 8 fields in the journals of older versions (no origin, no snapshot_end)
    return Record(*fields)


def route_in_jvm(events: Any, buckets: int) -> Any:
    """Route Spark's Kafka source rows (``value`` binary, ``topic``, ``partition``, ``offset``, and ``headers`` when
    the source includes them) in Spark SQL.

    A line with the routing header (kafkaio/headers.py, set by elrwatch's producers) is placed from its headers
    alone: ``crc32(<route header>) % buckets`` as `KIND_RAW`, or every bucket for `headers.EVERY_BUCKET`; its
    ``moff`` is the offset header (-1 without one). Its JSON is not read. A line without it as its first header (an
    old topic, a foreign producer, a header version this job does not know) is routed from its JSON: a partition
    record whose type, topic id and partition id (> 0) the JVM's JSON reader found goes to
    ``crc32("<topicId>:<partitionId>") % buckets`` (``routing.bucket_of``) as `KIND_RAW`; every other line (other
    types, partition 0, anything malformed or in kafka-dump-log's text form) goes to every bucket as
    `KIND_RAW_BROADCAST`, and each bucket parses it and applies only what it owns (``bucket.apply_rows``; a line
    placed in a bucket that does not own it is quarantined there as a conflict). Same columns as `ROUTED_SCHEMA`;
    ``rec`` is the raw line.
    """
    from pyspark.sql import functions as F

    if "headers" in events.columns:
        # The contract's headers by position (the route header first, the offset header second: kafkaio/headers.py),
        # name checked: `get` is null out of bounds (never an error under ANSI mode), and no per-row lambda (Spark
        # evaluates `filter(headers, h -> ...)` interpreted, which cost what skipping the JSON read saved).
        def header(name: str, position: int) -> str:
            item = f"get(headers, {position})"
            return f"CASE WHEN {item}.key = '{name}' THEN {item}.value END"

        with_headers = events.select(
            "value",
            "topic",
            "partition",
            "offset",
            F.expr(header(ROUTE_HEADER, 0)).alias("route"),
            F.expr(f"try_cast(cast({header(OFFSET_HEADER, 1)} AS STRING) AS BIGINT)").alias("route_offset"),
        )
    else:
        with_headers = events.select(
            "value",
            "topic",
            "partition",
            "offset",
            F.lit(None).cast("binary").alias("route"),
            F.lit(None).cast("long").alias("route_offset"),
        )
    # The JSON is parsed in a projection of its own (Spark would evaluate a from_json referenced from several
    # expressions of the same projection once per reference), and only for a line without the routing header (the
    # conditional is evaluated per row: its other branch is not).
    by_header = F.col("route").isNotNull()
    parsed = with_headers.select(
        "value",
        "topic",
        "partition",
        "offset",
        "route",
        "route_offset",
        F.when(~by_header, F.from_json(F.col("value").cast("string"), _ROUTING_SCHEMA)).alias("h"),
    )
    topic_id, partition_id = F.col(f"h.data.{TOPIC_ID}"), F.col(f"h.data.{PARTITION_ID}")
    placed = F.when(by_header, F.col("route") != F.lit(EVERY_BUCKET)).otherwise(F.expr(jvm_placed_condition("h")))
    identity = F.when(by_header, F.col("route")).otherwise(
        F.concat(topic_id, F.lit(":"), partition_id.cast("string")).cast("binary")
    )
    bucket = F.pmod(F.crc32(identity), F.lit(buckets))
    every = F.array(*[F.lit(b) for b in range(buckets)])
    src = F.concat(F.col("topic"), F.lit("/"), F.col("partition").cast("string"))
    moff = F.when(by_header, F.col("route_offset")).otherwise(F.col("h.offset"))
    return parsed.select(
        F.explode(F.when(placed, F.array(bucket.cast("int"))).otherwise(every)).alias("bucket"),
        src.alias("src"),
        F.col("offset").alias("seq"),
        F.coalesce(moff, F.lit(-1)).cast("long").alias("moff"),
        F.when(placed, F.lit(KIND_RAW)).otherwise(F.lit(KIND_RAW_BROADCAST)).cast("tinyint").alias("kind"),
        F.col("value").cast("binary").alias("rec"),
    )


def route_batches(batches: Iterator[Any], buckets: int) -> Iterator[Any]:
    """mapInArrow: parse + validate each event once and send it to its bucket(s)."""
    import pyarrow as pa

    all_buckets = list(range(buckets))
    dumps = pickle.dumps
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        values = batch.column("value").to_pylist()
        topics = batch.column("topic").to_pylist()
        parts = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        out: list[tuple[int, str, int, int, str, bytes | None]] = []
        emit = out.append
        for value, topic, part, offset in zip(values, topics, parts, offsets, strict=True):
            if part is None or part < 0:
                src, position = topic, f"{topic}:{offset}"
            else:
                src = f"{topic}/{part}"
                position = f"{src}@{offset}"
            parsed = parse_line(value if value is not None else "", src, offset, position)
            if isinstance(parsed, Record):
                blob = encode_record(parsed)
                moff = parsed.offset if parsed.offset is not None else -1
                target = targets(parsed.type, parsed.data, buckets)
                for bucket in all_buckets if target == ALL_BUCKETS else (target,):
                    emit((bucket, src, offset, moff, KIND_RECORD, blob))
            elif isinstance(parsed, RecordError):
                if not parsed.raw:
                    parsed.raw = value or ""
                emit((0, src, offset, -1, KIND_ERROR, dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL)))
            elif isinstance(parsed, Ignored):
                emit((0, src, offset, -1, KIND_IGNORED, None))
            else:  # Skipped
                emit((0, src, offset, -1, KIND_SKIPPED, parsed.type.encode()))
        cols = list(zip(*out, strict=True)) if out else [[]] * 6
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(cols[0], pa.int32()),
                pa.array(cols[1], pa.string()),
                pa.array(cols[2], pa.int64()),
                pa.array(cols[3], pa.int64()),
                pa.array(cols[4], pa.int8()),
                pa.array(cols[5], pa.binary()),
            ],
            names=["bucket", "src", "seq", "moff", "kind", "rec"],
        )
    trim_after_big_batch(rows, collect_first=False)
