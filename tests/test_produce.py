"""`elrwatch produce`: keys that keep per-partition and per-broker order; publishing to a real Kafka broker."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time

import orjson
import pytest

from elrwatch.kafkaio.headers import EVERY_BUCKET, OFFSET_HEADER, ROUTE_HEADER
from elrwatch.kafkaio.produce import EventKeys, key_and_headers, key_of
from elrwatch.state.eventgen import simulated_lines


def _cli(*args: str, stdin: bytes | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def _produce_simulated(
    bootstrap: str, topic: str, partitions: int, shape: dict[str, int], *options: str
) -> subprocess.CompletedProcess:
    """`elrwatch produce --simulate` to ``topic`` (created with ``partitions`` partitions) of the simulated cluster of
    ``shape`` (the ``--sim-*`` options: topics, partitions, brokers, steps, churn), with ``options``."""
    simulation = [arg for name, value in shape.items() for arg in (f"--sim-{name}", str(value))]
    args = ["produce", "--bootstrap-servers", bootstrap, "--topic", topic, "--simulate", *simulation, *options]
    return _cli(*args, "--create-topic", "--partitions", str(partitions))


def _consume(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60.0) -> list:
    """Every record of ``topic`` (all of its partitions up to their current end), each partition in offset order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: list = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"{len(got)} of {sum(ends.values())} records consumed"
            for records in consumer.poll(1000).values():
                got.extend(records)
    finally:
        consumer.close()
    return sorted(got, key=lambda r: (r.partition, r.offset))


def test_keys_keep_partition_and_broker_order():
    pcr = '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":3,"topicId":"FbrrdcfiR-KC2CPSTHaJrg"}}'
    assert key_of(pcr) == b"topic:FbrrdcfiR-KC2CPSTHaJrg"
    assert (
        key_of(f"| offset: 4 CreateTime: 1 keySize: -1 valueSize: 9 payload: {pcr}") == b"topic:FbrrdcfiR-KC2CPSTHaJrg"
    )
    assert key_of('{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":2}}') == b"broker:2"
    assert key_of('{"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":5,"epoch":1}}') == b"broker:5"
    # a topic's creation and its partitions share one key, so they stay in order across event-topic partitions
    assert key_of('{"type":"TOPIC_RECORD","version":0,"data":{"name":"a","topicId":"x"}}') == b"topic:x"
    assert key_of('{"type":"REMOVE_TOPIC_RECORD","version":0,"data":{"topicId":"x"}}') == b"topic:x"
    assert key_of("garbage") == b"invalid"
    assert key_of("| offset: 0 CreateTime: 1 SnapshotHeader {}") == b"other"


def test_a_topics_config_and_elr_clearing_share_its_key_once_its_name_is_known():
    """A min ISR change and the ELR clearing after it name the topic: keyed with its partitions, they cannot be
    applied after a later partition change (which would skip the clearing there as already applied)."""
    clear = '{"type":"CLEAR_ELR_RECORD","version":0,"data":{"topicName":"a"}}'
    config = '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":2,"resourceName":"a","name":"min.insync.replicas","value":"2"}}'
    cluster_config = (
        '{"type":"CONFIG_RECORD","version":0,"data":{"resourceType":4,"resourceName":"","name":"x","value":"1"}}'
    )
    keys = EventKeys()
    assert keys(clear) == b"CLEAR_ELR_RECORD" and keys(config) == b"CONFIG_RECORD"  # name not known yet
    assert keys('{"type":"TOPIC_RECORD","version":0,"data":{"name":"a","topicId":"x"}}') == b"topic:x"
    assert keys(clear) == keys(config) == b"topic:x"
    assert keys(cluster_config) == b"CONFIG_RECORD"
    assert keys('{"type":"CLEAR_ELR_RECORD","version":0,"data":{"topicName":""}}') == b"CLEAR_ELR_RECORD"  # all
    restarted = EventKeys()
    restarted.learn("a", "x")
    assert restarted(config) == b"topic:x"
    assert key_of(config) == b"CONFIG_RECORD"  # the stateless form


def test_routing_headers_of_each_record_class():
    """The routing headers (kafkaio/headers.py) come from the key's parse: a partition-routed record with a topic id
    and a partition id > 0 is placed by ``<topicId>:<partitionId>``, every other valid event goes to every bucket,
    the offset header is the envelope's; invalid lines and kafka-dump-log text lines get none."""

    def envelope(type_name: str, data: dict, offset: object = 17) -> str:
        return json.dumps({"type": type_name, "version": 0, "data": data, "offset": offset})

    def headers(line: str) -> list[tuple[str, bytes]]:
        key, got = key_and_headers(line)
        assert key == key_of(line)  # one parse, the same key
        return got

    placed = [(ROUTE_HEADER, b"tid:3"), (OFFSET_HEADER, b"17")]
    every = [(ROUTE_HEADER, EVERY_BUCKET), (OFFSET_HEADER, b"17")]
    for type_name in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD"):
        assert headers(envelope(type_name, {"topicId": "tid", "partitionId": 3})) == placed
        assert headers(envelope(type_name, {"topicId": "tid", "partitionId": 0})) == every  # partition 0
    assert headers(envelope("PARTITION_CHANGE_RECORD", {"topicId": "tid", "partitionId": 3}, None)) == placed[:1]
    assert headers(envelope("PARTITION_CHANGE_RECORD", {"topicId": "tid", "partitionId": 3}, "17")) == placed[:1]
    # what Spark's JSON reader would not read as a string topic id and an INT partition id > 0: every bucket
    for data in (
        {"topicId": "tid", "partitionId": "3"},
        {"topicId": "tid", "partitionId": 3.0},
        {"topicId": "tid", "partitionId": True},
        {"topicId": "tid", "partitionId": 1 << 31},
        {"topicId": "tid", "partitionId": -1},
        {"topicId": 5, "partitionId": 3},
        {"partitionId": 3},
    ):
        assert headers(envelope("PARTITION_CHANGE_RECORD", data)) == every, data
    for line in (  # types sent to every bucket, unknown and skipped types
        envelope("TOPIC_RECORD", {"name": "a", "topicId": "tid"}),
        envelope("FENCE_BROKER_RECORD", {"id": 5, "epoch": 1}),
        envelope("CONFIG_RECORD", {"resourceType": 2, "resourceName": "a", "name": "min.insync.replicas"}),
        envelope("NO_OP_RECORD", {}),
        envelope("SOMETHING_NEW", {"topicId": "tid", "partitionId": 3}),
        '{"type":"FENCE_BROKER_RECORD","version":0,"data":null,"offset":17}',
    ):
        assert headers(line) == every, line
    pcr = envelope("PARTITION_CHANGE_RECORD", {"topicId": "tid", "partitionId": 3})
    for line in (  # not valid events, and kafka-dump-log text lines: no headers (the job reads their JSON)
        "garbage",
        "",
        "[1, 2]",
        '{"version":0,"data":{}}',
        '{"type":5,"version":0,"data":{}}',
        '{"type":"TOPIC_RECORD","version":0,"data":[1]}',
        f"| offset: 4 CreateTime: 1 keySize: -1 valueSize: 9 payload: {pcr}",
        f"| payload: {pcr}",
        "| offset: 0 CreateTime: 1 SnapshotHeader {}",
    ):
        assert headers(line) == [], line
    keys = EventKeys()
    assert keys.with_headers(pcr) == (keys(pcr), placed)


@pytest.mark.e2e
def test_produce_cli_publishes_keyed_lines(kafka_server, fresh_topic, tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    from elrwatch.state.eventgen import scenario

    topic = fresh_topic("produce-t")

    lines = scenario(2, 4, 3, steps=4, churn=20)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-m",
            "elrwatch.cli",
            "produce",
            str(path),
            "--bootstrap-servers",
            kafka_server.bootstrap,
            "--topic",
            topic,
            "--create-topic",
            "--partitions",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"done, {len(lines)} events sent" in done.stderr
    consumer = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        assert sum(consumer.end_offsets(tps).values()) == len(lines)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(lines):
            assert time.monotonic() < deadline, f"{len(got)} of {len(lines)} records consumed"
            for records in consumer.poll(1000).values():
                got.extend(records)
    finally:
        consumer.close()
    by_key: dict[bytes, set[int]] = {}
    want_keys = _keys_in_order(lines)
    for record in got:
        assert record.key == want_keys[record.value]
        assert record.headers == key_and_headers(record.value)[1] and record.headers  # the routing headers
        by_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(parts) == 1 for parts in by_key.values())  # one key, one partition: order kept
    order = {line: i for i, line in enumerate(lines)}
    for p in range(3):
        seq = [order[r.value] for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert seq == sorted(seq)
    missing = subprocess.run(
        [sys.executable, "-P", "-m", "elrwatch.cli", "produce", "--simulate", str(path), "--topic", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("elrwatch: error:")


def _keys_in_order(lines: list) -> dict:
    """Each line's key as `produce` gives it, the lines keyed in order (topic names learnt on the way)."""
    keys = EventKeys()
    return {(line.encode() if isinstance(line, str) else line): keys(line) for line in lines}


def _check_simulated_records(got: list, expected: list[bytes]) -> dict:
    """Checks shared by the `produce --simulate` tests; returns the replay document of the consumed values.

    ``got``: the consumed records, each event-topic partition in offset order; ``expected``: the simulator's lines
    in the order it produced them (for a run cut by --duration: a prefix of them, possibly without the last line).
    """
    assert got, "no records produced"
    order = {line: i for i, line in enumerate(expected)}
    assert len(order) == len(expected)  # every simulated line is unique (it carries its metadata offset)
    assert all(r.value in order for r in got)  # values are the simulator's lines, byte for byte
    assert len({r.value for r in got}) == len(got)  # none sent twice
    # the keying rule, and one key -> one event-topic partition
    key_partitions: dict[bytes, set[int]] = {}
    want_keys = _keys_in_order(expected)
    for r in got:
        assert r.key == want_keys[r.value]
        key_partitions.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in key_partitions.values()), key_partitions
    # per metadata partition and per broker: one key, and the topic's order is the simulator's order
    by_partition: dict[tuple[str, int], list] = {}
    by_broker: dict[int, list] = {}
    for r in got:
        event = orjson.loads(r.value)
        data = event["data"]
        if event["type"] in ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD"):
            by_partition.setdefault((data["topicId"], data["partitionId"]), []).append(r)
        elif "brokerId" in data:
            by_broker.setdefault(data["brokerId"], []).append(r)
    assert by_partition and by_broker
    for entity, records in [*by_partition.items(), *((f"broker {b}", rs) for b, rs in by_broker.items())]:
        assert len({r.key for r in records}) == 1, entity
        assert len({r.partition for r in records}) == 1, entity
        on_topic = [order[r.value] for r in records]  # records: event-topic offset order
        assert on_topic == sorted(on_topic), entity  # the simulator's order kept
        offsets = [orjson.loads(r.value)["offset"] for r in records]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), entity  # metadata offsets increase
    for records in by_partition.values():
        assert orjson.loads(records[0].value)["type"] == "PARTITION_RECORD"  # creation first, then its changes
    # Replay the values one event-topic partition after the other (no global re-ordering by metadata offset): the
    # keys alone must keep every record applicable, so nothing is quarantined.
    done = _cli("replay", "-", "--compact", stdin=b"\n".join(r.value for r in got) + b"\n")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["quarantined"]["count"] == 0, doc["quarantined"]
    assert doc["counts"]["applied"] == len(got)
    # each partition's epoch: one bump per change record, none lost or applied out of order
    epochs = {(p["topicId"], p["partitionId"]): p["partitionEpoch"] for p in doc["partitions"]}
    assert epochs == {key: len(records) - 1 for key, records in by_partition.items()}
    return doc


@pytest.mark.e2e
def test_produce_simulate_publishes_the_generator_events_in_key_order(kafka_server, fresh_topic):
    topic = fresh_topic("produce-sim")
    shape = {"topics": 2, "partitions": 4, "brokers": 3, "steps": 12, "churn": 40}
    done = _produce_simulated(kafka_server.bootstrap, topic, 3, shape, "--seed", "11")
    assert done.returncode == 0, done.stderr.decode()
    expected = list(simulated_lines(2, 4, 3, 12, 40, 11))
    assert f"done, {len(expected)} events sent to {topic}" in done.stderr.decode()
    got = _consume(kafka_server.bootstrap, topic, 3)
    assert sorted(r.value for r in got) == sorted(expected)  # exactly the generator's events, each once
    assert len({r.partition for r in got}) > 1  # the keys spread the events: order is kept by key, not by luck
    doc = _check_simulated_records(got, expected)
    assert len(doc["partitions"]) == 2 * 4 and {b["brokerId"] for b in doc["brokers"]} == {0, 1, 2}


@pytest.mark.e2e
def test_produce_simulate_loop_stops_after_duration(kafka_server, fresh_topic):
    topic = fresh_topic("produce-sim-loop")
    started = time.monotonic()
    shape = {"topics": 1, "partitions": 3, "brokers": 3, "steps": 4, "churn": 10}
    done = _produce_simulated(kafka_server.bootstrap, topic, 2, shape, "--sim-loop", "--duration", "2", "--rate", "300")
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()
    assert elapsed < 20  # --sim-loop alone never ends: --duration stopped it
    got = _consume(kafka_server.bootstrap, topic, 2)
    # a bounded prefix of the endless stream, paced by --rate (300/s for 2 s; generous bounds for a busy machine)
    assert 100 <= len(got) <= 700, len(got)
    assert f"done, {len(got)} events sent" in done.stderr.decode()
    expected = list(itertools.islice(simulated_lines(1, 3, 3, 4, 10, 7, loop=True), len(got) + 1))
    assert sorted(r.value for r in got) == sorted(expected[: len(got)])  # the first events of the endless stream
    doc = _check_simulated_records(got, expected)
    assert len(got) > len(list(simulated_lines(1, 3, 3, 4, 10, 7)))  # more than one round: the loop ran
    assert len(doc["partitions"]) == 3
