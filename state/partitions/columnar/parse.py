"""Partition records parsed as columns: a run of raw JSON lines in one pass of Arrow's JSON reader, with a proof,
line by line, that `records.parse_line` would give the same Record (so nothing needs a Python object per line).

A line is *certain* when every check below holds; any other line is *declined* and parsed one by one by the object
parse, which names its error. The checks are exactly what `parse_envelope`'s hot path and the generated validators
accept for PartitionRecord and PartitionChangeRecord (`records.compiled_fields`, `value_checks.SEMANTICS`):

* the line is one JSON object on one line (``{`` first, ``}`` last, no line break) that Arrow parses with the
  explicit schema below. Arrow refuses a value of another JSON type than the schema's (a string for an int, a
  float, a bool, an out-of-range int, a key given twice), so only the block it is in fails: blocks are split in
  halves until the failing lines stand alone, and those are declined;
* the line holds as many keys (``":``) as the parse found non-null values, envelope and data together: no null,
  no key outside the schema (Arrow ignores those), no key whose text Arrow would read differently;
* the type is PARTITION_RECORD or PARTITION_CHANGE_RECORD at a version elrwatch applies; ``offset`` and
  ``timestamp``, when given, are >= 0;
* every field given is a field of that type at that version, every required field is given, ints are in their
  type's range, broker id lists hold ids in [0, 2^31) once each, Uuids are Kafka Uuids;
* the type's impossible values (`value_checks`) are absent: a negative partition id or epoch, a leader below
  -1 (PartitionRecord) or -2 (PartitionChangeRecord), a leader recovery state out of range, no replicas.

`record` builds the Record of a certain line (its data in the validators' key order): for the few records the
engine needs as objects.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from elrwatch.state import records
from elrwatch.state.records import Record, compiled_fields, parse_line, schema_versions
from elrwatch.state.value_checks import is_uuid

TYPES: Final = (records.PARTITION_RECORD, records.PARTITION_CHANGE_RECORD)
_INT_RANGES: Final = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1)}
_ARROW: Final = {
    "int8": pa.int64(),
    "int16": pa.int64(),
    "int32": pa.int64(),
    "uuid": pa.string(),
    "[]int32": pa.list_(pa.int64()),
    "[]uuid": pa.list_(pa.string()),
}


def _data_fields() -> dict[str, str]:
    """Every data field of the two types at any version: its spec type."""
    out: dict[str, str] = {}
    for type_name in TYPES:
        low, high = schema_versions(type_name)
        for version in range(low, high + 1):
            for spec in compiled_fields(type_name, version):
                out.setdefault(spec.json_name, spec.type)
    return out


DATA_FIELDS: Final = _data_fields()
SCHEMA: Final = pa.schema(
    [
        ("type", pa.string()),
        ("version", pa.int64()),
        ("data", pa.struct([(name, _ARROW[kind]) for name, kind in DATA_FIELDS.items()])),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
    ]
)
_PARSE: Final = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
#: Arrow's reader on its thread pool, 1 MiB blocks: 0.6 us a line against 1.2 single-threaded (25k storm lines, 2
#: cores); a line longer than a block fails its block and is declined.
_READ: Final = pj.ReadOptions(use_threads=True, block_size=1 << 20)


@dataclass(frozen=True)
class Layout:
    """One (type, version): its fields in the validators' key order (required ones first, then the optional ones,
    each in schema order), which are required, and which data fields it does not have."""

    order: tuple[str, ...]
    required: tuple[str, ...]
    absent: tuple[str, ...]


def _layouts() -> dict[tuple[str, int], Layout]:
    out = {}
    for type_name in TYPES:
        low, high = schema_versions(type_name)
        for version in range(low, high + 1):
            specs = compiled_fields(type_name, version)
            required = tuple(s.json_name for s in specs if s.required)
            optional = tuple(s.json_name for s in specs if not s.required)
            names = {s.json_name for s in specs}
            absent = tuple(name for name in DATA_FIELDS if name not in names)
            out[(type_name, version)] = Layout(required + optional, required, absent)
    return out


LAYOUTS: Final = _layouts()


@dataclass
class PartitionLines:
    """A run of lines parsed as columns: ``certain`` per line, and one row per line in ``table`` (a declined
    line's row holds nulls or whatever Arrow read)."""

    certain: np.ndarray
    table: pa.Table

    def column(self, name: str) -> pa.Array:
        """A top-level column (``type``, ``version``, ``offset``, ``timestamp``) or a data field."""
        if name in ("type", "version", "offset", "timestamp"):
            return self.table.column(name).combine_chunks()
        return self.table.column("data").combine_chunks().field(name)

    def record(self, i: int, source: str, seq: int, position: str | None) -> Record:
        """The Record of certain line ``i``, as `records.parse_line(line, source, seq, position)` gives it."""
        assert self.certain[i], "only a certain line has a Record from columns"
        row = self.table.slice(i, 1).to_pylist()[0]
        layout = LAYOUTS[(row["type"], row["version"])]
        values = row["data"]
        data: dict[str, Any] = {}
        for name in layout.order:
            value = values[name]
            if value is not None:
                data[name] = tuple(value) if isinstance(value, list) else value
        return Record(row["type"], row["version"], data, source, seq, position, row["offset"], row["timestamp"])


def parse_partition_lines(lines: list[bytes]) -> PartitionLines:
    """Parse ``lines`` (raw envelope lines) as columns and prove each one (see the module)."""
    text = b"\n".join(lines)
    shaped, keys = _shape_and_keys(lines, text)
    table, parsed = _read(lines, text, shaped)
    certain = parsed & (keys == _values_found(table)) & _proved(table)
    return PartitionLines(certain, table)


def _shape_and_keys(lines: list[bytes], text: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Per line of ``text`` (the lines joined by newlines): one object on one line (``{`` first, ``}`` last, no
    line break inside), and its count of ``":`` (keys)."""
    n = len(lines)
    lengths = np.fromiter(map(len, lines), np.int64, n)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=starts[1:])
    ends = starts + lengths
    buf = np.frombuffer(text, dtype=np.uint8)
    nonempty = lengths > 0
    shaped = nonempty.copy()
    shaped[nonempty] = (buf[starts[nonempty]] == ord("{")) & (buf[ends[nonempty] - 1] == ord("}"))
    breaks = np.flatnonzero((buf == ord("\n")) | (buf == ord("\r")))  # the separators, and any inside a line
    shaped &= np.searchsorted(breaks, ends) == np.searchsorted(breaks, starts)
    pairs = np.flatnonzero((buf[:-1] == ord('"')) & (buf[1:] == ord(":")))  # where each ``":`` starts
    keys = np.searchsorted(pairs, ends - 1) - np.searchsorted(pairs, starts)  # those wholly inside the line
    return shaped, keys


def _read(lines: list[bytes], text: bytes, shaped: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """One row per line (nulls for a line not read) and whether each line was read; a block Arrow refuses is
    split in halves until its refused lines stand alone."""
    n = len(lines)
    parsed = np.zeros(n, dtype=bool)
    pieces: list[tuple[np.ndarray, pa.Table]] = []

    def read(indices: np.ndarray, joined: bytes | None = None) -> None:
        if not len(indices):
            return
        try:
            if joined is None:
                joined = b"\n".join([lines[i] for i in indices.tolist()])
            table = pj.read_json(io.BytesIO(joined), read_options=_READ, parse_options=_PARSE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            table = None
        if table is not None and table.num_rows == len(indices):
            parsed[indices] = True
            pieces.append((indices, table))
            return
        if len(indices) > 1:
            half = len(indices) // 2
            read(indices[:half])
            read(indices[half:])

    read(np.flatnonzero(shaped), text if shaped.all() else None)
    if len(pieces) == 1 and parsed.all():
        return pieces[0][1].combine_chunks(), parsed
    # rows in line order: the pieces' rows (in line order already), a row of nulls for each line not read
    row_of = np.full(n, -1, dtype=np.int64)
    base = 0
    for indices, table in pieces:
        row_of[indices] = np.arange(base, base + len(indices))
        base += table.num_rows
    row_of[row_of < 0] = base  # the appended row of nulls
    whole = pa.concat_tables([table for _, table in pieces] + [_null_row()]).combine_chunks()
    return whole.take(pa.array(row_of)), parsed


def _null_row() -> pa.Table:
    return pa.Table.from_pylist([{}], schema=SCHEMA)


def _valid(array: pa.Array) -> np.ndarray:
    return array.is_valid().to_numpy(zero_copy_only=False)


def _ints(array: pa.Array, fill: int = 0) -> np.ndarray:
    return array.fill_null(fill).to_numpy(zero_copy_only=False).astype(np.int64)


def _values_found(table: pa.Table) -> np.ndarray:
    """Non-null values per row, envelope and data together."""
    found = np.zeros(table.num_rows, dtype=np.int64)
    for name in ("type", "version", "data", "offset", "timestamp"):
        found += _valid(table.column(name).combine_chunks())
    data = table.column("data").combine_chunks()
    for name in DATA_FIELDS:
        found += _valid(data.field(name))
    return found


def _proved(table: pa.Table) -> np.ndarray:
    """Whether each row holds what the object parse gives its line, given as many keys as values (see the
    module); rows not read: anything."""
    n = table.num_rows
    data = table.column("data").combine_chunks()
    present = {name: _valid(data.field(name)) for name in DATA_FIELDS}
    ok = np.ones(n, dtype=bool)
    # the envelope
    types = table.column("type").combine_chunks()
    versions = _ints(table.column("version").combine_chunks(), -1)
    for name in ("offset", "timestamp"):
        column = table.column(name).combine_chunks()
        ok &= ~_valid(column) | (_ints(column) >= 0)
    is_type = {t: pc.equal(types, t).fill_null(False).to_numpy(zero_copy_only=False) for t in TYPES}
    known = np.zeros(n, dtype=bool)
    for (type_name, version), layout in LAYOUTS.items():
        mine = is_type[type_name] & (versions == version)
        if not mine.any():
            continue
        fits = np.ones(n, dtype=bool)
        for name in layout.required:
            fits &= present[name]
        for name in layout.absent:
            fits &= ~present[name]
        known |= mine & fits
    ok &= known
    # values: int ranges, broker id lists, Uuids
    for name, kind in DATA_FIELDS.items():
        column = data.field(name)
        has = present[name]
        if kind in _INT_RANGES:
            low, high = _INT_RANGES[kind]
            value = _ints(column)
            ok &= ~has | ((value >= low) & (value <= high))
        elif kind == "[]int32":
            ok &= _broker_ids(column, n)
        elif kind == "uuid":
            ok &= ~has | _uuids(column)
        elif kind == "[]uuid":
            ok &= ~has | _uuid_lists(column, n)
    # the types' impossible values (value_checks.SEMANTICS)
    pr = is_type[records.PARTITION_RECORD]
    pid = _ints(data.field("partitionId"), -1)
    leader = _ints(data.field("leader"), -2)
    lrs = data.field("leaderRecoveryState")
    lrs_value = _ints(lrs, -1)
    replicas = data.field("replicas")
    no_replicas = _valid(replicas) & (_list_lengths(replicas) == 0)
    ok &= pid >= 0
    pr_ok = (
        (_ints(data.field("leaderEpoch"), -1) >= 0)
        & (_ints(data.field("partitionEpoch"), -1) >= 0)
        & (leader >= -1)
        & (~_valid(lrs) | (lrs_value == 0) | (lrs_value == 1))
        & ~no_replicas
    )
    pcr_ok = (
        (~present["leader"] | (leader >= -2)) & (~_valid(lrs) | ((lrs_value >= -1) & (lrs_value <= 1))) & ~no_replicas
    )
    return ok & np.where(pr, pr_ok, pcr_ok)


def _list_lengths(column: pa.ListArray) -> np.ndarray:
    """Items per row (0 for a null list)."""
    return np.diff(column.offsets.to_numpy())


def _broker_ids(column: pa.ListArray, n: int) -> np.ndarray:
    """Per row: a null list, or ids in [0, 2^31) each once."""
    values = column.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    ok = np.ones(n, dtype=bool)
    if not len(values):
        return ok
    owner = np.repeat(np.arange(n, dtype=np.int64), _list_lengths(column))
    bad = (values < 0) | (values >= 2**31)
    ok[owner[bad]] = False
    keys = owner * (1 << 32) + np.clip(values, 0, 2**32 - 1)
    keys.sort()
    again = keys[1:] == keys[:-1]
    ok[keys[1:][again] >> 32] = False
    return ok


def _uuids(column: pa.Array) -> np.ndarray:
    """Per row: the string is a Kafka Uuid (each distinct value checked once)."""
    encoded = column.dictionary_encode()
    valid_of = np.array([v is not None and is_uuid(v) for v in encoded.dictionary.to_pylist()] + [False])
    indices = encoded.indices.fill_null(len(valid_of) - 1).to_numpy(zero_copy_only=False)
    return valid_of[indices]


def _uuid_lists(column: pa.ListArray, n: int) -> np.ndarray:
    """Per row: every item of the list is a Kafka Uuid."""
    values = column.flatten()
    ok = np.ones(n, dtype=bool)
    if not len(values):
        return ok
    item_ok = _uuids(values)
    owner = np.repeat(np.arange(n, dtype=np.int64), _list_lengths(column))
    ok[owner[~item_ok]] = False
    return ok


class RawLine(tuple):  # type: ignore[type-arg]
    """A certain line kept in place of its Record (the recent-offsets ring): ``(line, source, seq)``, parsed again
    only when used. A tuple, so that making one costs no Python call."""

    __slots__ = ()

    def record(self) -> Record:
        """The line's Record, as the object parse gives it (equal to the columns', `partition_lines`)."""
        line, source, seq = self
        return line_record(line, source, seq)


def line_record(line: bytes, source: str, seq: int) -> Record:
    """The Record of a certain line read from ``source`` at ``seq`` (position ``source@seq``, as the buckets
    parse raw lines)."""
    record = parse_line(line, source, seq, f"{source}@{seq}")
    if record.__class__ is not Record:
        raise ValueError(f"{source}@{seq}: a line proved to be a record did not parse as one: {record}")
    return record  # type: ignore[return-value]
