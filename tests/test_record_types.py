"""The registry of record types (state/record_types.py): an entry, its schema and its handlers in the stores are
all a new type needs to be parsed, validated, routed (in Python and in the JVM's expression), applied by both
partition stores alike (the columnar one the runtime's), counted by the bucket that reports it and keyed by
``elrwatch produce``; a type missing a handler is refused with one line when it is registered; and every module
reads the built-in entries.

Two fake types are registered at run time, as DESIGN.md's recipe adds a type:

* ``ISR_SHRINK_RECORD``, a partition's record: a broker leaves the partition's ISR. Its handler is one function
  over the stores' common API (`PartitionStore.apply_change`), named for both stores.
* ``BROKER_MAINTENANCE_RECORD``, a broker's record: the broker enters a planned shutdown. Its handler is a function
  over the image's brokers area: the partitions of that broker derive again in each store by the area's effects.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from core_events import TOPIC_ID, base_cluster, envelope, line, partition, topic
from test_columnar import run_both

from elrwatch.kafkaio.produce import key_of
from elrwatch.state import record_types, records
from elrwatch.state.cluster import ClusterState
from elrwatch.state.eventgen import EventGenerator
from elrwatch.state.image import AREA_CLASSES, MetadataImage
from elrwatch.state.outcome import Outcome, record_error
from elrwatch.state.partitions import PartitionStore
from elrwatch.state.partitions.columnar import ColumnarPartitions
from elrwatch.state.partitions.objects import ObjectPartitions
from elrwatch.state.records import Record, RecordError, Skipped, parse_line
from elrwatch.state.routing import ALL_BUCKETS, bucket_of, reporter, targets
from elrwatch.streaming import bucket_input, route
from elrwatch.streaming import snapshots as snapshot_module

FAKE = "ISR_SHRINK_RECORD"
FAKE_BROKER = "BROKER_MAINTENANCE_RECORD"
BUCKETS = 4


def _field(name: str, field_type: str, versions: str = "0+", **more: str) -> dict[str, Any]:
    """A field of a record spec in Kafka's schema format."""
    return {"name": name, "type": field_type, "versions": versions, **more}


BROKER_ID = _field("BrokerId", "int32", entityType="brokerId")
#: The fake partition type's schema, in Kafka's format: version 1 adds a reason.
FAKE_SCHEMA: dict[str, Any] = {
    "name": "IsrShrinkRecord",
    "validVersions": "0-1",
    "fields": [
        _field("TopicId", "uuid"),
        _field("PartitionId", "int32"),
        BROKER_ID,
        _field("Reasons", "[]int32", "1+"),
    ],
}
FAKE_BROKER_SCHEMA: dict[str, Any] = {
    "name": "BrokerMaintenanceRecord",
    "validVersions": "0",
    "fields": [BROKER_ID, _field("BrokerEpoch", "int64")],
}


def shrink_isr(store: PartitionStore, record: Record) -> Outcome | RecordError:
    """The fake partition type's handler, in either store: the broker leaves the partition's ISR (a partition
    change of its ISR)."""
    data = record.data
    store.flush()  # the columnar store's partitions as of the records before this one
    current = store.partition(data["topicId"], data["partitionId"])
    if current is None:
        return record_error(record, "unknown_partition", "partitionId", "no PARTITION_RECORD for this partition")
    isr = tuple(b for b in current.isr if b != data["brokerId"])
    return store.apply_change(record, {"topicId": data["topicId"], "partitionId": data["partitionId"], "isr": isr})


def enter_maintenance(image: MetadataImage, record: Record) -> Outcome | RecordError:
    """The fake broker type's handler: the registered broker (at its epoch) enters a controlled shutdown."""
    return image.brokers.update(record, lambda broker: setattr(broker, "in_controlled_shutdown", True))


FAKE_ENTRY = record_types.RecordType(
    FAKE,
    record_types.SCOPE_PARTITION,
    record_types.ROUTE_OWNER,
    handlers=dict.fromkeys(record_types.STORES, shrink_isr),
    key=record_types.BY_TOPIC_ID,
    schema=FAKE_SCHEMA,
)
FAKE_BROKER_ENTRY = record_types.RecordType(
    FAKE_BROKER,
    record_types.SCOPE_BROKER,
    record_types.ROUTE_EVERY,
    handler=enter_maintenance,
    key=record_types.ProducerKey(record_types.KEY_BROKER, "brokerId"),
    schema=FAKE_BROKER_SCHEMA,
)


@pytest.fixture
def fake_type(request: pytest.FixtureRequest) -> record_types.RecordType:
    """The fake types registered for one test (the partition type's entry); each unregistered at its end."""
    for entry in (FAKE_ENTRY, FAKE_BROKER_ENTRY):
        record_types.register(entry)
        request.addfinalizer(functools.partial(record_types.unregister, entry.name))
    return FAKE_ENTRY


def _note(partition_id: int, broker: int = 1, version: int = 0, offset: int | None = None, **extra: Any) -> str:
    data: dict[str, Any] = {"topicId": TOPIC_ID, "partitionId": partition_id, "brokerId": broker, **extra}
    return line(envelope(FAKE, version, data, offset))


def _maintenance(broker: int, epoch: int = 100, offset: int | None = None) -> str:
    return line(envelope(FAKE_BROKER, 0, {"brokerId": broker, "brokerEpoch": epoch}, offset))


def _setup_lines(partitions: int) -> list[str]:
    out = [line(envelope(*topic("t")))]
    out += [line(envelope(*partition(partition_id=p))) for p in range(partitions)]
    return out


# --- parse and validate ---------------------------------------------------------------------------------------


def test_a_registered_type_is_parsed_and_validated_against_its_schema(fake_type: record_types.RecordType) -> None:
    parsed = parse_line(_note(3, version=1, reasons=[2, 1]), "ev", 7)
    assert isinstance(parsed, Record)
    assert (parsed.type, parsed.version) == (FAKE, 1)
    assert parsed.data == {"topicId": TOPIC_ID, "partitionId": 3, "brokerId": 1, "reasons": (2, 1)}
    missing = parse_line(line(envelope(FAKE, 0, {"topicId": TOPIC_ID, "partitionId": 3})), "ev", 8)
    assert isinstance(missing, RecordError)
    assert (missing.reason, missing.field) == ("missing_field", "brokerId")
    bad = parse_line(_note(3, version=1, reasons="x"), "ev", 9)
    assert isinstance(bad, RecordError) and (bad.reason, bad.field) == ("invalid_field", "reasons")
    not_in_v0 = parse_line(_note(3, version=0, reasons=[1]), "ev", 10)
    assert isinstance(not_in_v0, RecordError) and not_in_v0.field == "reasons"
    too_new = parse_line(_note(3, version=2), "ev", 11)
    assert isinstance(too_new, RecordError) and too_new.reason == "unsupported_version"
    broker = parse_line(_maintenance(2), "ev", 12)
    assert isinstance(broker, Record) and broker.data == {"brokerId": 2, "brokerEpoch": 100}
    # the validator built from the schema at run time accepts exactly what the checked path accepts
    data = {"topicId": TOPIC_ID, "partitionId": 3, "brokerId": 4, "reasons": [4]}
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
    assert targets(FAKE_BROKER, {"brokerId": 1, "brokerEpoch": 1}, BUCKETS) == ALL_BUCKETS


def test_the_jvm_condition_names_the_partition_routed_types() -> None:
    condition = route.jvm_placed_condition("h")
    names = condition.split("IN (")[1].split(")")[0]
    named = sorted(name.strip(" '") for name in names.split(","))
    assert named == sorted(record_types.partition_routed_names())  # the registry's, whatever types it holds
    assert {records.PARTITION_RECORD, records.PARTITION_CHANGE_RECORD, records.REPLICA_LOG_INFO_RECORD} <= set(named)
    assert "h.data.topicId IS NOT NULL" in condition and "coalesce(h.data.partitionId, 0) > 0" in condition


# --- apply, count, key ----------------------------------------------------------------------------------------


def _fake_stream(seed: int) -> list[list[str]]:
    """Batches of a generated cluster with the fake types among its records: shrinks of live and gone partitions,
    re-sent ones, planned shutdowns of registered and unknown brokers, then fences and churn."""
    gen = EventGenerator(topics=2, partitions=12, brokers=4, seed=seed)
    boot = [text.decode() for text in gen.bootstrap()]
    topic_id = gen.topic_ids[0]

    def shrink(pid: int, broker: int) -> str:
        gen.offset += 1  # the generator's offsets go on after this record's
        return line(envelope(FAKE, 0, {"topicId": topic_id, "partitionId": pid, "brokerId": broker}, gen.offset))

    def maintenance(broker: int) -> str:
        gen.offset += 1
        return _maintenance(broker, gen.epochs.get(broker, 100), gen.offset)

    first = [shrink(p, b) for p in range(12) for b in (0, 1)]
    first += [first[3], shrink(99, 0), maintenance(2), maintenance(77)]
    second = [maintenance(3), shrink(0, 2), shrink(5, 3), *(t.decode() for t in gen.churn(40))]
    return [boot, first, [t.decode() for t in gen.fence(1)], second, [t.decode() for t in gen.churn(40)]]


@pytest.mark.parametrize("bucket", [None, (0, 3), (1, 3), (2, 3)])
def test_both_stores_apply_the_registered_types_alike(fake_type: record_types.RecordType, bucket: Any) -> None:
    """The differential harness (tests/test_columnar.py) on a stream with the fake types: every outcome, error,
    partition, transition, counter, gauge and output of the columnar store (the default) equals the object
    store's, record by record and as lines admitted as vectors."""
    for as_lines in (False, True):
        result = run_both(_fake_stream(7), bucket=bucket, default_min_isr=2, as_lines=as_lines)
        assert result.outcomes.get("applied", 0) > 0 and result.outcomes.get("quarantined", 0) > 0
        assert result.transitions > 0


def test_the_registered_types_change_partitions_and_brokers(fake_type: record_types.RecordType) -> None:
    state = ClusterState()
    assert state.store == record_types.STORE_COLUMNAR  # the default: the runtime's store
    lines = [*(line(envelope(*r)) for r in base_cluster(brokers=(0, 1, 2))), *_setup_lines(2)]
    for seq, text in enumerate(lines):
        assert state.apply(parse_line(text, "ev", seq)) is Outcome.APPLIED  # type: ignore[arg-type]
    assert state.apply(parse_line(_note(1, broker=2, offset=10), "ev", 10)) is Outcome.APPLIED  # type: ignore[arg-type]
    p1 = state.partition(TOPIC_ID, 1)
    assert p1 is not None and p1.isr == (0, 1) and p1.status == "UNDER_REPLICATED" and p1.partition_epoch == 1
    assert state.apply(parse_line(_note(1, broker=2, offset=10), "ev", 11)) is Outcome.DUPLICATE  # type: ignore[arg-type]
    assert state.apply(parse_line(_note(5, offset=12), "ev", 12)) is Outcome.QUARANTINED  # type: ignore[arg-type]
    assert state.last_error is not None and state.last_error.reason == "unknown_partition"
    assert state.apply(parse_line(_maintenance(0, offset=13), "ev", 13)) is Outcome.APPLIED  # type: ignore[arg-type]
    assert state.brokers[0].in_controlled_shutdown and not state.is_active(0)
    assert state.apply(parse_line(_maintenance(9, offset=14), "ev", 14)) is Outcome.QUARANTINED  # type: ignore[arg-type]
    assert state.last_error is not None and state.last_error.reason == "unknown_broker"
    gauges = dict(state.partitions.gauges())
    offline = {b: gauges[("elrwatch_broker_restart_offline_partitions", (("broker", str(b)),))] for b in range(3)}
    assert offline == {0: 0, 1: 1, 2: 0}  # partition 1's ISR is (0, 1) and 0 is stopping: only 1 can lead it


def _rows(lines: list[str], kind: int) -> list[tuple[int, str, int, bytes]]:
    return [(kind, "ev/0", seq, text.encode()) for seq, text in enumerate(lines)]


@pytest.mark.parametrize("kind", ["python", route.KIND_RAW_BROADCAST])
def test_the_owner_bucket_applies_and_counts_a_registered_type(
    fake_type: record_types.RecordType, kind: str | int
) -> None:
    """Routed in Python (``route_batches``'s rows) or sent to every bucket as raw lines (the JVM's `KIND_RAW_BROADCAST` rows)."""
    brokers = [line(envelope(*r)) for r in base_cluster(brokers=(0, 1, 2))]
    lines = [*brokers, *_setup_lines(8), *(_note(p, broker=p % 3) for p in range(8)), _maintenance(1)]
    states = [snapshot_module.BucketState.new(b, BUCKETS, 1) for b in range(BUCKETS)]
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
        quarantined = bucket_input.apply_rows(b, BUCKETS, iter(per_bucket[b]), states[b])
        assert quarantined == []
    for p in range(8):  # the owner's state applied the shrink; no other bucket holds the partition
        owner = states[bucket_of(TOPIC_ID, p, BUCKETS)].cluster
        held = owner.partition(TOPIC_ID, p)
        assert held is not None and p % 3 not in held.isr and len(held.isr) == 2
    for s in states:  # every bucket applied the broker's record
        assert s.cluster.brokers[1].in_controlled_shutdown
    counted = [states[b].counts.events_by_type[FAKE] for b in range(BUCKETS)]
    assert sum(counted) == 8  # once each, by its owner
    for b in range(BUCKETS):
        assert counted[b] == sum(1 for p in range(8) if bucket_of(TOPIC_ID, p, BUCKETS) == b)
    assert [s.counts.events_by_type[FAKE_BROKER] for s in states] == [1, 0, 0, 0]  # bucket 0 reports it


def test_produce_keys_a_registered_type_by_its_entry(fake_type: record_types.RecordType) -> None:
    assert key_of(_note(3)) == f"topic:{TOPIC_ID}".encode()


# --- the built-in entries ---------------------------------------------------------------------------------------


def test_the_registry_refuses_inconsistent_entries() -> None:
    with pytest.raises(ValueError, match="already registered"):
        record_types.register(record_types.get(records.TOPIC_RECORD))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only a partition's records"):
        record_types.register(
            record_types.RecordType(
                "X_RECORD", record_types.SCOPE_TOPIC, record_types.ROUTE_OWNER, handler="topics.apply_topic"
            )
        )
    with pytest.raises(ValueError, match="has a schema"):
        record_types.register(
            record_types.RecordType(
                "X_RECORD", record_types.SCOPE_CLUSTER, record_types.ROUTE_EVERY, handler=enter_maintenance
            )
        )
    with pytest.raises(ValueError, match="built in"):
        record_types.unregister(records.TOPIC_RECORD)
    assert record_types.get("X_RECORD") is None


def _partition_entry(handlers: dict[str, Any]) -> record_types.RecordType:
    return record_types.RecordType(
        "X_RECORD", record_types.SCOPE_PARTITION, record_types.ROUTE_OWNER, handlers=handlers, schema=FAKE_SCHEMA
    )


def test_a_type_without_a_handler_in_every_store_is_refused_in_one_line() -> None:
    """At registration, never as quarantine at run time: a store missing, a name the store does not define, an
    area's method that does not exist."""
    cases = [
        (
            _partition_entry({record_types.STORE_OBJECTS: shrink_isr}),
            r"^record type 'X_RECORD': no handler for the columnar partition store$",
        ),
        (
            _partition_entry({**dict.fromkeys(record_types.STORES, shrink_isr), "rows": shrink_isr}),
            "unknown partition store rows",
        ),
        (
            _partition_entry({record_types.STORE_OBJECTS: "apply_change", record_types.STORE_COLUMNAR: "apply_x"}),
            r"^record type X_RECORD: the columnar store has no handler 'apply_x'$",
        ),
        (
            record_types.RecordType(
                "X_RECORD",
                record_types.SCOPE_BROKER,
                record_types.ROUTE_EVERY,
                handler="brokers.apply_x",
                schema=FAKE_BROKER_SCHEMA,
            ),
            r"^record type X_RECORD: the brokers area has no handler 'apply_x'$",
        ),
        (
            record_types.RecordType(
                "X_RECORD",
                record_types.SCOPE_BROKER,
                record_types.ROUTE_EVERY,
                handler="partitions.apply_x",
                schema=FAKE_BROKER_SCHEMA,
            ),
            "is not '<area>.<method>' of an area",
        ),
    ]
    for entry, message in cases:
        with pytest.raises(ValueError, match=message) as refused:
            record_types.register(entry)
        assert "\n" not in str(refused.value)
        assert record_types.get("X_RECORD") is None  # nothing half-registered


def test_a_partition_store_missing_a_method_cannot_be_made() -> None:
    """`PartitionStore` is abstract: a third store that leaves out part of the interface fails at its first
    instance, naming what it misses, not at the first record that needs it."""

    class HalfStore(PartitionStore):  # no KIND: not a store the registry checks handlers for
        def drain(self) -> Any:
            return None

    with pytest.raises(TypeError, match="abstract method") as refused:
        HalfStore(MetadataImage())
    assert "iter_partitions" in str(refused.value)
    for store in (ObjectPartitions, ColumnarPartitions):
        assert not store.__abstractmethods__


def test_every_applied_builtin_type_has_its_handlers_and_a_schema() -> None:
    stores = {record_types.STORE_OBJECTS: ObjectPartitions, record_types.STORE_COLUMNAR: ColumnarPartitions}
    for entry in record_types.BUILTIN_TYPES:
        if not entry.applied:
            assert entry.route == record_types.ROUTE_SKIPPED
            assert isinstance(parse_line(line(envelope(entry.name, 0, {})), "ev", 0), Skipped)
            continue
        if entry.scope == record_types.SCOPE_PARTITION:
            assert entry.handlers is not None and set(entry.handlers) == set(record_types.STORES), entry.name
            for store, name in entry.handlers.items():
                assert isinstance(name, str) and callable(getattr(stores[store], name)), (entry.name, store)
        else:
            assert isinstance(entry.handler, str), entry.name
            area, _, method = entry.handler.partition(".")
            assert callable(getattr(AREA_CLASSES[area], method)), entry.name
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
        static={1: {record_types.MIN_ISR: "2", record_types.UNCLEAN_ENABLE: None}},
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
