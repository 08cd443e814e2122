"""`elrwatch produce`: keys that keep per-partition and per-broker order; publishing to a real noida-db."""

from __future__ import annotations

import subprocess
import sys

import pytest

from elrwatch.streaming.produce import key_of


def test_keys_keep_partition_and_broker_order():
    pcr = '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":3,"topicId":"FbrrdcfiR-KC2CPSTHaJrg"}}'
    assert key_of(pcr) == b"topic:FbrrdcfiR-KC2CPSTHaJrg"
    assert key_of(f"| offset: 4 CreateTime: 1 keySize: -1 valueSize: 9 payload: {pcr}") == b"topic:FbrrdcfiR-KC2CPSTHaJrg"
    assert key_of('{"type":"BROKER_REGISTRATION_CHANGE_RECORD","version":0,"data":{"brokerId":2}}') == b"broker:2"
    assert key_of('{"type":"FENCE_BROKER_RECORD","version":0,"data":{"id":5,"epoch":1}}') == b"broker:5"
    # a topic's creation and its partitions share one key, so they stay in order across event-topic partitions
    assert key_of('{"type":"TOPIC_RECORD","version":0,"data":{"name":"a","topicId":"x"}}') == b"topic:x"
    assert key_of('{"type":"REMOVE_TOPIC_RECORD","version":0,"data":{"topicId":"x"}}') == b"topic:x"
    assert key_of("garbage") == b"invalid"
    assert key_of("| offset: 0 CreateTime: 1 SnapshotHeader {}") == b"other"


@pytest.mark.e2e
def test_produce_cli_publishes_keyed_lines(kafka_server, tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    from elrwatch.streaming.eventgen import scenario

    lines = scenario(2, 4, 3, steps=4, churn=20)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    done = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "produce", str(path), "--bootstrap-servers", kafka_server.bootstrap,
         "--topic", "produce-t", "--create-topic", "--partitions", "3"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"done, {len(lines)} events sent" in done.stderr
    consumer = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition("produce-t", p) for p in range(3)]
        assert sum(consumer.end_offsets(tps).values()) == len(lines)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got = []
        while len(got) < len(lines):
            for records in consumer.poll(1000).values():
                got.extend(records)
    finally:
        consumer.close()
    by_key: dict[bytes, set[int]] = {}
    for record in got:
        assert record.key == key_of(record.value)
        by_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(parts) == 1 for parts in by_key.values())  # one key, one partition: order kept
    order = {line: i for i, line in enumerate(lines)}
    for p in range(3):
        seq = [order[r.value] for r in sorted(got, key=lambda r: r.offset) if r.partition == p]
        assert seq == sorted(seq)
    missing = subprocess.run(
        [sys.executable, "-m", "elrwatch.cli", "produce", "--simulate", str(path), "--topic", "x"],
        capture_output=True, text=True, timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("elrwatch: error:")
