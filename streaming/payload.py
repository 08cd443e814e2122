"""The bucket → driver wire format: a bucket's output payload as Spark rows.

With a rows directory (the job's, ``JobConfig.rows_dir``), a bucket writes its store lists (changed partition
rows, removals, transitions, quarantined records, violations, changed brokers) to an immutable *rows file* named by
its new state token (`write_rows_file`, fsynced before the state row goes back to Spark), and its output row is
only the head: counts, gauge contributions, topic documents, the shared/cluster parts and the file's name. Without
one, the head is followed by the partition rows in compressed chunks and carries the other lists itself.
"""

from __future__ import annotations

import marshal
import os
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from elrwatch.state import report
from elrwatch.state.gauges import encode_gauges, shared_gauges

PAYLOAD_HEAD, PAYLOAD_ROWS = b"H", b"P"


ROWS_PER_CHUNK = 5_000
#: The bucket's lists that go to the store, besides the partition rows (`concat_payloads`).
STORE_LISTS = ("removed", "transitions", "quarantined", "violations", "brokers")
ROWS_SUFFIX = ".rows"
ROWS_MAGIC = b"ELRROWS1"
#: The head's key naming the bucket's rows file of the batch (absent: nothing changed, or the lists are inline).
ROWS_FILE = "rowsFile"


def shared_parts(cluster: Any, brokers: Iterable[Any]) -> dict[str, Any]:
    """What bucket 0 adds to its payload of state every bucket holds in full (``cluster``, a ``ClusterState``):
    the shared gauges, the documents of the changed ``brokers`` and the cluster document."""
    return {
        "shared": encode_gauges(shared_gauges(cluster)),
        "brokers": [report.broker_doc(b) for b in brokers],
        "cluster": report.cluster_doc(cluster),
    }


class RowsFileError(RuntimeError):
    """A rows file cannot be read (missing, corrupt): one line naming it."""


def rows_file_name(bucket: int, token: str) -> str:
    """A bucket's rows file of the state ``token`` (a token is drawn per attempt: a re-run writes another file)."""
    return f"b{bucket:04d}-{token}{ROWS_SUFFIX}"


def write_rows_file(directory: str, payload: dict[str, Any], token: str) -> str | None:
    """Move the payload's store lists into the bucket's rows file for ``token`` (tmp + fsync + rename + directory
    fsync: durable and whole on return); the file's name, also set as the head's `ROWS_FILE`, with the lists'
    lengths in the head. None (lists left as they are, all empty) when the bucket changed nothing."""
    rows = payload.get("partitions", [])
    if not rows and not any(payload.get(k) for k in STORE_LISTS):
        return None
    payload.pop("partitions", None)
    lists = {k: payload.pop(k, []) for k in STORE_LISTS}
    payload["partitionCount"] = len(rows)
    payload["quarantinedCount"] = len(lists["quarantined"])
    payload["transitionCount"] = len(lists["transitions"])
    chunks = [zlib.compress(orjson.dumps(rows[i : i + ROWS_PER_CHUNK]), 1) for i in range(0, len(rows), ROWS_PER_CHUNK)]
    body = marshal.dumps((payload["bucket"], zlib.compress(orjson.dumps(lists), 1), chunks))
    name = rows_file_name(payload["bucket"], token)
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(ROWS_MAGIC + zlib.crc32(body).to_bytes(4, "big") + body)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    payload[ROWS_FILE] = name
    return name


def _rows_file_body(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise RowsFileError(f"rows file {path} is missing") from None
    except OSError as exc:
        raise RowsFileError(f"rows file {path} cannot be read: {exc.strerror or exc}") from None
    head = len(ROWS_MAGIC) + 4
    body = data[head:]
    if data[: len(ROWS_MAGIC)] != ROWS_MAGIC or zlib.crc32(body).to_bytes(4, "big") != data[len(ROWS_MAGIC) : head]:
        raise RowsFileError(f"rows file {path} is corrupt (bad header or checksum, {len(data)} bytes)")
    return body


def check_rows_file(path: str) -> None:
    """Raise a one-line `RowsFileError` unless the rows file is there and whole (its checksum matches)."""
    _rows_file_body(path)


def read_rows_file(path: str) -> tuple[dict[str, list[Any]], list[bytes]]:
    """(the store lists, the compressed partition-row chunks as `PAYLOAD_ROWS` bodies) of a rows file, or a
    one-line `RowsFileError`."""
    body = _rows_file_body(path)
    try:
        _bucket, packed, chunks = marshal.loads(body)
        lists = orjson.loads(zlib.decompress(packed))
        return {k: lists[k] for k in STORE_LISTS}, [PAYLOAD_ROWS + c for c in chunks]
    except (EOFError, ValueError, TypeError, KeyError, zlib.error) as exc:
        raise RowsFileError(f"rows file {path} is corrupt ({type(exc).__name__}: {str(exc)[:80]})") from None


def encode_payload(payload: dict[str, Any]) -> list[bytes]:
    """A bucket's output as rows: the head (everything but the partition rows, ``partitionCount``) and the
    changed partitions' rows (``state.partition_row``) in chunks. The driver merges the heads
    and streams the chunks into the store one at a time: it never holds all the rows (1M in the initial load)."""

    rows = payload.pop("partitions", None)
    if rows is None:  # the rows are in the bucket's rows file (`write_rows_file`)
        rows = []
    else:
        payload["partitionCount"] = len(rows)
        payload["quarantinedCount"] = len(payload.get("quarantined", ()))
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
        out["removed"].extend(tuple(r) for r in p.get("removed", ()))
        out["transitions"].extend(p.get("transitions", ()))
        out["quarantined"].extend(p.get("quarantined", ()))
        out["violations"].extend(p.get("violations", ()))
        if p["bucket"] == 0:
            out["brokers"].extend(p.get("brokers", ()))
    return out
