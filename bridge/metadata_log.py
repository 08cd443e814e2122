"""Kafka's ``__cluster_metadata`` files, decoded in pure Python: record batches (magic 2) → metadata records as JSON.

This is the one module that knows the on-disk format (no I/O besides reading bytes given to it):

* **record batches** (``*.log`` segments and ``*.checkpoint`` snapshots share the format): a 61-byte header
  (base offset, length, partition leader epoch, magic 2, CRC32C of everything after the CRC, attributes, last
  offset delta, timestamps, producer id/epoch, base sequence, record count), then the records, compressed as a
  whole when the attributes say so (gzip; snappy, lz4 and zstd only when kafka-python's codec finds the library);
* **records**: a zigzag varint length, attributes, timestamp delta (varlong), offset delta, key, value, headers;
* **metadata record values** (``MetadataRecordSerde``): unsigned varints frame version (1), api key and record
  version, then the record in Kafka's flexible message encoding — compact arrays, strings and bytes (length + 1,
  0 = null), 16-byte uuids, and a tagged-field section per struct;
* the record **JSON** as ``DumpLogSegments --cluster-metadata-decoder`` prints it: camelCase field names in schema
  order, fields absent from the version omitted, tagged fields omitted when equal to their default, uuids as
  base64url without padding (json-format.md §1.1).

The record schemas are Kafka's own JSON specs: those the core validates against (``state/kafka_schemas/``) and
the other metadata record types of Kafka 4.4.0 (``bridge/kafka_schemas/``, from ``kafka-metadata-4.4.0.jar``).
Control batches (LeaderChange, SnapshotHeader/Footer, KRaftVersion, KRaftVoters) carry no metadata record and are
reported as such, not decoded.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import crc32c
import orjson

from elrwatch.state.records import in_versions, version_range  # Kafka's version specs, read as the core reads them

#: Batch header: baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h,
#: lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h, baseSequence i, count i.
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = BATCH_HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
CRC_START = 21  # the CRC covers attributes to the end of the batch
COMPRESSION_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"
#: ``AbstractApiMessageSerde.DEFAULT_FRAME_VERSION`` (json-format.md says 0; Kafka 4.4.0 writes and reads only 1).
FRAME_VERSION = 1


class DecodeError(ValueError):
    """A batch or record that cannot be decoded; ``reason`` is a bounded label (the bridge's error counter)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Truncated(Exception):
    """The bytes end inside a batch: a segment being written (read again later)."""


# --- schemas ----------------------------------------------------------------------------------------------------


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def _type_name(record_name: str) -> str:
    """``PartitionChangeRecord`` → ``PARTITION_CHANGE_RECORD`` (Kafka's MetadataRecordType constant)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", record_name).upper()


@cache
def schemas() -> dict[int, tuple[str, dict[str, Any]]]:
    """api key → (type name, schema): the core's schemas first, then the bridge's other metadata record types."""
    out: dict[int, tuple[str, dict[str, Any]]] = {}
    for package in ("elrwatch.state", "elrwatch.bridge"):
        folder = resources.files(package) / "kafka_schemas"
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if not entry.name.endswith(".json"):
                continue
            spec = orjson.loads(_strip_comments(entry.read_text(encoding="utf-8")))
            if spec.get("type") != "metadata":
                continue
            out.setdefault(int(spec["apiKey"]), (_type_name(spec["name"]), spec))
    return out


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


_INT_FORMATS = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "uint32": ">I", "int64": ">q"}
_INT_STRUCTS = {kind: struct.Struct(fmt) for kind, fmt in _INT_FORMATS.items()}
_FLOAT64 = struct.Struct(">d")
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64(raw: bytes) -> bytes:
    """base64url of ``raw`` (with padding)."""
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE)


@dataclass(frozen=True, slots=True)
class FieldPlan:
    """How to read and print one field of one record version."""

    json_name: str
    kind: str  # a primitive type, "[]<primitive>", "struct" or "[]struct"
    nullable: bool
    tagged: bool
    tag: int
    default: Any
    struct_plan: tuple[tuple[FieldPlan, ...], dict[int, FieldPlan]] | None


_PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "uuid"}
)


def _default(kind: str, nullable: bool, raw: Any) -> Any:
    if raw == "null":
        return None
    if kind.startswith("[]"):
        return []
    if kind == "bool":
        return str(raw).lower() == "true" if raw is not None else False
    if kind in ("string",):
        return "" if raw is None else str(raw)
    if kind == "uuid":
        return ZERO_UUID
    if kind == "bytes":
        return b""
    if kind == "float64":
        return float(raw) if raw is not None else 0.0
    if kind in _INT_FORMATS:
        if raw is None:
            return 0
        text = str(raw)
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    return None  # struct


def _plan_fields(
    fields: list[dict[str, Any]], version: int, common: dict[str, list[dict[str, Any]]]
) -> tuple[tuple[FieldPlan, ...], dict[int, FieldPlan]]:
    """(untagged fields in order, tag → tagged field) of one struct at one version."""
    ordered: list[FieldPlan] = []
    tagged: dict[int, FieldPlan] = {}
    for field in fields:
        if not in_versions(version, version_range(field.get("versions"))):
            continue
        type_name: str = field["type"]
        element = type_name[2:] if type_name.startswith("[]") else type_name
        sub = None
        if element not in _PRIMITIVES:
            sub_fields = field.get("fields") or common.get(element)
            if sub_fields is None:
                raise DecodeError("unknown_record_type", f"no definition of struct {element}")
            sub = _plan_fields(sub_fields, version, common)
            kind = "[]struct" if type_name.startswith("[]") else "struct"
        else:
            kind = type_name
        nullable = in_versions(version, version_range(field.get("nullableVersions")))
        is_tagged = in_versions(version, version_range(field.get("taggedVersions")))
        plan = FieldPlan(
            _camel(field["name"]),
            kind,
            nullable,
            is_tagged,
            int(field.get("tag", -1)),
            _default(kind, nullable, field.get("default")),
            sub,
        )
        ordered.append(plan)
        if is_tagged:
            tagged[plan.tag] = plan
    return tuple(ordered), tagged


@cache
def record_plan(api_key: int, version: int) -> tuple[str, tuple[tuple[FieldPlan, ...], dict[int, FieldPlan]], bool]:
    """(type name, field plan, flexible) of one metadata record version; DecodeError when unknown."""
    found = schemas().get(api_key)
    if found is None:
        raise DecodeError("unknown_record_type", f"unknown metadata record api key {api_key}")
    type_name, spec = found
    if not in_versions(version, version_range(spec.get("validVersions"))):
        raise DecodeError("unknown_record_version", f"{type_name} version {version} is not in {spec['validVersions']}")
    common = {s["name"]: s["fields"] for s in spec.get("commonStructs", [])}
    flexible = in_versions(version, version_range(spec.get("flexibleVersions")))
    return type_name, _plan_fields(spec["fields"], version, common), flexible


# --- primitive readers -------------------------------------------------------------------------------------------


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, next position)."""
    if pos < len(buf) and buf[pos] < 0x80:
        return buf[pos], pos + 1  # the common one-byte case
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("decode_error", "varint runs past the end of the buffer")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise DecodeError("decode_error", "varint is too long")


def read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varint/varlong at ``pos``: (value, next position)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def uuid_text(raw: bytes) -> str:
    """Kafka's ``Uuid.toString()``: base64url of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


Read = Callable[[bytes, int], tuple[Any, int]]


def _short(what: str) -> DecodeError:
    return DecodeError("decode_error", f"{what} runs past the end of the record value")


def _int_reader(kind: str) -> Read:
    fmt = _FLOAT64 if kind == "float64" else _INT_STRUCTS[kind]
    unpack, size = fmt.unpack_from, fmt.size

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size  # struct.error past the end: caught by decode_record

    return read


def _read_bool(buf: bytes, pos: int) -> tuple[Any, int]:
    return buf[pos] != 0, pos + 1


def _read_uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    raw = buf[pos : pos + 16]
    if len(raw) != 16:
        raise _short("a uuid")
    return _b64(raw)[:22].decode("ascii"), pos + 16


def _length_reader(flexible: bool, wide: bool) -> Callable[[bytes, int], tuple[int, int]]:
    """Collection lengths: compact (uvarint - 1) when flexible, else int16 (strings) or int32 (arrays, bytes)."""
    if flexible:

        def compact(buf: bytes, pos: int) -> tuple[int, int]:
            n, pos = read_uvarint(buf, pos)
            return n - 1, pos

        return compact
    fmt = _INT_STRUCTS["int32" if wide else "int16"]
    unpack, size = fmt.unpack_from, fmt.size
    return lambda buf, pos: (unpack(buf, pos)[0], pos + size)


def _null(name: str, what: str, nullable: bool, pos: int) -> tuple[None, int]:
    """A null ``what`` (string, bytes, array) read at ``pos``: null in a nullable field, else a DecodeError."""
    if not nullable:
        raise DecodeError("decode_error", f"{name}: null {what} in a non-nullable field")
    return None, pos


def _bytes_reader(kind: str, plan: FieldPlan, flexible: bool) -> Read:
    length = _length_reader(flexible, kind == "bytes")
    name, nullable, text = plan.json_name, plan.nullable, kind == "string"

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        n, pos = length(buf, pos)
        if n < 0:
            return _null(name, kind, nullable, pos)
        end = pos + n
        raw = buf[pos:end]
        if len(raw) != n:
            raise _short(name)
        if not text:
            return base64.b64encode(raw).decode("ascii"), end  # Jackson's BinaryNode
        try:
            return raw.decode("utf-8"), end
        except UnicodeDecodeError as exc:
            raise DecodeError("decode_error", f"{name}: invalid UTF-8: {exc}") from None

    return read


def _reader(plan: FieldPlan, flexible: bool) -> Read:
    """The reader of one field (compiled once per record version)."""
    kind = plan.kind
    if kind.startswith("[]"):
        element = kind[2:]
        length = _length_reader(flexible, True)
        name, nullable = plan.json_name, plan.nullable
        if element == "int32":

            def read_ints(buf: bytes, pos: int) -> tuple[Any, int]:
                n, pos = length(buf, pos)
                if n < 0:
                    return _null(name, "array", nullable, pos)
                return list(struct.unpack_from(f">{n}i", buf, pos)), pos + 4 * n

            return read_ints
        item = (
            _struct_reader(plan.struct_plan, flexible)
            if element == "struct"  # type: ignore[arg-type]
            else _reader(FieldPlan(name, element, False, False, -1, None, None), flexible)
        )

        def read_array(buf: bytes, pos: int) -> tuple[Any, int]:
            n, pos = length(buf, pos)
            if n < 0:
                return _null(name, "array", nullable, pos)
            if n > len(buf) - pos:
                raise _short(name)
            out = []
            for _ in range(n):
                value, pos = item(buf, pos)
                out.append(value)
            return out, pos

        return read_array
    if kind == "struct":
        return _struct_reader(plan.struct_plan, flexible)  # type: ignore[arg-type]
    if kind in _INT_STRUCTS or kind == "float64":
        return _int_reader(kind)
    if kind == "bool":
        return _read_bool
    if kind == "uuid":
        return _read_uuid
    if kind in ("string", "bytes"):
        return _bytes_reader(kind, plan, flexible)
    raise DecodeError("decode_error", f"unsupported field type {kind}")


def _struct_reader(plan: tuple[tuple[FieldPlan, ...], dict[int, FieldPlan]], flexible: bool) -> Read:
    """The reader of a struct: its untagged fields in order, then (flexible) its tagged-field section. The JSON
    keeps schema order; a tagged field is left out when absent or equal to its default (Kafka's JsonConverter)."""
    ordered, tagged_plans = plan
    untagged = tuple((f.json_name, _reader(f, flexible)) for f in ordered if not f.tagged)
    tagged = {tag: (f.json_name, _reader(f, flexible), f.default) for tag, f in tagged_plans.items()}
    order = tuple(f.json_name for f in ordered)

    def read(buf: bytes, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        for name, rd in untagged:
            values[name], pos = rd(buf, pos)
        if not flexible:
            return values, pos
        count, pos = read_uvarint(buf, pos)
        if not count:
            return values, pos
        found = False
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            field = tagged.get(tag)
            if field is None:
                pos += size  # an unknown tagged field: skipped, as Kafka does
                continue
            name, rd, default = field
            stop = pos + size
            value, pos = rd(buf, pos)
            if pos != stop:
                raise DecodeError("decode_error", f"tagged field {name}: size {size} does not match")
            if value != default:
                values[name] = value
                found = True
        if not found:
            return values, pos
        return {name: values[name] for name in order if name in values}, pos

    return read


@cache
def record_reader(api_key: int, version: int) -> tuple[str, Read]:
    """(type name, reader of the body) of one metadata record version; DecodeError when unknown."""
    type_name, plan, flexible = record_plan(api_key, version)
    return type_name, _struct_reader(plan, flexible)


def decode_value(value: bytes) -> tuple[str, int, dict[str, Any]]:
    """One metadata record value (``MetadataRecordSerde``) → (type name, version, data as DumpLogSegments prints)."""
    frame, pos = read_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise DecodeError("decode_error", f"unknown metadata record frame version {frame}")
    api_key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    type_name, read = record_reader(api_key, version)
    data, end = read(value, pos)
    if end != len(value):
        raise DecodeError("decode_error", f"{type_name} v{version}: the body ends at byte {end} of {len(value)}")
    return type_name, version, data


# --- batches and records -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Batch:
    """One record batch: its header and where it is in the file."""

    base_offset: int
    last_offset: int
    position: int
    size: int
    leader_epoch: int
    crc: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    count: int
    body: bytes  # the records, decompressed

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def codec(self) -> str:
        return COMPRESSION_CODECS.get(self.attributes & 0x7, "unknown")


@dataclass(slots=True)
class RawRecord:
    """One record of a batch: its absolute offset, CreateTime, and value bytes (None for a null value)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        import gzip

        return gzip.decompress(data)
    from kafka import codec as kcodec  # kafka-python's codecs: snappy (xerial framing), lz4 frames, zstd

    available = {
        2: ("snappy", kcodec.has_snappy, kcodec.snappy_decode),
        3: ("lz4", kcodec.has_lz4, kcodec.lz4_decode),
        4: ("zstd", kcodec.has_zstd, kcodec.zstd_decode),
    }
    if codec not in available:
        raise DecodeError("unsupported_compression", f"unknown compression codec {codec}")
    name, has, decode = available[codec]
    if not has():
        raise DecodeError("unsupported_compression", f"a {name}-compressed batch: the {name} library is not installed")
    return decode(data)


def read_batch(buf: bytes | memoryview, pos: int) -> Batch:
    """The batch starting at ``pos``. Raises Truncated when ``buf`` ends inside it, DecodeError when it is bad."""
    available = len(buf) - pos
    if available < LOG_OVERHEAD:
        raise Truncated
    base_offset, length = struct.unpack_from(">qi", buf, pos)
    if length < HEADER_SIZE - LOG_OVERHEAD:
        if base_offset == 0 and length == 0:
            raise Truncated  # zero bytes (a preallocated or not yet written region)
        raise DecodeError("decode_error", f"batch at position {pos}: length {length} is too small")
    size = LOG_OVERHEAD + length
    if available < size:
        raise Truncated
    (base_offset, _, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts, _pid, _pepoch, _seq, count) = (
        BATCH_HEADER.unpack_from(buf, pos)
    )
    if magic != 2:
        raise DecodeError("decode_error", f"batch at offset {base_offset}: magic {magic}, only 2 is supported")
    body = bytes(buf[pos + CRC_START : pos + size])
    if crc32c.crc32c(body) != crc:
        raise DecodeError("crc_mismatch", f"batch at offset {base_offset} (position {pos}): CRC32C mismatch")
    records = body[HEADER_SIZE - CRC_START :]
    return Batch(
        base_offset,
        base_offset + last_delta,
        pos,
        size,
        leader_epoch,
        crc,
        attributes,
        base_ts,
        max_ts,
        count,
        _decompress(attributes & 0x7, records),
    )


def iter_records(batch: Batch) -> Iterator[RawRecord]:
    """The records of a batch (absolute offsets, CreateTime = base timestamp + delta)."""
    buf = batch.body
    pos = 0
    for _ in range(batch.count):
        length, pos = read_varint(buf, pos)
        end = pos + length
        if end > len(buf):
            raise DecodeError("decode_error", f"batch at offset {batch.base_offset}: a record runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(buf, pos)
        offset_delta, pos = read_varint(buf, pos)
        key_len, pos = read_varint(buf, pos)
        key = None
        if key_len >= 0:
            key = buf[pos : pos + key_len]
            pos += key_len
        value_len, pos = read_varint(buf, pos)
        value = None
        if value_len >= 0:
            value = buf[pos : pos + value_len]
            pos += value_len
        yield RawRecord(batch.base_offset + offset_delta, batch.base_timestamp + ts_delta, key, value)
        pos = end  # headers are skipped (metadata records have none)


@dataclass(slots=True)
class Decoded:
    """A decoded metadata record, or why it could not be decoded (``error``, with a bounded ``reason``)."""

    offset: int
    timestamp: int
    value: bytes | None
    type: str | None = None
    version: int | None = None
    data: dict[str, Any] | None = None
    reason: str | None = None
    error: str | None = None

    def envelope(self, **extra: Any) -> dict[str, Any]:
        """elrwatch's event envelope: Kafka's dump-log JSON plus ``offset`` and ``timestamp``."""
        return {
            "type": self.type,
            "version": self.version,
            "data": self.data,
            "offset": self.offset,
            "timestamp": self.timestamp,
            **extra,
        }


def decode_record(record: RawRecord) -> Decoded:
    """Decode one raw record's value; never raises (a failure is a Decoded with ``reason`` and ``error``)."""
    if record.value is None:
        return Decoded(record.offset, record.timestamp, None, reason="decode_error", error="null record value")
    try:
        type_name, version, data = decode_value(record.value)
    except DecodeError as exc:
        return Decoded(record.offset, record.timestamp, record.value, reason=exc.reason, error=str(exc))
    except (struct.error, IndexError, ValueError) as exc:
        return Decoded(record.offset, record.timestamp, record.value, reason="decode_error", error=str(exc))
    return Decoded(record.offset, record.timestamp, record.value, type_name, version, data)


@dataclass(slots=True)
class ScanResult:
    """What `scan` found in a buffer: decoded records, problems, and where complete batches end."""

    records: list[Decoded]
    errors: list[tuple[str, str]]  # (reason, message)
    end: int  # position after the last complete batch read (where to resume)
    truncated: bool  # the buffer ends inside a batch (a segment being written)
    control_batches: int


def scan(buf: bytes | memoryview, pos: int = 0) -> ScanResult:
    """Decode every complete batch from ``pos``: a bad batch (CRC, magic, compression) is reported and skipped
    (its length is known); a batch cut by the end of the buffer stops the scan with ``truncated``."""
    records: list[Decoded] = []
    errors: list[tuple[str, str]] = []
    control = 0
    truncated = False
    while pos < len(buf):
        try:
            batch = read_batch(buf, pos)
        except Truncated:
            truncated = True
            break
        except DecodeError as exc:
            errors.append((exc.reason, str(exc)))
            try:
                (length,) = struct.unpack_from(">i", buf, pos + 8)
            except struct.error:
                truncated = True
                break
            if length < HEADER_SIZE - LOG_OVERHEAD:
                break  # cannot find the next batch: stop here
            pos += LOG_OVERHEAD + length
            continue
        pos += batch.size
        if batch.is_control:
            control += 1
            continue
        try:
            for raw in iter_records(batch):
                decoded = decode_record(raw)
                if decoded.reason is not None:
                    errors.append((decoded.reason, f"offset {decoded.offset}: {decoded.error}"))
                records.append(decoded)
        except DecodeError as exc:
            errors.append((exc.reason, str(exc)))
    return ScanResult(records, errors, pos, truncated, control)


def dumps_payload(decoded: Decoded) -> str:
    """The record as DumpLogSegments prints its payload (compact JSON, fields in order)."""
    return orjson.dumps({"type": decoded.type, "version": decoded.version, "data": decoded.data}).decode()
