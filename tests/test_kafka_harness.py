"""The test harness itself: noida-db answers topic creation, produce, consume, ListOffsets."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.e2e


def test_noida_roundtrip(kafka_server):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    kafka_server.create_topic("harness", partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_server.bootstrap, linger_ms=20)
    for i in range(50):
        producer.send("harness", key=b"k", value=b"v%d" % i, partition=i % 2)
    producer.flush(10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=kafka_server.bootstrap, session_timeout_ms=6000,
                             enable_auto_commit=False)
    try:
        tps = [TopicPartition("harness", p) for p in (0, 1)]
        assert consumer.partitions_for_topic("harness") == {0, 1}
        assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        # batches of many records: latest must still be the true end (tansu gets this wrong)
        assert consumer.end_offsets(tps) == {tps[0]: 25, tps[1]: 25}
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + 15
        while len(got) < 50 and time.monotonic() < deadline:
            for msgs in consumer.poll(500).values():
                got.extend(m.value for m in msgs)
        assert sorted(got) == sorted(b"v%d" % i for i in range(50))
    finally:
        consumer.close()
