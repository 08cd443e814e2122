"""Snapshots of the columnar store (`store.ColumnarPartitions`) as one Arrow IPC file, loaded memory-mapped.

`save(cluster, path)` writes a `ClusterState` whose store is columnar, between batches:

* the partition columns of the live rows as one Arrow record batch (topic index, partition id, leader, the six
  interned tuple ids, epochs, recovery state, status, flags, status since, last offset, timestamp and position);
* in the schema's metadata, the rest: ``elrwatch.columnar.version`` (`VERSION`) and ``elrwatch.columnar.side``, a
  JSON document holding the interned tuples, the topics of the table, the replica log infos, the store's counters,
  its bucket and default min ISR, and the shared metadata image (brokers, topics, configs, features, source
  positions, the recent-offsets ring, partition 0 shadows) with the violations, pickled, with its CRC-32.

The file is written to a temporary name next to ``path``, fsynced and renamed over it (then the directory is
fsynced). `load(path)` maps it (`pyarrow.memory_map`), checks the version, the CRC and that every index in the
columns is in range, and copies the columns into the store's growable arrays. `to_bytes` / `from_bytes` are the same
file in memory (the streaming job's blob mode keeps it in Spark's state row).

The image part is a pickle: load only files the job wrote itself, from a directory only it can write. The CRC
catches a torn or corrupted side part, Arrow's reader a truncated file; the column bodies are not checksummed
(their indices are range-checked, so a flipped bit cannot make the store read out of bounds, but it can change a
value).

A missing, truncated or corrupt file, or one of another version, raises `SnapshotError`: one line naming the file.
Nothing is rebuilt from less.
"""

from __future__ import annotations

import base64
import io
import os
import pickle
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import orjson
import pyarrow as pa
from pyarrow import ipc

from elrwatch.state.cluster import ClusterState
from elrwatch.state.partitions.columnar.store import ColumnarPartitions
from elrwatch.state.partitions.columnar.table import DENSE_PARTITION_IDS, PartitionTable

#: The format version this module writes and reads.
VERSION: Final = 3
VERSION_KEY: Final = b"elrwatch.columnar.version"
SIDE_KEY: Final = b"elrwatch.columnar.side"
#: The columns saved, in file order (``alive`` is implied: only live rows are saved).
COLUMNS: Final = ("topic", "pid", *PartitionTable.INT32[2:], *PartitionTable.INT64, "lrs", "status", "flags", "llc")
_TUPLE_COLUMNS: Final = ("replicas", "isr", "elr", "lke", "adding", "removing")
#: The store's counters a snapshot keeps.
_COUNTERS: Final = ("fast_records", "barrier_records", "audited_rows", "vector_admitted")


class SnapshotError(ValueError):
    """A columnar snapshot that cannot be loaded (missing, truncated, corrupt, another version)."""


def _store(cluster: ClusterState) -> ColumnarPartitions:
    store = cluster.partitions
    if not isinstance(store, ColumnarPartitions):
        raise TypeError(f"a columnar snapshot is of a columnar store, not the {cluster.store} store")
    return store


def _side(cluster: ClusterState) -> dict[str, Any]:
    store = _store(cluster)
    blob = pickle.dumps({"image": cluster.image, "violations": store.violations}, protocol=pickle.HIGHEST_PROTOCOL)
    return {
        "default_min_isr": cluster.default_min_isr,
        "bucket": list(store.bucket) if store.bucket is not None else None,
        "tuples": [list(t) for t in store.tuples.tuples],
        "topics": {
            "ids": store.topic_ids,
            "names": store.topic_names,
            "min_isr": store.topic_min_isr,
            "unclean": store.topic_unclean,
            "live": sorted(store.topic_index.values()),
        },
        "log_info": [[t, p, list(infos.values())] for (t, p), infos in store.log_info.items()],
        "operator_steps": [[t, p, steps] for (t, p), steps in store.operator_steps.items()],
        "counters": {name: getattr(store, name) for name in _COUNTERS},
        "elections": dict(store.counters),
        "image": base64.b64encode(blob).decode(),
        "image_crc32": zlib.crc32(blob),
    }


def _between_batches(cluster: ClusterState) -> ColumnarPartitions:
    """The state's columnar store, its segment applied; a ValueError while transitions are not drained."""
    store = _store(cluster)
    store.flush()
    if store._transitions:
        raise ValueError("a columnar snapshot is taken between batches: drain the transitions first")
    return store


def _write(cluster: ClusterState, out: BinaryIO) -> None:
    store = _between_batches(cluster)
    table = store.table
    live = np.flatnonzero(table.alive[: table.size])
    cols = table.cols
    arrays = [pa.array(cols[name][live]) for name in COLUMNS]
    arrays.append(pa.array(cols["position"][live].tolist(), type=pa.string()))
    side = orjson.dumps(_side(cluster))
    schema = pa.schema(
        [pa.field(name, array.type) for name, array in zip((*COLUMNS, "position"), arrays, strict=True)],
        metadata={VERSION_KEY: str(VERSION).encode(), SIDE_KEY: side},
    )
    with ipc.new_file(out, schema) as writer:
        writer.write_batch(pa.record_batch(arrays, schema=schema))


def save(cluster: ClusterState, path: str | os.PathLike[str]) -> int:
    """Write ``cluster`` (its store columnar) to ``path`` atomically (tmp + fsync + rename); the file's size in
    bytes. Between batches only: transitions not drained are refused."""
    _between_batches(cluster)  # refused before any file is made
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            _write(cluster, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return target.stat().st_size


def to_bytes(cluster: ClusterState) -> bytes:
    """The snapshot file's bytes (`save` in memory)."""
    out = io.BytesIO()
    _write(cluster, out)
    return out.getvalue()


def _fail(path: Path | str, why: str) -> SnapshotError:
    return SnapshotError(f"columnar snapshot {path}: {why}")


def _read(source: Any, where: Path | str) -> tuple[pa.RecordBatch, dict[str, Any]]:
    """The batch of partition rows and the side document of an open Arrow file, checked."""
    try:
        reader = ipc.open_file(source)
        metadata = reader.schema.metadata or {}
        version = metadata.get(VERSION_KEY)
        if version is None:
            raise _fail(where, "not an elrwatch columnar snapshot (no format version)")
        if version != str(VERSION).encode():
            raise _fail(
                where,
                f"format version {version.decode(errors='replace')}, this elrwatch reads {VERSION}: written by "
                "another elrwatch version; start the job on a new checkpoint",
            )
        if reader.num_record_batches != 1:
            raise _fail(where, f"{reader.num_record_batches} record batches, expected 1")
        batch = reader.get_batch(0)
        batch.validate(full=False)
        side = orjson.loads(metadata[SIDE_KEY])
    except SnapshotError:
        raise
    except (pa.ArrowException, OSError, KeyError, orjson.JSONDecodeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(where, f"corrupt ({first})") from None
    if batch.schema.names != [*COLUMNS, "position"]:
        raise _fail(where, f"corrupt (columns {batch.schema.names})")
    return batch, side


def load(path: str | os.PathLike[str]) -> ClusterState:
    """The state saved in ``path`` (memory-mapped, then copied into growable columns); `SnapshotError` if the
    file is missing, truncated, corrupt or of another version."""
    where = Path(path)
    if not where.is_file():
        raise _fail(where, "missing")
    try:
        source = pa.memory_map(str(where), "r")
    except (pa.ArrowException, OSError) as error:
        raise _fail(where, f"cannot be read ({error})") from None
    return _load(source, where)


def from_bytes(data: bytes, where: str = "in the state row") -> ClusterState:
    """The state of `to_bytes`' bytes."""
    return _load(pa.BufferReader(data), where)


def _load(source: Any, where: Path | str) -> ClusterState:
    batch, side = _read(source, where)
    try:
        blob = base64.b64decode(side["image"], validate=True)
        if zlib.crc32(blob) != side["image_crc32"]:
            raise _fail(where, "corrupt (the image part's CRC-32 does not match)")
        parts = pickle.loads(blob)
        bucket = tuple(side["bucket"]) if side["bucket"] is not None else None
        cluster = ClusterState(default_min_isr=side["default_min_isr"], bucket=bucket)  # type: ignore[arg-type]
        cluster.image = parts["image"]
        store = _store(cluster)
        store.image = cluster.image
        store.violations = parts["violations"]
        _restore(store, batch, side, where)
    except SnapshotError:
        raise
    except Exception as error:  # a corrupt side part can fail in many ways: each is one line
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(where, f"corrupt ({type(error).__name__}: {first})") from None
    return cluster


def _restore(store: ColumnarPartitions, batch: pa.RecordBatch, side: dict[str, Any], where: Path | str) -> None:
    tuples = store.tuples
    for members in side["tuples"][1:]:  # id 0 is the empty tuple
        tuples.intern(tuple(members))
    if len(tuples.tuples) != len(side["tuples"]):
        raise _fail(where, "corrupt (a tuple appears twice)")
    topics = side["topics"]
    store.topic_ids = list(topics["ids"])
    store.topic_names = list(topics["names"])
    store.topic_min_isr = list(topics["min_isr"])
    store.topic_unclean = list(topics["unclean"])
    count = len(store.topic_ids)
    store.topic_index = {store.topic_ids[t]: t for t in topics["live"]}
    store.log_info = {(t, p): {info["brokerId"]: info for info in infos} for t, p, infos in side["log_info"]}
    store.operator_steps = {(t, p): steps for t, p, steps in side.get("operator_steps", ())}
    for name, value in side["counters"].items():
        setattr(store, name, value)
    store.counters = Counter(side["elections"])

    rows = batch.num_rows
    capacity = rows + max(1024, rows // 8)  # room for new partitions before the first doubling
    table = PartitionTable(capacity=0)
    cols = table.cols
    for name, column in zip((*COLUMNS, "position"), batch.columns, strict=True):
        if column.null_count:
            raise _fail(where, f"corrupt (nulls in column {name})")
        dtype, default = PartitionTable.DEFAULTS[name]
        values = cols[name] = np.empty(capacity, dtype=dtype)
        values[:rows] = column.to_numpy(zero_copy_only=name != "position")
        values[rows:] = default
    cols["alive"] = np.zeros(capacity, dtype=bool)
    cols["alive"][:rows] = True
    cols["changed"] = np.zeros(capacity, dtype=bool)
    table.size = rows
    topic = cols["topic"][:rows]
    ids = np.concatenate([cols[name][:rows] for name in _TUPLE_COLUMNS])
    if rows and (
        topic.min() < 0
        or topic.max() >= count
        or ids.min() < 0
        or ids.max() >= len(tuples.tuples)
        or cols["pid"][:rows].min() < 0
        or cols["status"][:rows].min() < -1
    ):
        raise _fail(where, "corrupt (an index out of range in the partition columns)")
    store.table = table

    # per-topic lookups: dense arrays of rows by partition id, a dict for the large ids
    pids = cols["pid"][:rows]
    store._dense = [np.full(0, -1, dtype=np.int32) for _ in range(count)]
    store._sparse = [{} for _ in range(count)]
    store._topic_size = np.bincount(topic, minlength=count).tolist()
    order = np.argsort(topic, kind="stable")
    bounds = np.searchsorted(topic[order], np.arange(count + 1))
    for t in range(count):
        of_topic = order[bounds[t] : bounds[t + 1]]
        if len(of_topic) == 0:
            continue
        if store.topic_ids[t] not in store.topic_index:
            raise _fail(where, f"corrupt (rows of a removed topic {store.topic_ids[t]})")
        p = pids[of_topic]
        small = p < DENSE_PARTITION_IDS
        dense = np.full(max(16, int(p[small].max()) + 1 if small.any() else 0), -1, dtype=np.int32)
        dense[p[small]] = of_topic[small]
        if (dense >= 0).sum() != small.sum():
            raise _fail(where, f"corrupt (a partition of topic {store.topic_ids[t]} appears twice)")
        store._dense[t] = dense
        store._sparse[t] = {int(k): int(r) for k, r in zip(p[~small], of_topic[~small], strict=True)}
    store._active = None
    store._segment_reset()
