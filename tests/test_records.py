"""state/records.py: every record type and version of Kafka's schemas parses; bad input is a typed RecordError.

The (type, version) list is compiled from the schema files in state/kafka_schemas/ so it stays complete.
References: monitor-spec.md §1, json-format.md §1, DESIGN.md §1.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from core_events import DIR, TOPIC_ID, dump_line, envelope, line, skip_metadata_line, uuid_of
from hypothesis import given, settings
from hypothesis import strategies as st

from elrwatch.state import record_types
from elrwatch.state import records as records_module
from elrwatch.state.records import QUARANTINE_REASONS, Ignored, Record, RecordError, Skipped, parse_line

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DIR = ROOT / "state" / "kafka_schemas"
REFERENCE = Path(os.environ.get("ELRWATCH_REFERENCE", ROOT.parent / "shared" / "reference"))
JSON_FORMAT = REFERENCE / "json-format.md"
PAYLOADS_COPY = Path(__file__).parent / "data" / "json_format_payloads.txt"

# --- the schemas, read independently of the implementation ---------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    text = "\n".join(x for x in path.read_text().splitlines() if not x.lstrip().startswith("//"))
    return json.loads(text)


def _range(spec: str | None) -> tuple[int, int] | None:
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 10**6
    if "-" in spec:
        low, high = spec.split("-")
        return int(low), int(high)
    return int(spec), int(spec)


def _in(version: int, spec: str | None) -> bool:
    r = _range(spec)
    return r is not None and r[0] <= version <= r[1]


def _type_name(schema_name: str) -> str:
    """PartitionChangeRecord -> PARTITION_CHANGE_RECORD (MetadataRecordType's enum name)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", schema_name).upper()


SCHEMAS: dict[str, dict[str, Any]] = {}
for _path in sorted(SCHEMA_DIR.glob("*.json")):
    _schema = _load(_path)
    if _schema.get("type") == "metadata":
        SCHEMAS[_type_name(_schema["name"])] = _schema
# elrwatch's own record types carry their spec in their registry entry (DESIGN.md §1a): the same properties run on them
for _entry in record_types.BUILTIN_TYPES:
    if _entry.schema is not None:
        SCHEMAS[_entry.name] = _entry.schema

TYPE_VERSIONS: list[tuple[str, int]] = []
for _name, _schema in SCHEMAS.items():
    _low, _high = _range(_schema["validVersions"])
    TYPE_VERSIONS += [(_name, v) for v in range(_low, _high + 1)]


def fields_at(type_name: str, version: int) -> list[dict[str, Any]]:
    return [f for f in SCHEMAS[type_name]["fields"] if _in(version, f["versions"])]


def is_tagged(field: dict[str, Any], version: int) -> bool:
    return _in(version, field.get("taggedVersions"))


def camel(name: str) -> str:
    return name[0].lower() + name[1:]


def max_version(type_name: str) -> int:
    return _range(SCHEMAS[type_name]["validVersions"])[1]


# --- one valid example value per field (every field of every schema must have one) -------------------------------

ENDPOINTS = [{"name": "PLAINTEXT", "host": "localhost", "port": 9093, "securityProtocol": 0}]
FEATURES = [{"name": "metadata.version", "minSupportedVersion": 7, "maxSupportedVersion": 33}]
SAMPLES: dict[str, dict[str, Any]] = {
    "PARTITION_RECORD": {
        "partitionId": 0,
        "topicId": TOPIC_ID,
        "replicas": [0, 1, 2],
        "isr": [0, 1],
        "removingReplicas": [],
        "addingReplicas": [],
        "leader": 0,
        "leaderRecoveryState": 1,
        "leaderEpoch": 4,
        "partitionEpoch": 7,
        "directories": [DIR, DIR, DIR],
        "eligibleLeaderReplicas": [2],
        "lastKnownElr": [],
    },
    "PARTITION_CHANGE_RECORD": {
        "partitionId": 3,
        "topicId": TOPIC_ID,
        "isr": [0, 1],
        "leader": 1,
        "replicas": [0, 1, 2],
        "removingReplicas": [],
        "addingReplicas": [],
        "leaderRecoveryState": 0,
        "directories": [DIR, DIR, DIR],
        "eligibleLeaderReplicas": [2],
        "lastKnownElr": [],
    },
    "CLEAR_ELR_RECORD": {"topicName": "foo"},
    "TOPIC_RECORD": {"name": "foo", "topicId": TOPIC_ID},
    "REMOVE_TOPIC_RECORD": {"topicId": TOPIC_ID},
    "REGISTER_BROKER_RECORD": {
        "brokerId": 1,
        "isMigratingZkBroker": False,
        "incarnationId": "nJ-GQl6-TAS1YX06s1WjLg",
        "brokerEpoch": 101,
        "endPoints": ENDPOINTS,
        "features": FEATURES,
        "rack": "rack-a",
        "fenced": True,
        "inControlledShutdown": False,
        "logDirs": [DIR],
        "cordonedLogDirs": [],
    },
    "BROKER_REGISTRATION_CHANGE_RECORD": {
        "brokerId": 1,
        "brokerEpoch": 101,
        "fenced": 1,
        "inControlledShutdown": 1,
        "logDirs": [DIR],
        "cordonedLogDirs": [],
    },
    "UNREGISTER_BROKER_RECORD": {"brokerId": 1, "brokerEpoch": 101},
    "FENCE_BROKER_RECORD": {"id": 1, "epoch": 101},
    "UNFENCE_BROKER_RECORD": {"id": 1, "epoch": 101},
    "CONFIG_RECORD": {"resourceType": 2, "resourceName": "foo", "name": "min.insync.replicas", "value": "2"},
    "FEATURE_LEVEL_RECORD": {"name": "eligible.leader.replicas.version", "featureLevel": 1},
    "STATIC_BROKER_CONFIG_RECORD": {"nodeId": 1, "name": "min.insync.replicas", "value": "2"},
    "OPERATOR_RECOVERY_RECORD": {
        "topicId": TOPIC_ID,
        "partitionId": 0,
        "step": "verify",
        "outcome": "done",
        "candidate": 2,
        "replicas": [1, 2, 3],
        "order": [],
        "leader": 2,
        "endOffset": 170,
        "candidateLogEndOffset": 170,
        "losses": [{"brokerId": 1, "records": 0, "exact": False}, {"brokerId": 3, "records": -1, "exact": False}],
        "message": "step 3/4 verify: leader 2; end offset 170 = 2's reported log end offset 170",
    },
    "REPLICA_LOG_INFO_RECORD": {
        "topicId": TOPIC_ID,
        "partitionId": 0,
        "brokerId": 2,
        "brokerEpoch": 101,
        "logEndOffset": 170,
        "lastWrittenLeaderEpoch": 1,
        "currentLeaderEpoch": 2,
    },
    "CLEAN_SHUTDOWN_RECORD": {
        "brokerId": 2,
        "registrationEpoch": 101,
        "cleanShutdownEpoch": 101,
        "logDirs": 2,
        "logDirsWithFile": 2,
    },
}


def example(type_name: str, version: int) -> dict[str, Any]:
    """A valid data object with every field of ``version`` present."""
    return {
        camel(f["name"]): copy.deepcopy(SAMPLES[type_name][camel(f["name"])]) for f in fields_at(type_name, version)
    }


def tuples(data: dict[str, Any]) -> dict[str, Any]:
    """Int lists as tuples (DESIGN.md §1: Record.data keeps lists of ints as tuples)."""
    return {k: tuple(v) if isinstance(v, list) and all(type(x) is int for x in v) else v for k, v in data.items()}


def same_data(got: dict[str, Any], sent: dict[str, Any]) -> bool:
    """Record.data equals what was sent; int lists must be tuples, other lists may be lists or tuples."""
    for key, value in sent.items():
        if isinstance(value, list) and value and all(type(x) is int for x in value):
            assert type(got.get(key)) is tuple, (key, got.get(key))
    norm = {
        k: tuple(v) if isinstance(v, list) and all(not isinstance(x, dict) for x in v) else v for k, v in got.items()
    }
    want = {
        k: tuple(v) if isinstance(v, list) and all(not isinstance(x, dict) for x in v) else v for k, v in sent.items()
    }
    return norm == want


def parse(obj: Any, source: str = "events.jsonl", seq: int = 7) -> Any:
    text = obj if isinstance(obj, str | bytes) else line(obj)
    return parse_line(text, source, seq)


def assert_error(result: Any, reason: str, field: str | None = "__any__", position: str = "events.jsonl:7") -> None:
    assert isinstance(result, RecordError), f"expected RecordError({reason}), got {result!r}"
    assert result.reason == reason, result
    assert result.reason in QUARANTINE_REASONS
    if field != "__any__":
        assert result.field == field, result
    assert result.position == position, result
    assert result.message


# --- inventory -------------------------------------------------------------------------------------------------


#: The record types monitor-spec.md names (the reference documents a payload of each).
SPEC_TYPES = {
    "PARTITION_RECORD",
    "PARTITION_CHANGE_RECORD",
    "CLEAR_ELR_RECORD",
    "TOPIC_RECORD",
    "REMOVE_TOPIC_RECORD",
    "REGISTER_BROKER_RECORD",
    "BROKER_REGISTRATION_CHANGE_RECORD",
    "UNREGISTER_BROKER_RECORD",
    "FENCE_BROKER_RECORD",
    "UNFENCE_BROKER_RECORD",
    "CONFIG_RECORD",
    "FEATURE_LEVEL_RECORD",
}


def test_inventory_covers_monitor_spec_types() -> None:
    assert set(SCHEMAS) >= SPEC_TYPES
    assert ("PARTITION_CHANGE_RECORD", 2) in TYPE_VERSIONS
    assert ("REGISTER_BROKER_RECORD", 4) in TYPE_VERSIONS
    for type_name in SCHEMAS:
        assert set(SAMPLES[type_name]) >= {camel(f["name"]) for f in SCHEMAS[type_name]["fields"]}, type_name


# --- valid examples, every type x version ------------------------------------------------------------------------


@pytest.mark.parametrize(("type_name", "version"), TYPE_VERSIONS)
def test_valid_envelope_parses(type_name: str, version: int) -> None:
    data = example(type_name, version)
    result = parse(envelope(type_name, version, data))
    assert isinstance(result, Record), result
    assert (result.type, result.version) == (type_name, version)
    assert same_data(result.data, data)
    assert result.offset is None
    assert result.source == "events.jsonl" and result.seq == 7
    assert result.position == "events.jsonl:7"


@pytest.mark.parametrize(("type_name", "version"), TYPE_VERSIONS)
def test_valid_envelope_with_offset_and_timestamp(type_name: str, version: int) -> None:
    data = example(type_name, version)
    result = parse(envelope(type_name, version, data, offset=55, timestamp=1732100000123))
    assert isinstance(result, Record), result
    assert result.offset == 55
    assert result.timestamp_ms == 1732100000123
    assert same_data(result.data, data)


@pytest.mark.parametrize(("type_name", "version"), TYPE_VERSIONS)
def test_valid_dump_log_line_parses(type_name: str, version: int) -> None:
    data = example(type_name, version)
    result = parse(dump_line(envelope(type_name, version, data), offset=412, create_time=1732100000000))
    assert isinstance(result, Record), result
    assert (result.type, result.version) == (type_name, version)
    assert same_data(result.data, data)
    assert result.offset == 412
    assert result.timestamp_ms == 1732100000000
    assert result.position == "events.jsonl:7"


@pytest.mark.parametrize(("type_name", "version"), TYPE_VERSIONS)
def test_valid_skip_record_metadata_line_parses(type_name: str, version: int) -> None:
    data = example(type_name, version)
    result = parse(skip_metadata_line(envelope(type_name, version, data)))
    assert isinstance(result, Record), result
    assert (result.type, result.version) == (type_name, version)
    assert same_data(result.data, data)
    assert result.offset is None


def test_log_append_time_dump_line() -> None:
    env = envelope("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID})
    text = (
        "| offset: 9 LogAppendTime: 1732100000999 keySize: -1 valueSize: 24 sequence: -1 headerKeys: [] "
        f"payload: {line(env)}"
    )
    result = parse(text)
    assert isinstance(result, Record)
    assert (result.offset, result.timestamp_ms) == (9, 1732100000999)


# --- tagged fields: absent = unchanged (not in data), [] = cleared (present, empty) --------------------------------

TAGGED = [(t, v, camel(f["name"])) for t, v in TYPE_VERSIONS for f in fields_at(t, v) if is_tagged(f, v)]
REQUIRED = [(t, v, camel(f["name"])) for t, v in TYPE_VERSIONS for f in fields_at(t, v) if not is_tagged(f, v)]


@pytest.mark.parametrize(("type_name", "version", "field"), TAGGED)
def test_absent_tagged_field_is_absent_from_data(type_name: str, version: int, field: str) -> None:
    data = example(type_name, version)
    del data[field]
    result = parse(envelope(type_name, version, data))
    assert isinstance(result, Record), result
    assert field not in result.data or result.data[field] is None


def test_empty_list_is_cleared_not_absent() -> None:
    data = {
        "partitionId": 0,
        "topicId": TOPIC_ID,
        "isr": [],
        "leader": -1,
        "eligibleLeaderReplicas": [],
        "lastKnownElr": [],
    }
    result = parse(envelope("PARTITION_CHANGE_RECORD", 2, data))
    assert isinstance(result, Record)
    assert result.data["isr"] == ()
    assert result.data["eligibleLeaderReplicas"] == ()
    assert result.data["lastKnownElr"] == ()
    assert "replicas" not in result.data or result.data["replicas"] is None


def test_tagged_null_means_unchanged() -> None:
    data = {"partitionId": 0, "topicId": TOPIC_ID, "isr": None, "leader": 2}
    result = parse(envelope("PARTITION_CHANGE_RECORD", 2, data))
    assert isinstance(result, Record), result
    assert result.data.get("isr") is None
    assert result.data["leader"] == 2


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"TOPIC_RECORD","version":0,"data":{',
        "{not json}",
        '{"type": TOPIC_RECORD}',
        "{'a': 1}",
        '{"type":"TOPIC_RECORD","version":0,"data":{"name":"foo","topicId":"' + TOPIC_ID + '"}} trailing',
    ],
)
def test_invalid_json(text: str) -> None:
    assert_error(parse(text), "invalid_json")


@pytest.mark.parametrize("text", ["[1,2,3]", '[{"type":"TOPIC_RECORD"}]'])
def test_non_object_json_array(text: str) -> None:
    assert_error(parse(text), "invalid_envelope")


@pytest.mark.parametrize("text", ["42", "null", '"PARTITION_RECORD"', "true"])
def test_non_object_json_scalar_is_quarantined(text: str) -> None:
    result = parse(text)
    assert isinstance(result, RecordError), result
    assert result.reason in ("invalid_json", "invalid_envelope")
    assert result.position == "events.jsonl:7"


@pytest.mark.parametrize("missing", ["type", "version", "data"])
def test_missing_envelope_key(missing: str) -> None:
    env = envelope("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID})
    del env[missing]
    assert_error(parse(env), "invalid_envelope", missing)


@pytest.mark.parametrize(
    "bad",
    [
        {"type": 5},
        {"type": None},
        {"type": "topic_record"},
        {"version": "0"},
        {"version": -1},
        {"version": 1.0},
        {"version": True},
        {"data": [1]},
        {"data": "x"},
        {"data": None},
    ],
)
def test_malformed_envelope_keys(bad: dict[str, Any]) -> None:
    env = envelope("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID})
    env.update(bad)
    (key,) = bad
    assert_error(parse(env), "invalid_envelope", key)


@pytest.mark.parametrize(("type_name", "version", "field"), REQUIRED)
def test_missing_required_field(type_name: str, version: int, field: str) -> None:
    data = example(type_name, version)
    del data[field]
    assert_error(parse(envelope(type_name, version, data)), "missing_field", field)


def newest_fields(*field_types: str) -> list[tuple[str, int, str, str]]:
    """(record type, its newest version, field, field type) of every field of one of ``field_types`` at the newest
    version of each record type."""
    return [
        (t, v, camel(f["name"]), f["type"])
        for t, v in TYPE_VERSIONS
        if v == max_version(t)
        for f in fields_at(t, v)
        if f["type"] in field_types
    ]


def assert_invalid_with(type_name: str, version: int, field: str, value: Any) -> None:
    """The type's example record with ``field`` set to ``value`` is an invalid_field error naming ``field``."""
    data = {**example(type_name, version), field: value}
    assert_error(parse(envelope(type_name, version, data)), "invalid_field", field)


INT_FIELDS = newest_fields("int8", "int16", "int32", "int64")
OUT_OF_RANGE = {"int8": 128, "int16": 2**15, "int32": 2**31, "int64": 2**63}


@pytest.mark.parametrize(("type_name", "version", "field", "kind"), INT_FIELDS)
@pytest.mark.parametrize("wrong", ["string", "bool", "float", "out_of_range", "list"])
def test_mistyped_int_field(type_name: str, version: int, field: str, kind: str, wrong: str) -> None:
    good = example(type_name, version)[field]
    value = {
        "string": str(good),
        "bool": True,
        "float": float(good) + 0.5,
        "list": [good],
        "out_of_range": OUT_OF_RANGE[kind],
    }[wrong]
    assert_invalid_with(type_name, version, field, value)


def test_float_with_integral_value_is_not_an_int() -> None:
    assert_invalid_with("PARTITION_RECORD", 2, "leaderEpoch", 4.0)


def test_negative_out_of_range_int8() -> None:
    data = {"partitionId": 0, "topicId": TOPIC_ID, "leaderRecoveryState": -129}
    assert_error(parse(envelope("PARTITION_CHANGE_RECORD", 2, data)), "invalid_field", "leaderRecoveryState")


#: Values of another type or form than a field's, by the field's type.
WRONG_VALUES: dict[str, list[Any]] = {
    "string": [5],
    "bool": [1, "true", None],
    "[]int32": ["0,1", [0, "1"], [0, 1.5], [True], 3, {"0": 1}],
    "uuid": [
        "FbrrdcfiR-KC2CPSTHaJr",
        "FbrrdcfiR-KC2CPSTHaJrgA",
        "FbrrdcfiR+KC2CPSTHaJr/",
        "!!!!!!!!!!!!!!!!!!!!!!",
        "",
        12,
        None,
        [],
        [TOPIC_ID],
        {"a": 1},
        "00000000-0000-0000-0000-000000000001",
    ],
}
MISTYPED = [(t, v, f, wrong) for t, v, f, kind in newest_fields(*WRONG_VALUES) for wrong in WRONG_VALUES[kind]]


@pytest.mark.parametrize(("type_name", "version", "field", "wrong"), MISTYPED)
def test_mistyped_string_bool_int_list_or_uuid_field(type_name: str, version: int, field: str, wrong: Any) -> None:
    assert_invalid_with(type_name, version, field, wrong)


# Every replica list of partition records (replicas, isr, elr, lastKnownElr, adding, removing) holds broker ids:
# a negative id or the same broker twice is invalid input.
REPLICA_LISTS = [
    (t, v, f) for t, v, f, _ in newest_fields("[]int32") if t in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")
]


@pytest.mark.parametrize(("type_name", "version", "field"), REPLICA_LISTS)
@pytest.mark.parametrize("wrong", [[0, -1], [-3], [1, 2, 1], [0, 0]])
def test_impossible_broker_ids_in_replica_list(type_name: str, version: int, field: str, wrong: list[int]) -> None:
    data = example(type_name, version)
    data[field] = wrong
    if field == "replicas" and "directories" in data:
        data["directories"] = [DIR] * len(wrong)
    assert_error(parse(envelope(type_name, version, data)), "invalid_field", field)


def test_malformed_uuid_in_directories() -> None:
    data = example("PARTITION_RECORD", 2)
    for wrong in ([DIR, "nope", DIR], [DIR, [], DIR], [DIR, {"x": 1}, DIR], [DIR, 5, None], "AAAA", {"a": DIR}):
        data["directories"] = wrong
        assert_error(parse(envelope("PARTITION_RECORD", 2, data)), "invalid_field", "directories")


@pytest.mark.parametrize("type_name", sorted(SCHEMAS))
def test_version_newer_than_known(type_name: str) -> None:
    newer = max_version(type_name) + 1
    data = example(type_name, max_version(type_name))
    assert_error(parse(envelope(type_name, newer, data)), "unsupported_version", "version")


LATER_FIELDS = [
    (t, v, camel(f["name"]))
    for t, v in TYPE_VERSIONS
    for f in SCHEMAS[t]["fields"]
    if not _in(v, f["versions"]) and _range(f["versions"])[0] > v
]


@pytest.mark.parametrize(("type_name", "version", "field"), LATER_FIELDS)
def test_field_not_in_version(type_name: str, version: int, field: str) -> None:
    assert_invalid_with(type_name, version, field, copy.deepcopy(SAMPLES[type_name][field]))


def test_later_fields_inventory() -> None:
    assert ("PARTITION_CHANGE_RECORD", 0, "eligibleLeaderReplicas") in LATER_FIELDS
    assert ("PARTITION_CHANGE_RECORD", 1, "lastKnownElr") in LATER_FIELDS
    assert ("PARTITION_RECORD", 0, "directories") in LATER_FIELDS


@pytest.mark.parametrize(
    ("type_name", "version", "field", "value"),
    [
        ("PARTITION_RECORD", 2, "leader", -2),
        ("PARTITION_RECORD", 2, "leaderRecoveryState", 2),
        ("PARTITION_RECORD", 2, "partitionId", -1),
        ("PARTITION_RECORD", 2, "leaderEpoch", -5),
        ("PARTITION_CHANGE_RECORD", 2, "leader", -3),
        ("PARTITION_CHANGE_RECORD", 2, "leaderRecoveryState", 2),
        ("BROKER_REGISTRATION_CHANGE_RECORD", 1, "fenced", 2),
        ("BROKER_REGISTRATION_CHANGE_RECORD", 1, "inControlledShutdown", 5),
        ("REGISTER_BROKER_RECORD", 3, "brokerId", -1),
        ("CONFIG_RECORD", 0, "value", "zero"),
        ("CONFIG_RECORD", 0, "value", "0"),
    ],
)
def test_impossible_values(type_name: str, version: int, field: str, value: Any) -> None:
    assert_invalid_with(type_name, version, field, value)


def test_partition_record_without_replicas_is_impossible() -> None:
    assert_invalid_with("PARTITION_RECORD", 0, "replicas", [])


def test_envelope_offset_must_be_a_non_negative_int() -> None:
    env = envelope("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID})
    env["offset"] = "12"
    assert_error(parse(env), "invalid_envelope", "offset")
    env["offset"] = -1
    assert_error(parse(env), "invalid_envelope", "offset")


def test_envelope_offset_must_match_the_dump_log_offset() -> None:
    env = envelope("TOPIC_RECORD", 0, {"name": "foo", "topicId": TOPIC_ID}, offset=13)
    assert_error(parse(dump_line(env, offset=12)), "invalid_envelope", "offset")
    result = parse(dump_line(env, offset=13))
    assert isinstance(result, Record) and result.offset == 13


def test_dump_line_with_bad_payload_is_quarantined_with_its_offset() -> None:
    text = "| offset: 77 CreateTime: 1732100000000 keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: {oops"
    result = parse(text)
    assert_error(result, "invalid_json")
    assert result.offset == 77


# --- skipped, ignored, quarantined lines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "data"),
    [
        ("PRODUCER_IDS_RECORD", {"brokerId": 1, "brokerEpoch": 101, "nextProducerId": 5000}),
        ("NO_OP_RECORD", {}),
        (
            "ACCESS_CONTROL_ENTRY_RECORD",
            {
                "id": uuid_of(9),
                "resourceType": 2,
                "resourceName": "foo",
                "patternType": 3,
                "principal": "User:a",
                "host": "*",
                "operation": 3,
                "permissionType": 3,
            },
        ),
        ("CLIENT_QUOTA_RECORD", {"entity": [], "key": "producer_byte_rate", "value": 1024.0, "remove": False}),
    ],
)
def test_unused_types_are_skipped(type_name: str, data: dict[str, Any]) -> None:
    for text in (line(envelope(type_name, 0, data, offset=3)), dump_line(envelope(type_name, 0, data), offset=3)):
        result = parse(text)
        assert isinstance(result, Skipped), result
        assert result.type == type_name
        assert result.offset == 3


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "Dumping /var/kafka/__cluster_metadata-0/00000000000000000000.log",
        "Log starting offset: 0",
        "Snapshot end offset: 4242, epoch: 7",
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 producerEpoch: -1 "
        "partitionLeaderEpoch: 1 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        "position: 0 CreateTime: 1732100000000 size: 312 magic: 2 compresscodec: none crc: 1234567 isvalid: true",
        "| offset: 0 CreateTime: 1732100000000 keySize: 4 valueSize: 19 sequence: -1 headerKeys: [] "
        'SnapshotHeader {"version":0,"lastContainedLogTimestamp":0}',
        "| offset: 5 CreateTime: 1732100000000 keySize: 4 valueSize: 10 sequence: -1 headerKeys: [] "
        'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}',
    ],
)
def test_dump_log_headers_and_control_lines_are_ignored(text: str) -> None:
    assert isinstance(parse(text), Ignored)


def test_dump_log_error_line_is_quarantined() -> None:
    text = "Error at 12, skipping. Could not deserialize record: unknown apiKey 99"
    result = parse(text)
    assert_error(result, "undecodable_record")
    assert result.offset == 12
    assert "unknown apiKey 99" in result.message and result.raw == text


@pytest.mark.parametrize(
    "raw", [b"\xff\xfe\xfd", b'{"type":"TOPIC_RECORD","version":0,"data":{"name":"f\xc3"}}', b"\x80abc"]
)
def test_non_utf8_bytes_are_quarantined(raw: bytes) -> None:
    assert_error(parse(raw), "invalid_json")


def test_garbage_text_is_quarantined_with_position() -> None:
    assert_error(parse("hello world"), "invalid_json")


# --- json-format.md §1.2 example payloads -----------------------------------------------------------------------------


def _reference_payloads() -> list[str]:
    if JSON_FORMAT.exists():
        text = JSON_FORMAT.read_text()
        found = [m.group(1) for m in re.finditer(r"^valueSize=\d+\s+(\{.*\})\s*$", text, re.M)]
        if found:
            return found
    return [x for x in PAYLOADS_COPY.read_text().splitlines() if x.startswith("{")]


PAYLOADS = _reference_payloads()


def test_reference_payloads_found() -> None:
    assert len(PAYLOADS) >= 24
    assert {json.loads(p)["type"] for p in PAYLOADS} >= SPEC_TYPES


@pytest.mark.parametrize("payload", PAYLOADS, ids=[f"p{i}" for i in range(len(PAYLOADS))])
def test_reference_payload_parses(payload: str) -> None:
    env = json.loads(payload)
    for text in (payload, dump_line(env, offset=412), skip_metadata_line(env)):
        result = parse(text)
        assert isinstance(result, Record), (text, result)
        assert (result.type, result.version) == (env["type"], env["version"])
        assert same_data(result.data, env["data"])


def test_reference_full_dump_line() -> None:
    text = (
        "| offset: 412 CreateTime: 1732100000000 keySize: -1 valueSize: 55 sequence: -1 headerKeys: [] payload: "
        '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":0,"topicId":"FbrrdcfiR-KC2CPSTHaJrg",'
        '"isr":[],"leader":-1,"eligibleLeaderReplicas":[0,1,2],"lastKnownElr":[0]}}'
    )
    result = parse(text)
    assert isinstance(result, Record)
    assert result.offset == 412 and result.timestamp_ms == 1732100000000
    assert result.data == {
        "partitionId": 0,
        "topicId": TOPIC_ID,
        "isr": (),
        "leader": -1,
        "eligibleLeaderReplicas": (0, 1, 2),
        "lastKnownElr": (0,),
    }


def test_nullable_rack_and_config_delete() -> None:
    data = example("REGISTER_BROKER_RECORD", 3)
    data["rack"] = None
    result = parse(envelope("REGISTER_BROKER_RECORD", 3, data))
    assert isinstance(result, Record) and result.data["rack"] is None
    result = parse(
        envelope(
            "CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": None}
        )
    )
    assert isinstance(result, Record) and result.data["value"] is None


def test_parse_line_never_raises_on_odd_input() -> None:
    for text in [
        "|",
        "| payload:",
        "| payload: ",
        "| offset: x payload: {}",
        "{",
        "}",
        "[",
        "\x00",
        "\ud800",
        '{"type":"PARTITION_RECORD","version":99999999999999999999999,"data":{}}',
        '{"type":"PARTITION_RECORD","version":0,"data":{"partitionId":1e400}}',
    ]:
        result = parse(text)
        assert isinstance(result, RecordError | Ignored), (text, result)


# --- the straight-line fast path agrees with the generic validator ----------------------------------------------

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["AAAAAAAAAAAAAAAAAAAAAg", "AAAAAAAAAAAAAAAAAAAAA", "min.insync.replicas", "true"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)
_INT_LISTS = st.lists(st.integers(-3, 2**31) | st.booleans(), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(TYPE_VERSIONS),
    st.data(),
)
def test_fast_validator_accepts_only_what_the_generic_validator_accepts(type_version, data) -> None:
    """The generated straight-line validator returns the generic validator's result, or None (= ask it)."""
    type_name, version = type_version
    record = copy.deepcopy(example(type_name, version))
    for key in data.draw(st.lists(st.sampled_from([*sorted(record), "extra"]), max_size=3)):
        record[key] = data.draw(_JSON_VALUES | _INT_LISTS)
    for key in data.draw(st.lists(st.sampled_from(sorted(record)), max_size=2)):
        record.pop(key, None)
    fast = records_module._fast_validator(type_name, version)(copy.deepcopy(record))
    try:
        generic = records_module._validate_data(type_name, version, copy.deepcopy(record))
    except records_module._Invalid:
        generic = None
    if fast is not None:
        assert generic is not None, (record, fast)
        assert fast == generic and {k: type(v) for k, v in fast.items()} == {k: type(v) for k, v in generic.items()}


@pytest.mark.parametrize(("type_name", "version"), TYPE_VERSIONS)
def test_fast_validator_takes_the_valid_examples(type_name: str, version: int) -> None:
    """Valid records go through the fast path (else it would be no faster)."""
    data = example(type_name, version)
    assert records_module._fast_validator(type_name, version)(copy.deepcopy(data)) == records_module._validate_data(
        type_name, version, copy.deepcopy(data)
    )


def test_the_parser_uses_one_validator_per_type_and_version() -> None:
    """Every used (type, version) gets its straight-line validator from `validator_source` once, and the
    parser's hot path calls that same function."""
    used = {
        (name, version)
        for name in records_module.USED_TYPES
        for version in range(records_module.schema_versions(name)[0], records_module.schema_versions(name)[1] + 1)
    }
    for type_name, version in sorted(used):
        validator = records_module._fast_validator(type_name, version)
        assert records_module._fast_validator(type_name, version) is validator
    for type_name, version in sorted(used & set(TYPE_VERSIONS)):  # the types of Kafka's schemas: an example each
        validator = records_module._fast_validator(type_name, version)
        text = json.dumps({"type": type_name, "version": version, "data": example(type_name, version)})
        assert isinstance(records_module.parse_envelope(text), Record), (type_name, version)
        assert records_module._VALIDATORS[(type_name, version)] is validator
