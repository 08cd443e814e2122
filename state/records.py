"""Reading KRaft metadata records: one input line → a validated `Record` or a `RecordError`.

Input lines are either the dump-log JSON envelope ``{"type":…,"version":…,"data":{…}}`` (optionally with
elrwatch's ``"offset"`` and ``"timestamp"`` keys) or whole lines of ``kafka-dump-log.sh
--cluster-metadata-decoder`` output (``| offset: 412 CreateTime: … payload: {…}``); see json-format.md.
`parse_line` reads one line on its own; `DumpReader` reads a whole dump in order and adds what only the lines
before tell (the offsets of ``--skip-record-metadata`` lines, a snapshot's records, where the log starts).

Validation is driven by Kafka's own record specs (``kafka_schemas/*.json``, copied from Kafka trunk): which fields
exist in which version, which are tagged (absent = default = unchanged), which are nullable, and their types.
On top of the schema, "impossible" values are rejected: negative or duplicate broker ids in a replica list,
negative partition ids or epochs, out-of-range enum values. Nothing here raises on bad input: every problem is
returned as a `RecordError` naming the position, the field and a reason from a small fixed set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

import orjson

from elrwatch.state import record_types
from elrwatch.state.record_types import BROKER_REGISTRATION_CHANGE_RECORD as BROKER_REGISTRATION_CHANGE_RECORD
from elrwatch.state.record_types import CLEAR_ELR_RECORD as CLEAR_ELR_RECORD
from elrwatch.state.record_types import CONFIG_RECORD as CONFIG_RECORD
from elrwatch.state.record_types import FEATURE_LEVEL_RECORD as FEATURE_LEVEL_RECORD
from elrwatch.state.record_types import FENCE_BROKER_RECORD as FENCE_BROKER_RECORD
from elrwatch.state.record_types import PARTITION_CHANGE_RECORD as PARTITION_CHANGE_RECORD
from elrwatch.state.record_types import PARTITION_RECORD as PARTITION_RECORD
from elrwatch.state.record_types import REGISTER_BROKER_RECORD as REGISTER_BROKER_RECORD
from elrwatch.state.record_types import REMOVE_TOPIC_RECORD as REMOVE_TOPIC_RECORD
from elrwatch.state.record_types import REPLICA_LOG_INFO_RECORD as REPLICA_LOG_INFO_RECORD
from elrwatch.state.record_types import REPLICA_LOG_INFO_SCHEMA as REPLICA_LOG_INFO_SCHEMA
from elrwatch.state.record_types import TOPIC_RECORD as TOPIC_RECORD
from elrwatch.state.record_types import UNFENCE_BROKER_RECORD as UNFENCE_BROKER_RECORD
from elrwatch.state.record_types import UNREGISTER_BROKER_RECORD as UNREGISTER_BROKER_RECORD
from elrwatch.state.value_checks import MISSING, VALID_UUIDS, is_uuid
from elrwatch.state.value_checks import SEMANTICS as _SEMANTICS
from elrwatch.state.value_checks import Invalid as _Invalid
from elrwatch.state.value_checks import no_semantics as _no_semantics

# --- record types -------------------------------------------------------------------------------------------
# The registry of record types (record_types.py) defines them and their schemas; the names stay importable from
# here. A well-formed record of a type the registry does not apply is counted and skipped (`Skipped`).

_TYPE_NAME = re.compile(r"^[A-Z][A-Z0-9_]*_RECORD$")

# --- errors ---------------------------------------------------------------------------------------------------

#: The fixed set of quarantine reasons (bounded Prometheus label values).
QUARANTINE_REASONS = (
    "invalid_json",
    "invalid_envelope",
    "unsupported_version",
    "missing_field",
    "invalid_field",
    "unknown_topic",
    "unknown_partition",
    "unknown_broker",
    "conflict",
    "undecodable_record",
)


#: RecordError's fields in order (its pickled form).
RECORD_ERROR_FIELDS: Final = (
    "position",
    "reason",
    "field",
    "message",
    "raw",
    "type",
    "offset",
    "applied",
)


@dataclass(slots=True)
class RecordError:
    """Why one input event was quarantined: where it was, which field, the reason code and a readable message."""

    position: str
    reason: str
    field: str | None
    message: str
    raw: str
    type: str | None = None
    offset: int | None = None
    #: A ``conflict`` at an applied offset: the record that was applied there (envelope JSON); ``raw`` is the new one.
    applied: str | None = None

    # Pickled as the list of its field values, as dataclass(slots=True) does itself, but spelled out: bucket
    # snapshots hold these objects, and a named field list keeps their pickled form fixed.
    def __getstate__(self) -> list[object]:
        return [getattr(self, name) for name in RECORD_ERROR_FIELDS]

    def __setstate__(self, state: list[object]) -> None:
        self.applied = None  # absent from the pickles of older versions (7 fields)
        for name, value in zip(RECORD_ERROR_FIELDS, state, strict=False):
            setattr(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (as in the report's ``quarantined.records``; ``applied`` only for an offset conflict)."""
        out: dict[str, Any] = {
            "position": self.position,
            "offset": self.offset,
            "type": self.type,
            "reason": self.reason,
            "field": self.field,
            "message": self.message,
            "raw": self.raw[:2000],
        }
        if self.applied is not None:
            out["applied"] = self.applied[:2000]
        return out

    def __str__(self) -> str:
        where = f" field {self.field!r}" if self.field else ""
        return f"{self.position}: {self.reason}{where}: {self.message}"


# --- records --------------------------------------------------------------------------------------------------


class Record:
    """One validated metadata record. ``data`` keeps Kafka's camelCase keys; int lists are tuples."""

    __slots__ = (
        "_position",
        "data",
        "offset",
        "origin",
        "seq",
        "snapshot_end",
        "source",
        "timestamp_ms",
        "type",
        "version",
    )

    def __init__(
        self,
        type: str,
        version: int,
        data: dict[str, Any],
        source: str = "-",
        seq: int = 0,
        position: str | None = None,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        origin: str | None = None,
        snapshot_end: int | None = None,
    ) -> None:
        """``origin``: the envelope's ``"source"`` (``"admin-poll"``: derived by `elrwatch bridge --source admin`);
        ``snapshot_end``: the envelope's ``"snapshotEnd"`` (a snapshot's record, see `ClusterState.apply`)."""
        self.type = type
        self.version = version
        self.data = data
        self.source = source
        self.seq = seq
        self._position = position or None
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.origin = origin
        self.snapshot_end = snapshot_end

    # Pickled as a call of the constructor, so that both builds (setup.py) read each other's pickles.
    def __reduce__(self) -> tuple[type[Record], tuple[object, ...]]:
        return (
            Record,
            (
                self.type,
                self.version,
                self.data,
                self.source,
                self.seq,
                self._position,
                self.offset,
                self.timestamp_ms,
                self.origin,
                self.snapshot_end,
            ),
        )

    @property
    def position(self) -> str:
        """Where the record was read, printable (``source:seq`` unless the reader gave another form)."""
        if self._position is None:
            self._position = f"{self.source}:{self.seq}"
        return self._position

    def __repr__(self) -> str:
        return f"Record({self.type} v{self.version} @{self.position} offset={self.offset} {self.data})"

    def envelope(self) -> dict[str, Any]:
        """The record as an envelope dict (lists as lists), with offset/timestamp when known."""
        out: dict[str, Any] = {
            "type": self.type,
            "version": self.version,
            "data": {k: list(v) if isinstance(v, tuple) else v for k, v in self.data.items()},
        }
        if self.offset is not None:
            out["offset"] = self.offset
        if self.timestamp_ms is not None:
            out["timestamp"] = self.timestamp_ms
        return out


class Ignored:
    """A line that is not an event (blank, dump-log batch header, control record)."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class Skipped:
    """A well-formed record of a Kafka type elrwatch does not use: counted, not applied."""

    __slots__ = ("offset", "type")

    def __init__(self, type: str, offset: int | None) -> None:
        self.type = type
        self.offset = offset


# --- schema compilation ---------------------------------------------------------------------------------------

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def version_range(spec: str | None) -> tuple[int, int] | None:
    """Kafka's version spec ("0+", "1-3", "none") → inclusive (low, high) or None (also for an absent spec)."""
    if not spec or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 30
    if "-" in spec:
        low, high = spec.split("-")
        return int(low), int(high)
    return int(spec), int(spec)


def in_versions(version: int, spec: tuple[int, int] | None) -> bool:
    """Whether ``version`` is in a `version_range` (False for None)."""
    return spec is not None and spec[0] <= version <= spec[1]


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of one record version, compiled from Kafka's schema."""

    json_name: str
    type: str
    required: bool
    nullable: bool
    broker_ids: bool


def _camel(name: str) -> str:
    return name[0].lower() + name[1:]


def _entry(type_name: str) -> record_types.RecordType:
    entry = record_types.get(type_name)
    if entry is None or not entry.applied:
        raise KeyError(f"{type_name} is not a record type elrwatch applies (state/record_types.py)")
    return entry


def _load_schema(type_name: str) -> dict[str, Any]:
    """A type's spec: its registry entry's own, or its file in ``kafka_schemas/``."""
    entry = _entry(type_name)
    if entry.schema is not None:
        return entry.schema
    file_name = entry.schema_file or ""
    text = resources.files("elrwatch.state").joinpath("kafka_schemas", file_name).read_text()
    stripped = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
    return orjson.loads(stripped)


@cache
def schema_versions(type_name: str) -> tuple[int, int]:
    """Valid versions (low, high) of a record type elrwatch uses."""
    low_high = version_range(_load_schema(type_name)["validVersions"])
    assert low_high is not None
    return low_high


@cache
def compiled_fields(type_name: str, version: int) -> tuple[FieldSpec, ...]:
    """The fields of ``type_name`` at ``version``, in schema order."""
    fields = []
    for field in _load_schema(type_name)["fields"]:
        if not in_versions(version, version_range(field["versions"])):
            continue
        tagged = in_versions(version, version_range(field.get("taggedVersions")))
        nullable = in_versions(version, version_range(field.get("nullableVersions")))
        fields.append(
            FieldSpec(
                json_name=_camel(field["name"]),
                type=field["type"],
                required=not tagged,
                nullable=nullable,
                # Every int32 list in the record types elrwatch uses holds broker ids (Kafka's spec tags most of
                # them entityType=brokerId but not PartitionRecord.Isr), so all get the broker-id checks.
                broker_ids=field["type"] == "[]int32",
            )
        )
    return tuple(fields)


@cache
def _all_field_names(type_name: str) -> frozenset[str]:
    return frozenset(_camel(f["name"]) for f in _load_schema(type_name)["fields"])


#: The types the core applies that elrwatch ships with.
USED_TYPES = frozenset(entry.name for entry in record_types.BUILTIN_TYPES if entry.applied)
_USED_VERSIONS: dict[str, tuple[int, int]] = {name: schema_versions(name) for name in USED_TYPES}


def _versions(type_name: str) -> tuple[int, int] | None:
    """Valid versions of a type the core applies, None for any other (a type registered at run time included)."""
    versions = _USED_VERSIONS.get(type_name)
    if versions is None:
        entry = record_types.get(type_name)
        if entry is not None and entry.applied:
            versions = schema_versions(type_name)
    return versions


# --- value checks ---------------------------------------------------------------------------------------------


# Kind codes of compiled fields (fast dispatch in `_validate_data`).
_K_INT, _K_BOOL, _K_STRING, _K_UUID, _K_INT_LIST, _K_BROKER_LIST, _K_UUID_LIST, _K_STRUCT_LIST = range(8)


def _kind(spec: FieldSpec) -> int:
    kind = spec.type
    if kind in _INT_RANGES:
        return _K_INT
    if kind == "bool":
        return _K_BOOL
    if kind == "string":
        return _K_STRING
    if kind == "uuid":
        return _K_UUID
    if kind == "[]int32":
        return _K_BROKER_LIST if spec.broker_ids else _K_INT_LIST
    if kind == "[]uuid":
        return _K_UUID_LIST
    return _K_STRUCT_LIST


@cache
def _compiled(type_name: str, version: int) -> tuple[tuple[str, int, int, int, bool, bool, FieldSpec], ...]:
    """(name, kind, low, high, required, nullable, spec) per field: what `_validate_data` loops over."""
    out = []
    for spec in compiled_fields(type_name, version):
        low, high = _INT_RANGES.get(spec.type, (0, 0))
        out.append((spec.json_name, _kind(spec), low, high, spec.required, spec.nullable, spec))
    return tuple(out)


def _check_value(spec: FieldSpec, kind: int, low: int, high: int, value: Any) -> Any:
    """Validate one present, non-null field value; return the value to store (int lists as tuples)."""
    name = spec.json_name
    if kind == _K_INT:
        if type(value) is not int:
            raise _Invalid("invalid_field", name, f"expected {spec.type}, got {type(value).__name__} {value!r}")
        if not low <= value <= high:
            raise _Invalid("invalid_field", name, f"{value} out of range for {spec.type}")
        return value
    if kind in (_K_BROKER_LIST, _K_INT_LIST):
        if type(value) is not list:
            raise _Invalid("invalid_field", name, f"expected a list of int32, got {type(value).__name__}")
        for item in value:
            if type(item) is not int or not -(2**31) <= item < 2**31:
                raise _Invalid("invalid_field", name, f"expected int32 items, got {item!r}")
        if kind == _K_BROKER_LIST:
            if value and min(value) < 0:
                raise _Invalid("invalid_field", name, f"negative broker id in {value}")
            if len(set(value)) != len(value):
                raise _Invalid("invalid_field", name, f"duplicate broker id in {value}")
        return tuple(value)
    if kind == _K_UUID:
        if not is_uuid(value):
            raise _Invalid("invalid_field", name, f"expected a 22-char base64 Uuid, got {value!r}")
        return value
    if kind == _K_BOOL:
        if type(value) is not bool:
            raise _Invalid("invalid_field", name, f"expected bool, got {value!r}")
        return value
    if kind == _K_STRING:
        if not isinstance(value, str):
            raise _Invalid("invalid_field", name, f"expected string, got {type(value).__name__}")
        return value
    if kind == _K_UUID_LIST:
        if not isinstance(value, list) or not all(is_uuid(item) for item in value):
            raise _Invalid("invalid_field", name, "expected a list of Uuids")
        return tuple(value)
    # arrays of structs (endPoints, features): shape only
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _Invalid("invalid_field", name, "expected a list of objects")
    return value


def _validate_data(type_name: str, version: int, data: Any) -> dict[str, Any]:
    if type(data) is not dict:
        raise _Invalid("invalid_envelope", "data", "data must be a JSON object")
    out: dict[str, Any] = {}
    for name, kind, low, high, required, nullable, spec in _compiled(type_name, version):
        if name in data:
            value = data[name]
            if value is None:
                if not nullable:
                    raise _Invalid("invalid_field", name, "must not be null")
                out[name] = None
            elif kind == _K_INT and type(value) is int and low <= value <= high:
                out[name] = value  # fast path for the commonest case
            else:
                out[name] = _check_value(spec, kind, low, high, value)
        elif required:
            raise _Invalid("missing_field", name, f"required in {type_name} v{version}")
    if len(data) != len(out):
        known = _all_field_names(type_name)
        for key, value in data.items():
            if key not in out and key in known and value is not None:
                raise _Invalid("invalid_field", key, f"field does not exist in {type_name} version {version}")
    _check_semantics(type_name, out)
    return out


# --- straight-line validators (the hot path) ---------------------------------------------------------------------
#
# `_validate_data` walks the compiled field list and names the precise error. Most records are valid, so each
# (type, version) also gets a straight-line validator generated from the same field list: it accepts exactly what
# `_validate_data` accepts and returns the same dict, or returns None on *anything* unusual (a bad value, an
# extra key, a semantic problem), and then `_validate_data` runs to accept the record or name the error.

_INT32_MAX = 2**31 - 1


def _value_check(var: str, kind: int, low: int, high: int) -> list[str]:
    """Generated lines that check the non-null value in ``var`` (lists become tuples) or ``return None``."""
    if kind == _K_INT:
        return [f"if type({var}) is not int or {var} < {low} or {var} > {high}:", "    return None"]
    if kind == _K_BOOL:
        return [f"if type({var}) is not bool:", "    return None"]
    if kind == _K_STRING:
        return [f"if not isinstance({var}, str):", "    return None"]
    if kind == _K_UUID:
        return [f"if type({var}) is not str or ({var} not in U and not is_uuid({var})):", "    return None"]
    if kind in (_K_BROKER_LIST, _K_INT_LIST):
        low_item = 0 if kind == _K_BROKER_LIST else -(2**31)
        lines = [
            f"if type({var}) is not list:",
            "    return None",
            f"for i in {var}:",
            f"    if type(i) is not int or i < {low_item} or i > {_INT32_MAX}:",
            "        return None",
            f"{var} = tuple({var})",
        ]
        if kind == _K_BROKER_LIST:
            lines += [f"if len({var}) > 1 and len(set({var})) != len({var}):", "    return None"]
        return lines
    if kind == _K_UUID_LIST:
        return [  # U holds only Uuids already validated; hashing an unhashable item raises TypeError
            f"if type({var}) is not list:",
            "    return None",
            "try:",
            f"    known = U.issuperset({var})",
            "except TypeError:",
            "    return None",
            f"if not known and not all(is_uuid(i) for i in {var}):",
            "    return None",
            f"{var} = tuple({var})",
        ]
    return [f"if type({var}) is not list or not all(isinstance(i, dict) for i in {var}):", "    return None"]


def _indent(lines: list[str], depth: int = 1) -> list[str]:
    return ["    " * depth + line for line in lines]


def validator_source(type_name: str, version: int, name: str = "validate", check: str = "check") -> str:
    """Python source of the straight-line validator of one (type, version), a function ``name(data)``: the data
    dict → the validated dict, or None (see above). It reads the globals ``M``, ``U``, ``is_uuid``, ``Invalid`` and
    the record type's semantic check under the name ``check`` (`_fast_validator` defines them)."""
    fields = _compiled(type_name, version)
    required = [(f"v{i}", field) for i, field in enumerate(fields) if field[4]]
    optional = [(f"v{i}", field) for i, field in enumerate(fields) if not field[4]]
    lines = [f"def {name}(data):"]
    if required:
        reads = [f"{var} = data[{field[0]!r}]" for var, field in required]
        lines += ["    try:", *_indent(reads, 2), "    except KeyError:", "        return None"]
    for var, (_name, kind, low, high, _required, nullable, _spec) in required:
        value_check = _value_check(var, kind, low, high)
        if nullable:
            lines += [f"    if {var} is not None:", *_indent(value_check, 2)]
        else:
            lines += [f"    if {var} is None:", "        return None", *_indent(value_check)]
    lines.append("    out = {" + ", ".join(f"{field[0]!r}: {var}" for var, field in required) + "}")
    if optional:
        # Optional (tagged) fields: only look up as many as the data still holds; each level of nesting is one
        # more field, entered while keys are left (a change record usually sets two or three of eleven).
        lines += ["    get = data.get", f"    left = len(data) - {len(required)}"]
        for depth, (var, (name, kind, low, high, _required, nullable, _spec)) in enumerate(optional, start=1):
            lines += _indent(
                [
                    "if left:",
                    f"    {var} = get({name!r}, M)",
                    f"    if {var} is not M:",
                    "        left -= 1",
                    f"        if {var} is None:",
                    f"            out[{name!r}] = None" if nullable else "            return None",
                    "        else:",
                    *_indent(_value_check(var, kind, low, high), 3),
                    f"            out[{name!r}] = {var}",
                ],
                depth,
            )
    lines += [
        "    if len(data) != len(out):",
        "        return None",
        "    try:",
        f"        {check}(out)",
        "    except Invalid:",
        "        return None",
        "    return out",
    ]
    return "\n".join(lines) + "\n"


#: (type, version) → its straight-line validator, built from `validator_source` at the pair's first use.
_FAST_VALIDATORS: dict[tuple[str, int], Any] = {}


def _fast_validator(type_name: str, version: int) -> Any:
    """The straight-line validator of one (type, version), built from `validator_source` at first use and kept
    (a built-in type and a type registered at run time alike)."""
    key = (type_name, version)
    validator = _FAST_VALIDATORS.get(key)
    if validator is None:
        namespace: dict[str, Any] = {
            "M": MISSING,
            "U": VALID_UUIDS,
            "is_uuid": is_uuid,
            "Invalid": _Invalid,
            "check": _SEMANTICS.get(type_name, _no_semantics),
        }
        exec(validator_source(type_name, version), namespace)
        validator = namespace["validate"]
        _FAST_VALIDATORS[key] = validator
    return validator


def validate_data(type_name: str, version: int, data: Any) -> dict[str, Any]:
    """Validate a record's ``data`` for a known type and supported version; raises `_Invalid` naming the error."""
    if type(data) is dict:
        out = _fast_validator(type_name, version)(data)
        if out is not None:
            return out
    return _validate_data(type_name, version, data)


def _check_semantics(type_name: str, data: dict[str, Any]) -> None:
    """Impossible values that the schema alone allows."""
    _SEMANTICS.get(type_name, _no_semantics)(data)


# --- line parsing ---------------------------------------------------------------------------------------------

_DUMP_OFFSET = re.compile(r"offset:\s*(-?\d+)")
_DUMP_TIME = re.compile(r"(?:CreateTime|LogAppendTime):\s*(-?\d+)")
#: Lines DumpLogSegments prints about a file or a batch, not about a record (ignored).
_HEADER_PREFIXES = (
    "baseOffset:",
    "Log starting offset",
    "Snapshot end offset",
    "KRaft bootstrap snapshot",
    "Dumping ",
    "Starting offset",
    "Found ",
    "Skipping ",
    "Ignoring unknown file",
    "Non-consecutive offsets",
)
#: Control records, which DumpLogSegments prints instead of a payload (ignored); after ``| offset: …`` or alone.
_CONTROL_PREFIXES = (
    "SnapshotHeader",
    "SnapshotFooter",
    "KRaftVersion",
    "KRaftVoters",
    "LeaderChange:",
    "controlType:",
    "endTxnMarker:",
)
#: What DumpLogSegments prints as the payload of a record it cannot decode (``Error at offset N`` in other parsers).
_ERROR_LINE = re.compile(r"^Error at (?:offset )?(-?\d+), skipping\.\s*(.*)$", re.DOTALL)


def _undecodable(
    match: re.Match[str], text: str, position: str | None, source: str, seq: int, offset: int | None
) -> RecordError:
    """A record DumpLogSegments could not decode: quarantined with its offset and Kafka's own message."""
    at = int(match.group(1)) if offset is None else offset
    detail = match.group(2).strip() or "no message"
    return RecordError(
        position or f"{source}:{seq}",
        "undecodable_record",
        None,
        f"DumpLogSegments could not decode the record at offset {at}: {detail}",
        text,
        offset=at,
    )


def parse_line(
    line: str | bytes, source: str = "-", seq: int = 0, position: str | None = None
) -> Record | RecordError | Ignored | Skipped:
    """Parse one input line on its own; never raises.

    ``source``/``seq`` identify where the line was read (file + line number, or event-topic partition + offset);
    ``position`` is their printable form (default ``source:seq``). A ``--skip-record-metadata`` line has no offset
    here: `DumpReader` gives it one from its batch header.
    """
    if isinstance(line, bytes):
        if line[:1] == b"{" or line.lstrip()[:1] == b"{":
            return parse_envelope(line, source=source, seq=seq, position=position)  # the hot path: no decode
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return RecordError(
                position or f"{source}:{seq}", "invalid_json", None, f"not UTF-8: {exc}", repr(line)[:2000]
            )
    elif isinstance(line, bytearray | memoryview):
        return parse_line(bytes(line), source, seq, position)
    else:
        text = line
    pos = position
    stripped = text.strip()
    if not stripped:
        return Ignored("blank")
    offset: int | None = None
    timestamp: int | None = None
    payload = stripped
    if stripped[0] not in "{[":
        if stripped.startswith("|") or stripped.startswith("payload:"):
            marker = stripped.find("payload:")
            head_text = stripped if marker < 0 else stripped[:marker]
            match = _DUMP_OFFSET.search(head_text)
            offset = int(match.group(1)) if match else None
            if marker < 0:
                return Ignored("control record")  # e.g. `| offset: 0 ... SnapshotHeader {...}`
            match = _DUMP_TIME.search(head_text)
            timestamp = int(match.group(1)) if match else None
            payload = stripped[marker + len("payload:") :].strip()
            if payload.startswith("Error at"):
                error = _ERROR_LINE.match(payload)
                if error:
                    return _undecodable(error, text, pos, source, seq, offset)
        elif stripped.startswith(_HEADER_PREFIXES):
            return Ignored("dump-log header")
        elif stripped.startswith(_CONTROL_PREFIXES):
            return Ignored("control record")
        else:
            error = _ERROR_LINE.match(stripped)
            if error:
                return _undecodable(error, text, pos, source, seq, None)
            return RecordError(
                pos or f"{source}:{seq}",
                "invalid_json",
                None,
                "neither a JSON envelope nor a kafka-dump-log line",
                text,
            )
    return parse_envelope(
        payload, source=source, seq=seq, position=pos, offset=offset, timestamp_ms=timestamp, raw=text
    )


# --- reading a whole dump -------------------------------------------------------------------------------------

#: Which part of a DumpLogSegments output a `DumpReader` is in.
SECTION_NONE = ""  # no file header seen (envelope lines, or a dump without its headers): offsets as printed
SECTION_LOG = "log"  # after ``Log starting offset: N`` (or a first batch header): log offsets
SECTION_SNAPSHOT = "snapshot"  # after ``Snapshot end offset: N, epoch: E``
SECTION_BOOTSTRAP = "bootstrap"  # after ``KRaft bootstrap snapshot``

_LOG_HEADER = re.compile(r"^Log starting offset:\s*(-?\d+)")
_SNAPSHOT_HEADER = re.compile(r"^Snapshot end offset:\s*(-?\d+),\s*epoch:\s*(-?\d+)")
_BATCH_HEADER = re.compile(r"^baseOffset:\s*(-?\d+)\s+lastOffset:\s*(-?\d+)")
#: First characters of the header lines `DumpReader` reads (baseOffset, Log…, Snapshot…, KRaft…, Dumping).
_HEADER_FIRST_CHARS = frozenset("bLSKD")
_SECTIONS = frozenset({SECTION_NONE, SECTION_LOG, SECTION_SNAPSHOT, SECTION_BOOTSTRAP})


class DumpReader:
    """Parses lines in order with what one line alone cannot tell (one reader for the whole input, files in order).

    * A ``--skip-record-metadata`` line (``| payload: {…}``) gets its offset from the batch header before it: the
      i-th record line after ``baseOffset: N lastOffset: M …`` has offset N+i (none past M).
    * A snapshot's records (after ``Snapshot end offset: N, epoch: E``) have no log offset (their ``| offset:``
      counts from 0 inside the snapshot): they get N-1, the last offset the snapshot covers, and `snapshot_end` is
      N while they are read. A bootstrap snapshot's records (``KRaft bootstrap snapshot``) get no offset.
    * `gap` is ``(missing_from, log_start)`` when the first log section (``Log starting offset: N``, else its first
      batch's base offset) starts past what came before it: past 0 without a snapshot, or past the end offset of
      the snapshot read before it. What the input describes is then partial.
    """

    def __init__(self) -> None:
        self.section = SECTION_NONE
        #: Not inside a snapshot: an envelope line needs no placing (`parse`'s and the replay's fast path).
        self.plain = True
        self.snapshot_end: int | None = None  # the end offset of the snapshot being read
        self.snapshots: list[tuple[int, int]] = []  # (end offset, epoch) of every snapshot read
        self.gap: tuple[int, int] | None = None
        self._seen_log = False
        self._next: int | None = None  # the offset of the current batch's next record line
        self._last: int | None = None  # the current batch's last offset

    def parse(
        self, line: str | bytes, source: str = "-", seq: int = 0, position: str | None = None
    ) -> Record | RecordError | Ignored | Skipped:
        """Parse one line (as `parse_line`) and place it in the dump: offsets, snapshot, log start."""
        if isinstance(line, str):
            first = line[:1]
            if first == "{" and self.plain:
                return parse_line(line, source, seq, position)  # an envelope: nothing to place (the hot path)
            if first in _HEADER_FIRST_CHARS:
                self._header(line)
            record_line = first == "|" or line.lstrip().startswith(("|", "payload:"))
        else:
            head = bytes(line[:1])
            if head == b"{" and self.plain:
                return parse_line(line, source, seq, position)
            if head and head in b"bLSKD":
                self._header(bytes(line).decode("utf-8", "replace"))
            record_line = head == b"|" or bytes(line).lstrip().startswith((b"|", b"payload:"))
        parsed = parse_line(line, source, seq, position)
        if record_line or not self.plain:
            self._place(parsed)
        return parsed

    def checkpoint(self) -> list[Any]:
        """Where the reader is, as JSON-able values (`restore` reads them back): e.g. in a streaming source's offset,
        so that the next lines of a growing file are read in their place."""
        gap = list(self.gap) if self.gap is not None else None
        snapshots = [list(snapshot) for snapshot in self.snapshots[-1:]]
        return [self.section, self.snapshot_end, self._next, self._last, self._seen_log, gap, snapshots]

    @classmethod
    def restore(cls, values: object) -> DumpReader:
        """A reader at a `checkpoint` (a fresh one for None or a malformed checkpoint)."""
        try:
            return cls._restored(values)
        except (TypeError, ValueError, IndexError):  # a damaged checkpoint: read on as from a fresh dump
            return cls()

    @classmethod
    def _restored(cls, values: object) -> DumpReader:
        reader = cls()
        if not isinstance(values, list) or len(values) != 7:
            return reader
        section, snapshot_end, following, last, seen_log, gap, snapshots = values
        reader.section = section if section in _SECTIONS else SECTION_NONE
        reader.plain = reader.section != SECTION_SNAPSHOT and reader.section != SECTION_BOOTSTRAP
        reader.snapshot_end = snapshot_end if type(snapshot_end) is int else None
        reader._next = following if type(following) is int else None
        reader._last = last if type(last) is int else None
        reader._seen_log = seen_log is True
        if isinstance(gap, list | tuple) and len(gap) == 2:
            reader.gap = (int(gap[0]), int(gap[1]))
        if isinstance(snapshots, list):
            reader.snapshots = [
                (int(s[0]), int(s[1])) for s in snapshots if isinstance(s, list | tuple) and len(s) == 2
            ]
        return reader

    def self_contained(self, line: str) -> str:
        """The line in a form `parse_line` alone reads right (for a reader that parses lines one by one, like the
        streaming job): a ``--skip-record-metadata`` record line gets its ``| offset: N``; a snapshot's record
        becomes its envelope with ``"offset": N-1, "snapshotEnd": N`` (as `parse` places it; a bootstrap
        snapshot's, or one whose payload is no JSON object, loses the offset counted inside the snapshot). Other
        lines are returned as they are; every line moves the reader on."""
        first = line[:1]
        if first in _HEADER_FIRST_CHARS:
            self._header(line)
            return line
        if first != "|" and not line.lstrip().startswith(("|", "payload:")):
            return line
        marker = line.find("payload:")
        if marker < 0:
            return line  # a control record
        if self.section == SECTION_SNAPSHOT or self.section == SECTION_BOOTSTRAP:
            payload = line[marker + len("payload:") :].strip()
            end = self.snapshot_end
            if self.section == SECTION_SNAPSHOT and end is not None and end > 0 and payload.startswith("{"):
                created = _DUMP_TIME.search(line, 0, marker)
                stamp = f'"timestamp":{created.group(1)},' if created and int(created.group(1)) >= 0 else ""
                return f'{{"offset":{end - 1},"snapshotEnd":{end},{stamp}{payload[1:]}'
            return "| " + line[marker:]
        match = _DUMP_OFFSET.search(line, 0, marker)
        if match:
            self._next = int(match.group(1)) + 1
            return line
        following = self._next
        if following is not None and (self._last is None or following <= self._last):
            self._next = following + 1
            return f"| offset: {following} {line[marker:]}"
        return line

    def _header(self, text: str) -> None:
        if text.startswith("Dumping "):
            self._next = self._last = None
            return
        match = _BATCH_HEADER.match(text)
        if match:
            self._next, self._last = int(match.group(1)), int(match.group(2))
            if self.section == SECTION_NONE:
                self._start_log(self._next)
            return
        match = _LOG_HEADER.match(text)
        if match:
            self._start_log(int(match.group(1)))
            return
        match = _SNAPSHOT_HEADER.match(text)
        if match:
            self.section = SECTION_SNAPSHOT
            self.plain = False
            self.snapshot_end = int(match.group(1))
            self.snapshots.append((self.snapshot_end, int(match.group(2))))
            return
        if text.startswith("KRaft bootstrap snapshot"):
            self.section = SECTION_BOOTSTRAP
            self.plain = False
            self.snapshot_end = None

    def _start_log(self, offset: int) -> None:
        self.section = SECTION_LOG
        self.plain = True
        self.snapshot_end = None
        if not self._seen_log:
            self._seen_log = True
            covered = self.snapshots[-1][0] if self.snapshots else 0
            if offset > covered:
                self.gap = (covered, offset)

    def _place(self, parsed: Record | RecordError | Ignored | Skipped) -> None:
        """Give the parse result the offset its place in the dump says."""
        if isinstance(parsed, Ignored):
            return
        section = self.section
        if section == SECTION_SNAPSHOT:
            end = self.snapshot_end
            parsed.offset = end - 1 if end is not None and end > 0 else None
            return
        if section == SECTION_BOOTSTRAP:
            parsed.offset = None
            return
        offset = parsed.offset
        if offset is None:
            following = self._next
            if following is not None and (self._last is None or following <= self._last):
                parsed.offset = following
                self._next = following + 1
        else:
            self._next = offset + 1


#: (type, version) → straight-line validator, filled as (type, version) pairs are first seen: `parse_envelope`'s
#: hot path.
_VALIDATORS: dict[tuple[str, int], Any] = {}


def parse_envelope(
    payload: str | bytes,
    *,
    source: str = "-",
    seq: int = 0,
    position: str | None = None,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    raw: str | None = None,
) -> Record | RecordError | Skipped:
    """Parse and validate one JSON envelope."""
    try:
        envelope = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        message = f"invalid JSON: {exc}"
        return _envelope_error(payload, raw, position, source, seq, offset, "invalid_json", None, message)
    if type(envelope) is dict:
        # Hot path: a known (type, version), well-formed envelope keys and data the straight-line validator accepts.
        get = envelope.get
        type_name = get("type")
        version = get("version")
        if type(type_name) is str and type(version) is int:
            validator = _VALIDATORS.get((type_name, version))
            if validator is not None:
                data = get("data")
                extra_offset = get("offset")
                extra_ts = get("timestamp")
                if (
                    type(data) is dict
                    # any other key ("source", "snapshotEnd": elrwatch bridge, the files source) takes the checked path
                    and len(envelope) == 3 + (extra_offset is not None) + (extra_ts is not None)
                    and (extra_offset is None or (offset is None and type(extra_offset) is int and extra_offset >= 0))
                    and (extra_ts is None or (type(extra_ts) is int and extra_ts >= 0))
                ):
                    out = validator(data)
                    if out is not None:
                        return Record(
                            type_name,
                            version,
                            out,
                            source,
                            seq,
                            position,
                            offset if extra_offset is None else extra_offset,
                            timestamp_ms if extra_ts is None else extra_ts,
                        )
    return _parse_envelope_checked(envelope, payload, source, seq, position, offset, timestamp_ms, raw)


def _envelope_error(
    payload: str | bytes,
    raw: str | None,
    position: str | None,
    source: str,
    seq: int,
    offset: int | None,
    reason: str,
    field: str | None,
    message: str,
    type_name: str | None = None,
) -> RecordError:
    raw_text = raw if raw is not None else payload
    if not isinstance(raw_text, str):
        raw_text = bytes(raw_text).decode("utf-8", "replace")
    return RecordError(position or f"{source}:{seq}", reason, field, message, raw_text, type_name, offset)


def _parse_envelope_checked(
    envelope: Any,
    payload: str | bytes,
    source: str,
    seq: int,
    position: str | None,
    offset: int | None,
    timestamp_ms: int | None,
    raw: str | None,
) -> Record | RecordError | Skipped:
    """Every check of the envelope, naming the first problem (the path for anything the hot path declined)."""

    def error(reason: str, field: str | None, message: str, type_name: str | None = None) -> RecordError:
        return _envelope_error(payload, raw, position, source, seq, offset, reason, field, message, type_name)

    if type(envelope) is not dict:
        return error("invalid_envelope", None, "the event must be a JSON object")
    type_name = envelope.get("type")
    versions = _versions(type_name) if type(type_name) is str else None
    if versions is None and (not isinstance(type_name, str) or not _TYPE_NAME.match(type_name)):
        return error("invalid_envelope", "type", f"missing or malformed record type {type_name!r}")
    extra_offset = envelope.get("offset")
    if extra_offset is not None:
        if type(extra_offset) is not int or extra_offset < 0:
            return error("invalid_envelope", "offset", f"offset must be an int >= 0, got {extra_offset!r}", type_name)
        if offset is not None and offset != extra_offset:
            return error(
                "invalid_envelope", "offset", f"envelope offset {extra_offset} != dump-log offset {offset}", type_name
            )
        offset = extra_offset
    extra_ts = envelope.get("timestamp")
    if extra_ts is not None:
        if type(extra_ts) is not int or extra_ts < 0:
            return error(
                "invalid_envelope", "timestamp", f"timestamp must be epoch ms >= 0, got {extra_ts!r}", type_name
            )
        timestamp_ms = extra_ts
    origin = envelope.get("source")
    if origin is not None and (type(origin) is not str or not 0 < len(origin) <= 64):
        return error("invalid_envelope", "source", f"source must be a short string, got {origin!r}", type_name)
    snapshot_end = envelope.get("snapshotEnd")
    if snapshot_end is not None and (type(snapshot_end) is not int or snapshot_end < 1):
        message = f"snapshotEnd must be an int >= 1, got {snapshot_end!r}"
        return error("invalid_envelope", "snapshotEnd", message, type_name)
    version = envelope.get("version")
    if type(version) is not int or version < 0:
        return error("invalid_envelope", "version", f"missing or malformed version {version!r}", type_name)
    data = envelope.get("data")
    if data is None:
        return error("invalid_envelope", "data", "missing data", type_name)
    if versions is None:
        if type(data) is not dict:
            return error("invalid_envelope", "data", "data must be a JSON object", type_name)
        return Skipped(type_name, offset)  # type: ignore[arg-type]
    if not versions[0] <= version <= versions[1]:
        return error(
            "unsupported_version",
            "version",
            f"{type_name} version {version} is not in {versions[0]}-{versions[1]}",
            type_name,
        )
    if type_name in _USED_VERSIONS:  # a type registered at run time takes this path (it may be unregistered)
        _VALIDATORS[(type_name, version)] = _fast_validator(type_name, version)  # type: ignore[arg-type,index]
    try:
        data = validate_data(type_name, version, data)  # type: ignore[arg-type]
    except _Invalid as exc:
        return error(exc.reason, exc.field, exc.message, type_name)
    return Record(
        type_name,  # type: ignore[arg-type]
        version,
        data,
        source,
        seq,
        position,
        offset,
        timestamp_ms,
        origin,
        snapshot_end,
    )


def is_known_kafka_type(type_name: str) -> bool:
    """Whether ``type_name`` is a record type of the registry (applied or skipped)."""
    return record_types.get(type_name) is not None
