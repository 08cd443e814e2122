"""The bucket → driver wire format: a bucket's output payload as Spark rows (a head, then its partition rows in
compressed chunks), decoded on the driver one chunk at a time."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import orjson

PAYLOAD_HEAD, PAYLOAD_ROWS = b"H", b"P"


ROWS_PER_CHUNK = 5_000


def encode_payload(payload: dict[str, Any]) -> list[bytes]:
    """A bucket's output as rows: the head (everything but the partition rows, ``partitionCount``) and the
    changed partitions' rows (``state.partition_row``) in chunks. The driver merges the heads
    and streams the chunks into the store one at a time: it never holds all the rows (1M in the initial load)."""

    rows = payload.pop("partitions")
    payload["partitionCount"] = len(rows)
    out = [PAYLOAD_HEAD + zlib.compress(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), 1)]
    for i in range(0, len(rows), ROWS_PER_CHUNK):
        out.append(PAYLOAD_ROWS + zlib.compress(orjson.dumps(rows[i : i + ROWS_PER_CHUNK]), 1))
    return out


def decode_payloads(bodies: list[bytes]) -> tuple[list[dict[str, Any]], list[bytes]]:
    """(bucket heads, compressed partition-row chunks) of a batch's output rows."""

    heads = [orjson.loads(zlib.decompress(b[1:])) for b in bodies if b[:1] == PAYLOAD_HEAD]
    return heads, [b for b in bodies if b[:1] == PAYLOAD_ROWS]


def iter_partition_rows(chunks: list[bytes]) -> Iterator[list[Any]]:
    """The partition rows of the chunks, one chunk decoded at a time (each chunk is dropped once read)."""

    while chunks:
        yield from orjson.loads(zlib.decompress(chunks.pop()[1:]))


def concat_payloads(payloads: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The buckets' lists of one micro-batch put together in bucket order (`StatusStore.write_batch` arguments;
    brokers come from bucket 0, which holds every broker)."""
    out: dict[str, list[Any]] = {
        "partitions": [],
        "removed": [],
        "transitions": [],
        "quarantined": [],
        "violations": [],
        "brokers": [],
    }
    for p in sorted(payloads, key=lambda p: p["bucket"]):
        out["partitions"].extend(p.get("partitions", ()))
        out["removed"].extend(tuple(r) for r in p["removed"])
        out["transitions"].extend(p["transitions"])
        out["quarantined"].extend(p["quarantined"])
        out["violations"].extend(p["violations"])
        if p["bucket"] == 0:
            out["brokers"].extend(p["brokers"])
    return out
