"""The bucket → driver wire format: a bucket's output payload as Spark rows.

With a rows directory (the job's, ``JobConfig.rows_dir``), a bucket writes its store lists (changed partition
rows, removals, transitions, quarantined records, violations, changed brokers) to an immutable *rows file* named by
its new state token (`write_rows_file`, fsynced before the state row goes back to Spark), and its output row is
only the head: counts, gauge contributions, topic documents, the shared/cluster parts and the file's name. Without
one, the head is followed by the partition rows in compressed chunks and carries the other lists itself.
"""

from __future__ import annotations

import gc
import marshal
import os
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

import orjson

from elrwatch.state import report
from elrwatch.state.gauges import encode_gauges, shared_gauges

#: Output row tags: the head, partition rows as compressed JSON lists (the object engine's), partition rows as an
#: Arrow IPC stream (the columnar engine's `columnar_output.changed_table`).
PAYLOAD_HEAD, PAYLOAD_ROWS, PAYLOAD_ARROW = b"H", b"P", b"A"
ROWS_TAGS = (PAYLOAD_ROWS, PAYLOAD_ARROW)


ROWS_PER_CHUNK = 5_000
#: The bucket's lists that go to the store, besides the partition rows (`concat_payloads`).
STORE_LISTS = ("removed", "transitions", "quarantined", "violations", "brokers")
ROWS_SUFFIX = ".rows"
#: Version 2 keeps each chunk's tag; version 1 (JSON chunks only, untagged) is still read.
ROWS_MAGIC, ROWS_MAGIC_V1 = b"ELRROWS2", b"ELRROWS1"
#: The head's key naming the bucket's rows file of the batch (absent: nothing changed, or the lists are inline).
ROWS_FILE = "rowsFile"


def shared_parts(cluster: Any, brokers: Iterable[Any]) -> dict[str, Any]:
    """What bucket 0 adds to its payload of state every bucket holds in full (``cluster``, a ``ClusterState``):
    the shared gauges, the documents of the changed ``brokers`` and the cluster document."""
    return {
        "shared": encode_gauges(shared_gauges(cluster)),
        "brokers": [report.broker_doc(b, cluster.epochs_known) for b in brokers],
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
    rows = payload.get("partitions")
    if not _row_count(rows) and not any(_row_count(payload.get(k)) for k in STORE_LISTS):
        return None
    payload.pop("partitions", None)
    lists = {k: payload.pop(k, None) or [] for k in STORE_LISTS}
    transitions = lists["transitions"]
    payload["partitionCount"] = _row_count(rows)
    payload["quarantinedCount"] = len(lists["quarantined"])
    payload["transitionCount"] = _row_count(transitions)
    tables = []
    if not isinstance(transitions, list):  # the columnar engine's `transition_table`: as Arrow, like the rows
        tables.append(_arrow_body(transitions))
        lists["transitions"] = []
    body = marshal.dumps((payload["bucket"], zlib.compress(orjson.dumps(lists), 1), rows_bodies(rows), tables))
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
    if (
        data[: len(ROWS_MAGIC)] not in (ROWS_MAGIC, ROWS_MAGIC_V1)
        or zlib.crc32(body).to_bytes(4, "big") != data[len(ROWS_MAGIC) : head]
    ):
        raise RowsFileError(f"rows file {path} is corrupt (bad header or checksum, {len(data)} bytes)")
    return body


def check_rows_file(path: str) -> None:
    """Raise a one-line `RowsFileError` unless the rows file is there and whole (its checksum matches)."""
    _rows_file_body(path)


def read_rows_file(path: str) -> tuple[dict[str, list[Any]], list[bytes]]:
    """(the store lists, the partition-row chunks as tagged bodies, `iter_partition_rows`) of a rows file, or a
    one-line `RowsFileError`."""
    body = _rows_file_body(path)
    try:
        _bucket, packed, chunks, *tables = marshal.loads(body)
        lists = orjson.loads(zlib.decompress(packed))
        if not all(c[:1] in ROWS_TAGS for c in chunks):  # version 1: untagged JSON chunks, no transition tables
            chunks = [PAYLOAD_ROWS + c for c in chunks]
        for table in tables[0] if tables else ():
            lists["transitions"].extend(_transitions_of(_read_arrow(table)))
        return {k: lists[k] for k in STORE_LISTS}, chunks
    except (EOFError, ValueError, TypeError, KeyError, zlib.error) as exc:
        raise RowsFileError(f"rows file {path} is corrupt ({type(exc).__name__}: {str(exc)[:80]})") from None


def encode_payload(payload: dict[str, Any]) -> list[bytes]:
    """A bucket's output as rows: the head (everything but the partition rows, ``partitionCount``) and the
    changed partitions' rows (``state.partition_row``) in chunks. The driver merges the heads
    and streams the chunks into the store one at a time: it never holds all the rows (1M in the initial load)."""

    chunks: list[bytes] = []
    if "transitions" in payload and not isinstance(payload["transitions"], list):  # `transition_table` or None
        payload["transitions"] = _transitions_of(payload["transitions"])
    if "partitions" in payload:  # else the rows are in the bucket's rows file (`write_rows_file`)
        rows = payload.pop("partitions")
        payload["partitionCount"] = _row_count(rows)
        payload["quarantinedCount"] = len(payload.get("quarantined", ()))
        chunks = rows_bodies(rows)
    return [PAYLOAD_HEAD + zlib.compress(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS), 1), *chunks]


def _row_count(rows: Any) -> int:
    """Rows in a payload's ``partitions``: a list of `partition_row` lists, an Arrow table or None."""
    return 0 if rows is None else len(rows)


def rows_bodies(rows: Any) -> list[bytes]:
    """A payload's partition rows as tagged bodies: an Arrow table (the columnar engine's changed rows) as one
    LZ4-compressed Arrow IPC stream (no Python object per row: the store writer makes the rows, behind the
    gauges), a list as compressed JSON chunks of `ROWS_PER_CHUNK`."""
    if rows is None or not len(rows):
        return []
    if isinstance(rows, list):
        return [
            PAYLOAD_ROWS + zlib.compress(orjson.dumps(rows[i : i + ROWS_PER_CHUNK]), 1)
            for i in range(0, len(rows), ROWS_PER_CHUNK)
        ]
    return [PAYLOAD_ARROW + _arrow_body(rows)]


def _arrow_body(table: Any) -> bytes:
    """An Arrow table as an LZ4-compressed Arrow IPC stream."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _read_arrow(body: Any) -> Any:
    """The table of an `_arrow_body` (bytes or a buffer)."""
    import pyarrow as pa

    with pa.ipc.open_stream(body) as reader:
        return reader.read_all()


def _transitions_of(table: Any) -> list[dict[str, Any]]:
    from elrwatch.state.partitions.columnar.output import transitions_of

    return transitions_of(table)


def decode_payloads(bodies: list[bytes]) -> tuple[list[dict[str, Any]], list[bytes]]:
    """(bucket heads, partition-row chunks, `iter_partition_rows`) of a batch's output rows."""

    heads = [orjson.loads(zlib.decompress(b[1:])) for b in bodies if b[:1] == PAYLOAD_HEAD]
    return heads, [b for b in bodies if b[:1] in ROWS_TAGS]


def iter_partition_rows(chunks: list[bytes]) -> Iterator[list[Any]]:
    """The partition rows of the chunks, one chunk decoded at a time (each chunk is dropped once read)."""

    while chunks:
        chunk = chunks.pop()
        if chunk[:1] == PAYLOAD_ARROW:
            import pyarrow as pa

            from elrwatch.state.partitions.columnar.output import rows_of

            table = _read_arrow(pa.py_buffer(chunk)[1:])
            del chunk
            for start in range(0, table.num_rows, ROWS_PER_CHUNK):
                # the collector paused while a slice's rows are made: its passes over the young lists were more
                # than half of the time (3.1 µs a row without, 7.9 with)
                enabled = gc.isenabled()
                gc.disable()
                try:
                    rows = list(rows_of(table.slice(start, ROWS_PER_CHUNK)))
                finally:
                    if enabled:
                        gc.enable()
                yield from rows
        else:
            yield from orjson.loads(zlib.decompress(chunk[1:]))


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
