"""Snapshots of the columnar engine (state/columnar.py) as one Arrow IPC file, loaded memory-mapped.

`save(engine, path)` writes a `ColumnarState` (or an `AuditedColumnarState`) between batches:

* the partition columns of the live rows as one Arrow record batch (topic index, partition id, leader, the six
  interned tuple ids, epochs, recovery state, status, flags, status since, last offset, timestamp and position);
* in the schema's metadata, the rest: ``elrwatch.columnar.version`` (`VERSION`) and ``elrwatch.columnar.side``, a
  JSON document holding the interned tuples, the topics of the table, the replica log infos, the quarantine
  reported, the engine's counters, its bucket and default min ISR, and the embedded `ClusterState` (brokers,
  topics, configs, features, source positions, the recent-offsets ring, partition 0 shadows, violations) as
  `ClusterState.to_bytes` gives it, with its CRC-32.

The file is written to a temporary name next to ``path``, fsynced and renamed over it (then the directory is
fsynced). `load(path)` maps it (`pyarrow.memory_map`), checks the version, the CRC and that every index in the
columns is in range, and copies the columns into the engine's growable arrays.

The embedded core part is a pickle (`ClusterState.from_bytes`, the format of the streaming job's own bucket
snapshots): load only files the job wrote itself, from a directory only it can write. The CRC catches a torn or
corrupted side part, Arrow's reader a truncated file; the column bodies are not checksummed (their indices are
range-checked, so a flipped bit cannot make the engine read out of bounds, but it can change a value).

A missing, truncated or corrupt file, or one of another version, raises `SnapshotError`: one line naming the file.
Nothing is rebuilt from less.
"""

from __future__ import annotations

import base64
import os
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np
import orjson
import pyarrow as pa
from pyarrow import ipc

from elrwatch.state.cluster import ClusterState
from elrwatch.state.columnar import DENSE_PARTITION_IDS, ColumnarState, PartitionTable
from elrwatch.state.records import RECORD_ERROR_FIELDS, RecordError

#: The format version this module writes and reads.
VERSION: Final = 2
VERSION_KEY: Final = b"elrwatch.columnar.version"
SIDE_KEY: Final = b"elrwatch.columnar.side"
#: The columns saved, in file order (``alive`` is implied: only live rows are saved).
COLUMNS: Final = ("topic", "pid", *PartitionTable.INT32[2:], *PartitionTable.INT64, "lrs", "status", "flags", "llc")
_TUPLE_COLUMNS: Final = ("replicas", "isr", "elr", "lke", "adding", "removing")

Engine = TypeVar("Engine", bound=ColumnarState)


class SnapshotError(ValueError):
    """A columnar snapshot that cannot be loaded (missing, truncated, corrupt, another version)."""


def _side(engine: ColumnarState) -> dict[str, Any]:
    core = engine.core
    blob = core.to_bytes()
    return {
        "class": type(engine).__name__,
        "default_min_isr": core.default_min_isr,
        "bucket": list(engine.bucket) if engine.bucket is not None else None,
        "tuples": [list(t) for t in engine.tuples.tuples],
        "topics": {
            "ids": engine.topic_ids,
            "names": engine.topic_names,
            "min_isr": engine.topic_min_isr,
            "unclean": engine.topic_unclean,
            "live": sorted(engine.topic_index.values()),
        },
        "log_info": [[t, p, list(infos.values())] for (t, p), infos in engine.log_info.items()],
        "quarantined": [[getattr(e, name) for name in RECORD_ERROR_FIELDS] for e in engine.quarantined],
        "counters": {
            name: getattr(engine, name)
            for name in ("fast_records", "barrier_records", "audited_rows")
            if hasattr(engine, name)
        },
        "elections": dict(engine.counters),
        "core": base64.b64encode(blob).decode(),
        "core_crc32": zlib.crc32(blob),
    }


def save(engine: ColumnarState, path: str | os.PathLike[str]) -> int:
    """Write ``engine`` to ``path`` atomically (tmp + fsync + rename); the file's size in bytes. Between batches
    only: a segment not applied or transitions not drained are refused."""
    if engine._seg_rows or engine._transitions:
        raise ValueError("a columnar snapshot is taken between batches: apply the segment and drain transitions first")
    target = Path(path)
    table = engine.table
    live = np.flatnonzero(table.alive[: table.size])
    cols = table.cols
    arrays = [pa.array(cols[name][live]) for name in COLUMNS]
    arrays.append(pa.array(cols["position"][live].tolist(), type=pa.string()))
    side = orjson.dumps(_side(engine))
    schema = pa.schema(
        [pa.field(name, array.type) for name, array in zip((*COLUMNS, "position"), arrays, strict=True)],
        metadata={VERSION_KEY: str(VERSION).encode(), SIDE_KEY: side},
    )
    batch = pa.record_batch(arrays, schema=schema)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as out:
            with ipc.new_file(out, schema) as writer:
                writer.write_batch(batch)
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


def _fail(path: Path, why: str) -> SnapshotError:
    return SnapshotError(f"columnar snapshot {path}: {why}")


def _read(path: Path) -> tuple[pa.RecordBatch, dict[str, Any]]:
    """The batch of partition rows and the side document, checked."""
    if not path.is_file():
        raise _fail(path, "missing")
    try:
        reader = ipc.open_file(pa.memory_map(str(path), "r"))
        metadata = reader.schema.metadata or {}
        version = metadata.get(VERSION_KEY)
        if version is None:
            raise _fail(path, "not an elrwatch columnar snapshot (no format version)")
        if version != str(VERSION).encode():
            raise _fail(path, f"format version {version.decode(errors='replace')}, this elrwatch reads {VERSION}")
        if reader.num_record_batches != 1:
            raise _fail(path, f"{reader.num_record_batches} record batches, expected 1")
        batch = reader.get_batch(0)
        batch.validate(full=False)
        side = orjson.loads(metadata[SIDE_KEY])
    except SnapshotError:
        raise
    except (pa.ArrowException, OSError, KeyError, orjson.JSONDecodeError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(path, f"corrupt ({first})") from None
    if batch.schema.names != [*COLUMNS, "position"]:
        raise _fail(path, f"corrupt (columns {batch.schema.names})")
    return batch, side


def load(path: str | os.PathLike[str], engine_class: type[Engine] = ColumnarState) -> Engine:  # type: ignore[assignment]
    """The engine saved in ``path`` (memory-mapped, then copied into growable columns); `SnapshotError` if the
    file is missing, truncated, corrupt or of another version."""
    where = Path(path)
    batch, side = _read(where)
    try:
        blob = base64.b64decode(side["core"], validate=True)
        if zlib.crc32(blob) != side["core_crc32"]:
            raise _fail(where, "corrupt (the core part's CRC-32 does not match)")
        core = ClusterState.from_bytes(blob)
        bucket = tuple(side["bucket"]) if side["bucket"] is not None else None
        engine = engine_class(default_min_isr=side["default_min_isr"], bucket=bucket)  # type: ignore[arg-type]
        core.track_changes = False
        engine.core = core
        _restore(engine, batch, side, where)
    except SnapshotError:
        raise
    except Exception as error:  # a corrupt side part can fail in many ways: each is one line
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise _fail(where, f"corrupt ({type(error).__name__}: {first})") from None
    return engine


def _restore(engine: ColumnarState, batch: pa.RecordBatch, side: dict[str, Any], where: Path) -> None:
    tuples = engine.tuples
    for members in side["tuples"][1:]:  # id 0 is the empty tuple
        tuples.intern(tuple(members))
    if len(tuples.tuples) != len(side["tuples"]):
        raise _fail(where, "corrupt (a tuple appears twice)")
    topics = side["topics"]
    engine.topic_ids = list(topics["ids"])
    engine.topic_names = list(topics["names"])
    engine.topic_min_isr = list(topics["min_isr"])
    engine.topic_unclean = list(topics["unclean"])
    count = len(engine.topic_ids)
    engine.topic_index = {engine.topic_ids[t]: t for t in topics["live"]}
    engine.log_info = {(t, p): {info["brokerId"]: info for info in infos} for t, p, infos in side["log_info"]}
    engine.quarantined = [RecordError(**dict(zip(RECORD_ERROR_FIELDS, e, strict=True))) for e in side["quarantined"]]
    for name, value in side["counters"].items():
        setattr(engine, name, value)
    engine.counters = Counter(side["elections"])

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
    engine.table = table

    # per-topic lookups: dense arrays of rows by partition id, a dict for the large ids
    pids = cols["pid"][:rows]
    engine._dense = [np.full(0, -1, dtype=np.int32) for _ in range(count)]
    engine._sparse = [{} for _ in range(count)]
    engine._topic_size = np.bincount(topic, minlength=count).tolist()
    order = np.argsort(topic, kind="stable")
    bounds = np.searchsorted(topic[order], np.arange(count + 1))
    for t in range(count):
        of_topic = order[bounds[t] : bounds[t + 1]]
        if len(of_topic) == 0:
            continue
        if engine.topic_ids[t] not in engine.topic_index:
            raise _fail(where, f"corrupt (rows of a removed topic {engine.topic_ids[t]})")
        p = pids[of_topic]
        small = p < DENSE_PARTITION_IDS
        dense = np.full(max(16, int(p[small].max()) + 1 if small.any() else 0), -1, dtype=np.int32)
        dense[p[small]] = of_topic[small]
        if (dense >= 0).sum() != small.sum():
            raise _fail(where, f"corrupt (a partition of topic {engine.topic_ids[t]} appears twice)")
        engine._dense[t] = dense
        engine._sparse[t] = {int(k): int(r) for k, r in zip(p[~small], of_topic[~small], strict=True)}
    engine._active = None
    engine._segment_reset()
