"""The registry of record types (state/record_types.py): one entry, its schema and its handler are all a new type
needs to be parsed, validated, routed (in Python and in the JVM's expression), applied by the core, counted by the
bucket that reports it and keyed by ``elrwatch produce``; and every module reads the built-in entries."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_events import TOPIC_ID, envelope, line, partition, topic

from elrwatch.kafkaio.produce import key_of
from elrwatch.state import record_types, records
from elrwatch.state.cluster import ClusterState
from elrwatch.state.outcome import Outcome
from elrwatch.state.gauges import PipelineCounts
from elrwatch.state.records import Record, RecordError, Skipped, parse_line
from elrwatch.state.routing import ALL_BUCKETS, bucket_of, reporter, targets
from elrwatch.streaming import bucket as bucket_module
from elrwatch.streaming import route
from elrwatch.streaming import snapshots as snapshot_module

FAKE = "PARTITION_NOTE_RECORD"
BUCKETS = 4

#: The fake type's schema, in Kafka's format: version 1 adds a broker list.
FAKE_SCHEMA: dict[str, Any] = {
    "name": "PartitionNoteRecord",
    "validVersions": "0-1",
    "fields": [
        {"name": "TopicId", "type": "uuid", "versions": "0+"},
        {"name": "PartitionId", "type": "int32", "versions": "0+"},
        {"name": "Note", "type": "string", "versions": "0+"},
        {"name": "Brokers", "type": "[]int32", "versions": "1+"},
    ],
}

#: What the fake handler applied: (bucket of the state, note).
APPLIED: list[tuple[Any, str]] = []


def apply_note(state: ClusterState, record: Record) -> Outcome | RecordError:
    """The fake type's handler: a note about a partition the state knows, else the record is quarantined."""
    data = record.data
    if state.partition(data["topicId"], data["partitionId"]) is None:
        message = f"no partition {data['partitionId']} of {data['topicId']}"
        return RecordError(record.position, "unknown_partition", "partitionId", message, "", record.type, record.offset)
    APPLIED.append((state.bucket, data["note"]))
    return Outcome.APPLIED


FAKE_ENTRY = record_types.RecordType(
    FAKE,
    record_types.SCOPE_PARTITION,
    record_types.ROUTE_OWNER,
    apply_note,
    record_types.BY_TOPIC_ID,
    schema=FAKE_SCHEMA,
)


@pytest.fixture
def fake_type() -> Iterator[record_types.RecordType]:
    """The fake type registered for one test."""
    APPLIED.clear()
    record_types.register(FAKE_ENTRY)
    try:
        yield FAKE_ENTRY
    finally:
        record_types.unregister(FAKE)


def _note(partition_id: int, note: str = "hello", version: int = 0, **extra: Any) -> str:
    data: dict[str, Any] = {"topicId": TOPIC_ID, "partitionId": partition_id, "note": note, **extra}
    return line(envelope(FAKE, version, data))


def _setup_lines(partitions: int) -> list[str]:
    out = [line(envelope(*topic("t")))]
    out += [line(envelope(*partition(partition_id=p))) for p in range(partitions)]
    return out


# --- parse and validate ---------------------------------------------------------------------------------------


def test_a_registered_type_is_parsed_and_validated_against_its_schema(fake_type: record_types.RecordType) -> None:
    parsed = parse_line(_note(3, version=1, brokers=[2, 1]), "ev", 7)
    assert isinstance(parsed, Record)
    assert (parsed.type, parsed.version) == (FAKE, 1)
    assert parsed.data == {"topicId": TOPIC_ID, "partitionId": 3, "note": "hello", "brokers": (2, 1)}
    missing = parse_line(line(envelope(FAKE, 0, {"topicId": TOPIC_ID, "partitionId": 3})), "ev", 8)
    assert isinstance(missing, RecordError)
    assert (missing.reason, missing.field) == ("missing_field", "note")
    bad = parse_line(_note(3, version=1, brokers=[1, 1]), "ev", 9)
    assert isinstance(bad, RecordError) and (bad.reason, bad.field) == ("invalid_field", "brokers")
    not_in_v0 = parse_line(_note(3, version=0, brokers=[1]), "ev", 10)
    assert isinstance(not_in_v0, RecordError) and not_in_v0.field == "brokers"
    too_new = parse_line(_note(3, version=2), "ev", 11)
    assert isinstance(too_new, RecordError) and too_new.reason == "unsupported_version"
    # the validator built from the schema at run time accepts exactly what the checked path accepts
    data = {"topicId": TOPIC_ID, "partitionId": 3, "note": "x", "brokers": [4]}
    assert records._fast_validator(FAKE, 1)(dict(data)) == records._validate_data(FAKE, 1, dict(data))


def test_an_unregistered_type_is_skipped() -> None:
    assert record_types.get(FAKE) is None
    skipped = parse_line(_note(3), "ev", 1)
    assert isinstance(skipped, Skipped) and skipped.type == FAKE


# --- route ----------------------------------------------------------------------------------------------------


def test_a_registered_type_routes_as_its_entry_says(fake_type: record_types.RecordType) -> None:
    data = {"topicId": TOPIC_ID, "partitionId": 0}
    owner = bucket_of(TOPIC_ID, 0, BUCKETS)
    # ROUTE_OWNER: even partition 0 goes to its owner only (PARTITION_RECORD's partition 0 goes everywhere)
    assert targets(FAKE, data, BUCKETS) == owner
    assert targets(records.PARTITION_RECORD, data, BUCKETS) == ALL_BUCKETS
    assert reporter(FAKE, data, BUCKETS) == owner
    assert f"'{FAKE}'" in route.jvm_placed_condition()


def test_the_jvm_condition_names_the_partition_routed_types() -> None:
    condition = route.jvm_placed_condition("h")
    names = condition.split("IN (")[1].split(")")[0]
    assert sorted(name.strip(" '") for name in names.split(",")) == sorted(
        [records.PARTITION_RECORD, records.PARTITION_CHANGE_RECORD, records.REPLICA_LOG_INFO_RECORD]
    )
    assert "h.data.topicId IS NOT NULL" in condition and "coalesce(h.data.partitionId, 0) > 0" in condition


# --- apply, count, key ----------------------------------------------------------------------------------------


def test_the_core_applies_a_registered_type_with_its_handler(fake_type: record_types.RecordType) -> None:
    state = ClusterState()
    for seq, text in enumerate(_setup_lines(2)):
        assert state.apply(parse_line(text, "ev", seq)) is Outcome.APPLIED  # type: ignore[arg-type]
    assert state.apply(parse_line(_note(1, "one"), "ev", 10)) is Outcome.APPLIED  # type: ignore[arg-type]
    assert APPLIED == [(None, "one")]
    assert state.apply(parse_line(_note(1, "one"), "ev", 10)) is Outcome.DUPLICATE  # type: ignore[arg-type]
    assert state.apply(parse_line(_note(5, "nowhere"), "ev", 11)) is Outcome.QUARANTINED  # type: ignore[arg-type]
    assert state.last_error is not None and state.last_error.reason == "unknown_partition"
    assert APPLIED == [(None, "one")]


def _rows(lines: list[str], kind: int) -> list[tuple[int, str, int, bytes]]:
    return [(kind, "ev/0", seq, text.encode()) for seq, text in enumerate(lines)]


@pytest.mark.parametrize("kind", ["python", route.KIND_RAW_BROADCAST])
def test_the_owner_bucket_applies_and_counts_a_registered_type(
    fake_type: record_types.RecordType, kind: str | int
) -> None:
    """Routed in Python (``route_batches``'s rows) or sent to every bucket as raw lines (the JVM's `KIND_RAW_BROADCAST` rows)."""
    lines = [*_setup_lines(8), *(_note(p, f"note {p}") for p in range(8))]
    states = [
        snapshot_module.BucketState(ClusterState(bucket=(b, BUCKETS)), PipelineCounts(), {}) for b in range(BUCKETS)
    ]
    if kind == "python":
        import pyarrow as pa

        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(lines),
                pa.array(["ev"] * len(lines)),
                pa.array([0] * len(lines), pa.int32()),
                pa.array(range(len(lines)), pa.int64()),
            ],
            names=["value", "topic", "partition", "offset"],
        )
        routed = pa.Table.from_batches(list(route.route_batches(iter([batch]), BUCKETS))).to_pylist()
        per_bucket = {
            b: [(r["kind"], r["src"], r["seq"], r["rec"]) for r in routed if r["bucket"] == b] for b in range(BUCKETS)
        }
    else:
        per_bucket = {b: _rows(lines, kind) for b in range(BUCKETS)}
    for b in range(BUCKETS):
        quarantined = bucket_module.apply_rows(b, BUCKETS, iter(per_bucket[b]), states[b])
        assert quarantined == []
    assert sorted(APPLIED, key=lambda a: a[1]) == [
        ((bucket_of(TOPIC_ID, p, BUCKETS), BUCKETS), f"note {p}") for p in range(8)
    ]
    counted = [states[b].counts.events_by_type[FAKE] for b in range(BUCKETS)]
    assert sum(counted) == 8  # once each, by its owner
    for b in range(BUCKETS):
        assert counted[b] == sum(1 for p in range(8) if bucket_of(TOPIC_ID, p, BUCKETS) == b)


def test_produce_keys_a_registered_type_by_its_entry(fake_type: record_types.RecordType) -> None:
    assert key_of(_note(3)) == f"topic:{TOPIC_ID}".encode()


# --- the built-in entries ---------------------------------------------------------------------------------------


def test_the_registry_refuses_inconsistent_entries() -> None:
    with pytest.raises(ValueError, match="already registered"):
        record_types.register(record_types.get(records.TOPIC_RECORD))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only a partition's records"):
        record_types.register(
            record_types.RecordType(
                "X_RECORD", record_types.SCOPE_TOPIC, record_types.ROUTE_OWNER, apply_note, schema=FAKE_SCHEMA
            )
        )
    with pytest.raises(ValueError, match="has a schema"):
        record_types.register(
            record_types.RecordType("X_RECORD", record_types.SCOPE_CLUSTER, record_types.ROUTE_EVERY, apply_note)
        )
    with pytest.raises(ValueError, match="built in"):
        record_types.unregister(records.TOPIC_RECORD)
    assert record_types.get("X_RECORD") is None


def test_every_applied_builtin_type_has_a_handler_method_and_a_schema() -> None:
    for entry in record_types.BUILTIN_TYPES:
        if entry.handler is None:
            assert entry.route == record_types.ROUTE_SKIPPED
            assert isinstance(parse_line(line(envelope(entry.name, 0, {})), "ev", 0), Skipped)
            continue
        assert isinstance(entry.handler, str) and callable(getattr(ClusterState, entry.handler)), entry.name
        assert records.schema_versions(entry.name)[0] == 0
    assert set(record_types.applied_names()) == records.USED_TYPES


def test_the_admin_bridge_derives_exactly_the_derivable_types() -> None:
    from elrwatch.bridge.admin import DERIVED_TYPES, Broker, Partition, Topic, View, diff

    new = View(
        brokers={1: Broker(fenced=False), 2: Broker(fenced=False)},
        topics={"t": Topic(TOPIC_ID, {0: Partition(1, 0, [1, 2], [1, 2], [], [])})},
        features={record_types.METADATA_VERSION: 21},
        cluster_configs={record_types.MIN_ISR: "2"},
        topic_configs={"t": {record_types.UNCLEAN_ENABLE: "true"}},
    )
    first = diff(None, new, 0, 1)
    later = View(
        brokers={1: Broker(fenced=False), 2: Broker(fenced=True)},
        topics={"t": Topic(TOPIC_ID, {0: Partition(1, 1, [1, 2], [1], [], [])})},
        features={record_types.METADATA_VERSION: 21},
        cluster_configs={record_types.MIN_ISR: "2"},
        topic_configs={"t": {record_types.UNCLEAN_ENABLE: "true"}},
    )
    second = diff(new, later, len(first), 2)
    gone = diff(later, View(features=later.features), len(first) + len(second), 3)
    emitted = {event["type"] for event in first + second + gone}
    assert emitted == DERIVED_TYPES == record_types.admin_derivable_names()
    assert {records.REPLICA_LOG_INFO_RECORD, records.FENCE_BROKER_RECORD} & DERIVED_TYPES == set()
    json.dumps(first)  # envelopes, as published


def test_the_log_bridge_learns_topic_ids_as_produce_does(tmp_path: Path) -> None:
    """The metadata-log bridge remembers each topic's id from the records that tell it (`learn_topic_name`), so a
    restarted bridge keys a topic's configs like its partitions."""
    from test_bridge import make_batch, real_values, write_segment

    from elrwatch.bridge.runner import LogBridge, MemoryPublisher, Metrics, StateFile

    log_dir = tmp_path / "log"
    log_dir.mkdir()
    write_segment(log_dir, 0, make_batch(0, [value for _, value in real_values()]))
    publisher = MemoryPublisher()
    bridge = LogBridge(log_dir, publisher, StateFile(None), Metrics())
    assert bridge.step() > 0
    events = [json.loads(text) for text in publisher.lines]
    told = {e["data"]["name"]: e["data"]["topicId"] for e in events if e["type"] == records.TOPIC_RECORD}
    assert told and bridge.topic_ids == told
    keyed: dict[str, str] = {}
    for event in events:
        key_of(json.dumps(event), keyed)
    assert keyed == told
